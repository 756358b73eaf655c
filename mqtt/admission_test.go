package mqtt

import (
	"bufio"
	"context"
	"net"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/gorilla/websocket"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/tolsey/tolsey/core/coretest"
	"github.com/tolsey/tolsey/core/limits"
	"github.com/tolsey/tolsey/core/metrics"
	"github.com/tolsey/tolsey/retain"
	"github.com/tolsey/tolsey/retain/memory"
)

// Every test here dials from its own loopback addresses (Linux routes all
// of 127/8 to lo), so that one address can be over its limits while
// another is not.

// connackFrom sends a CONNECT of version (4: MQTT 3.1.1, 5) from the
// address from, and returns the CONNACK and the client.
func connackFrom(t *testing.T, from, addr string, version byte, id string) (packets.Packet, *rawClient) {
	t.Helper()
	conn := coretest.DialFrom(t, from, addr)
	c := &rawClient{conn: conn, r: bufio.NewReader(conn), version: version}
	c.write(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect},
		Connect: packets.ConnectParams{ProtocolName: []byte("MQTT"), Clean: true, Keepalive: 30, ClientIdentifier: id}})
	pk := c.read(t)
	if pk.FixedHeader.Type != packets.Connack {
		t.Fatalf("%s: want CONNACK, got %s", id, packets.PacketNames[pk.FixedHeader.Type])
	}
	return pk, c
}

// pahoFrom connects a paho MQTT 5 client from the address from, wanting
// success.
func pahoFrom(t *testing.T, from, addr, id string) *testClient {
	t.Helper()
	return connectOn(t, coretest.DialFrom(t, from, addr), &paho.Connect{ClientID: id, CleanStart: true, KeepAlive: 30})
}

// pahoRefused connects a paho MQTT 5 client from the address from and
// returns the CONNACK that refused it.
func pahoRefused(t *testing.T, from, addr, id string) *paho.Connack {
	t.Helper()
	conn := coretest.DialFrom(t, from, addr)
	c := paho.NewClient(paho.ClientConfig{ClientID: id, Conn: conn})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ca, err := c.Connect(ctx, &paho.Connect{ClientID: id, CleanStart: true, KeepAlive: 30})
	if err == nil || ca == nil {
		t.Fatalf("%s from %s: want a refusing CONNACK, got %v %v", id, from, ca, err)
	}
	return ca
}

func startAdmissionServer(t *testing.T, o limits.Options) (*Server, *metrics.Metrics) {
	t.Helper()
	m := metrics.New()
	s := startTestServer(t, memory.New(retain.Limits{}), func(opts *Options) {
		opts.Admission = limits.New(o)
		opts.Metrics = m
	})
	return s, m
}

