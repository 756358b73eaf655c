package core

import (
	"context"
	"errors"
	"testing"
	"time"
)

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

// Wants answers "nobody" without walking the index when every subscription
// skips the origin; the summary it reads must follow every Subscribe and
// Unsubscribe, shared groups included.
func TestWantsFollowsSubscriptionChanges(t *testing.T) {
	r := NewRouter(RouterOptions{})
	if r.Wants("a", ProtocolMQTT) || r.Wants("a", "") {
		t.Fatal("an empty router wants nothing")
	}
	mqttSide, err := r.Subscribe("#", &nopSub{}, SubOptions{SkipOrigin: ProtocolMQTT})
	if err != nil {
		t.Fatal(err)
	}
	natsSide, err := r.Subscribe("$share/g/a", &nopSub{}, SubOptions{SkipOrigin: ProtocolNATS})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		origin Protocol
		want   bool
	}{{ProtocolMQTT, true}, {ProtocolNATS, true}, {ProtocolAMQP, true}, {"", true}} {
		if got := r.Wants("a", c.origin); got != c.want {
			t.Fatalf("Wants(a, %q) = %v, want %v", c.origin, got, c.want)
		}
	}
	if r.Wants("b", ProtocolMQTT) {
		t.Fatal("only the group on a wants an MQTT message, not on b")
	}
	r.Unsubscribe(natsSide)
	r.Unsubscribe(natsSide) // twice is harmless and must not count twice
	if r.Wants("a", ProtocolMQTT) || !r.Wants("a", ProtocolNATS) {
		t.Fatal("after the group left, only non-MQTT messages are wanted")
	}
	second, err := r.Subscribe("x/#", &nopSub{}, SubOptions{SkipOrigin: ProtocolMQTT})
	if err != nil {
		t.Fatal(err)
	}
	if r.Wants("x/y", ProtocolMQTT) || !r.Wants("x/y", ProtocolAMQP) {
		t.Fatal("two subscriptions, both skipping MQTT")
	}
	plain, err := r.Subscribe("x/+", &nopSub{}, SubOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !r.Wants("x/y", ProtocolMQTT) || r.Wants("z", ProtocolMQTT) {
		t.Fatal("a plain subscription wants MQTT messages on its topics only")
	}
	r.Unsubscribe(plain)
	r.Unsubscribe(second)
	r.Unsubscribe(mqttSide)
	if r.Wants("x/y", ProtocolAMQP) || r.Len() != 0 {
		t.Fatal("an emptied router wants nothing")
	}
}

// BenchmarkRouterWants is the question the MQTT front-end asks before every
// MQTT publish: with only its own "#" (SkipOrigin mqtt) the answer needs no
// lock and no topic walk; with another front-end's subscription it walks.
func BenchmarkRouterWants(b *testing.B) {
	for _, other := range []bool{false, true} {
		name := "mqtt-only"
		if other {
			name = "with-amqp-sub"
		}
		b.Run(name, func(b *testing.B) {
			r := NewRouter(RouterOptions{})
			mustSubscribe(b, r, "#", &nopSub{}, SubOptions{SkipOrigin: ProtocolMQTT})
			if other {
				mustSubscribe(b, r, "other/#", &nopSub{}, SubOptions{})
			}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if r.Wants("load/p0/s0", ProtocolMQTT) {
						b.Fatal("wanted")
					}
				}
			})
		})
	}
}

