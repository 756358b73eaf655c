package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"
	"github.com/eclipse/paho.golang/paho"

	"github.com/tolsey/tolsey/gateway"
)

// shareCount counts what the members of one shared group received, by
// body and by gateway.
type shareCount struct {
	mu     sync.Mutex
	bodies map[string]int
	by     map[string]int // gateway → messages its members got
}

func newShareCount() *shareCount {
	return &shareCount{bodies: map[string]int{}, by: map[string]int{}}
}

func (c *shareCount) add(gw, body string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.bodies[body]++
	c.by[gw]++
}

// missing returns the bodies not received yet.
func (c *shareCount) missing(bodies []string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, b := range bodies {
		if c.bodies[b] == 0 {
			out = append(out, b)
		}
	}
	return out
}

// waitAll waits until every body arrived; it logs what is missing when
// they do not.
func (c *shareCount) waitAll(t *testing.T, what string, bodies []string) {
	t.Helper()
	var miss []string
	defer func() {
		if len(miss) > 0 {
			c.mu.Lock()
			t.Logf("%s: %d of %d bodies missing (%v…); spread %v", what, len(miss), len(bodies), miss[:min(len(miss), 10)], c.by)
			c.mu.Unlock()
		}
	}()
	eventually(t, what, func() bool { miss = c.missing(bodies); return len(miss) == 0 })
}

// drainMQTT counts what an MQTT member receives, in the background.
func drainMQTT(t *testing.T, c *client5, gw string, into *shareCount) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case m := <-c.msgs:
				body := string(m.Payload)
				if m.Properties != nil {
					for _, u := range m.Properties.User {
						if strings.Contains(u.Key, "tolsey-share") {
							body = "marker leaked: " + body // the gateway's own, never a client's
						}
					}
				}
				into.add(gw, body)
			case <-ctx.Done():
				return
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
}

// drainAMQP counts what an AMQP link of a shared subscription receives.
func drainAMQP(t *testing.T, r *goamqp.Receiver, gw string, into *shareCount) {
	receiveAMQP(t, r, func(body string) { into.add(gw, body) })
}

// receiveAMQP accepts every message r receives and hands its body to fn,
// in the background until the test ends, so that the link's credit never
// runs out while the test waits.
func receiveAMQP(t *testing.T, r *goamqp.Receiver, fn func(body string)) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			m, err := r.Receive(ctx, nil)
			if err != nil {
				return
			}
			_ = r.AcceptMessage(ctx, m)
			fn(amqpBody(m))
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
}

