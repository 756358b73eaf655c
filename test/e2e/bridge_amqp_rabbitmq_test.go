package e2e

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"
	"github.com/eclipse/paho.golang/paho"

	"github.com/tolsey/tolsey/test/internal/rabbitnode"
)

// startRabbitMQ runs a RabbitMQ node of its own with the AMQP 1.0 plugin
// (test/internal/rabbitnode) and returns its AMQP address. The test's end
// stops it.
func startRabbitMQ(t *testing.T) string {
	t.Helper()
	n, err := rabbitnode.Start(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Stop)
	return n.Addr
}

// rabbitSession is a go-amqp session on RabbitMQ as guest.
func rabbitSession(t *testing.T, addr string) *goamqp.Session {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := goamqp.Dial(ctx, "amqp://"+addr, &goamqp.ConnOptions{SASLType: goamqp.SASLTypePlain("guest", "guest")})
	if err != nil {
		t.Fatalf("dial RabbitMQ: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	s, err := c.NewSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// The bridge against RabbitMQ 3.10 with its AMQP 1.0 plugin: an outbound
// QoS 1 rule into a queue (/queue/<name>), read back with go-amqp with the
// topic, headers and the bridge's message-id; an inbound rule from another
// queue into our topics.
func TestBridgeAMQPRabbitMQ(t *testing.T) {
	rabbit := startRabbitMQ(t)
	rs := rabbitSession(t, rabbit)
	g := startGateway(t, "--node.id=edge", amqpBridgesFlag(map[string]any{
		"name": "rabbit", "addr": rabbit, "user": "guest", "password": "guest",
		"rules": []ruleJSON{
			{"direction": "out", "local": "up/#", "remote": "/queue/tolsey-up", "qos": 1},
			{"direction": "in", "local": "down/#", "remote": "/queue/tolsey-down", "qos": 1},
		}}))
	eventually(t, "bridge connected", func() bool { return bridgeUp(g) })

	pub := connect5(t, g.MQTTAddr(), "pub")
	props := &paho.PublishProperties{ContentType: "text/plain", User: paho.UserProperties{{Key: "k", Value: "v"}}}
	for _, p := range []string{"one", "two"} {
		if r := pub.publish(t, &paho.Publish{Topic: "up/dev/" + p, QoS: 1, Payload: []byte(p), Properties: props}); r.ReasonCode != 0 {
			t.Fatalf("PUBACK %#x", r.ReasonCode)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rcv, err := rs.NewReceiver(ctx, "/queue/tolsey-up", &goamqp.ReceiverOptions{Credit: 10})
	if err != nil {
		t.Fatalf("receiver on RabbitMQ: %v", err)
	}
	var ids []any
	for _, p := range []string{"one", "two"} {
		m := amqpNext(t, rcv)
		if amqpBody(m) != p || m.Properties == nil || m.Properties.Subject == nil || *m.Properties.Subject != "up/dev/"+p ||
			m.ApplicationProperties["Tolsey-Topic"] != "up/dev/"+p || m.ApplicationProperties["k"] != "v" ||
			m.Properties.ContentType == nil || *m.Properties.ContentType != "text/plain" {
			t.Errorf("RabbitMQ gave %q %+v %v", amqpBody(m), m.Properties, m.ApplicationProperties)
		}
		ids = append(ids, m.Properties.MessageID)
	}
	// MessageID(node, epoch/queue, seq): the buffer's sequence numbers,
	// which the same record keeps when it is sent again.
	for i, id := range ids {
		s, _ := id.(string)
		if !strings.HasPrefix(s, "edge:") || !strings.HasSuffix(s, "/queue/tolsey-up:"+strconv.Itoa(i+1)) {
			t.Errorf("message-id %d is %v, want edge:<epoch>/<queue>:%d", i, id, i+1)
		}
	}

	sub := connect5(t, g.MQTTAddr(), "sub")
	sub.subscribe(t, paho.SubscribeOptions{Topic: "down/#", QoS: 1})
	snd, err := rs.NewSender(ctx, "/queue/tolsey-down", nil)
	if err != nil {
		t.Fatalf("sender on RabbitMQ: %v", err)
	}
	subj := "down/dev/1"
	if err := snd.Send(ctx, &goamqp.Message{Data: [][]byte{[]byte("cmd")}, Properties: &goamqp.MessageProperties{Subject: &subj},
		ApplicationProperties: map[string]any{"a": "1"}}, nil); err != nil {
		t.Fatalf("send to RabbitMQ: %v", err)
	}
	m := sub.next(t)
	if m.Topic != subj || string(m.Payload) != "cmd" || m.Properties.User.Get("a") != "1" || m.QoS != 1 {
		t.Errorf("local got %s %q qos %d %+v", m.Topic, m.Payload, m.QoS, m.Properties)
	}
}
