package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/tolsey/tolsey/gateway"
)

// startNATS runs a real NATS server in-process, as nats-server's own tests
// do, with JetStream stored in dir ("" for a temp dir). port 0 picks a free
// port. It is shut down when the test ends (or earlier by the test).
func startNATS(t testing.TB, port int, dir string) *natsserver.Server {
	t.Helper()
	if port == 0 {
		port = -1
	}
	if dir == "" {
		dir = t.TempDir()
	}
	s, err := natsserver.NewServer(&natsserver.Options{
		Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true,
	})
	if err != nil {
		t.Fatalf("nats server: %v", err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server not ready")
	}
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	return s
}

func natsPort(s *natsserver.Server) int { return s.Addr().(*net.TCPAddr).Port }

// natsClient connects a plain nats.go client, closed when the test ends.
func natsClient(t *testing.T, s *natsserver.Server) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatalf("nats connect: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// rulesFlag is --bridge.nats.rules with rules as JSON.
func rulesFlag(rules ...map[string]any) string {
	b, _ := json.Marshal(rules)
	return "--bridge.nats.rules=" + string(b)
}

type ruleJSON = map[string]any

// startBridged runs a gateway bridged to s with rules, and waits until
// NATS has its subscriptions (subs more than before it started).
func startBridged(t *testing.T, s *natsserver.Server, node string, rules []ruleJSON, set ...string) *gateway.Gateway {
	t.Helper()
	before := s.NumSubscriptions()
	inbound := 0
	for _, r := range rules {
		if d := r["direction"]; d == "in" || d == "both" {
			inbound++
		}
	}
	args := append([]string{"--bridge.nats.url=" + s.ClientURL(), "--node.id=" + node, rulesFlag(rules...)}, set...)
	g := startGateway(t, args...)
	eventually(t, "bridge subscriptions at NATS", func() bool {
		return int(s.NumSubscriptions()-before) >= inbound && len(g.BridgesDown()) == 0
	})
	return g
}

// Core NATS both ways, with headers: an MQTT 5 publish reaches a nats.go
// subscriber on the mapped subject with its properties as headers, and a
// nats.go publish reaches an MQTT subscriber on the mapped topic with them
// back as properties.
func TestBridgeNATSCoreBothWays(t *testing.T) {
	s := startNATS(t, 0, "")
	g := startBridged(t, s, "gw1", []ruleJSON{
		{"direction": "out", "local": "sensors/#", "remote": "iot.sensors.>", "qos": 0},
		{"direction": "in", "local": "cmd/#", "remote": "site.cmd.>", "qos": 1},
	})
	nc := natsClient(t, s)
	got := make(chan *nats.Msg, 10)
	if _, err := nc.ChanSubscribe("iot.>", got); err != nil {
		t.Fatal(err)
	}
	nc.Flush()

	pub := connect5(t, g.MQTTAddr(), "pub")
	pub.publish(t, &paho.Publish{Topic: "sensors/room.1/temp", QoS: 1, Payload: []byte("21.5"), Properties: &paho.PublishProperties{
		ContentType: "text/plain", User: paho.UserProperties{{Key: "unit", Value: "C"}},
	}})
	select {
	case m := <-got:
		if m.Subject != "iot.sensors.room//1.temp" || string(m.Data) != "21.5" {
			t.Errorf("NATS got %s %q", m.Subject, m.Data)
		}
		if m.Header.Get("Content-Type") != "text/plain" {
			t.Errorf("headers: %v", m.Header)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("nothing reached NATS")
	}

	sub := connect5(t, g.MQTTAddr(), "sub")
	sub.subscribe(t, paho.SubscribeOptions{Topic: "cmd/#", QoS: 1})
	out := nats.NewMsg("site.cmd.valve.open")
	out.Data = []byte("now")
	out.Header.Set("Content-Type", "text/plain")
	if err := nc.PublishMsg(out); err != nil {
		t.Fatal(err)
	}
	m := sub.next(t)
	if m.Topic != "cmd/valve/open" || string(m.Payload) != "now" || m.QoS != 1 {
		t.Errorf("MQTT got %s %q qos %d", m.Topic, m.Payload, m.QoS)
	}
	if m.Properties == nil || m.Properties.ContentType != "text/plain" {
		t.Errorf("properties: %+v", m.Properties)
	}
	st := g.Bridges()
	if len(st) != 1 || st[0].State != "connected" || st[0].Rules[0].Out != 1 || st[0].Rules[1].In != 1 {
		t.Errorf("status: %+v", st)
	}
}

// Two gateways bridge the same subjects both ways through one NATS: each
// MQTT subscriber, on either gateway, gets each message exactly once, and
// NATS sees each once. A message that carries our node in its hop path is
// dropped as a loop.
func TestBridgeNATSNoLoopTwoGateways(t *testing.T) {
	s := startNATS(t, 0, "")
	rules := []ruleJSON{{"direction": "both", "local": "t/#", "remote": "t.>", "qos": 1}}
	ga := startBridged(t, s, "A", rules)
	gb := startBridged(t, s, "B", rules)
	nc := natsClient(t, s)
	var mu sync.Mutex
	seen := map[string]int{}
	if _, err := nc.Subscribe("t.>", func(m *nats.Msg) {
		mu.Lock()
		seen[string(m.Data)]++
		mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	nc.Flush()

	subA := connect5(t, ga.MQTTAddr(), "subA")
	subA.subscribe(t, paho.SubscribeOptions{Topic: "t/#", QoS: 1})
	subB := connect5(t, gb.MQTTAddr(), "subB")
	subB.subscribe(t, paho.SubscribeOptions{Topic: "t/#", QoS: 1})
	pubA := connect5(t, ga.MQTTAddr(), "pubA")
	pubB := connect5(t, gb.MQTTAddr(), "pubB")
	const n = 50
	for i := 0; i < n; i++ {
		pubA.publish(t, &paho.Publish{Topic: "t/a", QoS: 1, Payload: []byte(fmt.Sprintf("a%d", i))})
		pubB.publish(t, &paho.Publish{Topic: "t/b", QoS: 1, Payload: []byte(fmt.Sprintf("b%d", i))})
	}
	// The fences, one from each side, arrive at both after everything
	// before them from that side (one connection, one order).
	pubA.publish(t, &paho.Publish{Topic: "t/endA", QoS: 1, Payload: []byte("endA")})
	pubB.publish(t, &paho.Publish{Topic: "t/endB", QoS: 1, Payload: []byte("endB")})
	for _, c := range []struct {
		name string
		sub  *client5
	}{{"subA", subA}, {"subB", subB}} {
		counts := map[string]int{}
		fences := 0
		for fences < 2 {
			m := c.sub.next(t)
			counts[string(m.Payload)]++
			if strings.HasPrefix(m.Topic, "t/end") {
				fences++
			}
		}
		for i := 0; i < n; i++ {
			for _, p := range []string{"a", "b"} {
				if k := counts[fmt.Sprintf("%s%d", p, i)]; k != 1 {
					t.Errorf("%s got %s%d %d times", c.name, p, i, k)
				}
			}
		}
	}
	eventually(t, "NATS saw every message", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return seen["endA"] == 1 && seen["endB"] == 1
	})
	mu.Lock()
	for k, v := range seen {
		if v != 1 {
			t.Errorf("NATS saw %s %d times", k, v)
		}
	}
	mu.Unlock()
	// Nothing more comes: a fence published now is the next message.
	pubA.publish(t, &paho.Publish{Topic: "t/last", QoS: 1, Payload: []byte("last")})
	if m := subB.next(t); m.Topic != "t/last" {
		t.Errorf("subB got %s %q after the fences: a loop", m.Topic, m.Payload)
	}
	if m := subA.next(t); m.Topic != "t/last" {
		t.Errorf("subA got %s %q after the fences: a loop", m.Topic, m.Payload)
	}

	// A message whose hop path holds A is A's own, come back: A drops it.
	loop := nats.NewMsg("t.x")
	loop.Data = []byte("loop")
	loop.Header.Set("Tolsey-Path", "A")
	nc.PublishMsg(loop)
	fence := nats.NewMsg("t.fence")
	nc.PublishMsg(fence)
	if m := subA.next(t); m.Topic != "t/fence" {
		t.Errorf("A took a message whose path holds A: %s %q", m.Topic, m.Payload)
	}
	if m := subB.next(t); m.Topic != "t/x" { // B is not on its path
		t.Errorf("B: %s %q", m.Topic, m.Payload)
	}
}

// An unreachable NATS at start does not stop the gateway: it serves local
// clients, /readyz stays 200 and names the bridge as down, and
// /api/v1/bridges says why.
func TestBridgeNATSUnreachableAtStart(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	g := startGateway(t, "--bridge.nats.url=nats://"+addr, "--node.id=lonely",
		rulesFlag(ruleJSON{"direction": "out", "local": "x/#", "remote": "x.>"}))
	eventually(t, "bridge reports the failure", func() bool {
		st := g.Bridges()
		return len(st) == 1 && st[0].LastError != ""
	})
	code, body := httpDo(t, "GET", "http://"+g.AdminAddr()+"/readyz")
	if code != 200 || !strings.Contains(body, "bridge nats down: nats: no servers available") {
		t.Errorf("/readyz %d %q", code, body)
	}
	code, body = httpDo(t, "GET", "http://"+g.AdminAddr()+"/api/v1/bridges")
	var st []map[string]any
	if err := json.Unmarshal([]byte(body), &st); err != nil || code != 200 || len(st) != 1 {
		t.Fatalf("/api/v1/bridges %d %s", code, body)
	}
	if st[0]["name"] != "nats" || st[0]["connected"] != false || st[0]["state"] != "reconnecting" || st[0]["lastError"] == "" {
		t.Errorf("/api/v1/bridges: %s", body)
	}
	// Local clients are served meanwhile.
	sub := connect5(t, g.MQTTAddr(), "sub")
	sub.subscribe(t, paho.SubscribeOptions{Topic: "x/#"})
	pub := connect5(t, g.MQTTAddr(), "pub")
	pub.publish(t, &paho.Publish{Topic: "x/1", Payload: []byte("local")})
	if m := sub.next(t); string(m.Payload) != "local" {
		t.Errorf("local delivery: %q", m.Payload)
	}
}

// A NATS request on <retainedRequests>.<subject> is answered with the
// retained message of the mapped topic.
func TestBridgeNATSRetainedRequest(t *testing.T) {
	s := startNATS(t, 0, "")
	g := startGateway(t, "--bridge.nats.url="+s.ClientURL(), "--bridge.nats.retainedRequests=$GW.retained")
	eventually(t, "bridge connected", func() bool { return len(g.BridgesDown()) == 0 })
	pub := connect5(t, g.MQTTAddr(), "pub")
	pub.publish(t, &paho.Publish{Topic: "site/1/state", QoS: 1, Retain: true, Payload: []byte("on")})
	nc := natsClient(t, s)
	eventually(t, "retained answer", func() bool {
		m, err := nc.Request("$GW.retained.site.1.state", nil, 2*time.Second)
		return err == nil && string(m.Data) == "on" && m.Header.Get("Tolsey-Topic") == "site/1/state"
	})
	m, err := nc.Request("$GW.retained.site.2.state", nil, 2*time.Second)
	if err != nil || len(m.Data) != 0 || m.Header.Get("Tolsey-Retained") != "none" {
		t.Errorf("no retained message: %v %+v", err, m)
	}
}
