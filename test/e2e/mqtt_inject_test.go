package e2e

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

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
