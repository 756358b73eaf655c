package e2e

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"
	"github.com/eclipse/paho.golang/paho"

	"github.com/tolsey/tolsey/core"
)

// Messages from other front-ends reach MQTT sessions at every QoS, with
// their properties, and the router reports no failure (a failure would turn
// into an AMQP "rejected" for the publisher).
func TestRoutedMessagesReachMQTTAtEveryQoS(t *testing.T) {
	g := startGateway(t)
	sub := connect5(t, g.MQTTAddr(), "sub")
	sub.subscribe(t, paho.SubscribeOptions{Topic: "inj/#", QoS: 2})
	for qos := byte(0); qos <= 2; qos++ {
		m := &core.Message{Topic: "inj/q", Payload: []byte{'0' + qos}, QoS: qos, ContentType: "text/plain",
			ResponseTopic: "inj/reply", CorrelationData: []byte("c1"), Expiry: time.Now().Add(time.Hour),
			UserProperties: []core.UserProperty{{Key: "k", Value: "v"}},
			Origin:         core.Origin{Protocol: core.ProtocolAMQP, Client: "amqp-client"}}
		res := g.Router().Publish(t.Context(), m)
		if res.Err != nil || res.Failed != 0 {
			t.Fatalf("QoS %d: publish result %+v", qos, res)
		}
		got := sub.next(t)
		if got.QoS != qos || string(got.Payload) != string(m.Payload) || got.Retain {
			t.Fatalf("QoS %d: got QoS %d payload %q retain %v", qos, got.QoS, got.Payload, got.Retain)
		}
		p := got.Properties
		if p.ContentType != "text/plain" || p.ResponseTopic != "inj/reply" || string(p.CorrelationData) != "c1" ||
			p.User.Get("k") != "v" || p.MessageExpiry == nil || *p.MessageExpiry > 3600 || *p.MessageExpiry < 3500 {
			t.Fatalf("QoS %d: properties %+v", qos, p)
		}
	}
}

// mqtt.maxKeepAlive replaces a longer (or no) MQTT 5 keep alive and says so
// in the CONNACK; a shorter one is kept.
func TestMaxKeepAlive(t *testing.T) {
	g := startGateway(t, "--mqtt.maxKeepAlive=60s")
	for _, c := range []struct{ asked, want uint16 }{{120, 60}, {0, 60}, {30, 0}} {
		conn, err := net.Dial("tcp", g.MQTTAddr())
		if err != nil {
			t.Fatal(err)
		}
		cl := paho.NewClient(paho.ClientConfig{Conn: conn})
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		ca, err := cl.Connect(ctx, &paho.Connect{ClientID: fmt.Sprintf("ka%d", c.asked), KeepAlive: c.asked, CleanStart: true})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		var got uint16
		if ca.Properties != nil && ca.Properties.ServerKeepAlive != nil {
			got = *ca.Properties.ServerKeepAlive
		}
		if got != c.want {
			t.Errorf("keep alive %d: Server Keep Alive %d, want %d (0 = not sent)", c.asked, got, c.want)
		}
		_ = cl.Disconnect(&paho.Disconnect{})
	}
}

// An MQTT client that subscribes while an AMQP client sends a steady
// stream on the topic gets every message sent after its SUBACK, round
// after round of subscribe and unsubscribe (between rounds nobody here
// subscribes, so the MQTT front-end skips the stream without injecting it
// into mochi: docs/mqtt-frontend.md, "The delivery path"). Each send waits
// for its outcome: a message whose send began after Subscribe returned
// was published after the SUBACK arrived.
func TestMQTTSubscribeDuringAMQPStream(t *testing.T) {
	g := startGateway(t)
	const topic = "stream/x"
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	snd, err := amqpSession(t, g).NewSender(ctx, topic, nil)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	var started atomic.Int64 // sends begun; a message's body is its number
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		for {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			n := started.Add(1)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := snd.Send(ctx, goamqp.NewMessage([]byte(strconv.FormatInt(n, 10))), nil)
			cancel()
			if err != nil {
				done <- fmt.Errorf("send %d: %w", n, err)
				return
			}
		}
	}()
	defer func() {
		close(stop)
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()

	sub := connect5(t, g.MQTTAddr(), "sub")
	const rounds, after = 10, 50
	for round := range rounds {
		sub.subscribe(t, paho.SubscribeOptions{Topic: topic})
		subacked := started.Load()
		got := map[int64]bool{}
		last := subacked
		for last < subacked+after {
			m := sub.next(t)
			n, err := strconv.ParseInt(string(m.Payload), 10, 64)
			if err != nil || m.Topic != topic {
				t.Fatalf("round %d: got %s %q", round, m.Topic, m.Payload)
			}
			if n <= subacked {
				continue // sent before the SUBACK: may or may not come
			}
			if got[n] {
				t.Fatalf("round %d: message %d twice", round, n)
			}
			got[n], last = true, max(last, n)
		}
		for n := subacked + 1; n <= last; n++ {
			if !got[n] {
				t.Fatalf("round %d: %d sends begun at the SUBACK; message %d, sent after it, missing", round, subacked, n)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := sub.Unsubscribe(ctx, &paho.Unsubscribe{Topics: []string{topic}})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
}
