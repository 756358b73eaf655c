package mqtt

import (
	"bufio"
	"encoding/binary"
	"net"
	"testing"
	"time"

	"github.com/tolsey/tolsey/retain"
	"github.com/tolsey/tolsey/retain/memory"
)

// qos1Publish is an MQTT 5 QoS 1 PUBLISH on "a" with packet id id.
func qos1Publish(id byte) []byte {
	b := []byte{0, 1, 'a', 0, id, 0, 'x'}
	return append(binary.AppendUvarint([]byte{0x32}, uint64(len(b))), b...)
}

// TestHeldAckNotWaitingForAWebSocketPing (mochi patch 26): a QoS 1
// PUBLISH and a WebSocket ping arrive in one read. The reader held the
// PUBACK for the rest of its burst, answered the ping, and waited for the
// client's next MQTT bytes with the PUBACK still held: a client waiting
// for it (keep alive 0) waited for ever. Found by review.
func TestHeldAckNotWaitingForAWebSocketPing(t *testing.T) {
	s := startTestServer(t, memory.New(retain.Limits{}))
	c := wsDial(t, s)
	raw := c.UnderlyingConn()
	if _, err := raw.Write(wsFrame(wsBinary, true, false, mqttConnect("held-ack"))); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(&wsStream{c: c})
	if typ, body := readMQTT(t, br); typ != 2 || body[1] != 0 {
		t.Fatalf("want CONNACK success, got type %d % x", typ, body)
	}
	for i := range 20 {
		out := wsFrame(wsBinary, true, false, qos1Publish(byte(i+1)))
		out = append(out, wsFrame(wsPing, true, false, []byte("hb"))...)
		if _, err := raw.Write(out); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second)) // against hanging, not a measurement
		if typ, body := readMQTT(t, br); typ != 4 {
			t.Fatalf("round %d: want PUBACK, got type %d % x", i, typ, body)
		}
	}
}

// TestHeldAckNotWaitingForTheRestOfAPacket (patch 26): PUBLISH A and the
// first bytes of PUBLISH B arrive together; A's PUBACK must not wait for
// the rest of B, which may come much later. Found by review.
func TestHeldAckNotWaitingForTheRestOfAPacket(t *testing.T) {
	s := startTestServer(t, memory.New(retain.Limits{}))
	c, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(mqttConnect("held-partial")); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if typ, body := readMQTT(t, br); typ != 2 || body[1] != 0 {
		t.Fatalf("want CONNACK success, got type %d % x", typ, body)
	}
	a, b := qos1Publish(1), qos1Publish(2)
	if _, err := c.Write(append(a, b[:3]...)); err != nil {
		t.Fatal(err)
	}
	if typ, body := readMQTT(t, br); typ != 4 || body[1] != 1 {
		t.Fatalf("want the PUBACK of A, got type %d % x", typ, body)
	}
	if _, err := c.Write(b[3:]); err != nil {
		t.Fatal(err)
	}
	if typ, body := readMQTT(t, br); typ != 4 || body[1] != 2 {
		t.Fatalf("want the PUBACK of B, got type %d % x", typ, body)
	}
}
