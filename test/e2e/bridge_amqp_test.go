package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/eclipse/paho.golang/paho"

	"github.com/tolsey/tolsey/gateway"
)

// amqpBridgeFlag is --bridge.amqp with one bridge named name to addr.
func amqpBridgeFlag(name, addr string, rules ...ruleJSON) string {
	b, _ := json.Marshal([]map[string]any{{"name": name, "url": "amqp://" + addr, "sasl": "anonymous", "rules": rules}})
	return "--bridge.amqp=" + string(b)
}

// freePort is a free loopback address for a server the test starts later.
//
// The port is below the kernel's ephemeral range: a port the kernel handed
// out for 127.0.0.1:0 could be handed out again, between this reservation
// and the later listen, as the source port of any outgoing connection on
// the machine (the bridge's own dials among them), and the listen failed
// with "address already in use" now and then. Ports below the range are
// only ever taken by an explicit bind.
func freePort(t *testing.T) string {
	t.Helper()
	lo := 32768 // Linux's default low end, if the range cannot be read
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil {
				lo = v
			}
		}
	}
	if lo > 12000 {
		for range 200 {
			port := lo - 10000 + rand.IntN(10000)
			ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
			if err != nil {
				continue // taken: another
			}
			addr := ln.Addr().String()
			ln.Close()
			return addr
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// proxy forwards connections on ln to target until the test ends: the
// remote "comes up" when the test starts it.
func proxy(t *testing.T, ln net.Listener, target string) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			r, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, r)
			mu.Unlock()
			wg.Add(2)
			go func() { defer wg.Done(); _, _ = io.Copy(r, c); r.Close() }()
			go func() { defer wg.Done(); _, _ = io.Copy(c, r); c.Close() }()
		}
	}()
}

// nextReal is the next message that is not a probe's.
func nextReal(t *testing.T, c *client5) *paho.Publish {
	t.Helper()
	for {
		if m := c.next(t); string(m.Payload) != "probe" {
			return m
		}
	}
}

func bridgeUp(g *gateway.Gateway) bool { return len(g.BridgesDown()) == 0 }

// probe publishes on topic at pub until sub receives it (a link being
// attached is not visible otherwise), then drains what else came.
func probe(t *testing.T, pub, sub *client5, topic string) {
	t.Helper()
	eventually(t, "probe "+topic+" through the bridge", func() bool {
		pub.publish(t, &paho.Publish{Topic: topic, QoS: 1, Payload: []byte("probe")})
		for {
			select {
			case m := <-sub.msgs:
				if m.Topic == topic || string(m.Payload) == "probe" {
					return true
				}
			default:
				return false
			}
		}
	})
}

