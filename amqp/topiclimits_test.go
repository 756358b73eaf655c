package amqp

import (
	"strings"
	"testing"

	goamqp "github.com/Azure/go-amqp"
	dto "github.com/prometheus/client_model/go"

	"github.com/tolsey/tolsey/core"
)

// TestAddressesObeyTopicLimits: AMQP addresses name MQTT topics (docs/architecture.md,
// decision 3), so the gateway's topic limits (mqtt.maxTopicLevels,
// mqtt.maxTopicLength; defaults 128 and 4,096 bytes) apply to them too: an
// attach whose source or target is over them is refused with
// amqp:invalid-field, and so is a message whose "to" is (rejected). Before,
// any address MQTT's grammar allows was taken, 65,535 bytes or 32,767
// levels.
func TestAddressesObeyTopicLimits(t *testing.T) {
	e := startServer(t)
	s := e.session(t)
	deep := strings.TrimSuffix(strings.Repeat("d/", 200), "/")
	wide := "w/" + strings.Repeat("x", 5000)
	atLimit := strings.TrimSuffix(strings.Repeat("l/", core.DefaultMaxTopicLevels), "/")

	for _, addr := range []string{deep, "topic://" + wide} {
		if _, err := s.NewReceiver(ctx5(t), addr, nil); amqpCond(err) != "amqp:invalid-field" {
			t.Errorf("receiver from %s: %v, want amqp:invalid-field", core.ShortTopic(addr), err)
		}
		if _, err := s.NewSender(ctx5(t), addr, nil); amqpCond(err) != "amqp:invalid-field" {
			t.Errorf("sender to %s: %v, want amqp:invalid-field", core.ShortTopic(addr), err)
		}
	}
	if _, err := s.NewReceiver(ctx5(t), strings.TrimSuffix(strings.Repeat("+/", 200), "/"), nil); amqpCond(err) != "amqp:invalid-field" {
		t.Errorf("receiver from a 200-level wildcard filter: %v, want amqp:invalid-field", err)
	}
	relay := newSender(t, s, "", nil)
	for _, to := range []string{deep, wide} {
		m := goamqp.NewMessage([]byte("x"))
		m.Properties = &goamqp.MessageProperties{To: &to}
		if err := relay.Send(ctx5(t), m, nil); amqpCond(err) != "amqp:invalid-field" {
			t.Errorf("anonymous relay to %s: %v, want rejected amqp:invalid-field", core.ShortTopic(to), err)
		}
	}

	// At the limits, all is as usual.
	r := newReceiver(t, s, atLimit, nil)
	send(t, newSender(t, s, atLimit, nil), goamqp.NewMessage([]byte("ok")))
	if got := body(receive(t, r)); got != "ok" {
		t.Fatalf("at the limit: got %q", got)
	}

	refused := func(limit string) float64 {
		var m dto.Metric
		if err := e.metrics.LimitRefusals.WithLabelValues("amqp", "topic_"+limit).Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetCounter().GetValue()
	}
	if l, n := refused("levels"), refused("length"); l != 4 || n != 3 {
		t.Errorf("refusals counted: levels %v, length %v; want 4 and 3", l, n)
	}
}
