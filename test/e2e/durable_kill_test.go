package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"
	"github.com/eclipse/paho.golang/paho"

	"github.com/tolsey/tolsey/core/coretest"
)

// JMS durable subscriptions across kill -9 (docs/jms.md, "Durable state that
// survives restarts"; docs/jms.md, "Durable subscriptions"), with the
// gateway binary as a child process, go-amqp as the durable subscriber and
// go-amqp and paho publishers.

// subQueues reads GET /api/v1/queues: the subscription queues, with their
// messages held and acknowledged.
func (p *gwProc) subQueues(t *testing.T) map[string][2]int64 {
	t.Helper()
	b, err := httpGet("http://" + p.admin + "/api/v1/queues")
	if err != nil {
		t.Fatalf("GET /api/v1/queues: %v", err)
	}
	var list []struct {
		Name         string `json:"name"`
		Messages     int64  `json:"messages"`
		Subscription bool   `json:"subscription"`
		Counters     struct {
			Acked int64 `json:"acked"`
		} `json:"counters"`
	}
	if err := json.Unmarshal(b, &list); err != nil {
		t.Fatalf("GET /api/v1/queues: %v: %s", err, b)
	}
	out := map[string][2]int64{}
	for _, q := range list {
		if q.Subscription {
			out[q.Name] = [2]int64{q.Messages, q.Counters.Acked}
		}
	}
	return out
}

func durableSubscriber(t *testing.T, addr string) (*goamqp.Conn, *goamqp.Receiver) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := goamqp.Dial(ctx, "amqp://"+addr, &goamqp.ConnOptions{ContainerID: "jms-kill", SASLType: goamqp.SASLTypeAnonymous()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	s, err := c.NewSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	r, err := s.NewReceiver(ctx, "k/#", &goamqp.ReceiverOptions{Name: "ksub", Credit: 100,
		SourceDurability: goamqp.DurabilityUnsettledState, SourceExpiryPolicy: goamqp.ExpiryPolicyNever})
	if err != nil {
		t.Fatal(err)
	}
	return c, r
}

// publishAMQP sends bodies to topic, each durable and unsettled: it
// returns once the gateway accepted them all.
func publishAMQP(t *testing.T, addr, topic string, bodies ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, s, err := dialSession(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	snd, err := s.NewSender(ctx, topic, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bodies {
		m := goamqp.NewMessage([]byte(b))
		// Priority 4, the AMQP default, as MQTT's publishes get: go-amqp
		// sends the header's zero value, priority 0, which a queue now
		// delivers after them (docs/queues.md, "Priority").
		m.Header = &goamqp.MessageHeader{Durable: true, Priority: 4}
		if err := snd.Send(ctx, m, nil); err != nil {
			t.Fatalf("send %q: %v", b, err)
		}
	}
}

func seqBodies(from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprintf("m%d", i))
	}
	return out
}

// TestDurableSubscriptionKill9: a durable subscriber takes ten messages
// and accepts the first five, then goes away (detach closed=false: its
// connection closes); ten more are published (AMQP and MQTT QoS 1, each
// acknowledged to its publisher); the gateway is killed with SIGKILL and
// started again on the same data; the subscriber comes back and gets m5
// to m19, in order, once each, and none it had accepted; unsubscribing
// deletes the subscription. With the default embedded store and with
// Redis.
func TestDurableSubscriptionKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the gateway")
	}
	bin := buildGatewayBinary(t)
	for _, tc := range []struct {
		name string
		args func() []string
	}{
		{"embedded", func() []string { return []string{"--data.dir=" + t.TempDir()} }},
		{"redis", func() []string {
			r := startRedis(t)
			return []string{"--data.dir=" + t.TempDir(), "--queues.backend=redis", "--retain.backend=redis", "--retain.redis.url=" + r.URL()}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append(tc.args(), "--node.id=edge", "--amqp.listen=127.0.0.1:0")
			gw := runGatewayProc(t, bin, args...)
			c, r := durableSubscriber(t, gw.amqp)
			publishAMQP(t, gw.amqp, "k/a", seqBodies(0, 10)...)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			for i := range 10 {
				m, err := r.Receive(ctx, nil)
				if err != nil || string(m.GetData()) != fmt.Sprintf("m%d", i) {
					t.Fatalf("receive m%d: %v %v", i, m, err)
				}
				if i < 5 {
					if err := r.AcceptMessage(ctx, m); err != nil {
						t.Fatal(err)
					}
				}
			}
			c.Close()
			// The five accepts applied: their removals are queued to the
			// store before the next publish's append, which is answered
			// once stored.
			coretest.Eventually(t, "five acknowledged", 10*time.Second, func() bool {
				acked := int64(5)
				for _, v := range gw.subQueues(t) {
					acked = v[1]
				}
				return acked == 5
			})
			publishAMQP(t, gw.amqp, "k/b", seqBodies(10, 15)...)
			pub := connect5(t, gw.mqtt, "kpub")
			for _, b := range seqBodies(15, 20) {
				if r := pub.publish(t, &paho.Publish{Topic: "k/c", QoS: 1, Payload: []byte(b)}); r.ReasonCode >= 0x80 {
					t.Fatalf("publish %s: reason %#x", b, r.ReasonCode)
				}
			}
			gw.Kill()

			gw2 := runGatewayProc(t, bin, args...)
			_, r = durableSubscriber(t, gw2.amqp)
			var got []string
			for len(got) < 15 {
				m, err := r.Receive(ctx, nil)
				if err != nil {
					t.Fatalf("after %v: %v\n%s", got, err, gw2.Output())
				}
				got = append(got, string(m.GetData()))
				if err := r.AcceptMessage(ctx, m); err != nil {
					t.Fatal(err)
				}
			}
			if want := fmt.Sprint(seqBodies(5, 20)); fmt.Sprint(got) != want {
				t.Fatalf("after kill -9: %v, want %v", got, want)
			}
			short, cancelShort := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancelShort()
			if m, err := r.Receive(short, nil); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("a message more: %v (%v)", m, err)
			}
			if err := r.Close(ctx); err != nil { // closed=true: unsubscribe
				t.Fatal(err)
			}
			if subs := gw2.subQueues(t); len(subs) != 0 {
				t.Fatalf("subscription queues after unsubscribe: %v", subs)
			}
		})
	}
}
