package gateway

import (
	"context"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/tolsey/tolsey/core"
)

// An alternate destination in the whole gateway: a message under its
// prefix goes to the alternate queue only when no consumer of any
// protocol receives it. An MQTT subscriber counts, for an MQTT publish
// (fanned out by mochi, not the router) as for any other.
func TestAlternateCountsMQTTSubscribers(t *testing.T) {
	g := startGateway(t, `--queues.declare=[{"name":"parked"}]`,
		`--queues.addresses=[{"prefix":"orders/","alternate":"parked"}]`)
	parked, _ := g.queues.Load().Queue("parked")
	pub := mqttClient(t, g, "pub")
	publish := func(topic string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := pub.Publish(ctx, &paho.Publish{Topic: topic, QoS: 1, Payload: []byte(topic)}); err != nil {
			t.Fatal(err)
		}
	}
	// Nobody listens: diverted.
	publish("orders/1")
	if n := parked.Info().Messages; n != 1 {
		t.Fatalf("%d parked with nobody listening, want 1", n)
	}
	// An MQTT subscriber receives it: not diverted, for an MQTT publish
	// and for one from another protocol.
	sub := mqttClient(t, g, "sub")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := sub.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "orders/#", QoS: 1}}}); err != nil {
		t.Fatal(err)
	}
	publish("orders/2")
	g.router.Publish(context.Background(), &core.Message{Topic: "orders/3", QoS: 1, Payload: []byte("3"),
		Origin: core.Origin{Protocol: core.ProtocolAMQP}})
	if n := parked.Info().Messages; n != 1 {
		t.Fatalf("%d parked with an MQTT subscriber on orders/#, want still 1", n)
	}
}
