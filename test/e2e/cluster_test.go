package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"
	"github.com/eclipse/paho.golang/paho"
	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/tolsey/tolsey/gateway"
	"github.com/tolsey/tolsey/retain/redistest"
)

// cluster3 runs three clustered gateways a, b, c on one NATS and one
// Redis, each with set applied, and waits until each has subscribed to
// the cluster's subject at NATS.
func cluster3(t *testing.T, set ...string) (*natsserver.Server, []*gateway.Gateway) {
	t.Helper()
	return cluster3On(t, startRedis(t), set...)
}

// cluster3On is cluster3 on the Redis r.
func cluster3On(t *testing.T, r *redistest.Server, set ...string) (*natsserver.Server, []*gateway.Gateway) {
	t.Helper()
	s := startNATS(t, 0, "")
	var gs []*gateway.Gateway
	for _, node := range []string{"a", "b", "c"} {
		before := s.NumSubscriptions()
		args := append([]string{"--cluster.enabled=true", "--bridge.nats.url=" + s.ClientURL(), "--node.id=" + node,
			"--retain.backend=redis", "--retain.redis.url=" + r.URL(), "--retain.redis.prefix=cluster:"}, set...)
		g := startGateway(t, args...)
		eventually(t, "gateway "+node+" subscribed at NATS", func() bool { return s.NumSubscriptions() > before })
		gs = append(gs, g)
	}
	return s, gs
}

// amqpCollector receives from an AMQP link in the background, so that
// the test can wait for a fence without the link's credit running out.
type amqpCollector struct {
	mu   sync.Mutex
	msgs []string
}

func collectAMQP(t *testing.T, r *goamqp.Receiver) *amqpCollector {
	c := &amqpCollector{}
	receiveAMQP(t, r, func(body string) {
		c.mu.Lock()
		c.msgs = append(c.msgs, body)
		c.mu.Unlock()
	})
	return c
}

func (c *amqpCollector) count(body string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, b := range c.msgs {
		if b == body {
			n++
		}
	}
	return n
}

// A message published on any gateway (MQTT QoS 0 and 1, AMQP) reaches
// every matching MQTT and AMQP subscriber on every gateway exactly once:
// once from its own gateway, once through the cluster on each other, and
// never echoed back to its origin.
func TestClusterDeliveryExactlyOnce(t *testing.T) {
	_, gs := cluster3(t)
	var subs []*client5
	var asubs []*amqpCollector
	for i, g := range gs {
		m := connect5(t, g.MQTTAddr(), fmt.Sprintf("sub%d", i))
		m.subscribe(t, paho.SubscribeOptions{Topic: "c/#", QoS: 1})
		subs = append(subs, m)
		asubs = append(asubs, collectAMQP(t, amqpReceiver(t, amqpSession(t, g), "c/#")))
	}
	type pub struct {
		name string
		send func(body string)
	}
	var pubs []pub
	for i, g := range gs {
		mp := connect5(t, g.MQTTAddr(), fmt.Sprintf("pub%d", i))
		for _, qos := range []byte{0, 1} {
			pubs = append(pubs, pub{fmt.Sprintf("mqtt%d-qos%d", i, qos), func(body string) {
				mp.publish(t, &paho.Publish{Topic: "c/x", QoS: qos, Payload: []byte(body)})
			}})
		}
		as := amqpSession(t, g)
		pubs = append(pubs, pub{fmt.Sprintf("amqp%d", i), func(body string) {
			amqpSend(t, as, "topic://c/x", &goamqp.Message{Value: body})
		}})
	}
	const n = 20
	for _, p := range pubs {
		for k := range n {
			p.send(fmt.Sprintf("%s-%d", p.name, k))
		}
	}
	// Every body once at every subscriber: wait for all, then a fence on
	// each gateway proves nothing more is on its way.
	for i, s := range subs {
		got := map[string]int{}
		for range len(pubs) * n {
			got[string(s.next(t).Payload)]++
		}
		for _, p := range pubs {
			for k := range n {
				if b := fmt.Sprintf("%s-%d", p.name, k); got[b] != 1 {
					t.Errorf("MQTT subscriber on gateway %d got %s %d times", i, b, got[b])
				}
			}
		}
	}
	for i, g := range gs {
		fp := connect5(t, g.MQTTAddr(), fmt.Sprintf("fence%d", i))
		fp.publish(t, &paho.Publish{Topic: "c/fence", QoS: 1, Payload: []byte(fmt.Sprintf("fence%d", i))})
	}
	for i, s := range subs {
		var extra []string
		seen := 0
		for seen < len(gs) {
			m := s.next(t)
			if m.Topic == "c/fence" {
				seen++
				continue
			}
			extra = append(extra, string(m.Payload))
		}
		if len(extra) > 0 {
			t.Errorf("MQTT subscriber on gateway %d got extra copies: %v", i, extra)
		}
	}
	for i, a := range asubs {
		eventually(t, fmt.Sprintf("AMQP subscriber %d to get every fence", i), func() bool {
			for f := range gs {
				if a.count(fmt.Sprintf("fence%d", f)) != 1 {
					return false
				}
			}
			return true
		})
		for _, p := range pubs {
			for k := range n {
				if b := fmt.Sprintf("%s-%d", p.name, k); a.count(b) != 1 {
					t.Errorf("AMQP subscriber on gateway %d got %s %d times", i, b, a.count(b))
				}
			}
		}
	}
	for i, g := range gs {
		st := clusterStatus(t, g)
		if !st.Enabled || st.Stats == nil || st.Stats.In == 0 || st.Stats.Out == 0 {
			t.Errorf("gateway %d /api/v1/cluster: %+v", i, st)
		}
	}
}