// roundTrip checks that a client from another address is served while
// the limits refuse others: it subscribes and gets what it publishes.
func roundTrip(t *testing.T, from, addr, id string) {
	t.Helper()
	c := pahoFrom(t, from, addr, id)
	c.subscribe(t, "limits/"+id)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.Publish(ctx, &paho.Publish{Topic: "limits/" + id, QoS: 1, Payload: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.msgs:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s from %s got nothing back", id, from)
	}
}

// TestConnectionsPerAddress: with one connection per address, a second
// from the same address gets MQTT 5 CONNACK 0x97 Quota exceeded with a
// reason string (3.1.1: return code 3 Server unavailable), counted; another
// address is served meanwhile; a freed slot admits again.
func TestConnectionsPerAddress(t *testing.T) {
	s, m := startAdmissionServer(t, limits.Options{MaxPerAddress: 1})
	first := pahoFrom(t, "127.0.0.2", s.Addr(), "first")

	ca := pahoRefused(t, "127.0.0.2", s.Addr(), "second")
	if ca.ReasonCode != 0x97 || ca.Properties == nil || ca.Properties.ReasonString == "" {
		t.Fatalf("MQTT 5 over the per-address limit: %+v, want 0x97 with a reason string", ca)
	}
	if pk, _ := connackFrom(t, "127.0.0.2", s.Addr(), 4, "v3"); pk.ReasonCode != 3 {
		t.Fatalf("MQTT 3.1.1 over the per-address limit: code %d, want 3", pk.ReasonCode)
	}
	// Over WebSocket the same address is counted alike.
	d := websocket.Dialer{Subprotocols: []string{"mqtt"}, HandshakeTimeout: 5 * time.Second,
		NetDial: func(network, addr string) (net.Conn, error) {
			return (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}).Dial(network, addr)
		}}
	ws, _, err := d.Dial("ws://"+s.WSAddr()+"/mqtt", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	wsc := &wsClientConn{Conn: ws.UnderlyingConn(), wsStream: wsStream{c: ws}}
	rc := &rawClient{conn: wsc, r: bufio.NewReader(wsc), version: 5}
	rc.write(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect},
		Connect: packets.ConnectParams{ProtocolName: []byte("MQTT"), Clean: true, Keepalive: 30, ClientIdentifier: "ws"}})
	if pk := rc.read(t); pk.FixedHeader.Type != packets.Connack || pk.ReasonCode != 0x97 {
		t.Fatalf("over WebSocket: %s %#x, want CONNACK 0x97", packets.PacketNames[pk.FixedHeader.Type], pk.ReasonCode)
	}

	roundTrip(t, "127.0.0.3", s.Addr(), "other")
	if n := counter(t, m.ConnsRefused, "mqtt", limits.ReasonAddress); n != 3 {
		t.Fatalf("tolsey_connections_refused_total{reason=%s} = %v, want 3", limits.ReasonAddress, n)
	}

	_ = first.Disconnect(&paho.Disconnect{})
	waitUntil(t, "the address's slot to be free", func() bool { return s.opts.Admission.Open() == 1 })
	pahoFrom(t, "127.0.0.2", s.Addr(), "again")
}

// TestConnectRate: over its burst, an address gets MQTT 5 CONNACK 0x9F
// Connection rate exceeded (3.1.1: 3), while another address connects.
func TestConnectRate(t *testing.T) {
	s, m := startAdmissionServer(t, limits.Options{Rate: 0.001, Burst: 2}) // one token per 1000 s
	pahoFrom(t, "127.0.0.4", s.Addr(), "r1")
	pahoFrom(t, "127.0.0.4", s.Addr(), "r2")
	if ca := pahoRefused(t, "127.0.0.4", s.Addr(), "r3"); ca.ReasonCode != 0x9F {
		t.Fatalf("over the rate: %#x, want 0x9F", ca.ReasonCode)
	}
	if pk, _ := connackFrom(t, "127.0.0.4", s.Addr(), 4, "r4"); pk.ReasonCode != 3 {
		t.Fatalf("MQTT 3.1.1 over the rate: code %d, want 3", pk.ReasonCode)
	}
	roundTrip(t, "127.0.0.5", s.Addr(), "r5")
	if n := counter(t, m.ConnsRefused, "mqtt", limits.ReasonRate); n != 2 {
		t.Fatalf("refused for the rate: %v, want 2", n)
	}
}

// TestMaxConnections: the total counts every listener; beyond it every
// address is refused with 0x97.
func TestMaxConnections(t *testing.T) {
	s, m := startAdmissionServer(t, limits.Options{MaxConnections: 2})
	pahoFrom(t, "127.0.0.6", s.Addr(), "t1")
	wsDial(t, s) // a WebSocket connection is counted from its upgrade
	// which the server completes after the client has its answer.
	waitUntil(t, "the WebSocket connection to be admitted", func() bool { return s.opts.Admission.Open() == 2 })
	if ca := pahoRefused(t, "127.0.0.7", s.Addr(), "t3"); ca.ReasonCode != 0x97 {
		t.Fatalf("over the total: %#x, want 0x97", ca.ReasonCode)
	}
	if n := counter(t, m.ConnsRefused, "mqtt", limits.ReasonTotal); n != 1 {
		t.Fatalf("refused for the total: %v, want 1", n)
	}
}

// subscribeMany subscribes c to filters at QoS 1 in one SUBSCRIBE and
// returns the SUBACK's codes.
func (c *rawClient) subscribeMany(t *testing.T, id uint16, filters ...string) []byte {
	t.Helper()
	var subs packets.Subscriptions
	for _, f := range filters {
		subs = append(subs, packets.Subscription{Filter: f, Qos: 1})
	}
	c.write(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1}, PacketID: id, Filters: subs})
	pk := c.read(t)
	if pk.FixedHeader.Type != packets.Suback {
		t.Fatalf("want SUBACK, got %s", packets.PacketNames[pk.FixedHeader.Type])
	}
	return pk.ReasonCodes
}