// A shared group with members on every gateway (MQTT $share/g/s/#: one
// member on a and b, two on c; an AMQP shared subscription: a link on
// each gateway) gets every message once cluster-wide, whichever gateway
// and protocol it was published on, at QoS 0 and 1; the members of every
// gateway get some; a plain subscriber still gets every message once.
func TestClusterSharedSubscription(t *testing.T) {
	_, gs := cluster3(t)
	names := []string{"a", "b", "c"}
	mqttGroup, amqpGroup := newShareCount(), newShareCount()
	for i, g := range gs {
		members := 1
		if i == 2 {
			members = 2
		}
		for k := range members {
			m := connect5(t, g.MQTTAddr(), fmt.Sprintf("member-%s-%d", names[i], k))
			m.subscribe(t, paho.SubscribeOptions{Topic: "$share/g/s/#", QoS: 1})
			drainMQTT(t, m, names[i], mqttGroup)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		r, err := amqpSession(t, g).NewReceiver(ctx, "s/#", &goamqp.ReceiverOptions{
			Name: "work|" + names[i], SourceCapabilities: []string{"topic", "shared", "global"}, Credit: 100})
		cancel()
		if err != nil {
			t.Fatalf("AMQP shared receiver on %s: %v", names[i], err)
		}
		drainAMQP(t, r, names[i], amqpGroup)
	}
	plain := connect5(t, gs[1].MQTTAddr(), "plain")
	plain.subscribe(t, paho.SubscribeOptions{Topic: "s/#", QoS: 1})
	// Each gateway knows both groups on the others: the announcement
	// crosses NATS once.
	eventually(t, "every gateway to know the other gateways' groups", func() bool {
		for _, g := range gs {
			if st := clusterStatus(t, g); st.Stats == nil || st.Stats.RemoteGroups < 2 {
				return false
			}
		}
		return true
	})

	type pub struct {
		name string
		send func(body string)
	}
	var pubs []pub
	for i, g := range gs {
		mp := connect5(t, g.MQTTAddr(), "pub-"+names[i])
		for _, qos := range []byte{0, 1} {
			pubs = append(pubs, pub{fmt.Sprintf("mqtt-%s-qos%d", names[i], qos), func(body string) {
				mp.publish(t, &paho.Publish{Topic: "s/x", QoS: qos, Payload: []byte(body)})
			}})
		}
		as := amqpSession(t, g)
		pubs = append(pubs, pub{"amqp-" + names[i], func(body string) {
			amqpSend(t, as, "topic://s/x", &goamqp.Message{Value: body, Header: &goamqp.MessageHeader{Durable: true}})
		}})
	}
	const n = 30
	var all []string
	for _, p := range pubs {
		for k := range n {
			b := fmt.Sprintf("%s-%d", p.name, k)
			p.send(b)
			all = append(all, b)
		}
	}
	// Then a fence on each gateway: published after everything else there.
	var fences []string
	for i, g := range gs {
		fp := connect5(t, g.MQTTAddr(), "fence-"+names[i])
		f := "fence-" + names[i]
		fp.publish(t, &paho.Publish{Topic: "s/fence", QoS: 1, Payload: []byte(f)})
		fences = append(fences, f)
	}
	want := append(append([]string(nil), all...), fences...)
	for _, grp := range []struct {
		name string
		c    *shareCount
	}{{"MQTT $share/g/s/#", mqttGroup}, {"AMQP shared subscription", amqpGroup}} {
		grp.c.waitAll(t, grp.name, want)
		grp.c.mu.Lock()
		for _, b := range want {
			if grp.c.bodies[b] != 1 {
				t.Errorf("%s: %s delivered %d times, want once", grp.name, b, grp.c.bodies[b])
			}
		}
		if len(grp.c.bodies) != len(want) {
			t.Errorf("%s: %d bodies, want %d", grp.name, len(grp.c.bodies), len(want))
		}
		for _, gw := range names {
			if grp.c.by[gw] == 0 {
				t.Errorf("%s: the members on gateway %s got nothing: %v", grp.name, gw, grp.c.by)
			}
		}
		t.Logf("%s: spread over gateways %v", grp.name, grp.c.by)
		grp.c.mu.Unlock()
	}
	got := map[string]int{}
	for _, m := range plain.until(t, "s/fence") {
		got[string(m.Payload)]++
	}
	for _, b := range all {
		if got[b] != 1 {
			t.Errorf("plain subscriber got %s %d times", b, got[b])
		}
	}
	var out, in uint64
	for _, g := range gs {
		st := clusterStatus(t, g)
		out, in = out+st.Stats.SharedOut, in+st.Stats.SharedIn
	}
	if out == 0 || in != out {
		t.Errorf("shared copies: %d sent, %d taken", out, in)
	}
}

// A gateway whose last member of a group just left is still in the
// group's NATS queue group for a while (until its next summary): a copy
// NATS gives it then is handed on to another member gateway, not lost.
// a's member stays; b's member subscribes and unsubscribes at once; c
// publishes: every message reaches a's member, and b handed some on.
func TestClusterSharedSubscriptionMemberLeft(t *testing.T) {
	memberLeft(t, func(t *testing.T, c *gateway.Gateway) func(string) {
		pub := connect5(t, c.MQTTAddr(), "pub-c")
		return func(b string) { pub.publish(t, &paho.Publish{Topic: "s/x", QoS: 1, Payload: []byte(b)}) }
	})
}

// The same from AMQP, on gateways where no MQTT subscription matches the
// topic: c, where the messages enter, has no MQTT client at all, and b's
// member has left, so neither injects a message into mochi (the inject
// shortcut, docs/mqtt-frontend.md, "The delivery path"). The copies NATS
// still gives b are answered "no member here" and handed on, not taken
// as delivered: every message reaches a's member, once.
func TestClusterSharedFromAMQPWithNoMQTTSubscriberThere(t *testing.T) {
	memberLeft(t, func(t *testing.T, c *gateway.Gateway) func(string) {
		as := amqpSession(t, c)
		return func(b string) {
			amqpSend(t, as, "topic://s/x", &goamqp.Message{Value: b, Header: &goamqp.MessageHeader{Durable: true}})
		}
	})
}

// memberLeft is the member-left drill of the two tests above: a's member
// of $share/g/s/# stays, b's subscribes and unsubscribes at once, and 40
// messages go in on c through the sender sender makes; every one must
// reach a's member exactly once, and b must have handed some on.
func memberLeft(t *testing.T, sender func(*testing.T, *gateway.Gateway) func(string)) {
	t.Helper()
	_, gs := cluster3(t)
	got := newShareCount()
	ma := connect5(t, gs[0].MQTTAddr(), "member-a")
	ma.subscribe(t, paho.SubscribeOptions{Topic: "$share/g/s/#", QoS: 1})
	drainMQTT(t, ma, "a", got)
	eventually(t, "c to know a's group", func() bool {
		st := clusterStatus(t, gs[2])
		return st.Stats != nil && st.Stats.RemoteGroups == 1
	})
	mb := connect5(t, gs[1].MQTTAddr(), "member-b")
	mb.subscribe(t, paho.SubscribeOptions{Topic: "$share/g/s/#", QoS: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	if _, err := mb.Unsubscribe(ctx, &paho.Unsubscribe{Topics: []string{"$share/g/s/#"}}); err != nil {
		t.Fatal(err)
	}
	cancel()
	send := sender(t, gs[2])
	var want []string
	for k := range 40 {
		b := fmt.Sprint("m", k)
		send(b)
		want = append(want, b)
	}
	got.waitAll(t, "a's member to get every message", want)
	st := clusterStatus(t, gs[1])
	if st.Stats.SharedBounced == 0 {
		t.Errorf("b handed no copy on (NATS never picked it: the test did not reach the window): %+v", st.Stats)
	}
	t.Logf("b handed on %d copies", st.Stats.SharedBounced)
	got.mu.Lock()
	defer got.mu.Unlock()
	for _, b := range want {
		if n := got.bodies[b]; n != 1 {
			t.Errorf("%s delivered %d times", b, n)
		}
	}
}
