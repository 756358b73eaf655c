package core

import (
	"context"
	"sync/atomic"
	"testing"
)

// fanner stands for consumers the router does not see (a front-end that
// fans out itself): it reaches someone while reach is set.
type fanner struct {
	recorder
	reach atomic.Bool
}

func (f *fanner) Reaches(*Message) bool { return f.reach.Load() }

var _ Interest = (*fanner)(nil)

func TestRouterFallbackOnlyWhenNobodyIsReached(t *testing.T) {
	r := NewRouter(RouterOptions{})
	fb, fb2 := &recorder{name: "fallback"}, &recorder{name: "another fallback"}
	mustSubscribe(t, r, "a/#", fb, SubOptions{QoS: 1, Fallback: true})
	mustSubscribe(t, r, "a/b", fb2, SubOptions{QoS: 1, Fallback: true})
	pub := func(origin Protocol, client string) {
		t.Helper()
		r.Publish(context.Background(), &Message{Topic: "a/b", QoS: 1, Origin: Origin{Protocol: origin, Client: client}})
	}
	check := func(what string, want int) {
		t.Helper()
		if n := fb.count(); n != want {
			t.Fatalf("%s: the fallback got %d messages, want %d", what, n, want)
		}
	}

	pub(ProtocolAMQP, "")
	check("nobody else subscribed (another fallback is no live consumer)", 1)
	if fb2.count() != 1 {
		t.Fatalf("the other fallback got %d", fb2.count())
	}

	plain := &recorder{name: "plain"}
	sub := mustSubscribe(t, r, "a/+", plain, SubOptions{QoS: 1})
	pub(ProtocolAMQP, "")
	check("a plain subscriber", 1)
	r.Unsubscribe(sub)

	// NoLocal: the publisher's own subscription does not reach it.
	sub = mustSubscribe(t, r, "a/b", plain, SubOptions{QoS: 1, NoLocal: true, Client: "me"})
	pub(ProtocolAMQP, "me")
	check("only the publisher's own NoLocal subscription", 2)
	pub(ProtocolAMQP, "you")
	check("another publisher, a NoLocal subscriber", 2)
	r.Unsubscribe(sub)

	// A subscriber that skips the origin and fans it out itself (the MQTT
	// front-end through mochi) is asked; one that just skips is not.
	mochi := &fanner{}
	mustSubscribe(t, r, "#", mochi, SubOptions{QoS: 2, SkipOrigin: ProtocolMQTT})
	pub(ProtocolMQTT, "")
	check("an Interest that reaches nobody", 3)
	mochi.reach.Store(true)
	pub(ProtocolMQTT, "")
	check("an Interest that skips MQTT and reaches an MQTT subscriber", 3)
	pub(ProtocolAMQP, "")
	check("an Interest that reaches someone", 3)
	if mochi.count() != 1 {
		t.Fatalf("the Interest subscriber got %d, want the AMQP one only", mochi.count())
	}
	mochi.reach.Store(false)
	pub(ProtocolAMQP, "")
	check("an Interest that reaches nobody, delivered to", 4)

	bridge := &recorder{name: "bridge"}
	mustSubscribe(t, r, "#", bridge, SubOptions{QoS: 1, SkipOrigin: ProtocolNATS})
	pub(ProtocolNATS, "")
	check("only a subscriber that skips the origin (and the Interest)", 5)
}