func clusterStatus(t *testing.T, g *gateway.Gateway) gateway.ClusterStatus {
	t.Helper()
	b, err := httpGet("http://" + g.AdminAddr() + "/api/v1/cluster")
	if err != nil {
		t.Fatal(err)
	}
	var st gateway.ClusterStatus
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return st
}

// With the same bridge rules on every gateway (the usual: one
// configuration for the cluster), a message published on one gateway
// reaches NATS once, not once per gateway, and a NATS message is brought
// in once, not once per gateway.
func TestClusterBridgeNoDoubleForwarding(t *testing.T) {
	rules := rulesFlag(ruleJSON{"direction": "out", "local": "o/#", "remote": "ext.o.>", "qos": 0},
		ruleJSON{"direction": "in", "local": "i/#", "remote": "ext.i.>", "qos": 0})
	s, gs := cluster3(t, rules)
	nc := natsClient(t, s)
	out := make(chan *nats.Msg, 1000)
	if _, err := nc.ChanSubscribe("ext.o.>", out); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	// Subscribers on every gateway, so that the cluster carries o/ and i/
	// messages everywhere.
	var subs []*client5
	for i, g := range gs {
		c := connect5(t, g.MQTTAddr(), fmt.Sprintf("sub%d", i))
		c.subscribe(t, paho.SubscribeOptions{Topic: "o/#", QoS: 1}, paho.SubscribeOptions{Topic: "i/#", QoS: 1})
		subs = append(subs, c)
	}
	eventually(t, "every bridge up", func() bool {
		for _, g := range gs {
			if len(g.BridgesDown()) > 0 {
				return false
			}
		}
		return true
	})

	const n = 30
	pub := connect5(t, gs[1].MQTTAddr(), "pub")
	for k := range n {
		pub.publish(t, &paho.Publish{Topic: "o/t", QoS: 1, Payload: []byte(fmt.Sprint(k))})
	}
	for k := range n {
		if err := nc.Publish("ext.i.t", []byte(fmt.Sprint("in", k))); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	for i, s := range subs {
		got := map[string]int{}
		for range 2 * n {
			got[string(s.next(t).Payload)]++
		}
		for k := range n {
			if got[fmt.Sprint(k)] != 1 || got[fmt.Sprint("in", k)] != 1 {
				t.Fatalf("subscriber on gateway %d: %v", i, got)
			}
		}
	}
	// The fence: a last message on one gateway's rule, after which NATS
	// holds nothing more from the gateways.
	pub.publish(t, &paho.Publish{Topic: "o/fence", QoS: 1})
	got := map[string]int{}
	for {
		select {
		case m := <-out:
			if m.Subject == "ext.o.fence" {
				for k := range n {
					if got[fmt.Sprint(k)] != 1 {
						t.Fatalf("NATS got o/t %d %d times (all: %v)", k, got[fmt.Sprint(k)], got)
					}
				}
				// Every subscriber is quiet beyond the 2n it got.
				for i, s := range subs {
					for _, m := range s.until(t, "o/fence") {
						t.Errorf("subscriber on gateway %d: extra %s %q", i, m.Topic, m.Payload)
					}
				}
				return
			}
			got[string(m.Data)]++
		case <-time.After(10 * time.Second):
			t.Fatalf("no fence on NATS; got %v", got)
		}
	}
}

// A retained message set on one gateway is read late on another with
// RETAIN=1, once; a live subscriber there gets it live once; the store
// holds one copy, written by the gateway it entered.
func TestClusterRetained(t *testing.T) {
	_, gs := cluster3(t)
	live := connect5(t, gs[1].MQTTAddr(), "live")
	live.subscribe(t, paho.SubscribeOptions{Topic: "r/#", QoS: 1}, paho.SubscribeOptions{Topic: "fence/r"})
	pub := connect5(t, gs[0].MQTTAddr(), "pub")
	pub.publish(t, &paho.Publish{Topic: "r/state", QoS: 1, Retain: true, Payload: []byte("on")})
	if m := live.next(t); m.Retain || string(m.Payload) != "on" {
		t.Fatalf("live on b: retain=%v %q", m.Retain, m.Payload)
	}
	eventually(t, "c's index to learn r/state", func() bool { return gs[2].Store().Stats().Count == 1 })
	late := connect5(t, gs[2].MQTTAddr(), "late")
	late.subscribe(t, paho.SubscribeOptions{Topic: "r/#", QoS: 1}, paho.SubscribeOptions{Topic: "fence/r"})
	fp := connect5(t, gs[2].MQTTAddr(), "fencer")
	fp.publish(t, &paho.Publish{Topic: "fence/r", QoS: 1})
	got := late.until(t, "fence/r")
	if len(got) != 1 || !got[0].Retain || string(got[0].Payload) != "on" {
		t.Fatalf("late subscriber on c: %s", topics(got))
	}
	if got := live.until(t, "fence/r"); len(got) != 0 {
		t.Fatalf("live subscriber on b got more: %s", topics(got))
	}
}

// QoS 1 across gateways is acknowledged only once NATS has the message
// (docs/cluster.md, "QoS"): with NATS down, an AMQP publisher's QoS 1
// message is rejected, not accepted and lost for the other gateways;
// NATS back, the cluster heals and messages cross again.
func TestClusterQoS1NATSDown(t *testing.T) {
	s, gs := cluster3(t)
	port := natsPort(s)
	sub := connect5(t, gs[1].MQTTAddr(), "sub")
	sub.subscribe(t, paho.SubscribeOptions{Topic: "q/#", QoS: 1})
	as := amqpSession(t, gs[0])
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	snd, err := as.NewSender(ctx, "topic://q/x", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := snd.Send(ctx, &goamqp.Message{Value: "up", Header: &goamqp.MessageHeader{Durable: true}}, nil); err != nil {
		t.Fatalf("send with NATS up: %v", err)
	}
	if m := sub.next(t); string(m.Payload) != "up" {
		t.Fatalf("got %q", m.Payload)
	}

	s.Shutdown()
	s.WaitForShutdown()
	eventually(t, "a to see NATS down", func() bool { return len(gs[0].BridgesDown()) > 0 })
	err = snd.Send(ctx, &goamqp.Message{Value: "down", Header: &goamqp.MessageHeader{Durable: true}}, nil)
	var ae *goamqp.Error
	if !errors.As(err, &ae) || ae.Condition != goamqp.ErrCondResourceLimitExceeded {
		t.Fatalf("send with NATS down: %v, want rejected %s", err, goamqp.ErrCondResourceLimitExceeded)
	}
	if st := clusterStatus(t, gs[0]); st.Stats == nil || st.Stats.Refused == 0 {
		t.Fatalf("refusal not counted: %+v", st)
	}
	// An MQTT 5 publisher is told too: PUBACK 0x97, as for any subscriber
	// that refused the message (docs/architecture.md).
	pub := connect5(t, gs[0].MQTTAddr(), "pub")
	if r := pub.publish(t, &paho.Publish{Topic: "q/down", QoS: 1, Payload: []byte("down")}); r == nil || r.ReasonCode != 0x97 {
		t.Fatalf("MQTT 5 QoS 1 publish with NATS down: %+v, want PUBACK 0x97", r)
	}

	startNATS(t, port, "")
	k := 0
	eventually(t, "the cluster to heal", func() bool {
		k++
		pub.publish(t, &paho.Publish{Topic: "q/heal", QoS: 1, Payload: []byte(fmt.Sprint(k))})
		select {
		case m := <-sub.msgs:
			return m.Topic == "q/heal"
		case <-time.After(100 * time.Millisecond):
			return false
		}
	})
}

// natsCounter counts the messages each gateway publishes to the cluster,
// as a plain NATS subscriber on <prefix>.msg.> sees them, and notes when
// one carrying mark in its body has arrived.
type natsCounter struct {
	mu     sync.Mutex
	bySubj map[string]int
	marked map[string]int // bySubj when the last marked message arrived
}

func countClusterMsgs(t *testing.T, s *natsserver.Server, mark string) *natsCounter {
	t.Helper()
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	c := &natsCounter{bySubj: map[string]int{}, marked: map[string]int{}}
	if _, err := nc.Subscribe("gw.msg.>", func(m *nats.Msg) {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.bySubj[m.Subject]++
		if strings.Contains(string(m.Data), mark) {
			c.marked[m.Subject] = c.bySubj[m.Subject]
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return c
}

// countAtMark is the number of messages subj carried up to and including
// the last marked one (0 before it arrives).
func (c *natsCounter) countAtMark(subj string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.marked[subj]
}

// Interest-based forwarding: with disjoint subscriptions on three
// gateways, a message goes to NATS only when another gateway has a
// matching subscription, and a new subscription on another gateway
// starts receiving at once.
func TestClusterInterestForwarding(t *testing.T) {
	s, gs := cluster3(t)
	a, b, c := gs[0], gs[1], gs[2]
	subB := connect5(t, b.MQTTAddr(), "subB")
	subB.subscribe(t, paho.SubscribeOptions{Topic: "ib/#", QoS: 1})
	recvC := collectAMQP(t, amqpReceiver(t, amqpSession(t, c), "ic/#"))
	// One period after start each gateway sends everything (summaries
	// may be missing); then it filters.
	for _, g := range gs {
		eventually(t, "filtering on "+clusterStatus(t, g).Node, func() bool { return clusterStatus(t, g).Stats.Filtering })
	}
	cnt := countClusterMsgs(t, s, "FENCE")
	pubA := connect5(t, a.MQTTAddr(), "pubA")
	const n = 20
	for k := range n {
		pubA.publish(t, &paho.Publish{Topic: "nobody/x", QoS: 1, Payload: []byte(fmt.Sprint("n", k))})
		pubA.publish(t, &paho.Publish{Topic: "ib/x", QoS: 1, Payload: []byte(fmt.Sprint("b", k))})
	}
	// A fence after them, wanted by c: NATS keeps one publisher's order,
	// so when it arrives everything a sent before it has.
	pubA.publish(t, &paho.Publish{Topic: "ic/x", QoS: 1, Payload: []byte("FENCE")})
	eventually(t, "fence on NATS", func() bool { return cnt.countAtMark("gw.msg.a") > 0 })
	if got := cnt.countAtMark("gw.msg.a"); got != n+1 {
		t.Fatalf("gateway a published %d messages to NATS, want %d (%d for b, the fence for c, none for nobody/x)", got, n+1, n)
	}
	if st := clusterStatus(t, a).Stats; st.Skipped < n {
		t.Fatalf("skipped %d, want ≥ %d: %+v", st.Skipped, n, st)
	}
	eventually(t, "fence at c", func() bool { return recvC.count("FENCE") == 1 })
	got := map[string]bool{}
	for range n {
		got[string(subB.next(t).Payload)] = true
	}
	if len(got) != n {
		t.Fatalf("b got %d distinct messages, want %d", len(got), n)
	}

	// A new subscription on b receives what a publishes right after its
	// SUBACK: poll, measuring from the SUBACK.
	late := connect5(t, b.MQTTAddr(), "lateB")
	late.subscribe(t, paho.SubscribeOptions{Topic: "late/#", QoS: 0})
	suback := time.Now()
	var first time.Duration
	for k := 0; first == 0; k++ {
		pubA.publish(t, &paho.Publish{Topic: "late/x", QoS: 1, Payload: []byte(fmt.Sprint(k))})
		select {
		case <-late.msgs:
			first = time.Since(suback)
		case <-time.After(5 * time.Millisecond):
			if time.Since(suback) > 10*time.Second {
				t.Fatal("the new subscription on b received nothing within 10 s")
			}
		}
	}
	t.Logf("new subscription on b: first message %v after its SUBACK", first)

	// After b's last subscriber of ib/# leaves, a stops sending ib/x.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := subB.Unsubscribe(ctx, &paho.Unsubscribe{Topics: []string{"ib/#"}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "ib/x no longer sent after b unsubscribed", func() bool {
		before := clusterStatus(t, a).Stats.Skipped
		pubA.publish(t, &paho.Publish{Topic: "ib/x", QoS: 1, Payload: []byte("after")})
		return clusterStatus(t, a).Stats.Skipped == before+1
	})
}
