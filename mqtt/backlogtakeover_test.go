package mqtt

import (
	"fmt"
	"testing"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/tolsey/tolsey/mqtt/session"
	"github.com/tolsey/tolsey/retain"
	"github.com/tolsey/tolsey/retain/memory"
)

// TestBacklogAfterTakeoverReachesTheNewConnection: a publisher that found
// the subscriber's connection, then had its QoS 1 copy dropped by that
// connection's full write queue, hands the copy to the backlog (keep). When
// a reconnect took the session over in between, the copy went into the old
// connection's inflight store after the new one had copied it: in neither
// store, lost although the publisher had its PUBACK (the race mochi patch
// 25 closed for mochi's own deliveries). It now goes, once, to the
// connection that holds the session, with the subscription's identifier.
func TestBacklogAfterTakeoverReachesTheNewConnection(t *testing.T) {
	// The old connection's cleanup may or may not have taken its
	// subscriptions away when the copy arrives.
	for _, oldSubscribed := range []bool{false, true} {
		s := startTestServer(t, memory.New(retain.Limits{}))
		first, _ := dialSession(t, s.Addr(), "flaky", 5, true)
		first.write(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1}, PacketID: 1,
			Properties: packets.Properties{SubscriptionIdentifier: []int{7}},
			Filters:    packets.Subscriptions{{Filter: "q/#", Qos: 1}}})
		if pk := first.read(t); pk.FixedHeader.Type != packets.Suback || len(pk.ReasonCodes) != 1 || pk.ReasonCodes[0] != 1 {
			t.Fatalf("want SUBACK granting QoS 1, got %v", pk)
		}
		old, ok := s.mochi.Clients.Get("flaky")
		if !ok {
			t.Fatal("no client flaky")
		}
		sub, _ := old.State.Subscriptions.Get("q/#")

		next, present := dialSession(t, s.Addr(), "flaky", 5, false)
		if !present {
			t.Fatal("the session was not carried on")
		}
		if oldSubscribed {
			old.State.Subscriptions.Add("q/#", sub)
		}
		// The publisher's copy, dropped by old's full queue after the takeover.
		s.hook.backlog.keep(old, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1},
			TopicName: "q/1", Payload: []byte("kept")})

		got := next.expectPublish(t, "q/1", "kept", 1, false)
		if ids := got.Properties.SubscriptionIdentifier; len(ids) != 1 || ids[0] != 7 {
			t.Fatalf("the copy carries subscription identifiers %v, want [7]", ids)
		}
		next.expectNoAckYet(t) // a PINGRESP next: no second copy
		if n := old.State.Inflight.Len(); n != 0 {
			t.Fatalf("old subscribed %v: the connection taken over holds %d messages", oldSubscribed, n)
		}
	}
}

// TestBacklogCopyIsStored: the backlog's copy of a message for a
// persistent session is in the session store, as mochi's own copies are,
// so that a restart sends it again; mochi drops the entry of the copy it
// refused (patch 32). Before, the refused copy's entry stayed stored and
// the backlog's was not: the message came again, under an id the client
// had never seen, even after it was acknowledged. Found by review.
func TestBacklogCopyIsStored(t *testing.T) {
	dir := t.TempDir()
	s, stop := startSessionServer(t, dir, nil)
	c, _ := dialSession(t, s.Addr(), "slow", 5, false)
	c.subscribeQoS1(t, "q/#")
	cl, ok := s.mochi.Clients.Get("slow")
	if !ok {
		t.Fatal("no client slow")
	}
	s.hook.backlog.keep(cl, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1},
		TopicName: "q/1", Payload: []byte("kept")})
	got := c.expectPublish(t, "q/1", "kept", 1, false) // not acknowledged
	stop()

	b, err := session.OpenBolt(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var ids []string
	if err := b.Load(func(kind session.Kind, client string, key, _ []byte) error {
		if kind == session.PutInflight && client == "slow" {
			ids = append(ids, fmt.Sprintf("%x", key))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("%04x", got.PacketID); len(ids) != 1 || ids[0] != want {
		t.Fatalf("stored in-flight ids %v, want the backlog copy's %s only", ids, want)
	}
}
