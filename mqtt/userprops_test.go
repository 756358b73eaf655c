package mqtt

import (
	"errors"
	"io"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/tolsey/tolsey/core/coretest"
	"github.com/tolsey/tolsey/core/metrics"
	"github.com/tolsey/tolsey/retain"
	"github.com/tolsey/tolsey/retain/memory"
)

// userProps is n user properties.
func userProps(n int) []packets.UserProperty {
	u := make([]packets.UserProperty, n)
	for i := range u {
		u[i] = packets.UserProperty{Key: "k", Val: "v"}
	}
	return u
}

// TestMaxUserProperties: mqtt.maxUserProperties bounds the user properties
// of one packet. A PUBLISH at the limit is delivered; one over it ends the
// connection, an MQTT 5 one with DISCONNECT 0x83; a CONNECT over it (read
// before any login) is closed without a CONNACK.
func TestMaxUserProperties(t *testing.T) {
	const limit = 8
	met := metrics.New()
	s := startTestServer(t, memory.New(retain.Limits{}), func(o *Options) { o.MaxUserProperties = limit; o.Metrics = met })

	sub := dialRaw(t, s.Addr(), "sub", 0)
	sub.subscribeQoS1(t, "up/#")
	pub := dialRaw(t, s.Addr(), "pub", 0)
	pub.write(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish}, TopicName: "up/ok",
		Payload: []byte("at the limit"), Properties: packets.Properties{User: userProps(limit)}})
	if pk := sub.read(t); pk.TopicName != "up/ok" || len(pk.Properties.User) != limit {
		t.Fatalf("subscriber got %q with %d user properties, want up/ok with %d", pk.TopicName, len(pk.Properties.User), limit)
	}

	pub.write(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish}, TopicName: "up/over",
		Payload: []byte("over the limit"), Properties: packets.Properties{User: userProps(limit + 1)}})
	if pk := pub.read(t); pk.FixedHeader.Type != packets.Disconnect || pk.ReasonCode != packets.ErrTooManyUserProperties.Code {
		t.Fatalf("publisher over the limit got %s %#x, want DISCONNECT %#x", packets.PacketNames[pk.FixedHeader.Type], pk.ReasonCode, packets.ErrTooManyUserProperties.Code)
	}
	if _, err := pub.next(); !errors.Is(err, io.EOF) {
		t.Fatalf("publisher's connection after the DISCONNECT: %v, want closed", err)
	}
	coretest.Eventually(t, "the close counted", 10*time.Second, func() bool {
		return counter(t, met.ConnsClosed, "mqtt", "too_many_user_properties") == 1
	})

	// The same in a CONNECT, before any login.
	c := dialRawConn(t, s.Addr(), 5)
	c.write(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect},
		Connect:    packets.ConnectParams{ProtocolName: []byte("MQTT"), Clean: true, Keepalive: 30, ClientIdentifier: "many"},
		Properties: packets.Properties{User: userProps(limit + 1)}})
	if pk, err := c.next(); !errors.Is(err, io.EOF) {
		t.Fatalf("a CONNECT over the limit got %s %v, want the connection closed", packets.PacketNames[pk.FixedHeader.Type], err)
	}

	// Nothing of the refused PUBLISH reached the subscriber.
	sub.write(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pingreq}})
	if pk := sub.read(t); pk.FixedHeader.Type != packets.Pingresp {
		t.Fatalf("subscriber got %s %q, want only the PINGRESP", packets.PacketNames[pk.FixedHeader.Type], pk.TopicName)
	}
}
