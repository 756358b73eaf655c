package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func jsClient(t *testing.T, nc *nats.Conn) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

func createStream(t *testing.T, js jetstream.JetStream, name string, subjects ...string) jetstream.Stream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: subjects, Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatalf("stream %s: %v", name, err)
	}
	return st
}

// Store and forward: with NATS stopped, 2,000 QoS 1 MQTT publishes are all
// acknowledged (each written to the on-disk buffer first); NATS restarted on
// the same port with the same JetStream store gets every one of them in its
// stream, exactly once, in the order they were published.
func TestBridgeJetStreamStoreAndForward(t *testing.T) {
	dir := t.TempDir()
	s := startNATS(t, 0, dir)
	port := natsPort(s)
	nc := natsClient(t, s)
	createStream(t, jsClient(t, nc), "ALARMS", "site1.alarms.>")
	nc.Close()
	g := startBridged(t, s, "edge", []ruleJSON{
		{"direction": "out", "local": "alarms/#", "remote": "site1.alarms.>", "qos": 1, "jetstream": true},
	})
	s.Shutdown()
	s.WaitForShutdown()
	eventually(t, "bridge sees NATS down", func() bool { return len(g.BridgesDown()) == 1 })

	pub := connect5(t, g.MQTTAddr(), "pub")
	const n = 2000
	for i := 0; i < n; i++ {
		r := pub.publish(t, &paho.Publish{Topic: "alarms/door", QoS: 1, Payload: []byte(fmt.Sprint(i))})
		if r == nil || r.ReasonCode != 0 {
			t.Fatalf("publish %d while NATS is down: %+v", i, r)
		}
	}
	if st := g.Bridges()[0].Rules[0].Buffer; st == nil || st.Messages != n {
		t.Fatalf("buffer holds %+v, want %d messages", st, n)
	}

	s2 := startNATS(t, port, dir)
	nc2 := natsClient(t, s2)
	js := jsClient(t, nc2)
	eventually(t, "buffer drained", func() bool {
		st := g.Bridges()[0].Rules[0].Buffer
		return st != nil && st.Messages == 0
	})
	stream, err := js.Stream(context.Background(), "ALARMS")
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != n {
		t.Fatalf("stream holds %d messages, want %d exactly once", info.State.Msgs, n)
	}
	for i := 0; i < n; i++ {
		m, err := stream.GetMsg(context.Background(), info.State.FirstSeq+uint64(i))
		if err != nil {
			t.Fatalf("stream message %d: %v", i, err)
		}
		if string(m.Data) != fmt.Sprint(i) || m.Subject != "site1.alarms.door" {
			t.Fatalf("stream message %d is %s %q: out of order", i, m.Subject, m.Data)
		}
	}
}

// A full buffer under rejectNew refuses the publish: MQTT 5 PUBACK 0x97,
// counted as buffer_full.
func TestBridgeJetStreamBufferFullRejectNew(t *testing.T) {
	s := startNATS(t, 0, "")
	g := startBridged(t, s, "edge", []ruleJSON{
		{"direction": "out", "local": "alarms/#", "remote": "site1.alarms.>", "qos": 1, "jetstream": true},
	}, "--bridge.buffer.maxBytes=4KiB", "--bridge.buffer.policy=rejectNew")
	s.Shutdown()
	s.WaitForShutdown()
	eventually(t, "bridge sees NATS down", func() bool { return len(g.BridgesDown()) == 1 })
	pub := connect5(t, g.MQTTAddr(), "pub")
	payload := []byte(strings.Repeat("x", 500))
	var refusedAt int
	for i := 0; i < 100 && refusedAt == 0; i++ {
		r := pub.publish(t, &paho.Publish{Topic: "alarms/door", QoS: 1, Payload: payload})
		switch {
		case r == nil:
			t.Fatalf("publish %d: no answer", i)
		case r.ReasonCode == 0x97:
			refusedAt = i
		case r.ReasonCode != 0:
			t.Fatalf("publish %d: reason %#x", i, r.ReasonCode)
		}
	}
	if refusedAt == 0 {
		t.Fatal("4 KiB buffer never refused a publish")
	}
	st := g.Bridges()[0].Rules[0].Buffer
	if st.Rejected == 0 || int(st.Messages) != refusedAt {
		t.Errorf("buffer: %+v, refused at %d", st, refusedAt)
	}
	_, body := httpDo(t, "GET", "http://"+g.AdminAddr()+"/metrics")
	if !strings.Contains(body, `tolsey_bridge_dropped_total{bridge="nats",reason="buffer_full"} 1`) {
		t.Errorf("metrics lack buffer_full 1:\n%s", grepLines(body, "tolsey_bridge"))
	}
}

// JetStream inbound: a durable consumer, acknowledged once our router took
// each message; a message with the retain header is stored as retained.
func TestBridgeJetStreamInbound(t *testing.T) {
	s := startNATS(t, 0, "")
	nc := natsClient(t, s)
	js := jsClient(t, nc)
	createStream(t, js, "COMMANDS", "site1.commands.>")
	g := startBridged(t, s, "edge", []ruleJSON{
		{"direction": "in", "local": "commands/#", "remote": "site1.commands.>", "qos": 1,
			"jetstream": map[string]string{"stream": "COMMANDS", "durable": "gw-site1"}},
	})
	sub := connect5(t, g.MQTTAddr(), "sub")
	sub.subscribe(t, paho.SubscribeOptions{Topic: "commands/#", QoS: 1})
	ctx := context.Background()
	for i := 0; i < 20; i++ {
		if _, err := js.Publish(ctx, "site1.commands.valve", []byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	ret := nats.NewMsg("site1.commands.mode")
	ret.Data = []byte("auto")
	ret.Header.Set("Tolsey-Retain", "true")
	if _, err := js.PublishMsg(ctx, ret); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		m := sub.next(t)
		if m.Topic != "commands/valve" || string(m.Payload) != fmt.Sprint(i) {
			t.Fatalf("message %d: %s %q", i, m.Topic, m.Payload)
		}
	}
	if m := sub.next(t); m.Topic != "commands/mode" {
		t.Fatalf("retained one: %s", m.Topic)
	}
	cons, err := js.Consumer(ctx, "COMMANDS", "gw-site1")
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "every message acknowledged", func() bool {
		ci, err := cons.Info(ctx)
		return err == nil && ci.AckFloor.Stream == 21 && ci.NumAckPending == 0
	})
	late := connect5(t, g.MQTTAddr(), "late")
	late.subscribe(t, paho.SubscribeOptions{Topic: "commands/mode", QoS: 1})
	if m := late.next(t); !m.Retain || string(m.Payload) != "auto" {
		t.Errorf("late subscriber: retain %v %q", m.Retain, m.Payload)
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
