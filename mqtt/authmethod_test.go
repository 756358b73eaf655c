package mqtt

import (
	"testing"

	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/tolsey/tolsey/retain"
	"github.com/tolsey/tolsey/retain/memory"
)

// TestUnsupportedAuthenticationMethod: the gateway has no extended
// authentication (MQTT 5 AUTH exchanges), so a CONNECT that names an
// Authentication Method is answered 0x8C, Bad authentication method, and
// closed [MQTT-4.12.0-1], not let in with 0x00 as if the method had been
// agreed (the client would then wait for an AUTH that never comes, or
// believe it authenticated).
func TestUnsupportedAuthenticationMethod(t *testing.T) {
	s := startTestServer(t, memory.New(retain.Limits{}))
	c := dialRawConn(t, s.Addr(), 5)
	c.write(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect},
		Connect:    packets.ConnectParams{ProtocolName: []byte("MQTT"), Clean: true, Keepalive: 30, ClientIdentifier: "scram"},
		Properties: packets.Properties{AuthenticationMethod: "SCRAM-SHA-256", AuthenticationData: []byte("n,,n=user,r=abc")}})
	pk := c.read(t)
	if pk.FixedHeader.Type != packets.Connack || pk.ReasonCode != packets.ErrBadAuthenticationMethod.Code {
		t.Fatalf("want CONNACK 0x8C, got %s 0x%02x", packets.PacketNames[pk.FixedHeader.Type], pk.ReasonCode)
	}
	c.expectClosed(t)
	if _, ok := s.mochi.Clients.Get("scram"); ok {
		t.Fatal("the refused client is registered")
	}

	// Without the property the same CONNECT is let in.
	ok := dialRawConn(t, s.Addr(), 5)
	ok.write(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect},
		Connect: packets.ConnectParams{ProtocolName: []byte("MQTT"), Clean: true, Keepalive: 30, ClientIdentifier: "plain"}})
	if pk := ok.read(t); pk.FixedHeader.Type != packets.Connack || pk.ReasonCode != 0 {
		t.Fatalf("want CONNACK 0x00, got %s 0x%02x", packets.PacketNames[pk.FixedHeader.Type], pk.ReasonCode)
	}
}
