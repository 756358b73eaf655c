package mqtt

import (
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/tolsey/tolsey/mqtt/session"
)

// The old connection's will goes out as its end begins (mochi's
// detachClient: the will, then OnWillSent, then OnDisconnect), fanned out
// to its subscribers first; a new connection of the client that took the
// session over meanwhile has stored its own record. The old connection's
// OnWillSent, late, wrote its record (session expiry 3600 s, no will) over
// the new connection's (7200 s): a crash then restored the session with the
// old connection's properties. It writes nothing now: another client of
// the id holds the session.
func TestLateWillSentWritesNothingOverNewerConnection(t *testing.T) {
	var bk session.Backend
	s, _ := startSessionServer(t, t.TempDir(), func(b session.Backend) session.Backend { bk = b; return b })

	held, free, _ := holdOldEnd(t, &testHookWillSent)

	old := dialRawConn(t, s.Addr(), 5)
	old.write(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect},
		Connect: packets.ConnectParams{ProtocolName: []byte("MQTT"), Keepalive: 30, ClientIdentifier: "dev",
			WillFlag: true, WillTopic: "will/dev", WillPayload: []byte("dead")},
		Properties: packets.Properties{SessionExpiryInterval: 3600, SessionExpiryIntervalFlag: true}})
	if ack := old.read(t); ack.FixedHeader.Type != packets.Connack || ack.ReasonCode != 0 {
		t.Fatalf("old: want CONNACK 0, got %v %#x", packets.PacketNames[ack.FixedHeader.Type], ack.ReasonCode)
	}
	_ = old.conn.Close() // ends without DISCONNECT: its will goes out
	select {
	case <-held:
	case <-time.After(20 * time.Second):
		t.Fatal("the old connection's will was never sent")
	}

	cur, present := dialSessionExpiry(t, s.Addr(), "dev", 5, false, 7200)
	if !present {
		t.Fatal("the new connection found no session")
	}
	cur.subscribeQoS1(t, "c/#") // after OnSessionEstablished stored its record
	free()
	waitUntil(t, "the old connection's end", func() bool { return atomic.LoadInt64(&s.mochi.Info.ClientsConnected) == 1 })
	settled(s)

	var rec clientRecord
	if err := bk.Load(func(kind session.Kind, id string, _, value []byte) error {
		if kind == session.PutClient && id == "dev" {
			return json.Unmarshal(value, &rec)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if got := rec.Props.SessionExpiryInterval; got != 7200 {
		t.Fatalf("stored record's session expiry %d; want the new connection's 7200", got)
	}
}
