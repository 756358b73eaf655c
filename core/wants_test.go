package core

import "testing"

type nopSub struct{}

func (*nopSub) Deliver(*Message, Delivery) error { return nil }

func TestRouterWants(t *testing.T) {
	r := NewRouter(RouterOptions{})
	mqttSide := &nopSub{}
	if _, err := r.Subscribe("#", mqttSide, SubOptions{SkipOrigin: ProtocolMQTT}); err != nil {
		t.Fatal(err)
	}
	if r.Wants("a/b", ProtocolMQTT) {
		t.Fatal("only a SkipOrigin=mqtt subscriber: an MQTT message is wanted by nobody")
	}
	if !r.Wants("a/b", ProtocolAMQP) {
		t.Fatal("an AMQP message is wanted by the MQTT side")
	}
	if _, err := r.Subscribe("a/+", &nopSub{}, SubOptions{}); err != nil {
		t.Fatal(err)
	}
	if !r.Wants("a/b", ProtocolMQTT) || r.Wants("x/y", ProtocolMQTT) || r.Wants("$SYS/a", ProtocolAMQP) {
		t.Fatal("Wants disagrees with the subscriptions")
	}
	if n := testing.AllocsPerRun(100, func() { r.Wants("a/b", ProtocolMQTT) }); n != 0 && !raceEnabled {
		t.Fatalf("Wants allocates %v times", n)
	}
}
