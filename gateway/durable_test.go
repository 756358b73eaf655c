package gateway

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"
	"github.com/eclipse/paho.golang/paho"
)

// amqpSession connects to g's AMQP listener as container (go-amqp's own
// id when ""), closed when the test ends, and opens a session.
func amqpSession(t *testing.T, g *Gateway, container string) (*goamqp.Conn, *goamqp.Session) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := goamqp.Dial(ctx, "amqp://"+g.AMQPAddr(), &goamqp.ConnOptions{ContainerID: container, SASLType: goamqp.SASLTypeAnonymous()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	s, err := c.NewSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c, s
}

// durableReceiver attaches a JMS-style durable subscriber (Qpid JMS:
// container-id + link name, expiry-policy never) on filter.
func durableReceiver(t *testing.T, g *Gateway, container, name, filter string) (*goamqp.Conn, *goamqp.Receiver) {
	t.Helper()
	c, s := amqpSession(t, g, container)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := s.NewReceiver(ctx, filter, &goamqp.ReceiverOptions{Name: name, Credit: 10,
		SourceDurability: goamqp.DurabilityUnsettledState, SourceExpiryPolicy: goamqp.ExpiryPolicyNever})
	if err != nil {
		t.Fatal(err)
	}
	return c, r
}

// amqpPublish sends one message to a topic and waits for its outcome.
func amqpPublish(t *testing.T, g *Gateway, topic, body string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, s := amqpSession(t, g, "")
	defer c.Close()
	snd, err := s.NewSender(ctx, topic, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := snd.Send(ctx, goamqp.NewMessage([]byte(body)), nil); err != nil {
		t.Fatalf("send %q: %v", body, err)
	}
}

func mqttPublish(t *testing.T, g *Gateway, topic, body string) {
	t.Helper()
	c := mqttClient(t, g, "pub-"+body)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.Publish(ctx, &paho.Publish{Topic: topic, QoS: 1, Payload: []byte(body)}); err != nil {
		t.Fatal(err)
	}
}

// TestDurableSubscriptionSurvivesRestart: a JMS durable subscriber that
// was away while the gateway restarted (same data.dir, the default
// embedded queue store) gets every message published since it detached,
// from AMQP and MQTT publishers, before and after the restart, in order;
// the one it had accepted is not delivered again, the one it had not is;
// unsubscribing (detach closed=true) deletes the subscription's queue.
func TestDurableSubscriptionSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	args := []string{"--amqp.listen=127.0.0.1:0", "--data.dir=" + dir}
	g := startGateway(t, args...)
	c, r := durableReceiver(t, g, "jms-app", "orders-sub", "orders/#")
	amqpPublish(t, g, "orders/1", "m0")
	amqpPublish(t, g, "orders/2", "m1")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, want := range []string{"m0", "m1"} {
		m, err := r.Receive(ctx, nil)
		if err != nil || string(m.GetData()) != want {
			t.Fatalf("receive %q: %v %v", want, m, err)
		}
		if want == "m0" {
			if err := r.AcceptMessage(ctx, m); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The connection's close follows the accept: the gateway applies
	// the dispositions a peer sent before it left.
	c.Close() // away, m1 unsettled: the subscription stays
	amqpPublish(t, g, "orders/3", "m2")
	mqttPublish(t, g, "orders/4", "m3")
	amqpPublish(t, g, "other/5", "not for it")
	if err := g.Stop(ctx); err != nil {
		t.Fatal(err)
	}

	g = startGateway(t, args...)
	mqttPublish(t, g, "orders/6", "m4") // after the restart, before the subscriber is back
	_, r = durableReceiver(t, g, "jms-app", "orders-sub", "orders/#")
	var got []string
	for len(got) < 4 {
		m, err := r.Receive(ctx, nil)
		if err != nil {
			t.Fatalf("after %v: %v", got, err)
		}
		got = append(got, string(m.GetData()))
		if err := r.AcceptMessage(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	if fmt.Sprint(got) != "[m1 m2 m3 m4]" {
		t.Fatalf("resumed after a restart: %v, want [m1 m2 m3 m4]", got)
	}
	short, cancelShort := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancelShort()
	if m, err := r.Receive(short, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("one more message %v (%v)", m, err)
	}
	// The admin API marks the subscription's queue.
	code, body := call(t, g, "GET", "/api/v1/queues", "")
	list := decode[[]queueJSON](t, body)
	if code != 200 || len(list) != 1 || !list[0].Subscription || list[0].Config.Overflow != "drop" {
		t.Fatalf("GET /api/v1/queues: %d %s", code, body)
	}
	if err := r.Close(ctx); err != nil { // closed=true: JMS unsubscribe
		t.Fatal(err)
	}
	if n := len(g.Queues().Queues()); n != 0 {
		t.Fatalf("%d queues after unsubscribe, want none", n)
	}
}
