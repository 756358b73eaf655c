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

type countSub struct{ n int }

func (c *countSub) Deliver(*Message, Delivery) error { c.n++; return nil }

// Wants must not take a shared group's turn: the MQTT front-end asks it
// before every Publish, and a turn taken by each would send every message to
// the same member of a two-member group.
func TestWantsLeavesSharedGroupTurns(t *testing.T) {
	r := NewRouter(RouterOptions{})
	a, b := &countSub{}, &countSub{}
	for _, s := range []*countSub{a, b} {
		if _, err := r.Subscribe("$share/g/t/#", s, SubOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for range 10 {
		if !r.Wants("t/x", ProtocolMQTT) {
			t.Fatal("a shared group wants the message")
		}
		r.Publish(t.Context(), &Message{Topic: "t/x", Origin: Origin{Protocol: ProtocolMQTT}})
	}
	if a.n != 5 || b.n != 5 {
		t.Fatalf("round robin after Wants: %d and %d, want 5 and 5", a.n, b.n)
	}
}
