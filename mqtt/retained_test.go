package mqtt

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/tolsey/tolsey/core"
	"github.com/tolsey/tolsey/retain"
	"github.com/tolsey/tolsey/retain/memory"
)

// TestReplayWaitsForAcknowledgements: a late subscriber whose window holds
// one message in flight (Receive Maximum 1, mqtt.maxInflight 1) gets every
// stored copy, each marked RETAIN=1, one per PUBACK. The replay worker
// waits for the acknowledgement of the copy before and is woken by it,
// through mochi's acknowledgement path: once per PUBACK, and never before
// the test has sent it. The test has no clock of its own to offer: a
// worker that missed the signal would leave it waiting for a copy that
// never comes. (Before, the worker polled the session's inflight count
// with a time.Sleep backoff.)
func TestReplayWaitsForAcknowledgements(t *testing.T) {
	store := memory.New(retain.Limits{})
	const n = 5
	setRetained(t, store, n)
	s := startTestServer(t, store, func(o *Options) { o.MaxInflight = 1 })
	r := s.hook.replay
	c := dialRaw(t, s.Addr(), "late", 1)
	c.subscribeQoS1(t, "r/#")
	seen := map[string]bool{}
	for i := range n {
		pk := c.read(t)
		if pk.FixedHeader.Type != packets.Publish || !pk.FixedHeader.Retain || pk.FixedHeader.Qos != 1 || seen[pk.TopicName] {
			t.Fatalf("copy %d: want a new stored copy, RETAIN=1 QoS 1; got %v retain=%v qos=%d topic %s",
				i, pk.FixedHeader.Type, pk.FixedHeader.Retain, pk.FixedHeader.Qos, pk.TopicName)
		}
		seen[pk.TopicName] = true
		if i < n-1 {
			waitUntil(t, "the replay worker to wait for the PUBACK", func() bool { return r.waiting.Load() == 1 })
			if w := r.wakes.Load(); w != int64(i) {
				t.Fatalf("before PUBACK %d the worker had woken %d times, want %d: a wake no acknowledgement caused", i, w, i)
			}
		}
		c.write(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Puback}, PacketID: pk.PacketID})
	}
	waitUntil(t, "the replay to end", func() bool { return r.holding.Load() == 0 })
	if w := r.wakes.Load(); w != n-1 {
		t.Fatalf("the worker woke %d times for %d acknowledgements it waited for", w, n-1)
	}
}

// setRetained stores n QoS 1 retained messages, r/0 to r/n-1, made an hour
// ago (before any subscription of the test).
func setRetained(t *testing.T, store retain.Store, n int) {
	t.Helper()
	for i := range n {
		m := &core.Message{Topic: fmt.Sprintf("r/%d", i), Payload: []byte("v"), QoS: 1, Created: time.Now().Add(-time.Hour)}
		if err := store.Set(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
}

// subscribeQoS1 subscribes to filter at QoS 1 and wants it granted.
func (c *rawClient) subscribeQoS1(t *testing.T, filter string) {
	t.Helper()
	c.write(t, packets.Packet{
		FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1},
		PacketID:    1,
		Filters:     packets.Subscriptions{{Filter: filter, Qos: 1}},
	})
	if pk := c.read(t); pk.FixedHeader.Type != packets.Suback || len(pk.ReasonCodes) != 1 || pk.ReasonCodes[0] != 1 {
		t.Fatalf("want SUBACK granting QoS 1, got %v", pk)
	}
}

// rawClient is an MQTT client (5, or 3.1.1 with version 4) that writes and
// reads packets itself, with mochi's codec: its acknowledgements go exactly
// when the test says, and it sees the server's in the order they come.
type rawClient struct {
	conn    net.Conn
	r       *bufio.Reader
	version byte
}

// dialRaw connects as id with the given Receive Maximum and waits for a
// successful CONNACK.
func dialRaw(t *testing.T, addr, id string, receiveMaximum uint16) *rawClient {
	t.Helper()
	return dialRawVersion(t, addr, id, 5, true, receiveMaximum)
}

// dialRawVersion is dialRaw with the protocol version (4: MQTT 3.1.1, 5)
// and the clean start flag.
func dialRawVersion(t *testing.T, addr, id string, version byte, clean bool, receiveMaximum uint16) *rawClient {
	t.Helper()
	c := dialRawConn(t, addr, version)
	c.write(t, packets.Packet{
		FixedHeader: packets.FixedHeader{Type: packets.Connect},
		Connect: packets.ConnectParams{ProtocolName: []byte("MQTT"), Clean: clean, Keepalive: 30,
			ClientIdentifier: id},
		Properties: packets.Properties{ReceiveMaximum: receiveMaximum},
	})
	if pk := c.read(t); pk.FixedHeader.Type != packets.Connack || pk.ReasonCode != 0 {
		t.Fatalf("%s: want a successful CONNACK first, got %s (topic %q, code %#x)",
			id, packets.PacketNames[pk.FixedHeader.Type], pk.TopicName, pk.ReasonCode)
	}
	return c
}

// dialRawConn connects a rawClient of version, closed when the test ends;
// nothing is sent yet.
func dialRawConn(t *testing.T, addr string, version byte) *rawClient {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &rawClient{conn: conn, r: bufio.NewReader(conn), version: version}
}

func (c *rawClient) write(t *testing.T, pk packets.Packet) {
	t.Helper()
	b, err := encodePacket(c.version, pk)
	if err == nil {
		_ = c.conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
		_, err = c.conn.Write(b)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// read returns the next packet, failing the test when none comes within
// 20 s (a deadline against hanging, not a measurement).
func (c *rawClient) read(t *testing.T) packets.Packet {
	t.Helper()
	pk, err := c.next()
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	return pk
}

// next returns the next packet, or why none came within 20 s.
func (c *rawClient) next() (packets.Packet, error) {
	_ = c.conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	pk := packets.Packet{ProtocolVersion: c.version}
	hb, err := c.r.ReadByte()
	if err == nil {
		err = pk.FixedHeader.Decode(hb)
	}
	if err == nil {
		pk.FixedHeader.Remaining, _, err = packets.DecodeLength(c.r)
	}
	body := make([]byte, pk.FixedHeader.Remaining)
	if err == nil {
		_, err = io.ReadFull(c.r, body)
	}
	if err != nil {
		return pk, err
	}
	switch pk.FixedHeader.Type {
	case packets.Connack:
		err = pk.ConnackDecode(body)
	case packets.Suback:
		err = pk.SubackDecode(body)
	case packets.Unsuback:
		err = pk.UnsubackDecode(body)
	case packets.Publish:
		err = pk.PublishDecode(body)
	case packets.Puback:
		err = pk.PubackDecode(body)
	case packets.Pubrec:
		err = pk.PubrecDecode(body)
	case packets.Pubcomp:
		err = pk.PubcompDecode(body)
	case packets.Pubrel:
		err = pk.PubrelDecode(body)
	case packets.Disconnect:
		err = pk.DisconnectDecode(body)
	}
	if err != nil {
		return pk, fmt.Errorf("decode %v: %w", pk.FixedHeader.Type, err)
	}
	return pk, nil
}
