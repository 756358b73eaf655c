package e2e

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"
	"github.com/eclipse/paho.golang/paho"

	"github.com/tolsey/tolsey/gateway"
)

// AMQP helpers (go-amqp) for the cross-protocol tests.

func amqpSession(t *testing.T, g *gateway.Gateway) *goamqp.Session {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := goamqp.Dial(ctx, "amqp://"+g.AMQPAddr(), &goamqp.ConnOptions{SASLType: goamqp.SASLTypeAnonymous()})
	if err != nil {
		t.Fatalf("amqp dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	s, err := c.NewSession(ctx, nil)
	if err != nil {
		t.Fatalf("amqp session: %v", err)
	}
	return s
}

func amqpReceiver(t *testing.T, s *goamqp.Session, source string) *goamqp.Receiver {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := s.NewReceiver(ctx, source, &goamqp.ReceiverOptions{Credit: 100})
	if err != nil {
		t.Fatalf("amqp receiver %s: %v", source, err)
	}
	return r
}

func amqpSend(t *testing.T, s *goamqp.Session, target string, m *goamqp.Message) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	snd, err := s.NewSender(ctx, target, nil)
	if err != nil {
		t.Fatalf("amqp sender %s: %v", target, err)
	}
	defer snd.Close(ctx)
	if err := snd.Send(ctx, m, nil); err != nil {
		t.Fatalf("amqp send to %s: %v", target, err)
	}
}

func amqpNext(t *testing.T, r *goamqp.Receiver) *goamqp.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := r.Receive(ctx, nil)
	if err != nil {
		t.Fatalf("amqp receive: %v", err)
	}
	_ = r.AcceptMessage(ctx, m)
	return m
}

func amqpBody(m *goamqp.Message) string {
	if s, ok := m.Value.(string); ok {
		return s
	}
	return string(m.GetData())
}

func TestMQTTToAMQP(t *testing.T) {
	g := startGateway(t)
	s := amqpSession(t, g)
	r := amqpReceiver(t, s, "plant/+/temp")
	pub := connect5(t, g.MQTTAddr(), "pub")
	format := byte(1)
	pub.publish(t, &paho.Publish{Topic: "plant/a/temp", QoS: 1, Payload: []byte("21.5 °C"), Properties: &paho.PublishProperties{
		ContentType: "text/plain", ResponseTopic: "plant/a/reply", CorrelationData: []byte{1, 2, 3},
		User: paho.UserProperties{{Key: "unit", Value: "C"}, {Key: "site", Value: "x"}}, PayloadFormat: &format,
		MessageExpiry: ptr(uint32(60)),
	}})
	m := amqpNext(t, r)
	if m.Value != "21.5 °C" {
		t.Fatalf("UTF-8 text with payload-format 1: body %#v / %q, want an amqp-value string", m.Value, m.GetData())
	}
	if m.Header == nil || !m.Header.Durable || m.Header.TTL <= 50*time.Second || m.Header.TTL > 60*time.Second {
		t.Fatalf("header %+v: want durable (QoS 1) and ttl ≈ 60 s", m.Header)
	}
	p := m.Properties
	if p == nil || *p.To != "plant/a/temp" || *p.ContentType != "text/plain" || *p.ReplyTo != "plant/a/reply" ||
		!bytes.Equal(p.CorrelationID.([]byte), []byte{1, 2, 3}) || p.AbsoluteExpiryTime == nil {
		t.Fatalf("properties %+v", p)
	}
	if m.ApplicationProperties["unit"] != "C" || m.ApplicationProperties["site"] != "x" {
		t.Fatalf("application-properties %v", m.ApplicationProperties)
	}
	if m.Annotations["x-opt-jms-msg-type"] != int8(5) || m.Annotations["x-opt-jms-dest"] != int8(1) || m.Annotations["x-opt-retain"] != nil {
		t.Fatalf("annotations %v", m.Annotations)
	}

	// Binary, QoS 0: a data section, not durable.
	pub.publish(t, &paho.Publish{Topic: "plant/b/temp", QoS: 0, Payload: []byte{0xff, 0xfe}})
	m = amqpNext(t, r)
	if !bytes.Equal(m.GetData(), []byte{0xff, 0xfe}) || m.Value != nil {
		t.Fatalf("binary payload: %#v / %x", m.Value, m.GetData())
	}
	if m.Header != nil && m.Header.Durable {
		t.Fatalf("QoS 0 delivered durable")
	}
	if m.Annotations["x-opt-jms-msg-type"] != int8(3) {
		t.Fatalf("annotations %v", m.Annotations)
	}
}