// Out QoS 1 and QoS 0 to a remote gateway's addresses with topic and
// headers kept, and in (QoS 1) from a filter on the remote, with topic and
// headers restored.
func TestBridgeAMQPOutInHeaders(t *testing.T) {
	remote := startGateway(t, "--node.id=R")
	local := startGateway(t, "--node.id=L", amqpBridgeFlag("r", remote.AMQPAddr(),
		ruleJSON{"direction": "out", "local": "up/#", "remote": "uplink", "qos": 1},
		ruleJSON{"direction": "out", "local": "fast/#", "remote": "fastlink", "qos": 0},
		ruleJSON{"direction": "in", "local": "down/#", "remote": "down/#", "qos": 1}))
	eventually(t, "bridge connected", func() bool { return bridgeUp(local) })

	rsub := connect5(t, remote.MQTTAddr(), "rsub")
	rsub.subscribe(t, paho.SubscribeOptions{Topic: "uplink", QoS: 1}, paho.SubscribeOptions{Topic: "fastlink"})
	lpub := connect5(t, local.MQTTAddr(), "lpub")
	props := &paho.PublishProperties{ContentType: "application/json", CorrelationData: []byte("corr-1"),
		User: paho.UserProperties{{Key: "k", Value: "v"}}}
	r := lpub.publish(t, &paho.Publish{Topic: "up/a/b", QoS: 1, Payload: []byte(`{"x":1}`), Properties: props})
	if r.ReasonCode != 0 {
		t.Fatalf("PUBACK %#x", r.ReasonCode)
	}
	m := rsub.next(t)
	if m.Topic != "uplink" || string(m.Payload) != `{"x":1}` || m.Properties.ContentType != "application/json" ||
		string(m.Properties.CorrelationData) != "corr-1" || m.Properties.User.Get("k") != "v" ||
		m.Properties.User.Get("Tolsey-Topic") != "up/a/b" || m.Properties.User.Get("Tolsey-Path") != "L" {
		t.Errorf("remote got %s %q %+v", m.Topic, m.Payload, m.Properties)
	}
	probe(t, lpub, rsub, "fast/probe")
	lpub.publish(t, &paho.Publish{Topic: "fast/1", Payload: []byte("f1")})
	if m := nextReal(t, rsub); m.Topic != "fastlink" || string(m.Payload) != "f1" || m.Properties.User.Get("Tolsey-Topic") != "fast/1" {
		t.Errorf("QoS 0 remote got %s %q", m.Topic, m.Payload)
	}

	lsub := connect5(t, local.MQTTAddr(), "lsub")
	lsub.subscribe(t, paho.SubscribeOptions{Topic: "down/#", QoS: 1})
	rpub := connect5(t, remote.MQTTAddr(), "rpub")
	probe(t, rpub, lsub, "down/probe")
	rpub.publish(t, &paho.Publish{Topic: "down/dev/1", QoS: 1, Payload: []byte("cmd"), Properties: &paho.PublishProperties{
		ContentType: "text/plain", CorrelationData: []byte("c2"), User: paho.UserProperties{{Key: "a", Value: "1"}}}})
	for {
		m := lsub.next(t)
		if string(m.Payload) == "probe" {
			continue
		}
		if m.Topic != "down/dev/1" || string(m.Payload) != "cmd" || m.Properties.ContentType != "text/plain" ||
			string(m.Properties.CorrelationData) != "c2" || m.Properties.User.Get("a") != "1" || m.QoS != 1 {
			t.Errorf("local got %s %q qos %d %+v", m.Topic, m.Payload, m.QoS, m.Properties)
		}
		break
	}

	// A third gateway reading the remote's uplink restores the topic from
	// the subject.
	third := startGateway(t, "--node.id=T", amqpBridgeFlag("r", remote.AMQPAddr(),
		ruleJSON{"direction": "in", "local": "up/#", "remote": "uplink", "qos": 1}))
	tsub := connect5(t, third.MQTTAddr(), "tsub")
	tsub.subscribe(t, paho.SubscribeOptions{Topic: "up/#", QoS: 1})
	probe(t, lpub, tsub, "up/probe")
	lpub.publish(t, &paho.Publish{Topic: "up/z", QoS: 1, Payload: []byte("zz"), Properties: props})
	for {
		m := tsub.next(t)
		if string(m.Payload) == "probe" {
			continue
		}
		if m.Topic != "up/z" || string(m.Payload) != "zz" || m.Properties.ContentType != "application/json" ||
			string(m.Properties.CorrelationData) != "corr-1" || m.Properties.User.Get("k") != "v" {
			t.Errorf("third got %s %q %+v", m.Topic, m.Payload, m.Properties)
		}
		break
	}
}

