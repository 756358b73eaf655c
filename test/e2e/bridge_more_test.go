package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"
	"github.com/eclipse/paho.golang/paho"
	pahov3 "github.com/eclipse/paho.mqtt.golang"
	natsserver "github.com/nats-io/nats-server/v2/server"

	"github.com/tolsey/tolsey/gateway"
)

// bridgeStatus is GET /api/v1/bridges as JSON, as an operator reads it.
type bridgeStatus struct {
	Name      string `json:"name"`
	State     string `json:"state"`
	Connected bool   `json:"connected"`
	LastError string `json:"lastError"`
	Rules     []struct {
		Buffer *struct {
			Messages      int64  `json:"messages"`
			MaxBytes      int64  `json:"maxBytes"`
			Rejected      uint64 `json:"rejected"`
			DroppedOldest uint64 `json:"droppedOldest"`
		} `json:"buffer"`
	} `json:"rules"`
}

func getBridges(t *testing.T, g *gateway.Gateway) []bridgeStatus {
	t.Helper()
	code, body := httpDo(t, "GET", "http://"+g.AdminAddr()+"/api/v1/bridges")
	var st []bridgeStatus
	if code != 200 || json.Unmarshal([]byte(body), &st) != nil {
		t.Fatalf("/api/v1/bridges: %d %s", code, body)
	}
	return st
}

// jsBridgeNATSDown runs a gateway with one outbound JetStream rule
// alarms/# ⇒ site1.alarms.> (stream ALARMS) and then stops NATS; the
// returned function starts NATS again on the same port and store.
func jsBridgeNATSDown(t *testing.T, set ...string) (*gateway.Gateway, func() *natsserver.Server) {
	t.Helper()
	dir := t.TempDir()
	s := startNATS(t, 0, dir)
	port := natsPort(s)
	nc := natsClient(t, s)
	createStream(t, jsClient(t, nc), "ALARMS", "site1.alarms.>")
	nc.Close()
	g := startBridged(t, s, "edge", []ruleJSON{
		{"direction": "out", "local": "alarms/#", "remote": "site1.alarms.>", "qos": 1, "jetstream": true},
	}, set...)
	s.Shutdown()
	s.WaitForShutdown()
	eventually(t, "bridge sees NATS down", func() bool { return len(g.BridgesDown()) == 1 })
	return g, func() *natsserver.Server { return startNATS(t, port, dir) }
}

// fillPayload is the size of message fillBuffer fills the buffer with; a
// message refused once it is full must be at least as large (a smaller
// one may still fit).
var fillPayload = strings.Repeat("x", 500)

// fillBuffer publishes 500-byte QoS 1 messages from an MQTT 5 client until
// the buffer refuses one (PUBACK 0x97), and returns how many it took.
func fillBuffer(t *testing.T, g *gateway.Gateway) int {
	t.Helper()
	pub := connect5(t, g.MQTTAddr(), "filler")
	payload := []byte(fillPayload)
	for i := 0; i < 1000; i++ {
		r := pub.publish(t, &paho.Publish{Topic: "alarms/fill", QoS: 1, Payload: payload})
		switch {
		case r == nil:
			t.Fatalf("publish %d: no answer", i)
		case r.ReasonCode == 0x97:
			return i
		case r.ReasonCode != 0:
			t.Fatalf("publish %d: reason %#x", i, r.ReasonCode)
		}
	}
	t.Fatal("the buffer never refused a publish")
	return 0
}