func TestAMQPToMQTT(t *testing.T) {
	g := startGateway(t)
	sub := connect5(t, g.MQTTAddr(), "sub")
	sub.subscribe(t, paho.SubscribeOptions{Topic: "cmd/#", QoS: 1})
	s := amqpSession(t, g)
	ct, reply := "application/json", "cmd/replies"
	m := goamqp.NewMessage([]byte(`{"on":true}`))
	m.Header = &goamqp.MessageHeader{TTL: 30 * time.Second}
	m.Properties = &goamqp.MessageProperties{ContentType: &ct, ReplyTo: &reply, CorrelationID: "req-7"}
	m.ApplicationProperties = map[string]any{"who": "ops", "n": int32(3)}
	amqpSend(t, s, "cmd/lamp", m)
	got := sub.next(t)
	if got.Topic != "cmd/lamp" || string(got.Payload) != `{"on":true}` || got.QoS != 0 || got.Retain {
		t.Fatalf("got %s %q qos=%d retain=%v", got.Topic, got.Payload, got.QoS, got.Retain)
	}
	pp := got.Properties
	if pp.ContentType != ct || pp.ResponseTopic != reply || string(pp.CorrelationData) != "req-7" {
		t.Fatalf("properties %+v", pp)
	}
	if pp.User.Get("who") != "ops" || pp.User.Get("n") != "3" {
		t.Fatalf("user properties %v", pp.User)
	}
	if pp.MessageExpiry == nil || *pp.MessageExpiry == 0 || *pp.MessageExpiry > 30 {
		t.Fatalf("message expiry %v, want ≤ 30", pp.MessageExpiry)
	}

	// An amqp-value string arrives as UTF-8 with payload-format 1; not
	// durable means QoS 0.
	amqpSend(t, s, "topic://cmd/text", &goamqp.Message{Value: "hello"})
	got = sub.next(t)
	if string(got.Payload) != "hello" || got.QoS != 0 || got.Properties.PayloadFormat == nil || *got.Properties.PayloadFormat != 1 {
		t.Fatalf("text: %q qos=%d format=%v", got.Payload, got.QoS, got.Properties.PayloadFormat)
	}
}

// TestAMQPDurableToMQTT: header.durable = true is MQTT QoS 1.
func TestAMQPDurableToMQTT(t *testing.T) {
	g := startGateway(t)
	sub := connect5(t, g.MQTTAddr(), "sub")
	sub.subscribe(t, paho.SubscribeOptions{Topic: "dur/#", QoS: 1})
	s := amqpSession(t, g)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	snd, err := s.NewSender(ctx, "dur/1", nil)
	if err != nil {
		t.Fatal(err)
	}
	m := goamqp.NewMessage([]byte("qos1"))
	m.Header = &goamqp.MessageHeader{Durable: true}
	if err := snd.Send(ctx, m, nil); err != nil {
		t.Fatalf("send: %v", err)
	}
	if got := sub.next(t); got.QoS != 1 || string(got.Payload) != "qos1" {
		t.Fatalf("got qos=%d %q", got.QoS, got.Payload)
	}
}

