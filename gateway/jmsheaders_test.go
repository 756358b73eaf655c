package gateway

import (
	"context"
	"net"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"
	"github.com/eclipse/paho.golang/paho"
)

// JMSType, JMSPriority and JMSTimestamp (AMQP subject, priority,
// creation-time) reach an MQTT 5 subscriber as the user properties
// tolsey_amqp_subject, tolsey_amqp_priority and tolsey_amqp_creation_time,
// and an MQTT 5 responder that echoes the request's user properties gives
// the AMQP requester its header fields back, not as application
// properties (docs/mapping.md, "JMS headers").
func TestJMSHeadersThroughAnMQTTResponder(t *testing.T) {
	g := startGateway(t, "--amqp.listen=127.0.0.1:0")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	cfg, requests := receiver("responder")
	conn, err := net.Dial("tcp", g.MQTTAddr())
	if err != nil {
		t.Fatal(err)
	}
	cfg.Conn = conn
	mc := paho.NewClient(cfg)
	if _, err := mc.Connect(ctx, &paho.Connect{ClientID: "responder", CleanStart: true}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mc.Disconnect(&paho.Disconnect{}); <-mc.Done() })
	if _, err := mc.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "jmsh/req", QoS: 1}}}); err != nil {
		t.Fatal(err)
	}

	_, s := amqpSession(t, g, "")
	replies, err := s.NewReceiver(ctx, "jmsh/reply", &goamqp.ReceiverOptions{Credit: 10})
	if err != nil {
		t.Fatal(err)
	}
	snd, err := s.NewSender(ctx, "jmsh/req", nil)
	if err != nil {
		t.Fatal(err)
	}
	subject := "order.v1"
	created := time.UnixMilli(1700000000123).UTC()
	req := goamqp.NewMessage([]byte("ping"))
	req.Header = &goamqp.MessageHeader{Durable: true, Priority: 7}
	req.Properties = &goamqp.MessageProperties{Subject: &subject, CreationTime: &created, ReplyTo: ptr("jmsh/reply")}
	req.ApplicationProperties = map[string]any{"k": "v"}
	if err := snd.Send(ctx, req, nil); err != nil {
		t.Fatal(err)
	}

	var in *paho.Publish
	select {
	case in = <-requests:
	case <-ctx.Done():
		t.Fatal("the MQTT responder got no request")
	}
	want := map[string]string{"tolsey_amqp_subject": "order.v1", "tolsey_amqp_priority": "7",
		"tolsey_amqp_creation_time": "2023-11-14T22:13:20.123Z", "k": "v"}
	for k, v := range want {
		if got := in.Properties.User.Get(k); got != v {
			t.Errorf("MQTT user property %s = %q, want %q (all: %v)", k, got, v, in.Properties.User)
		}
	}

	// The usual MQTT 5 response: the request's user properties echoed.
	if _, err := mc.Publish(ctx, &paho.Publish{Topic: in.Properties.ResponseTopic, QoS: 1, Payload: []byte("pong"),
		Properties: &paho.PublishProperties{User: in.Properties.User}}); err != nil {
		t.Fatal(err)
	}
	m, err := replies.Receive(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = replies.AcceptMessage(ctx, m)
	if m.Header == nil || m.Header.Priority != 7 {
		t.Errorf("reply header %+v, want priority 7", m.Header)
	}
	if p := m.Properties; p == nil || p.Subject == nil || *p.Subject != subject || p.CreationTime == nil || !p.CreationTime.Equal(created) {
		t.Errorf("reply properties %+v, want subject %q and creation-time %v", p, subject, created)
	}
	if len(m.ApplicationProperties) != 1 || m.ApplicationProperties["k"] != "v" {
		t.Errorf("reply application properties %v, want only k=v (the header properties restored to their fields)", m.ApplicationProperties)
	}
}

func ptr[T any](v T) *T { return &v }
