package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"
	"github.com/eclipse/paho.golang/paho"
	goredis "github.com/redis/go-redis/v9"
)

// A queue on Redis is one queue for the whole cluster: with consumers on
// each of three gateways and producers on one — MQTT QoS 1 publishes fed
// through the queue's topic subscription, AMQP sends straight to it —
// every message is consumed once. The queue's stream got each message
// once (Redis's count of entries ever added), so no second copy is left
// for a consumer to get later: the gateways that received a message from
// the cluster did not put it into the shared queue again.
func TestClusterQueueRedisShared(t *testing.T) {
	r := startRedis(t)
	_, gs := cluster3On(t, r, "--queues.backend=redis", `--queues.declare=[{"name":"cq","subscriptions":["cq/#"]}]`)
	got := newShareCount()
	for i, g := range gs {
		drainAMQP(t, amqpReceiver(t, amqpSession(t, g), "queue://cq"), "abc"[i:i+1], got)
	}
	const n = 30
	var bodies []string
	pub := connect5(t, gs[0].MQTTAddr(), "qpub")
	for i := range n {
		body := fmt.Sprint("mqtt-", i)
		if res := pub.publish(t, &paho.Publish{Topic: "cq/m", QoS: 1, Payload: []byte(body)}); res.ReasonCode != 0 {
			t.Fatalf("publish %s: %#x", body, res.ReasonCode)
		}
		bodies = append(bodies, body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	snd, err := amqpSession(t, gs[0]).NewSender(ctx, "queue://cq", nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		body := fmt.Sprint("amqp-", i)
		m := goamqp.NewMessage([]byte(body))
		m.Header = &goamqp.MessageHeader{Durable: true}
		if err := snd.Send(ctx, m, nil); err != nil {
			t.Fatalf("send %s: %v", body, err)
		}
		bodies = append(bodies, body)
	}
	got.waitAll(t, "every message consumed", bodies)

	opt, err := goredis.ParseURL(r.URL())
	if err != nil {
		t.Fatal(err)
	}
	rc := goredis.NewClient(opt)
	defer rc.Close()
	info, err := rc.XInfoStream(ctx, "tolsey:queue:{cq}:s").Result()
	if err != nil {
		t.Fatal(err)
	}
	got.mu.Lock()
	defer got.mu.Unlock()
	t.Logf("consumed per gateway: %v; stream entries added %d", got.by, info.EntriesAdded)
	for _, b := range bodies {
		if got.bodies[b] != 1 {
			t.Errorf("%s consumed %d times", b, got.bodies[b])
		}
	}
	if info.EntriesAdded != int64(len(bodies)) {
		t.Errorf("the queue's stream got %d entries for %d messages: copies from the cluster were queued again", info.EntriesAdded, len(bodies))
	}
}
