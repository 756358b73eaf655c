package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"
	"github.com/eclipse/paho.golang/paho"
	goredis "github.com/redis/go-redis/v9"

	"github.com/tolsey/tolsey/gateway"
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

// A queue declared at run time through one gateway's admin API follows
// on the others (docs/cluster.md, "Queues"): created on a, it is known on
// b and c, where a consumer on b takes, exactly once, what its
// subscription brings on c; changed on b, a and c take the change;
// deleted on b, it is gone on c and a's consumer is detached with
// amqp:resource-deleted. The NATS news carries it: the engines' periodic
// reading (30 s) is longer than the polls here (15 s).
func TestClusterQueueDeclaredAtRunTime(t *testing.T) {
	r := startRedis(t)
	_, gs := cluster3On(t, r, "--queues.backend=redis")
	a, b, c := gs[0], gs[1], gs[2]
	url := func(g *gateway.Gateway) string { return "http://" + g.AdminAddr() + "/api/v1/queues/rtq" }

	if code, body := httpSend(t, "PUT", url(a), `{"subscriptions":["rt/#"]}`); code != 201 {
		t.Fatalf("PUT on a: %d %s", code, body)
	}
	for _, g := range []*gateway.Gateway{b, c} {
		eventually(t, "the queue known on "+g.Cluster().Node, func() bool {
			code, _ := httpDo(t, "GET", url(g))
			return code == 200
		})
	}
	got := collectAMQP(t, amqpReceiver(t, amqpSession(t, b), "queue://rtq"))
	pub := connect5(t, c.MQTTAddr(), "rtpub")
	for _, body := range []string{"one", "fence"} {
		if res := pub.publish(t, &paho.Publish{Topic: "rt/x", QoS: 1, Payload: []byte(body)}); res.ReasonCode != 0 {
			t.Fatalf("publish %s on c: %#x", body, res.ReasonCode)
		}
	}
	eventually(t, "b's consumer got the message published on c", func() bool { return got.count("fence") == 1 })
	if n := got.count("one"); n != 1 {
		t.Fatalf("b's consumer got the message %d times, want once (all: %v)", n, got.msgs)
	}

	// Changed on b: a and c take the new subscriptions.
	if code, body := httpSend(t, "PUT", url(b), `{"subscriptions":["rt2/#"]}`); code != 200 {
		t.Fatalf("PUT on b: %d %s", code, body)
	}
	for _, g := range []*gateway.Gateway{a, c} {
		eventually(t, "the change known on "+g.Cluster().Node, func() bool {
			_, body := httpDo(t, "GET", url(g))
			return strings.Contains(body, `"rt2/#"`) && !strings.Contains(body, `"rt/#"`)
		})
	}

	// Deleted on b: a's consumer is told, c no longer has it.
	onA := amqpReceiver(t, amqpSession(t, a), "queue://rtq")
	if code, body := httpDo(t, "DELETE", url(b)); code != 204 {
		t.Fatalf("DELETE on b: %d %s", code, body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	_, err := onA.Receive(ctx, nil)
	var le *goamqp.LinkError
	if !errors.As(err, &le) || le.RemoteErr == nil || le.RemoteErr.Condition != "amqp:resource-deleted" {
		t.Fatalf("a's consumer after the delete on b: %v, want a detach with amqp:resource-deleted", err)
	}
	eventually(t, "the queue gone on c", func() bool {
		code, _ := httpDo(t, "GET", url(c))
		return code == 404
	})
	if code, _ := httpDo(t, "GET", url(a)); code != 404 {
		t.Errorf("GET on a after the delete: %d, want 404", code)
	}
}

// httpSend is httpDo with a JSON body.
func httpSend(t *testing.T, method, url, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// A queue created while NATS is down (its news lost: the connection
// buffers nothing while disconnected) reaches the other gateway when
// NATS is back: each reads every declaration after a reconnect, long
// before the 30 s periodic reading.
func TestClusterQueueFollowsAfterNATSRestart(t *testing.T) {
	s, gs := cluster2On(t, "--queues.backend=redis", "--cluster.heartbeat=200ms")
	a, b := gs[0], gs[1]
	port := natsPort(s)
	s.Shutdown()
	s.WaitForShutdown()
	url := func(g *gateway.Gateway) string { return "http://" + g.AdminAddr() + "/api/v1/queues/down" }
	if code, body := httpSend(t, "PUT", url(a), `{"subscriptions":["down/#"]}`); code != 201 {
		t.Fatalf("PUT on a while NATS is down: %d %s", code, body)
	}
	startNATS(t, port, "")
	eventually(t, "both gateways reconnected", func() bool {
		return clusterStatus(t, a).Reconnects > 0 && clusterStatus(t, b).Reconnects > 0
	})
	eventually(t, "the queue known on b", func() bool {
		code, _ := httpDo(t, "GET", url(b))
		return code == 200
	})
}
