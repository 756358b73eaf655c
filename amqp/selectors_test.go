package amqp

import (
	"context"
	"fmt"
	"strings"
	"testing"

	goamqp "github.com/Azure/go-amqp"

	"github.com/tolsey/tolsey/core"
	"github.com/tolsey/tolsey/core/queue"
)

// JMS selectors (selectors.go) with go-amqp over real sockets.

// selOpts asks for selector sel, as go-amqp (and Qpid JMS) write it.
func selOpts(name, sel string) *goamqp.ReceiverOptions {
	return &goamqp.ReceiverOptions{Name: name, Credit: 10, Filters: []goamqp.LinkFilter{goamqp.NewSelectorFilter(sel)}}
}

// sendProps sends one message per body to address to, each with the
// application properties props gives it.
func sendProps(t *testing.T, snd *goamqp.Sender, props func(i int) map[string]any, bodies ...string) {
	t.Helper()
	for i, b := range bodies {
		send(t, snd, &goamqp.Message{Data: [][]byte{[]byte(b)}, ApplicationProperties: props(i)})
	}
}

// shop gives message i a color and a price (an AMQP long, as Qpid JMS
// sends setLongProperty): 0 red 5, 1 red 15, 2 blue 20, 3 red 30.
func shop(i int) map[string]any {
	return map[string]any{"color": []string{"red", "red", "blue", "red"}[i], "price": int64([]int{5, 15, 20, 30}[i])}
}

func echoedSelector(r *goamqp.Receiver) any {
	return r.LinkSourceFilterValue(string(selectorFilterName))
}

// TestSelectorTopic: a topic receiver with a selector gets only the
// messages it selects, over typed application properties, and its attach
// answer echoes the selector (applied); a receiver without one gets all.
func TestSelectorTopic(t *testing.T) {
	e := startServer(t)
	s := e.session(t)
	const sel = "color = 'red' AND price > 10"
	r := newReceiver(t, s, "shop/#", selOpts("sel", sel))
	if v := echoedSelector(r); v != sel {
		t.Fatalf("attach answer's selector: %#v, want %q", v, sel)
	}
	plain := newReceiver(t, s, "shop/#", &goamqp.ReceiverOptions{Credit: 10})
	sendProps(t, newSender(t, s, "shop/items", nil), shop, "a", "b", "c", "d")
	expectBodies(t, "selector", receiveUntil(t, r, "d"), "b", "d")
	expectBodies(t, "plain", receiveUntil(t, plain, "d"), "a", "b", "c", "d")
}