// dropOldest: with a small buffer and NATS down, every publish is
// acknowledged, the oldest records make room and are counted in the
// buffer's stats, and once NATS is back the stream holds the newest ones,
// in publish order.
func TestBridgeJetStreamBufferDropOldest(t *testing.T) {
	g, restart := jsBridgeNATSDown(t, "--bridge.buffer.maxBytes=8KiB", "--bridge.buffer.policy=dropOldest")
	pub := connect5(t, g.MQTTAddr(), "pub")
	const n = 200
	pad := strings.Repeat("x", 200)
	for i := 0; i < n; i++ {
		r := pub.publish(t, &paho.Publish{Topic: "alarms/door", QoS: 1, Payload: []byte(fmt.Sprintf("%04d %s", i, pad))})
		if r == nil || r.ReasonCode != 0 {
			t.Fatalf("publish %d under dropOldest: %+v", i, r)
		}
	}
	st := getBridges(t, g)
	if len(st) != 1 || len(st[0].Rules) != 1 || st[0].Rules[0].Buffer == nil {
		t.Fatalf("/api/v1/bridges: %+v", st)
	}
	buf := st[0].Rules[0].Buffer
	kept := buf.Messages
	if buf.DroppedOldest == 0 || kept == 0 || kept+int64(buf.DroppedOldest) != n || buf.Rejected != 0 {
		t.Fatalf("buffer after %d publishes into 8 KiB: %+v (want dropped + held = %d, none rejected)", n, *buf, n)
	}

	s2 := restart()
	stream, err := jsClient(t, natsClient(t, s2)).Stream(context.Background(), "ALARMS")
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "buffer drained", func() bool {
		b := getBridges(t, g)[0].Rules[0].Buffer
		return b != nil && b.Messages == 0
	})
	info, err := stream.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if int64(info.State.Msgs) != kept {
		t.Fatalf("stream holds %d, the buffer held %d", info.State.Msgs, kept)
	}
	for i := int64(0); i < kept; i++ {
		m, err := stream.GetMsg(context.Background(), info.State.FirstSeq+uint64(i))
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("%04d ", n-kept+i); !strings.HasPrefix(string(m.Data), want) {
			t.Fatalf("stream message %d is %.5q, want %q: not the newest %d in order", i, m.Data, want, kept)
		}
	}
}

// MQTT 3.1.1 has no PUBACK reason code: a QoS 1 publish the full buffer
// refuses (rejectNew) closes the publisher's connection [MQTT-3.3.5-2],
// and no PUBACK is sent.
func TestBridgeJetStreamBufferFullMQTT311(t *testing.T) {
	g, _ := jsBridgeNATSDown(t, "--bridge.buffer.maxBytes=4KiB", "--bridge.buffer.policy=rejectNew")
	held := fillBuffer(t, g)

	lost := make(chan error, 1)
	o := pahov3.NewClientOptions().AddBroker("tcp://" + g.MQTTAddr()).SetClientID("v3pub").
		SetProtocolVersion(4).SetAutoReconnect(false).SetCleanSession(true).
		SetConnectionLostHandler(func(_ pahov3.Client, err error) { lost <- err })
	c := pahov3.NewClient(o)
	if tok := c.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("connect: %v", tok.Error())
	}
	defer c.Disconnect(0)
	tok := c.Publish("alarms/door", 1, false, fillPayload)
	select {
	case err := <-lost:
		t.Logf("3.1.1 connection closed: %v", err)
	case <-time.After(15 * time.Second):
		t.Fatal("the 3.1.1 publisher's connection is still open after its publish was refused")
	}
	// The token completes with an error or not at all: a nil error would
	// be a PUBACK for a message that was not taken.
	if tok.WaitTimeout(time.Second) && tok.Error() == nil {
		t.Fatal("the refused QoS 1 publish was acknowledged")
	}
	b := getBridges(t, g)[0].Rules[0].Buffer
	if b.Rejected < 2 || b.Messages != int64(held) {
		t.Errorf("buffer: %+v, want the 3.1.1 publish rejected too and %d held", *b, held)
	}
}

