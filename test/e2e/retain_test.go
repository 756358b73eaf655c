package e2e

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
)

// backends runs f against every retained store backend.
func backends(t *testing.T, f func(t *testing.T, set ...string)) {
	t.Run("memory", func(t *testing.T) { f(t, "--retain.backend=memory") })
	t.Run("embedded", func(t *testing.T) { f(t, "--retain.backend=embedded") })
	t.Run("redis", func(t *testing.T) {
		r := startRedis(t)
		f(t, "--retain.backend=redis", "--retain.redis.url="+r.URL(), "--retain.redis.prefix="+t.Name()+":")
	})
}

func TestRetainFlagOnlyOnLateDelivery(t *testing.T) {
	backends(t, func(t *testing.T, set ...string) {
		g := startGateway(t, set...)
		sub := connect5(t, g.MQTTAddr(), "early")
		sub.subscribe(t, paho.SubscribeOptions{Topic: "home/+/temp", QoS: 1})
		rap := connect5(t, g.MQTTAddr(), "rap")
		rap.subscribe(t, paho.SubscribeOptions{Topic: "home/#", QoS: 1, RetainAsPublished: true})
		pub := connect5(t, g.MQTTAddr(), "pub")
		r := pub.publish(t, &paho.Publish{Topic: "home/kitchen/temp", QoS: 1, Retain: true, Payload: []byte("21.5")})
		if r.ReasonCode != 0 {
			t.Fatalf("PUBACK reason %#x, want 0", r.ReasonCode)
		}
		if m := sub.next(t); m.Retain || string(m.Payload) != "21.5" {
			t.Fatalf("existing subscriber got retain=%v payload=%q; want RETAIN=0 live copy", m.Retain, m.Payload)
		}
		if m := rap.next(t); !m.Retain {
			t.Fatalf("Retain-As-Published subscriber got RETAIN=0")
		}
		late := connect5(t, g.MQTTAddr(), "late")
		late.subscribe(t, paho.SubscribeOptions{Topic: "home/+/temp", QoS: 1})
		m := late.next(t)
		if !m.Retain || string(m.Payload) != "21.5" || m.Topic != "home/kitchen/temp" {
			t.Fatalf("late subscriber got %s retain=%v %q; want stored copy with RETAIN=1", m.Topic, m.Retain, m.Payload)
		}
		if m.QoS != 1 {
			t.Fatalf("late copy QoS %d, want min(1,1)=1", m.QoS)
		}
	})
}

func TestRetainReplaceDeleteAndQoS(t *testing.T) {
	backends(t, func(t *testing.T, set ...string) {
		g := startGateway(t, set...)
		pub := connect5(t, g.MQTTAddr(), "pub")
		pub.publish(t, &paho.Publish{Topic: "dev/1/state", QoS: 1, Retain: true, Payload: []byte("old")})
		pub.publish(t, &paho.Publish{Topic: "dev/1/state", QoS: 1, Retain: true, Payload: []byte("new")})
		pub.publish(t, &paho.Publish{Topic: "dev/2/state", QoS: 1, Retain: true, Payload: []byte("two")})
		pub.publish(t, &paho.Publish{Topic: "dev/3/state", QoS: 2, Retain: true, Payload: []byte("three")})
		pub.publish(t, &paho.Publish{Topic: "dev/2/state", QoS: 1, Retain: true, Payload: nil}) // delete

		late := connect5(t, g.MQTTAddr(), "late")
		late.subscribe(t, paho.SubscribeOptions{Topic: "dev/#", QoS: 1}, paho.SubscribeOptions{Topic: "fence", QoS: 0})
		pub.publish(t, &paho.Publish{Topic: "fence", QoS: 1})
		got := retainedOnly(late.until(t, "fence"))
		sort.Slice(got, func(i, j int) bool { return got[i].Topic < got[j].Topic })
		if topics(got) != "dev/1/state=new(rtrue),dev/3/state=three(rtrue)" {
			t.Fatalf("late subscriber got %s", topics(got))
		}
		if got[1].QoS != 1 {
			t.Fatalf("QoS 2 retained delivered on a QoS 1 subscription at QoS %d, want 1", got[1].QoS)
		}
	})
}

