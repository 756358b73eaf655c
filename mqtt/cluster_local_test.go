package mqtt

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/tolsey/tolsey/mqtt/session"
	"github.com/tolsey/tolsey/retain"
	"github.com/tolsey/tolsey/retain/memory"
)

// storedInflights counts the in-flight messages b holds for client.
func storedInflights(t *testing.T, b session.Backend, client string) int {
	t.Helper()
	n := 0
	if err := b.Load(func(kind session.Kind, id string, _, _ []byte) error {
		if kind == session.PutInflight && id == client {
			n++
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return n
}

// Without a shared store (embedded, memory) a takeover by another gateway
// ends the old connection and the session stays here, offline, written
// here as before: an in-flight message of it that expires while it waits
// is deleted from the store too. Before, the old connection's stop cause
// (0x8E, the takeover's) kept the delete from being written, and the
// store kept the message mochi had dropped.
func TestTakenOverWithoutSharedStoreWritesTheOfflineSession(t *testing.T) {
	bolt, err := session.OpenBolt(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s := startTestServer(t, memory.New(retain.Limits{}), func(o *Options) {
		o.Sessions, o.Cluster, o.Node = bolt, claimFunc(answered), "a"
	})
	dev, _ := dialSession(t, s.Addr(), "dev", 5, false)
	dev.subscribeQoS1(t, "d/#")
	settled(s)

	answeredCh := make(chan struct{})
	s.TakenOver("dev", time.Now().UnixNano()+int64(time.Hour), "b", func(bool) { close(answeredCh) })
	<-answeredCh
	if pk := dev.read(t); pk.FixedHeader.Type != packets.Disconnect || pk.ReasonCode != packets.ErrSessionTakenOver.Code {
		t.Fatalf("dev: want DISCONNECT 0x8E, got %v %#x", packets.PacketNames[pk.FixedHeader.Type], pk.ReasonCode)
	}
	waitUntil(t, "dev's connection ended", func() bool { return atomic.LoadInt64(&s.mochi.Info.ClientsConnected) == 0 })
	cl, ok := s.mochi.Clients.Get("dev")
	if !ok {
		t.Fatal("the session was not kept here")
	}
	// Queued for the offline session (stored before its PUBACK), to
	// expire there unsent.
	pub := dialRaw(t, s.Addr(), "pub", 0)
	pub.write(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1},
		TopicName: "d/x", PacketID: 1, Payload: []byte("m1"),
		Properties: packets.Properties{MessageExpiryInterval: 1}})
	if pk := pub.read(t); pk.FixedHeader.Type != packets.Puback {
		t.Fatalf("want PUBACK, got %v", packets.PacketNames[pk.FixedHeader.Type])
	}
	settled(s)
	if n := storedInflights(t, bolt, "dev"); n != 1 {
		t.Fatalf("%d messages stored for the offline session; want 1", n)
	}
	waitUntil(t, "the in-flight message expired", func() bool { return cl.State.Inflight.Len() == 0 })
	settled(s)
	if n := storedInflights(t, bolt, "dev"); n != 0 {
		t.Fatalf("%d in-flight messages stored after mochi dropped the expired one; want 0", n)
	}
}
