package mqtt

import (
	"testing"

	"github.com/mochi-mqtt/server/v2/packets"
)

// TestSessionEstablishedAfterLetGoStoresNothing: mochi registers a
// connection before its CONNACK and calls OnSessionEstablished after it. A
// takeover by another gateway in between (TakenOver: the connection ended
// with 0x8E, then the session forgotten here and the store committed for
// the other gateway) was followed by the late call, which marked the
// session known here again and wrote it to the shared store the other
// gateway had read. Found by review.
func TestSessionEstablishedAfterLetGoStoresNothing(t *testing.T) {
	s, _ := startSessionServer(t, t.TempDir(), nil)
	dialSession(t, s.Addr(), "moved", 5, false)
	cl, ok := s.mochi.Clients.Get("moved")
	if !ok {
		t.Fatal("the connection is not registered")
	}
	// OnSessionEstablished runs after the CONNACK is written: the client
	// can read it first.
	waitUntil(t, "the persistent session stored", func() bool { return s.sessions.isKnown("moved") })
	// What TakenOver does, in its order.
	_ = s.mochi.DisconnectClientNoWait(cl, packets.ErrSessionTakenOver)
	_, _ = s.sessions.forget("moved")
	// mochi's late call.
	s.sessions.OnSessionEstablished(cl, packets.Packet{})
	if s.sessions.isKnown("moved") {
		t.Fatal("a session let go to another gateway is known here again")
	}
}
