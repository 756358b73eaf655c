package mqtt

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/tolsey/tolsey/core"
	"github.com/tolsey/tolsey/retain"
	"github.com/tolsey/tolsey/retain/memory"
)

// heldMatchStore holds up every Match until released, so that live
// messages reach a subscriber while its retained replay has not begun.
type heldMatchStore struct {
	retain.Store
	once    sync.Once
	entered chan struct{}
	release chan struct{}
}

func (s *heldMatchStore) Match(ctx context.Context, filter string, fn func(*core.Message) bool) error {
	s.once.Do(func() { close(s.entered) })
	<-s.release
	return s.Store.Match(ctx, filter, fn)
}

// TestReplayWithLiveMessagesDoesNotStall: a late subscriber with a small
// Receive Maximum gets every retained copy and every live message published
// while its replay is held up. Before, the live QoS 1 messages took every
// place in the session's inflight store (mqtt.maxInflight) while the
// client's gate held them back; the replay worker waited for a place, which
// only the gate it opens would have freed: the client got nothing more until
// it left. The client never has more unacknowledged QoS 1 PUBLISHes than its
// Receive Maximum [MQTT-3.3.4-9].
func TestReplayWithLiveMessagesDoesNotStall(t *testing.T) {
	const (
		maxInflight = 8
		receiveMax  = 2
		retained    = 20
		live        = maxInflight // fills the store; one more would be dropped
	)
	store := &heldMatchStore{Store: memory.New(retain.Limits{}), entered: make(chan struct{}), release: make(chan struct{})}
	setRetained(t, store.Store, retained)
	released := false
	release := func() {
		if !released {
			released = true
			close(store.release)
		}
	}
	s := startTestServer(t, store, func(o *Options) { o.MaxInflight = maxInflight })
	t.Cleanup(release) // before the shutdown, which waits for the worker

	sub := dialRaw(t, s.Addr(), "late", receiveMax)
	sub.subscribeQoS1(t, "r/#")
	select {
	case <-store.entered:
	case <-time.After(20 * time.Second):
		t.Fatal("the replay never asked the store")
	}

	pub := dialRaw(t, s.Addr(), "pub", 0)
	for i := range live {
		pub.write(t, packets.Packet{
			FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1},
			TopicName:   fmt.Sprintf("r/live/%d", i),
			PacketID:    uint16(i + 1),
			Payload:     []byte("l"),
		})
	}
	// mochi routes a QoS 1 PUBLISH to its subscribers before it answers it.
	for range live {
		if pk := pub.read(t); pk.FixedHeader.Type != packets.Puback {
			t.Fatalf("publisher: want PUBACK, got %v", pk)
		}
	}
	cl, ok := s.mochi.Clients.Get("late")
	if !ok {
		t.Fatal("subscriber gone")
	}
	waitUntil(t, "the live messages to wait in the subscriber's session", func() bool {
		return cl.State.Inflight.Len() >= live
	})
	release()

	// Acknowledge in batches of receiveMax: a server that keeps to the
	// Receive Maximum sends that many, then waits; one more before the
	// PUBACKs is a breach [MQTT-3.3.4-9]. 28 is a multiple of 2, and the
	// server sends whenever it may, so the last batch is full too.
	want := map[string]bool{}
	for i := range retained {
		want[fmt.Sprintf("r/%d", i)] = true
	}
	for i := range live {
		want[fmt.Sprintf("r/live/%d", i)] = true
	}
	got := map[string]int{}
	var unacked []uint16
	for len(got) < len(want) {
		pk, err := sub.next()
		if err != nil {
			t.Fatalf("after %d of %d messages (%d retained copies): %v", len(got), len(want), countRetained(got), err)
		}
		if pk.FixedHeader.Type != packets.Publish {
			continue
		}
		if !want[pk.TopicName] {
			t.Fatalf("unexpected message on %s", pk.TopicName)
		}
		got[pk.TopicName]++
		if unacked = append(unacked, pk.PacketID); len(unacked) > receiveMax {
			t.Fatalf("%d QoS 1 PUBLISHes unacknowledged, Receive Maximum %d", len(unacked), receiveMax)
		}
		if len(unacked) == receiveMax || len(got) == len(want) {
			for _, id := range unacked {
				sub.write(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Puback}, PacketID: id})
			}
			unacked = unacked[:0]
		}
	}
	for topic, n := range got {
		if n > 1 {
			t.Errorf("%s came %d times", topic, n)
		}
	}
}

func countRetained(got map[string]int) int {
	n := 0
	for topic := range got {
		if len(topic) < 7 || topic[:7] != "r/live/" {
			n++
		}
	}
	return n
}
