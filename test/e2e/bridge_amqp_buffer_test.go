package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"
	"github.com/eclipse/paho.golang/paho"

	"github.com/tolsey/tolsey/gateway"
)

// amqpBridgesFlag is --bridge.amqp with several bridges, each
// {name, addr, rules}; anonymous unless the map names a user or a sasl.
func amqpBridgesFlag(bridges ...map[string]any) string {
	for _, b := range bridges {
		if addr, ok := b["addr"]; ok {
			b["url"] = "amqp://" + addr.(string)
			delete(b, "addr")
		}
		if _, ok := b["sasl"]; !ok && b["user"] == nil {
			b["sasl"] = "anonymous"
		}
	}
	j, _ := json.Marshal(bridges)
	return "--bridge.amqp=" + string(j)
}

// amqpDownBridge is a gateway with bridge r (rule alarms/# ⇒ uplink, QoS 1)
// to front, where nothing listens yet, and set applied.
func amqpDownBridge(t *testing.T, front string, set ...string) *gateway.Gateway {
	t.Helper()
	g := startGateway(t, append([]string{"--node.id=L", amqpBridgeFlag("r", front,
		ruleJSON{"direction": "out", "local": "alarms/#", "remote": "uplink", "qos": 1})}, set...)...)
	eventually(t, "bridge reports the remote down", func() bool {
		st := g.Bridges()
		return len(st) == 1 && st[0].LastError != ""
	})
	return g
}

// remoteUp starts the remote gateway (set applied), attaches a consumer to
// its uplink, and then makes it reachable at front, the address the
// bridge dials: a remote gateway keeps no messages for absent consumers.
func remoteUp(t *testing.T, front string, set ...string) *goamqp.Receiver {
	t.Helper()
	remote := startGateway(t, append([]string{"--node.id=R"}, set...)...)
	rcv := amqpReceiver(t, amqpSession(t, remote), "uplink")
	ln, err := net.Listen("tcp", front)
	if err != nil {
		t.Fatalf("listen on the reserved port: %v", err)
	}
	proxy(t, ln, remote.AMQPAddr())
	return rcv
}

// rejectNew: a full buffer refuses the device's publish (MQTT 5 PUBACK
// 0x97) and an AMQP publisher's transfer (rejected
// amqp:resource-limit-exceeded), counted buffer_full on the bridge.
func TestBridgeAMQPBufferFullRejectNew(t *testing.T) {
	g := amqpDownBridge(t, freePort(t), "--bridge.buffer.maxBytes=4KiB", "--bridge.buffer.policy=rejectNew")
	held := fillBuffer(t, g)
	if held == 0 {
		t.Fatal("the first publish was refused")
	}

	s := amqpSession(t, g)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	snd, err := s.NewSender(ctx, "alarms/amqp", nil)
	if err != nil {
		t.Fatal(err)
	}
	err = snd.Send(ctx, goamqp.NewMessage([]byte(fillPayload)), nil)
	var ae *goamqp.Error
	if !asErr(err, &ae) || ae.Condition != "amqp:resource-limit-exceeded" || !strings.Contains(ae.Description, "buffer full") {
		t.Fatalf("AMQP publish into a full buffer: %v, want rejected amqp:resource-limit-exceeded (bridge buffer full)", err)
	}

	st := g.Bridges()[0].Rules[0].Buffer
	if st == nil || st.Rejected != 2 || int(st.Messages) != held {
		t.Errorf("buffer: %+v, want %d held and 2 rejected", st, held)
	}
	_, body := httpDo(t, "GET", "http://"+g.AdminAddr()+"/metrics")
	if !strings.Contains(body, `tolsey_bridge_dropped_total{bridge="r",reason="buffer_full"} 2`) {
		t.Errorf("metrics lack buffer_full 2:\n%s", grepLines(body, "tolsey_bridge_dropped"))
	}
}

// dropOldest: every publish is acknowledged, the oldest records make room
// and are counted; when the remote comes up it gets the newest ones, in
// order.
func TestBridgeAMQPBufferDropOldest(t *testing.T) {
	front := freePort(t)
	g := amqpDownBridge(t, front, "--bridge.buffer.maxBytes=8KiB", "--bridge.buffer.policy=dropOldest")
	pub := connect5(t, g.MQTTAddr(), "pub")
	const n = 200
	pad := strings.Repeat("x", 200)
	for i := range n {
		r := pub.publish(t, &paho.Publish{Topic: "alarms/door", QoS: 1, Payload: fmt.Appendf(nil, "%04d %s", i, pad)})
		if r == nil || r.ReasonCode != 0 {
			t.Fatalf("publish %d under dropOldest: %+v", i, r)
		}
	}
	buf := g.Bridges()[0].Rules[0].Buffer
	kept := buf.Messages
	if buf.Dropped == 0 || kept == 0 || kept+int64(buf.Dropped) != n || buf.Rejected != 0 {
		t.Fatalf("buffer after %d publishes into 8 KiB: %+v (want dropped + held = %d, none rejected)", n, *buf, n)
	}

	rcv := remoteUp(t, front)
	for i := range kept {
		body := amqpBody(amqpNext(t, rcv))
		if want := fmt.Sprintf("%04d ", n-kept+i); !strings.HasPrefix(body, want) {
			t.Fatalf("message %d is %.5q, want %q: not the newest %d in order", i, body, want, kept)
		}
	}
	eventually(t, "buffer drained", func() bool { return g.Bridges()[0].Rules[0].Buffer.Messages == 0 })
}