// TestSelectorRetained: a late subscriber's retained copies obey its
// selector.
func TestSelectorRetained(t *testing.T) {
	e := startServer(t)
	for i, topic := range []string{"shop/a", "shop/b"} {
		m := &core.Message{Topic: topic, Payload: []byte(topic), Retain: true, QoS: 1,
			UserProperties: []core.UserProperty{{Key: "n", Value: fmt.Sprint(i)}}}
		if err := e.store.Set(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	s := e.session(t)
	r := newReceiver(t, s, "shop/#", selOpts("late", "n = 1 OR last"))
	send(t, newSender(t, s, "shop/z", nil), &goamqp.Message{Data: [][]byte{[]byte("shop/z")}, ApplicationProperties: map[string]any{"last": true}})
	expectBodies(t, "late", receiveUntil(t, r, "shop/z"), "shop/b", "shop/z")
}

// TestSelectorQueue: a queue consumer with a selector takes only what it
// selects, the answer echoing the selector; what it does not select, at
// the head of the queue, stays for a consumer without one. A browser with
// a selector sees only what it selects.
func TestSelectorQueue(t *testing.T) {
	e := startServer(t)
	q := e.declare(t, queue.Config{Name: "orders"})
	s := e.session(t)
	sendProps(t, newSender(t, s, "queue://orders", nil), shop, "a", "b", "c", "d")

	const sel = "price >= 15 AND color <> 'blue'"
	b := newReceiver(t, s, "queue://orders", &goamqp.ReceiverOptions{Credit: 10, SourceDistributionMode: goamqp.SourceDistributionModeCopy,
		Filters: []goamqp.LinkFilter{goamqp.NewSelectorFilter("color = 'blue'")}})
	if got := body(next(t, b)); got != "c" {
		t.Fatalf("the selecting browser saw %q first, want c", got)
	}
	noMessage(t, b)

	r := newReceiver(t, s, "queue://orders", selOpts("sel", sel))
	if v := echoedSelector(r); v != sel {
		t.Fatalf("attach answer's selector: %#v, want %q", v, sel)
	}
	for _, want := range []string{"b", "d"} {
		m := receive(t, r)
		if body(m) != want {
			t.Fatalf("the selecting consumer got %q, want %q", body(m), want)
		}
	}
	noMessage(t, r)
	eventually(t, "b and d acknowledged", func() bool { return messages(q) == 2 })
	plain := newReceiver(t, e.session(t), "queue://orders", &goamqp.ReceiverOptions{Credit: 10})
	expectBodies(t, "plain", []string{body(receive(t, plain)), body(receive(t, plain))}, "a", "c")
	eventually(t, "the queue empty", func() bool { return messages(q) == 0 })
}

// TestSelectorDurable: a durable subscription keeps its selector while no
// link is attached (its backlog holds only what it selects); resumed with
// another selector it is a changed subscription that takes the new one.
func TestSelectorDurable(t *testing.T) {
	e := startServer(t)
	snd := newSender(t, e.session(t), "shop/items", nil)
	opts := func(sel string) *goamqp.ReceiverOptions {
		o := durableOpts("sub")
		o.Filters = []goamqp.LinkFilter{goamqp.NewSelectorFilter(sel)}
		return o
	}
	c1, s1 := dialAs(t, e, "jms")
	r := newReceiver(t, s1, "shop/#", opts("price > 10"))
	if v := echoedSelector(r); v != "price > 10" {
		t.Fatalf("attach answer's selector: %#v", v)
	}
	c1.Close()
	eventually(t, "connection gone", func() bool { return e.srv.Connections() == 1 })
	sendProps(t, snd, shop, "a", "b", "c", "d") // kept for the subscription, a not selected

	c2, s2 := dialAs(t, e, "jms")
	r = newReceiver(t, s2, "shop/#", opts("price > 10"))
	expectBodies(t, "resumed", receiveUntil(t, r, "d"), "b", "c", "d")
	c2.Close()
	eventually(t, "connection gone", func() bool { return e.srv.Connections() == 1 })

	_, s3 := dialAs(t, e, "jms")
	r = newReceiver(t, s3, "shop/#", opts("color = 'blue' OR price < 10"))
	sendProps(t, snd, shop, "a", "b", "c", "d")
	expectBodies(t, "changed", receiveUntil(t, r, "c"), "a", "c")
	noMessage(t, r)
}

// TestSelectorShared: every link of a shared subscription gets only what
// the subscription's selector selects.
func TestSelectorShared(t *testing.T) {
	e := startServer(t)
	opts := func(name string) *goamqp.ReceiverOptions {
		o := selOpts(name, "color = 'red'")
		o.SourceCapabilities = []string{"topic", "shared", "global"}
		return o
	}
	_, s1 := dialAs(t, e, "app-1")
	r := newReceiver(t, s1, "shop/#", opts("work"))
	if v := echoedSelector(r); v != "color = 'red'" {
		t.Fatalf("attach answer's selector: %#v", v)
	}
	sendProps(t, newSender(t, e.session(t), "shop/items", nil), shop, "a", "b", "c", "d")
	expectBodies(t, "shared", receiveUntil(t, r, "d"), "a", "b", "d")
}

// TestSelectorInvalid: a selector that does not parse, is not a string,
// or is longer than MaxSelectorLength refuses the link with
// amqp:invalid-field, on a topic and on a queue, the description naming
// the filter and the position.
func TestSelectorInvalid(t *testing.T) {
	e := startServer(t, func(o *Options) { o.MaxSelectorLength = 64 })
	e.declare(t, queue.Config{Name: "q"})
	s := e.session(t)
	cases := []struct {
		filter goamqp.LinkFilter
		want   string
	}{
		{goamqp.NewSelectorFilter("color = "), "position 9"},
		{goamqp.NewSelectorFilter("color = 'red' AND"), "position 18"},
		{goamqp.NewSelectorFilter("'a' + 1 = 2"), "wants a number"},
		{goamqp.NewSelectorFilter("a = '" + strings.Repeat("x", 64) + "'"), "longer than 64"},
		{goamqp.NewLinkFilter(string(selectorFilterName), selectorFilterCode, int64(7)), "want a string"},
	}
	for _, addr := range []string{"shop/#", "queue://q"} {
		for _, c := range cases {
			_, err := s.NewReceiver(ctx5(t), addr, &goamqp.ReceiverOptions{Filters: []goamqp.LinkFilter{c.filter}})
			if amqpCond(err) != "amqp:invalid-field" || !strings.Contains(err.Error(), string(selectorFilterName)) ||
				!strings.Contains(err.Error(), c.want) {
				t.Fatalf("%s: %v, want amqp:invalid-field naming %s and %q", addr, err, selectorFilterName, c.want)
			}
		}
	}
	// The session is fine: a valid selector still attaches.
	newReceiver(t, s, "shop/#", selOpts("ok", "color = 'red'"))
}

// TestSelectorBesideOtherFilters: filters the gateway does not apply are
// left out of the attach answer beside an applied selector (AMQP 1.0
// part 3 §3.5.3): an unknown one everywhere, no-local on a queue.
func TestSelectorBesideOtherFilters(t *testing.T) {
	e := startServer(t)
	e.declare(t, queue.Config{Name: "q"})
	s := e.session(t)
	const unknown = "example.org:unknown-filter"
	filters := []goamqp.LinkFilter{goamqp.NewSelectorFilter("color = 'red'"), goamqp.NewLinkFilter(unknown, 0, "x"),
		goamqp.NewLinkFilter(string(noLocalFilterName), noLocalFilterCode, []any{})}
	topic := newReceiver(t, s, "shop/#", &goamqp.ReceiverOptions{Credit: 10, Filters: filters})
	q := newReceiver(t, s, "queue://q", &goamqp.ReceiverOptions{Credit: 10, Filters: filters})
	for _, c := range []struct {
		who     string
		r       *goamqp.Receiver
		noLocal bool
	}{{"topic", topic, true}, {"queue", q, false}} {
		if v := echoedSelector(c.r); v != "color = 'red'" {
			t.Errorf("%s: attach answer's selector %#v", c.who, v)
		}
		if v := c.r.LinkSourceFilterValue(unknown); v != nil {
			t.Errorf("%s: the unknown filter is echoed: %#v", c.who, v)
		}
		if v := c.r.LinkSourceFilterValue(string(noLocalFilterName)); (v != nil) != c.noLocal {
			t.Errorf("%s: no-local in the answer %#v, want it %v", c.who, v, c.noLocal)
		}
	}
	other := e.session(t) // no-local: another connection publishes
	sendProps(t, newSender(t, other, "queue://q", nil), shop, "a", "b", "c", "d")
	sendProps(t, newSender(t, other, "shop/items", nil), shop, "a", "b", "c", "d")
	expectBodies(t, "topic", receiveUntil(t, topic, "d"), "a", "b", "d")
	expectBodies(t, "queue", receiveUntil(t, q, "d"), "a", "b", "d")
}