func TestRetainWildcardsAndDollarTopics(t *testing.T) {
	g := startGateway(t)
	pub := connect5(t, g.MQTTAddr(), "pub")
	for _, tp := range []string{"a", "a/b", "a/b/c", "a//c", "x/b/c", "$internal/a"} {
		pub.publish(t, &paho.Publish{Topic: tp, QoS: 1, Retain: true, Payload: []byte(tp)})
	}
	cases := map[string]string{
		"a/#":         "a,a/b,a/b/c,a//c",
		"+/b/+":       "a/b/c,x/b/c",
		"a/+/c":       "a/b/c,a//c",
		"#":           "a,a/b,a/b/c,a//c,x/b/c",
		"$internal/#": "$internal/a",
	}
	i := 0
	for filter, want := range cases {
		i++
		c := connect5(t, g.MQTTAddr(), fmt.Sprintf("w%d", i))
		c.subscribe(t, paho.SubscribeOptions{Topic: filter, QoS: 0}, paho.SubscribeOptions{Topic: "fence/w", QoS: 0})
		pub.publish(t, &paho.Publish{Topic: "fence/w", QoS: 1})
		var names []string
		for _, m := range retainedOnly(c.until(t, "fence/w")) {
			names = append(names, m.Topic)
		}
		sort.Strings(names)
		w := strings.Split(want, ",")
		sort.Strings(w)
		if strings.Join(names, ",") != strings.Join(w, ",") {
			t.Errorf("filter %s: got %v, want %v", filter, names, w)
		}
	}
}

func TestRetainHandlingAndShared(t *testing.T) {
	g := startGateway(t)
	pub := connect5(t, g.MQTTAddr(), "pub")
	pub.publish(t, &paho.Publish{Topic: "rh/t", QoS: 1, Retain: true, Payload: []byte("v")})

	c := connect5(t, g.MQTTAddr(), "rh")
	c.subscribe(t, paho.SubscribeOptions{Topic: "fence/rh"})
	// Retain Handling 2: never send retained messages.
	c.subscribe(t, paho.SubscribeOptions{Topic: "rh/#", QoS: 1, RetainHandling: 2})
	// Shared subscriptions get no retained messages [MQTT-4.8.2].
	c.subscribe(t, paho.SubscribeOptions{Topic: "$share/g/rh/+", QoS: 1})
	// Retain Handling 1: only when the subscription is new.
	c.subscribe(t, paho.SubscribeOptions{Topic: "rh/t", QoS: 1, RetainHandling: 1})
	c.subscribe(t, paho.SubscribeOptions{Topic: "rh/t", QoS: 1, RetainHandling: 1})
	pub.publish(t, &paho.Publish{Topic: "fence/rh", QoS: 1})
	got := retainedOnly(c.until(t, "fence/rh"))
	if topics(got) != "rh/t=v(rtrue)" {
		t.Fatalf("got %s; want exactly one retained copy (from the first Retain Handling 1 subscribe)", topics(got))
	}
}

func TestRetainExpiry(t *testing.T) {
	backends(t, func(t *testing.T, set ...string) {
		g := startGateway(t, set...)
		pub := connect5(t, g.MQTTAddr(), "pub")
		pub.publish(t, &paho.Publish{Topic: "exp/short", QoS: 1, Retain: true, Payload: []byte("s"),
			Properties: &paho.PublishProperties{MessageExpiry: ptr(uint32(1))}})
		pub.publish(t, &paho.Publish{Topic: "exp/long", QoS: 1, Retain: true, Payload: []byte("l"),
			Properties: &paho.PublishProperties{MessageExpiry: ptr(uint32(3600))}})
		time.Sleep(1100 * time.Millisecond) // the expiry is the subject under test
		eventually(t, "exp/short to expire", func() bool {
			m, err := g.Store().Get(t.Context(), "exp/short")
			return err == nil && m == nil
		})
		c := connect5(t, g.MQTTAddr(), "late")
		c.subscribe(t, paho.SubscribeOptions{Topic: "exp/#", QoS: 1}, paho.SubscribeOptions{Topic: "fence/e"})
		pub.publish(t, &paho.Publish{Topic: "fence/e", QoS: 1})
		got := retainedOnly(c.until(t, "fence/e"))
		if topics(got) != "exp/long=l(rtrue)" {
			t.Fatalf("got %s, want only exp/long", topics(got))
		}
		e := got[0].Properties.MessageExpiry
		if e == nil || *e == 0 || *e > 3600 {
			t.Fatalf("remaining expiry %v, want 1..3600", e)
		}
	})
}

func ptr[T any](v T) *T { return &v }
