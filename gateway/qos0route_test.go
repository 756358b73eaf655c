package gateway

import (
	"context"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/tolsey/tolsey/core/coretest"
)

// An MQTT QoS 0 publish, which the MQTT front-end asks about and
// publishes in one walk of the router's subscriptions
// (core.Router.PublishWanted), is stored by a queue whose subscriptions
// match its topic, and goes to an alternate destination only when no
// consumer of any protocol receives it, as a QoS 1 one does
// (TestAlternateCountsMQTTSubscribers); an MQTT subscriber that receives
// it keeps it from the alternate.
func TestMQTTQoS0PublishReachesQueuesAndAlternates(t *testing.T) {
	g := startGateway(t, `--queues.declare=[{"name":"parked"},{"name":"jobs","subscriptions":["jobs/#"]}]`,
		`--queues.addresses=[{"prefix":"orders/","alternate":"parked"}]`)
	parked, _ := g.queues.Load().Queue("parked")
	jobs, _ := g.queues.Load().Queue("jobs")
	got := make(chan *paho.Publish, 16)
	sub := mqttConnect(t, g, &paho.Connect{ClientID: "sub", CleanStart: true})
	sub.AddOnPublishReceived(func(pr paho.PublishReceived) (bool, error) { got <- pr.Packet; return true, nil })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := sub.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "orders/seen/#"}}}); err != nil {
		t.Fatal(err)
	}
	pub := mqttClient(t, g, "pub")
	for _, topic := range []string{"jobs/1", "orders/unseen/1", "orders/seen/1", "jobs/2"} {
		if _, err := pub.Publish(ctx, &paho.Publish{Topic: topic, QoS: 0, Payload: []byte(topic)}); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case pk := <-got:
		if pk.Topic != "orders/seen/1" {
			t.Fatalf("subscriber got %q, want orders/seen/1", pk.Topic)
		}
	case <-ctx.Done():
		t.Fatal("the MQTT subscriber got nothing")
	}
	coretest.Eventually(t, "QoS 0 publishes stored by the matching queue", 10*time.Second, func() bool { return jobs.Info().Messages == 2 })
	coretest.Eventually(t, "the QoS 0 publish nobody received parked", 10*time.Second, func() bool { return parked.Info().Messages >= 1 })
	// A QoS 1 publish on the same connection is handled after the QoS 0
	// ones before it: once it is acknowledged, those are all routed.
	if _, err := pub.Publish(ctx, &paho.Publish{Topic: "orders/unseen/2", QoS: 1, Payload: []byte("2")}); err != nil {
		t.Fatal(err)
	}
	if n := parked.Info().Messages; n != 2 {
		t.Fatalf("%d parked, want 2 (orders/unseen/1 and 2; not orders/seen/1, which a subscriber received)", n)
	}
	if n := jobs.Info().Messages; n != 2 {
		t.Fatalf("%d in jobs, want 2", n)
	}
}