// TestMaxSubscriptions: beyond mqtt.maxSubscriptions a filter gets SUBACK
// 0x97 Quota exceeded (3.1.1: 0x80), those before it in the packet are
// granted, a resubscribe does not count twice, a refused filter receives
// nothing, and each refusal is counted.
func TestMaxSubscriptions(t *testing.T) {
	m := metrics.New()
	s := startTestServer(t, memory.New(retain.Limits{}), func(o *Options) {
		o.MaxSubscriptions = 2
		o.Metrics = m
	})
	c := dialRaw(t, s.Addr(), "quota5", 100)
	if got := c.subscribeMany(t, 1, "q/a", "q/b", "q/c"); string(got) != "\x01\x01\x97" {
		t.Fatalf("three filters, quota 2: codes %x, want 01 01 97", got)
	}
	if got := c.subscribeMany(t, 2, "q/a", "q/a"); string(got) != "\x01\x01" {
		t.Fatalf("resubscribing a held filter: codes %x, want 01 01", got)
	}
	if got := c.subscribeMany(t, 3, "q/d"); string(got) != "\x97" {
		t.Fatalf("a new filter at the quota: codes %x, want 97", got)
	}
	// Unsubscribing frees room.
	c.write(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Unsubscribe, Qos: 1}, PacketID: 4,
		Filters: packets.Subscriptions{{Filter: "q/b"}}})
	if pk := c.read(t); pk.FixedHeader.Type != packets.Unsuback {
		t.Fatalf("want UNSUBACK, got %s", packets.PacketNames[pk.FixedHeader.Type])
	}
	if got := c.subscribeMany(t, 5, "q/d"); string(got) != "\x01" {
		t.Fatalf("after an unsubscribe: codes %x, want 01", got)
	}
	// q/c was refused: a publish there reaches nobody; q/a's does.
	pub := dialTest(t, s.Addr(), "quota-pub", nil)
	pub.publishAll(t, "q/c", "q/a")
	if pk := c.read(t); pk.FixedHeader.Type != packets.Publish || pk.TopicName != "q/a" {
		t.Fatalf("want the q/a publish only, got %s %q", packets.PacketNames[pk.FixedHeader.Type], pk.TopicName)
	}

	v3 := dialRawVersion(t, s.Addr(), "quota3", 4, true, 0)
	if got := v3.subscribeMany(t, 1, "r/a", "r/b", "r/c"); string(got) != "\x01\x01\x80" {
		t.Fatalf("MQTT 3.1.1, three filters, quota 2: codes %x, want 01 01 80", got)
	}
	if n := counter(t, m.LimitRefusals, "mqtt", limitSubscriptions); n != 3 {
		t.Fatalf("tolsey_limit_refusals_total{limit=subscriptions} = %v, want 3", n)
	}
}

// TestRefusalFlood: refused connections that never send their CONNECT
// hold at most maxPendingRefusals goroutines (the rest are closed at
// accept), each for refuseTimeout; meanwhile another address is served.
func TestRefusalFlood(t *testing.T) {
	s, m := startAdmissionServer(t, limits.Options{MaxPerAddress: 1})
	pahoFrom(t, "127.0.0.8", s.Addr(), "holder")
	const n = maxPendingRefusals + 44
	for range n {
		coretest.DialFrom(t, "127.0.0.8", s.Addr()) // silent: never sends CONNECT
	}
	waitUntil(t, "every flood connection refused", func() bool {
		return counter(t, m.ConnsRefused, "mqtt", limits.ReasonAddress) == n
	})
	pending := func() int {
		s.adm.mu.Lock()
		defer s.adm.mu.Unlock()
		return s.adm.pending
	}
	if p := pending(); p > maxPendingRefusals {
		t.Fatalf("%d refusals pending, want at most %d", p, maxPendingRefusals)
	}
	roundTrip(t, "127.0.0.3", s.Addr(), "bystander")
	waitUntil(t, "the silent refused connections closed", func() bool { return pending() == 0 })
}