// TestRetainedAcrossProtocols: an AMQP publisher retains with
// x-opt-retain; a late MQTT subscriber gets RETAIN=1; an MQTT retained
// publish reaches a late AMQP receiver with x-opt-retain and a live one
// without.
func TestRetainedAcrossProtocols(t *testing.T) {
	backends(t, func(t *testing.T, set ...string) {
		g := startGateway(t, set...)
		s := amqpSession(t, g)
		live := amqpReceiver(t, s, "state/#")
		m := goamqp.NewMessage([]byte("from-amqp"))
		m.Annotations = goamqp.Annotations{"x-opt-retain": true}
		amqpSend(t, s, "state/amqp", m)
		if got := amqpNext(t, live); amqpBody(got) != "from-amqp" || got.Annotations["x-opt-retain"] != nil {
			t.Fatalf("live AMQP receiver: %q %v", amqpBody(got), got.Annotations)
		}
		pub := connect5(t, g.MQTTAddr(), "pub")
		pub.publish(t, &paho.Publish{Topic: "state/mqtt", QoS: 1, Retain: true, Payload: []byte("from-mqtt")})
		if got := amqpNext(t, live); amqpBody(got) != "from-mqtt" || got.Annotations["x-opt-retain"] != nil {
			t.Fatalf("live AMQP receiver: %q %v", amqpBody(got), got.Annotations)
		}

		late := connect5(t, g.MQTTAddr(), "late")
		late.subscribe(t, paho.SubscribeOptions{Topic: "state/amqp", QoS: 1})
		if got := late.next(t); !got.Retain || string(got.Payload) != "from-amqp" {
			t.Fatalf("late MQTT subscriber: retain=%v %q", got.Retain, got.Payload)
		}

		lateA := amqpReceiver(t, amqpSession(t, g), "state/+")
		var seen []string
		for range 2 {
			got := amqpNext(t, lateA)
			if got.Annotations["x-opt-retain"] != true {
				t.Fatalf("late AMQP receiver: %q without x-opt-retain", amqpBody(got))
			}
			seen = append(seen, amqpBody(got))
		}
		if s := strings.Join(seen, ","); s != "from-amqp,from-mqtt" && s != "from-mqtt,from-amqp" {
			t.Fatalf("late AMQP receiver got %s", s)
		}
		pub.publish(t, &paho.Publish{Topic: "state/mqtt", QoS: 1, Payload: []byte("live")})
		if got := amqpNext(t, lateA); amqpBody(got) != "live" || got.Annotations["x-opt-retain"] != nil {
			t.Fatalf("live after retained: %q %v", amqpBody(got), got.Annotations)
		}
	})
}

func TestAMQPMetricsAndQuota(t *testing.T) {
	g := startGateway(t, "--retain.maxMessages=1")
	s := amqpSession(t, g)
	r := amqpReceiver(t, s, "m/#")
	m := goamqp.NewMessage([]byte("1"))
	m.Annotations = goamqp.Annotations{"x-opt-retain": true}
	amqpSend(t, s, "m/1", m)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	snd, err := s.NewSender(ctx, "m/2", nil)
	if err != nil {
		t.Fatal(err)
	}
	err = snd.Send(ctx, m, nil)
	var ae *goamqp.Error
	if !asErr(err, &ae) || ae.Condition != "amqp:resource-limit-exceeded" {
		t.Fatalf("retained over quota: %v, want rejected amqp:resource-limit-exceeded", err)
	}
	amqpNext(t, r)
	amqpNext(t, r) // delivered live all the same
	_, body := httpDo(t, "GET", "http://"+g.AdminAddr()+"/metrics")
	for _, want := range []string{
		`tolsey_messages_in_total{protocol="amqp"} 2`,
		`tolsey_messages_out_total{protocol="amqp"} 2`,
		`tolsey_connections{protocol="amqp"} 1`,
		`tolsey_retained_refused_total{reason="quota"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q:\n%s", want, grep(body, "tolsey_"))
		}
	}
}

func asErr(err error, target **goamqp.Error) bool {
	if err == nil {
		return false
	}
	e, ok := err.(*goamqp.Error)
	if ok {
		*target = e
	}
	return ok
}
