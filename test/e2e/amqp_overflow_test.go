package e2e

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"
	"github.com/eclipse/paho.golang/paho"

	"github.com/tolsey/tolsey/gateway"
)

// slowConsumerDrops reads tolsey_messages_dropped_total{protocol="amqp",
// reason="slow_consumer"} from the admin API.
func slowConsumerDrops(t *testing.T, g *gateway.Gateway) float64 {
	t.Helper()
	_, body := httpDo(t, "GET", "http://"+g.AdminAddr()+"/metrics")
	m := regexp.MustCompile(`(?m)^tolsey_messages_dropped_total\{protocol="amqp",reason="slow_consumer"\} (\S+)$`).FindStringSubmatch(body)
	if m == nil {
		return 0
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// publishQoS0 publishes n QoS 0 messages ("0", "1", ...) on topic from
// an MQTT client, in the background; the channel closes when it is done.
func publishQoS0(t *testing.T, g *gateway.Gateway, topic string, n int) <-chan struct{} {
	t.Helper()
	pub := connect5(t, g.MQTTAddr(), "ovf-pub-"+topic)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range n {
			if _, err := pub.Publish(context.Background(), &paho.Publish{Topic: topic, QoS: 0, Payload: []byte(strconv.Itoa(i))}); err != nil {
				t.Errorf("publish %d: %v", i, err)
				return
			}
		}
	}()
	return done
}

// TestLinkOverflowBlockMQTTQoS0: amqp.linkOverflow=block holds an MQTT
// QoS 0 publisher too (its connection stops being read while an AMQP
// consumer's full link waits for room): a consumer with little credit
// that reads slowly gets every message, in order, none dropped. Without
// the hold, all but the link's buffer and credit would be dropped.
func TestLinkOverflowBlockMQTTQoS0(t *testing.T) {
	g := startGateway(t, "--amqp.linkOverflow=block", "--amqp.linkBuffer=10", "--amqp.linkOverflowWait=1m")
	s := amqpSession(t, g)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := s.NewReceiver(ctx, "ovf/slow", &goamqp.ReceiverOptions{Credit: 2})
	if err != nil {
		t.Fatal(err)
	}
	const n = 2000
	done := publishQoS0(t, g, "ovf/slow", n)
	for i := range n {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		m, err := r.Receive(ctx, nil)
		cancel()
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if got := string(m.GetData()); got != strconv.Itoa(i) {
			t.Fatalf("message %d: got %q: messages were dropped", i, got)
		}
		if err := r.AcceptMessage(context.Background(), m); err != nil {
			t.Fatal(err)
		}
		if i%200 == 0 {
			time.Sleep(20 * time.Millisecond) // a slow consumer, not a timing assertion
		}
	}
	<-done
	if d := slowConsumerDrops(t, g); d != 0 {
		t.Fatalf("%v dropped", d)
	}
}

// TestLinkOverflowBlockMQTTQoS0Stuck: an AMQP consumer that reads nothing
// holds an MQTT QoS 0 publisher at most amqp.linkOverflowWait (once: the
// stalled link then drops without waiting): every publish goes through,
// and what the link could not hold is counted.
func TestLinkOverflowBlockMQTTQoS0Stuck(t *testing.T) {
	g := startGateway(t, "--amqp.linkOverflow=block", "--amqp.linkBuffer=10", "--amqp.linkOverflowWait=50ms")
	s := amqpSession(t, g)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := s.NewReceiver(ctx, "ovf/stuck", &goamqp.ReceiverOptions{Credit: 1}); err != nil {
		t.Fatal(err)
	}
	const n = 2000
	select {
	case <-publishQoS0(t, g, "ovf/stuck", n):
	case <-time.After(time.Minute):
		t.Fatal("the MQTT publisher is held by a consumer that reads nothing")
	}
	eventually(t, fmt.Sprintf("%d drops counted", n-11), func() bool { return slowConsumerDrops(t, g) >= n-11 })
	if d := slowConsumerDrops(t, g); d > n-10 {
		t.Fatalf("dropped %v of %d", d, n)
	}
}
