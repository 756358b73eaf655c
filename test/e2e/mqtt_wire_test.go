package e2e

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"testing"
	"time"
)

// Raw MQTT 5 over TCP, for what client libraries hide: the exact bytes of
// acknowledgements and what happens on the socket around a DISCONNECT.

type wire struct {
	t  *testing.T
	c  net.Conn
	rd *bufio.Reader
}

func dialWire(t *testing.T, addr, clientID string) *wire {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	w := &wire{t: t, c: c, rd: bufio.NewReader(c)}
	// CONNECT: "MQTT", version 5, clean start, keepalive 30, no properties.
	body := append([]byte{0, 4, 'M', 'Q', 'T', 'T', 5, 0x02, 0, 30, 0}, str(clientID)...)
	if err := w.send(0x10, body); err != nil {
		t.Fatalf("send CONNECT: %v", err)
	}
	if typ, b := w.read(); typ != 0x20 || len(b) < 2 || b[1] != 0 {
		t.Fatalf("CONNACK: type %#x body %x", typ, b)
	}
	return w
}

func str(s string) []byte { return append([]byte{byte(len(s) >> 8), byte(len(s))}, s...) }

func (w *wire) send(header byte, body []byte) error {
	pk := []byte{header}
	for n := len(body); ; {
		b := byte(n % 128)
		if n /= 128; n > 0 {
			b |= 0x80
		}
		pk = append(pk, b)
		if n == 0 {
			break
		}
	}
	_, err := w.c.Write(append(pk, body...))
	return err
}

// read returns the next packet's first byte and body.
func (w *wire) read() (byte, []byte) {
	w.t.Helper()
	_ = w.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	h, err := w.rd.ReadByte()
	if err != nil {
		w.t.Fatalf("read packet: %v", err)
	}
	n, mul := 0, 1
	for {
		b, err := w.rd.ReadByte()
		if err != nil {
			w.t.Fatalf("read length: %v", err)
		}
		n += int(b&0x7f) * mul
		if b&0x80 == 0 {
			break
		}
		mul *= 128
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(w.rd, body); err != nil {
		w.t.Fatalf("read body: %v", err)
	}
	return h, body
}

func publishBody(topic string, id uint16, props, payload []byte) []byte {
	b := append(str(topic), byte(id>>8), byte(id))
	b = append(b, byte(len(props)))
	b = append(b, props...)
	return append(b, payload...)
}

// TestPubackCarriesNoPublishProperties: mochi copies a PUBLISH's properties
// onto its PUBACK/PUBREC unless told not to; a PUBACK carries at most a
// reason code and a reason string [MQTT-3.4.2], never the user properties
// of the message it acknowledges.
func TestPubackCarriesNoPublishProperties(t *testing.T) {
	g := startGateway(t)
	w := dialWire(t, g.MQTTAddr(), "acker")
	// User Property (0x26) "a"="1", Content Type (0x03) "x".
	props := append(append([]byte{0x26}, append(str("a"), str("1")...)...), append([]byte{0x03}, str("x")...)...)
	if err := w.send(0x32, publishBody("ack/q1", 7, props, []byte("p"))); err != nil {
		t.Fatal(err)
	}
	if typ, b := w.read(); typ != 0x40 || !bytes.Equal(b, []byte{0, 7}) && !bytes.Equal(b, []byte{0, 7, 0}) && !bytes.Equal(b, []byte{0, 7, 0, 0}) {
		t.Fatalf("PUBACK type %#x body %x; want packet id 7, success, no properties", typ, b)
	}
	if err := w.send(0x34, publishBody("ack/q2", 8, props, []byte("p"))); err != nil {
		t.Fatal(err)
	}
	if typ, b := w.read(); typ != 0x50 || !bytes.Equal(b, []byte{0, 8}) && !bytes.Equal(b, []byte{0, 8, 0}) && !bytes.Equal(b, []byte{0, 8, 0, 0}) {
		t.Fatalf("PUBREC type %#x body %x; want packet id 8, success, no properties", typ, b)
	}
}

// TestDisconnectReachesClientStillSending is the Paho interoperability
// suite's test_flow_control2: a client that exceeds Receive Maximum gets
// DISCONNECT 0x93 [MQTT-3.3.4-9], and it must be able to read it although
// it goes on answering PUBRECs. When the gateway closed the socket outright,
// the client's next write drew a RST and the client failed with "connection
// reset" instead of acting on the reason code.
func TestDisconnectReachesClientStillSending(t *testing.T) {
	g := startGateway(t, "--mqtt.receiveMaximum=2")
	w := dialWire(t, g.MQTTAddr(), "flood")
	for id := uint16(1); id <= 3; id++ {
		if err := w.send(0x34, publishBody("flow/q2", id, nil, []byte("m"))); err != nil {
			t.Fatal(err)
		}
	}
	var recs [][]byte
	for {
		typ, b := w.read()
		if typ>>4 == 5 {
			recs = append(recs, b[:2])
			continue
		}
		if typ>>4 != 14 || len(b) < 1 || b[0] != 0x93 {
			t.Fatalf("packet %#x %x; want PUBRECs then DISCONNECT 0x93 receive maximum exceeded", typ, b)
		}
		break
	}
	if len(recs) != 2 {
		t.Fatalf("%d PUBRECs before the DISCONNECT, want 2", len(recs))
	}
	// Once the gateway has let go of the connection, the client answers
	// the PUBRECs and pings, as the Paho test client does: no reset.
	metrics := "http://" + g.AdminAddr() + "/metrics"
	eventually(t, "the gateway to drop the connection", func() bool {
		_, body := httpDo(t, "GET", metrics)
		return grep(body, `tolsey_connections{protocol="mqtt"}`) == `tolsey_connections{protocol="mqtt"} 0`
	})
	for i, rec := range append(recs, nil, nil) {
		var err error
		if rec != nil {
			err = w.send(0x62, rec) // PUBREL
		} else {
			err = w.send(0xc0, nil) // PINGREQ
		}
		if err != nil {
			t.Fatalf("write %d after the DISCONNECT: %v (the gateway closed without draining)", i, err)
		}
	}
	// The gateway discards them and then closes: end of stream, no answer.
	_ = w.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if b, err := w.rd.ReadByte(); err != io.EOF {
		t.Fatalf("after the DISCONNECT: read %#x, %v; want end of stream", b, err)
	}
}