// bridge.buffer.maxBytes is one budget for every AMQP bridge of the
// gateway (one file, data.dir/bridge/amqp): what bridge a holds leaves no
// room for bridge b.
func TestBridgeAMQPBufferOneBudget(t *testing.T) {
	g := startGateway(t, "--node.id=L", "--bridge.buffer.maxBytes=4KiB", "--bridge.buffer.policy=rejectNew",
		amqpBridgesFlag(
			map[string]any{"name": "a", "addr": freePort(t), "rules": []ruleJSON{{"direction": "out", "local": "alarms/#", "remote": "x", "qos": 1}}},
			map[string]any{"name": "b", "addr": freePort(t), "rules": []ruleJSON{{"direction": "out", "local": "other/#", "remote": "y", "qos": 1}}}))
	held := fillBuffer(t, g)
	pub := connect5(t, g.MQTTAddr(), "pub")
	r := pub.publish(t, &paho.Publish{Topic: "other/1", QoS: 1, Payload: []byte(fillPayload)})
	if r == nil || r.ReasonCode != 0x97 {
		t.Fatalf("bridge b's publish with bridge a's %d records filling the budget: %+v, want 0x97", held, r)
	}
	st := g.Bridges()
	if st[0].Rules[0].Buffer.MaxBytes != 4096 || st[1].Rules[0].Buffer.Messages != 0 || st[1].Rules[0].Buffer.Rejected != 1 {
		t.Errorf("buffers: a %+v, b %+v", *st[0].Rules[0].Buffer, *st[1].Rules[0].Buffer)
	}
}

// bridge.buffer.drainRate paces an AMQP rule's drain after an outage:
// with 50 msgs/s, at most about 55 of 150 buffered messages arrive in the
// first second (bounded at 100 here: a slow machine only lowers the
// count), and the whole drain takes at least 1 s (it would take 3 s; a
// slow machine only lengthens it). Without it the 150 arrive at once.
func TestBridgeAMQPDrainRate(t *testing.T) {
	front := freePort(t)
	g := amqpDownBridge(t, front, "--bridge.buffer.drainRate=50")
	pub := connect5(t, g.MQTTAddr(), "pub")
	const n = 150
	for i := range n {
		if r := pub.publish(t, &paho.Publish{Topic: "alarms/x", QoS: 1, Payload: fmt.Appendf(nil, "%d", i)}); r.ReasonCode != 0 {
			t.Fatalf("PUBACK %d: %#x", i, r.ReasonCode)
		}
	}
	rcv := remoteUp(t, front)
	var first time.Time
	inFirstSecond := 0
	for i := range n {
		m := amqpNext(t, rcv)
		now := time.Now()
		if i == 0 {
			first = now
		}
		if now.Sub(first) < time.Second {
			inFirstSecond++
		}
		if body := amqpBody(m); body != fmt.Sprint(i) {
			t.Fatalf("message %d: %q", i, body)
		}
	}
	took := time.Since(first)
	t.Logf("drainRate 50: %d of %d in the first second, all in %v", inFirstSecond, n, took.Round(time.Millisecond))
	if inFirstSecond > 100 || took < time.Second {
		t.Errorf("drainRate 50 not applied: %d messages in the first second, %d in %v", inFirstSecond, n, took)
	}
}

// One bridge.buffer.maxBytes for every bridge: a remote AMQP bridge's QoS 1
// rule filling the buffer leaves no room for the NATS bridge's JetStream
// rule either (both remotes unreachable), and the other way round would
// hold the same.
func TestBridgeBufferOneBudgetNATSAndAMQP(t *testing.T) {
	g := startGateway(t, "--node.id=L", "--bridge.buffer.maxBytes=4KiB", "--bridge.buffer.policy=rejectNew",
		"--bridge.nats.url=nats://"+freePort(t),
		rulesFlag(ruleJSON{"direction": "out", "local": "js/#", "remote": "js.>", "qos": 1, "jetstream": true}),
		amqpBridgesFlag(map[string]any{"name": "a", "addr": freePort(t), "rules": []ruleJSON{{"direction": "out", "local": "alarms/#", "remote": "x", "qos": 1}}}))
	held := fillBuffer(t, g)
	pub := connect5(t, g.MQTTAddr(), "pub")
	r := pub.publish(t, &paho.Publish{Topic: "js/1", QoS: 1, Payload: []byte(fillPayload)})
	if r == nil || r.ReasonCode != 0x97 {
		t.Fatalf("the JetStream rule's publish with the AMQP rule's %d records filling the budget: %+v, want 0x97", held, r)
	}
}