// PublishWanted answers as Wants and delivers as Publish, in one walk
// where it can: nobody wanting the message makes none (mk not called); a
// wanted one reaches every eligible subscriber once, with the counts and
// the topic table Publish keeps; shared groups keep their turns; a
// retained one is stored; a refusal is in the result.
func TestPublishWanted(t *testing.T) {
	var stored []string
	topics := NewTopicTable(16)
	r := NewRouter(RouterOptions{Node: "n", Topics: topics, Retainer: retainerFunc(func(_ context.Context, m *Message) error {
		stored = append(stored, m.Topic)
		return nil
	})})
	mqttSide := &recorder{}
	mustSubscribe(t, r, "#", mqttSide, SubOptions{SkipOrigin: ProtocolMQTT})
	made := 0
	mk := func(topic string, qos byte, retain bool) func() *Message {
		return func() *Message {
			made++
			return &Message{Topic: topic, QoS: qos, Retain: retain, Origin: Origin{Protocol: ProtocolMQTT, Client: "c"}}
		}
	}
	if _, ok := r.PublishWanted(t.Context(), "a/b", ProtocolMQTT, mk("a/b", 0, false)); ok || made != 0 || mqttSide.count() != 0 {
		t.Fatalf("only a SkipOrigin=mqtt subscriber: wanted %v, %d messages made, %d delivered", ok, made, mqttSide.count())
	}
	ctx, nobody := t.Context(), mk("x/y", 0, false)
	mustSubscribe(t, r, "z/#", &nopSub{}, SubOptions{}) // a walk to make: not every subscription skips MQTT
	if n := testing.AllocsPerRun(100, func() { r.PublishWanted(ctx, "x/y", ProtocolMQTT, nobody) }); n != 0 && !raceEnabled {
		t.Fatalf("PublishWanted of a message nobody wants allocates %v times", n)
	}

	plain, noLocal := &recorder{}, &recorder{}
	mustSubscribe(t, r, "a/+", plain, SubOptions{})
	mustSubscribe(t, r, "a/#", plain, SubOptions{QoS: 1}) // overlapping: once
	mustSubscribe(t, r, "a/b", noLocal, SubOptions{NoLocal: true, Client: "c"})
	for _, topic := range []string{"x/y", "$SYS/a"} {
		if _, ok := r.PublishWanted(t.Context(), topic, ProtocolMQTT, mk(topic, 0, false)); ok || made != 0 {
			t.Fatalf("%s: wanted %v, %d messages made", topic, ok, made)
		}
	}
	pub0, del0 := r.Counts()
	res, ok := r.PublishWanted(t.Context(), "a/b", ProtocolMQTT, mk("a/b", 0, false))
	if !ok || made != 1 || res.Matched != 1 || res.Failed != 0 {
		t.Fatalf("a/b: wanted %v, %d made, result %+v; want wanted, 1 made, 1 matched", ok, made, res)
	}
	if plain.count() != 1 || noLocal.count() != 0 || mqttSide.count() != 0 {
		t.Fatalf("deliveries: plain %d (want 1), no-local %d (want 0), skip-origin %d (want 0)", plain.count(), noLocal.count(), mqttSide.count())
	}
	if pub, del := r.Counts(); pub != pub0+1 || del != del0+1 {
		t.Fatalf("counts: published +%d, delivered +%d; want +1 and +1", pub-pub0, del-del0)
	}
	if got := topics.Topics("#", time.Now(), time.Minute); len(got) != 1 || got[0].Topic != "a/b" || got[0].Messages != 1 {
		t.Fatalf("topic table: %+v, want a/b once", got)
	}

	// Retained: stored, as Publish stores it, before its fan-out.
	res, ok = r.PublishWanted(t.Context(), "a/r", ProtocolMQTT, mk("a/r", 0, true))
	if !ok || !res.Retained || len(stored) != 1 || stored[0] != "a/r" || plain.count() != 2 {
		t.Fatalf("retained: wanted %v, result %+v, stored %v, delivered %d", ok, res, stored, plain.count())
	}

	// A refusal is in the result.
	refuse := subscriberFunc(func(*Message, Delivery) error { return ErrNoMember })
	mustSubscribe(t, r, "e/#", &refuse, SubOptions{})
	if res, ok := r.PublishWanted(t.Context(), "e/x", ProtocolMQTT, mk("e/x", 0, false)); !ok || res.Failed != 1 || !errors.Is(res.Err, ErrNoMember) {
		t.Fatalf("refused: wanted %v, result %+v", ok, res)
	}

	// Shared groups: every message to one member, turns kept.
	a, b := &countSub{}, &countSub{}
	for _, s := range []*countSub{a, b} {
		if _, err := r.Subscribe("$share/g/s/#", s, SubOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for range 10 {
		if _, ok := r.PublishWanted(t.Context(), "s/x", ProtocolMQTT, mk("s/x", 0, false)); !ok {
			t.Fatal("a shared group wants the message")
		}
	}
	if a.n != 5 || b.n != 5 {
		t.Fatalf("round robin: %d and %d, want 5 and 5", a.n, b.n)
	}
}
