package e2e

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"
	"github.com/eclipse/paho.golang/paho"
)

// TestSelectorOverMQTTUserProperties: an AMQP (JMS) receiver's selector
// selects on the user properties of MQTT 5 publishers, text that compares
// as a number where the selector compares with one (docs/jms.md,
// "Selectors"); and amqp.maxSelectorLength reaches the AMQP front-end.
func TestSelectorOverMQTTUserProperties(t *testing.T) {
	g := startGateway(t, "--amqp.maxSelectorLength=60")
	s := amqpSession(t, g)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	const sel = "site = 'north' AND temp > 20.5"
	r, err := s.NewReceiver(ctx, "sensors/#", &goamqp.ReceiverOptions{Credit: 100, Filters: []goamqp.LinkFilter{goamqp.NewSelectorFilter(sel)}})
	if err != nil {
		t.Fatal(err)
	}
	if v := r.LinkSourceFilterValue("apache.org:selector-filter:string"); v != sel {
		t.Fatalf("attach answer's selector %#v, want %q", v, sel)
	}
	pub := connect5(t, g.MQTTAddr(), "pub")
	for _, p := range [][2]string{{"north", "21"}, {"north", "19"}, {"north", "warm"}, {"south", "30"}, {"north", "2.25e1"}} {
		pub.publish(t, &paho.Publish{Topic: "sensors/" + p[0], QoS: 1, Payload: []byte(p[1]), Properties: &paho.PublishProperties{
			User: paho.UserProperties{{Key: "site", Value: p[0]}, {Key: "temp", Value: p[1]}}}})
	}
	for _, want := range []string{"21", "2.25e1"} {
		if got := amqpBody(amqpNext(t, r)); got != want {
			t.Fatalf("selected %q, want %q", got, want)
		}
	}

	_, err = s.NewReceiver(ctx, "sensors/#", &goamqp.ReceiverOptions{Filters: []goamqp.LinkFilter{
		goamqp.NewSelectorFilter("site = '" + strings.Repeat("n", 60) + "'")}})
	var ae *goamqp.Error
	if !errors.As(err, &ae) || ae.Condition != goamqp.ErrCondInvalidField || !strings.Contains(ae.Description, "longer than 60") {
		t.Fatalf("a selector over amqp.maxSelectorLength: %v, want amqp:invalid-field", err)
	}
}