// The remote is down when the gateway starts: the gateway serves its
// clients, /readyz is 200 naming the bridge, QoS 1 publishes are buffered;
// when the remote comes up they arrive exactly once, in order.
func TestBridgeAMQPRemoteDownAtStart(t *testing.T) {
	front := freePort(t)
	local := startGateway(t, "--node.id=L", amqpBridgeFlag("r", front,
		ruleJSON{"direction": "out", "local": "up/#", "remote": "uplink", "qos": 1}))
	eventually(t, "bridge reports the failure", func() bool {
		st := local.Bridges()
		return len(st) == 1 && st[0].LastError != ""
	})
	code, body := httpDo(t, "GET", "http://"+local.AdminAddr()+"/readyz")
	if code != 200 || !strings.Contains(body, "bridge amqp r down") {
		t.Errorf("/readyz %d %q", code, body)
	}
	const n = 300
	pub := connect5(t, local.MQTTAddr(), "pub")
	for i := range n {
		if r := pub.publish(t, &paho.Publish{Topic: "up/x", QoS: 1, Payload: fmt.Appendf(nil, "%d", i)}); r.ReasonCode != 0 {
			t.Fatalf("PUBACK %d: %#x", i, r.ReasonCode)
		}
	}
	if st := local.Bridges()[0]; st.Rules[0].Buffer == nil || st.Rules[0].Buffer.Messages != n {
		t.Fatalf("buffered: %+v", st.Rules[0].Buffer)
	}
	remote := startGateway(t, "--node.id=R")
	rsub := connect5(t, remote.MQTTAddr(), "rsub")
	rsub.subscribe(t, paho.SubscribeOptions{Topic: "uplink", QoS: 1})
	ln, err := net.Listen("tcp", front)
	if err != nil {
		t.Fatalf("listen on the reserved port: %v", err)
	}
	proxy(t, ln, remote.AMQPAddr())
	for i := range n {
		m := rsub.next(t)
		if string(m.Payload) != fmt.Sprint(i) {
			t.Fatalf("message %d: got %q", i, m.Payload)
		}
	}
	pub.publish(t, &paho.Publish{Topic: "up/end", QoS: 1, Payload: []byte("end")})
	if m := rsub.next(t); string(m.Payload) != "end" {
		t.Errorf("duplicate or stray before the fence: %q", m.Payload)
	}
	eventually(t, "buffer empty", func() bool { return local.Bridges()[0].Rules[0].Buffer.Messages == 0 })
}

// Two gateways each reading the other's t/# into their own t/#: every
// subscriber gets each message exactly once; the copies that come back are
// dropped as loops.
func TestBridgeAMQPNoLoopTwoGateways(t *testing.T) {
	pa, pb := freePort(t), freePort(t)
	in := ruleJSON{"direction": "in", "local": "t/#", "remote": "t/#", "qos": 1}
	a := startGateway(t, "--node.id=A", "--amqp.listen="+pa, amqpBridgeFlag("b", pb, in))
	b := startGateway(t, "--node.id=B", "--amqp.listen="+pb, amqpBridgeFlag("a", pa, in))
	eventually(t, "bridges connected", func() bool { return bridgeUp(a) && bridgeUp(b) })
	subA := connect5(t, a.MQTTAddr(), "subA")
	subA.subscribe(t, paho.SubscribeOptions{Topic: "t/#", QoS: 1})
	subB := connect5(t, b.MQTTAddr(), "subB")
	subB.subscribe(t, paho.SubscribeOptions{Topic: "t/#", QoS: 1})
	pubA := connect5(t, a.MQTTAddr(), "pubA")
	pubB := connect5(t, b.MQTTAddr(), "pubB")
	probe(t, pubA, subB, "t/probeA")
	probe(t, pubB, subA, "t/probeB")
	for _, c := range []*client5{subA, subB} { // the probes' own copies
		for len(c.msgs) > 0 {
			<-c.msgs
		}
	}
	const n = 20
	for i := range n {
		pubA.publish(t, &paho.Publish{Topic: fmt.Sprintf("t/a/%d", i), QoS: 1, Payload: []byte("a")})
		pubB.publish(t, &paho.Publish{Topic: fmt.Sprintf("t/b/%d", i), QoS: 1, Payload: []byte("b")})
	}
	pubA.publish(t, &paho.Publish{Topic: "t/fenceA", QoS: 1, Payload: []byte("fence")})
	pubB.publish(t, &paho.Publish{Topic: "t/fenceB", QoS: 1, Payload: []byte("fence")})
	for name, c := range map[string]*client5{"A": subA, "B": subB} {
		seen := map[string]int{}
		for seen["t/fenceA"] == 0 || seen["t/fenceB"] == 0 {
			m := c.next(t)
			if string(m.Payload) == "probe" {
				continue
			}
			seen[m.Topic]++
		}
		for i := range n {
			for _, s := range []string{"a", "b"} {
				if k := fmt.Sprintf("t/%s/%d", s, i); seen[k] != 1 {
					t.Errorf("subscriber on %s got %s %d times", name, k, seen[k])
				}
			}
		}
	}
	loops := func(g *gateway.Gateway) uint64 { return g.Bridges()[0].Rules[0].Dropped }
	eventually(t, "the copies that came back are dropped", func() bool { return loops(a) >= n && loops(b) >= n })
}
