package mqtt

import (
	"testing"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/tolsey/tolsey/retain"
	"github.com/tolsey/tolsey/retain/memory"
)

// TestQoS0AmongQoS1And2SameIDs: a QoS 0 PUBLISH (no packet id: mochi
// patch 46 skips its inflight lookup) sent while a QoS 2 one's PUBREC
// is held, and between QoS 1 ones, changes nothing of theirs: the QoS 2
// duplicate is still not published again (0x91), its PUBREL completes,
// the id is free again for a QoS 1 one, and every QoS 0 one is
// delivered once.
func TestQoS0AmongQoS1And2SameIDs(t *testing.T) {
	s := startTestServer(t, memory.New(retain.Limits{}))
	sub := dialRaw(t, s.Addr(), "sub", 0)
	sub.subscribeQoS1(t, "ids/#")
	pub := dialRaw(t, s.Addr(), "pub", 0)
	send := func(qos byte, id uint16, dup bool, payload string) {
		t.Helper()
		pub.write(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: qos, Dup: dup},
			TopicName: "ids/x", PacketID: id, Payload: []byte(payload)})
	}
	send(2, 1, false, "q2")
	pub.expectAcks(t, packets.Pubrec, []uint16{1}, nil)
	send(0, 0, false, "q0-a")
	send(2, 1, true, "q2") // re-sent while its PUBREC is held: not published again [MQTT-4.3.3-10]
	pub.expectAcks(t, packets.Pubrec, []uint16{1}, map[uint16]byte{1: packets.ErrPacketIdentifierInUse.Code})
	pub.write(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pubrel, Qos: 1}, PacketID: 1})
	pub.expectAcks(t, packets.Pubcomp, []uint16{1}, nil)
	send(1, 1, false, "q1-a")
	pub.expectAcks(t, packets.Puback, []uint16{1}, nil)
	send(0, 0, false, "q0-b")
	send(1, 1, false, "q1-b")
	pub.expectAcks(t, packets.Puback, []uint16{1}, nil)

	for _, want := range []string{"q2", "q0-a", "q1-a", "q0-b", "q1-b"} {
		pk := sub.read(t)
		if pk.FixedHeader.Type != packets.Publish || string(pk.Payload) != want {
			t.Fatalf("subscriber got %s %q, want %q", packets.PacketNames[pk.FixedHeader.Type], pk.Payload, want)
		}
		if pk.FixedHeader.Qos > 0 {
			sub.write(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Puback}, PacketID: pk.PacketID})
		}
	}
	sub.expectNoAckYet(t) // nothing more: the duplicate was not delivered
}
