package e2e

import (
	"reflect"
	"testing"

	goamqp "github.com/Azure/go-amqp"
	"github.com/eclipse/paho.golang/paho"
)

// TestTypedAMQPBodiesToMQTT: typed AMQP bodies (a JMS MapMessage's map, a
// StreamMessage's list, typed values) reach an MQTT 5 subscriber as JSON
// with content type application/json and the AMQP type in the user
// property tolsey_amqp_type (docs/mapping.md, "Typed bodies"); an MQTT
// reply that echoes them reaches an AMQP receiver as the typed body again.
func TestTypedAMQPBodiesToMQTT(t *testing.T) {
	g := startGateway(t)
	sub := connect5(t, g.MQTTAddr(), "sub")
	sub.subscribe(t, paho.SubscribeOptions{Topic: "typed/#", QoS: 1})
	s := amqpSession(t, g)
	for _, tc := range []struct {
		body       *goamqp.Message
		json, kind string
	}{
		{&goamqp.Message{Value: map[string]any{"n": int32(1)}}, `{"n":1}`, "map"},
		{&goamqp.Message{Value: []any{"a", int64(2), true}}, `["a",2,true]`, "list"},
		{&goamqp.Message{Sequence: [][]any{{"a", 1.5}}}, `["a",1.5]`, "sequence"},
		{&goamqp.Message{Value: int32(42)}, `42`, "int"},
		{&goamqp.Message{Value: goamqp.Symbol("sym")}, `"sym"`, "symbol"},
	} {
		amqpSend(t, s, "typed/"+tc.kind, tc.body)
		got := sub.next(t)
		pp := got.Properties
		if string(got.Payload) != tc.json || pp.ContentType != "application/json" || pp.User.Get("tolsey_amqp_type") != tc.kind {
			t.Errorf("%s: payload %s content type %q user %v; want %s", tc.kind, got.Payload, pp.ContentType, pp.User, tc.json)
		}
	}

	// The MQTT side echoes a map rendering back: the AMQP receiver gets a map.
	r := amqpReceiver(t, s, "typed-reply")
	pub := connect5(t, g.MQTTAddr(), "pub")
	pub.publish(t, &paho.Publish{Topic: "typed-reply", QoS: 1, Payload: []byte(`{"n":1,"s":"x"}`), Properties: &paho.PublishProperties{
		ContentType: "application/json", User: paho.UserProperties{{Key: "tolsey_amqp_type", Value: "map"}},
	}})
	m := amqpNext(t, r)
	if !reflect.DeepEqual(m.Value, map[string]any{"n": int64(1), "s": "x"}) || m.Annotations["x-opt-jms-msg-type"] != int8(2) {
		t.Fatalf("restored map: %#v, annotations %v", m.Value, m.Annotations)
	}
	if _, ok := m.ApplicationProperties["tolsey_amqp_type"]; ok {
		t.Fatalf("the type property is consumed, got %v", m.ApplicationProperties)
	}
}