// AMQP: a transfer the full buffer refuses (rejectNew) is settled
// rejected with amqp:resource-limit-exceeded.
func TestBridgeJetStreamBufferFullAMQP(t *testing.T) {
	g, _ := jsBridgeNATSDown(t, "--bridge.buffer.maxBytes=4KiB", "--bridge.buffer.policy=rejectNew")
	held := fillBuffer(t, g)

	s := amqpSession(t, g)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	snd, err := s.NewSender(ctx, "alarms/door", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer snd.Close(ctx)
	m := goamqp.NewMessage([]byte(fillPayload))
	m.Header = &goamqp.MessageHeader{Durable: true}
	err = snd.Send(ctx, m, nil)
	var ae *goamqp.Error
	if !errors.As(err, &ae) || ae.Condition != goamqp.ErrCondResourceLimitExceeded {
		t.Fatalf("send with the buffer full: %v, want rejected %s", err, goamqp.ErrCondResourceLimitExceeded)
	}
	b := getBridges(t, g)[0].Rules[0].Buffer
	if b.Rejected < 2 || b.Messages != int64(held) {
		t.Errorf("buffer: %+v, want the AMQP transfer rejected too and %d held", *b, held)
	}
	// The link goes on: a message for a topic no bridge rule takes is
	// accepted.
	snd2, err := s.NewSender(ctx, "local/only", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer snd2.Close(ctx)
	if err := snd2.Send(ctx, goamqp.NewMessage([]byte("ok")), nil); err != nil {
		t.Errorf("a local-only message on the same session: %v", err)
	}
}

// authFailures counts the connections s closed for failed authentication.
func authFailures(s *natsserver.Server) int {
	cz, err := s.Connz(&natsserver.ConnzOptions{State: natsserver.ConnClosed, Limit: 10000})
	if err != nil {
		return 0
	}
	n := 0
	for _, c := range cz.Conns {
		if strings.Contains(c.Reason, "Authentication") {
			n++
		}
	}
	return n
}

// Wrong credentials: the gateway starts and serves its local clients;
// /api/v1/bridges has the authorization error as lastError and /readyz is
// 200 naming the bridge as down. The bridge keeps trying (nats.go gives
// up by default after the same auth error twice on a server): once NATS
// has refused it three times and is then reconfigured to accept its
// password, it connects.
func TestBridgeNATSWrongCredentials(t *testing.T) {
	opts := &natsserver.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true,
		Username: "bridge", Password: "right", MaxClosedClients: 10000}
	s, err := natsserver.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server not ready")
	}
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	g := startGateway(t, "--bridge.nats.url="+s.ClientURL(), "--node.id=wrongpw",
		"--bridge.nats.user=bridge", "--bridge.nats.password=wrong",
		rulesFlag(ruleJSON{"direction": "out", "local": "x/#", "remote": "x.>"}))

	eventually(t, "the auth error in /api/v1/bridges", func() bool {
		st := getBridges(t, g)
		return len(st) == 1 && strings.Contains(strings.ToLower(st[0].LastError), "authorization violation")
	})
	st := getBridges(t, g)[0]
	if st.Connected || st.Name != "nats" {
		t.Errorf("/api/v1/bridges: %+v", st)
	}
	code, body := httpDo(t, "GET", "http://"+g.AdminAddr()+"/readyz")
	if code != 200 || !strings.Contains(body, "bridge nats down:") || !strings.Contains(strings.ToLower(body), "authorization violation") {
		t.Errorf("/readyz %d %q", code, body)
	}
	// Local clients are served meanwhile.
	sub := connect5(t, g.MQTTAddr(), "sub")
	sub.subscribe(t, paho.SubscribeOptions{Topic: "x/#"})
	pub := connect5(t, g.MQTTAddr(), "pub")
	pub.publish(t, &paho.Publish{Topic: "x/1", Payload: []byte("local")})
	if m := sub.next(t); string(m.Payload) != "local" {
		t.Errorf("local delivery: %q", m.Payload)
	}

	// Still trying after the same auth error more than twice.
	eventually(t, "three refused attempts at NATS (or the bridge closed)", func() bool {
		return authFailures(s) >= 3 || getBridges(t, g)[0].State == "closed"
	})
	if st := getBridges(t, g)[0]; st.State == "closed" {
		t.Fatalf("the bridge gave up after %d auth failures: %+v", authFailures(s), st)
	}
	fixed := opts.Clone()
	fixed.Password = "wrong"
	if err := s.ReloadOptions(fixed); err != nil {
		t.Fatalf("reload NATS with the gateway's password: %v", err)
	}
	eventually(t, "bridge connected once NATS takes its password", func() bool {
		st := getBridges(t, g)
		return len(st) == 1 && st[0].Connected && st[0].State == "connected"
	})
}
