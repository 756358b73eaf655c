package mqtt

import (
	"runtime"
	"testing"

	"github.com/mochi-mqtt/server/v2/packets"
)

// TestParseConnectSharesUserProperties (gateway patch 42): the client keeps
// its CONNECT's user properties without copying them. The CONNECT is parsed
// before its client is authenticated, and a packet of mqtt.maxPacketSize
// holding nothing but empty user properties decodes to 6.4 times its size:
// a copy doubled that, for a packet that is read only and then dropped.
func TestParseConnectSharesUserProperties(t *testing.T) {
	cl, _, _ := newTestClient()
	user := make([]packets.UserProperty, 100_000)
	pk := packets.Packet{ProtocolVersion: 5, Connect: packets.ConnectParams{ClientIdentifier: "props"},
		Properties: packets.Properties{User: user}}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	cl.ParseConnect("tcp", pk)
	runtime.ReadMemStats(&after)
	if got := len(cl.Properties.Props.User); got != len(user) {
		t.Fatalf("the client kept %d user properties, want %d", got, len(user))
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 64<<10 {
		t.Errorf("ParseConnect allocated %d KiB for %d user properties (copied?)", got>>10, len(user))
	}
}
