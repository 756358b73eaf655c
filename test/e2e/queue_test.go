package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"
	"github.com/eclipse/paho.golang/paho"
)

// The case end to end through the configuration file: queue
// foxes declared in YAML with animals/f* and the exception !animals/fox;
// an MQTT 5 publisher (paho) publishes at QoS 1 while nobody consumes;
// a go-amqp receiver on queue://foxes then gets exactly the topics the
// filters let in, in order, and the queue is empty once it accepted them.
func TestQueueAnimalsFromConfigFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "gateway.yaml")
	yaml := `queues:
  declare:
    - name: foxes
      subscriptions: ["animals/f*", "!animals/fox"]
      access: exclusive
`
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	g := startGateway(t, "--config="+file)
	pub := connect5(t, g.MQTTAddr(), "zoo")
	topics := []string{"animals/fox", "animals/frog", "animals/cat", "animals/foxes", "animals/f", "animals/fox/cub", "animals/ferret"}
	for _, tp := range topics {
		if r := pub.publish(t, &paho.Publish{Topic: tp, QoS: 1, Payload: []byte("on " + tp)}); r.ReasonCode != 0 {
			t.Fatalf("publish %s: PUBACK %#x", tp, r.ReasonCode)
		}
	}
	// Every PUBACK came after the queue stored the message: nothing to
	// wait for.
	r := amqpReceiver(t, amqpSession(t, g), "queue://foxes")
	var got []string
	for range 4 {
		m := amqpNext(t, r)
		got = append(got, amqpBody(m))
	}
	want := "on animals/frog,on animals/foxes,on animals/f,on animals/ferret"
	if strings.Join(got, ",") != want {
		t.Fatalf("queue foxes delivered %q, want %q", strings.Join(got, ","), want)
	}
	eventually(t, "queue foxes empty", func() bool {
		code, body := httpDo(t, "GET", "http://"+g.AdminAddr()+"/api/v1/queues/foxes")
		var q struct{ Messages, InFlight int }
		return code == 200 && json.Unmarshal([]byte(body), &q) == nil && q.Messages == 0 && q.InFlight == 0
	})
}

// Two gateways share queue q on Redis; gateway a only takes sends, b only
// consumes. The queue never holds more than one message, so a maxMessages
// of 10 must never refuse. It does (core/queue, reported, not fixed here):
// each engine counts a shared queue's depth from its own appends and
// removals (Queue.messages, set from the backend's Stats at open only),
// so a's count climbs with every send b consumes and a refuses the 11th
// with amqp:resource-limit-exceeded, while b's count goes negative
// (GET /api/v1/queues/q says -10 there).
func TestQueueRedisSharedDepth(t *testing.T) {
	r := startRedis(t)
	set := []string{"--queues.backend=redis", "--retain.redis.url=" + r.URL(),
		`--queues.declare=[{"name":"q","maxMessages":10}]`}
	a := startGateway(t, append(set, "--node.id=a")...)
	b := startGateway(t, append(set, "--node.id=b")...)
	rb := amqpReceiver(t, amqpSession(t, b), "queue://q")
	sa := amqpSession(t, a)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	snd, err := sa.NewSender(ctx, "queue://q", nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		m := goamqp.NewMessage([]byte(fmt.Sprint(i)))
		m.Header = &goamqp.MessageHeader{Durable: true}
		if err := snd.Send(ctx, m, nil); err != nil {
			_, ba := httpDo(t, "GET", "http://"+a.AdminAddr()+"/api/v1/queues/q")
			_, bb := httpDo(t, "GET", "http://"+b.AdminAddr()+"/api/v1/queues/q")
			t.Fatalf("send %d into a queue that holds at most 1: %v\na says %s\nb says %s", i, err, ba, bb)
		}
		if got := amqpBody(amqpNext(t, rb)); got != fmt.Sprint(i) {
			t.Fatalf("b got %q, want %d", got, i)
		}
	}
}
