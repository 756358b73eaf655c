package queue

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tolsey/tolsey/core"
	"github.com/tolsey/tolsey/core/coretest"
	"github.com/tolsey/tolsey/core/queue/match"
)

// listener is a plain router subscriber: a live consumer.
type listener struct {
	mu  sync.Mutex
	got []string
}

func (l *listener) Deliver(m *core.Message, _ core.Delivery) error {
	l.mu.Lock()
	l.got = append(l.got, m.Topic)
	l.mu.Unlock()
	return nil
}

func setAlternates(t *testing.T, e *Engine, alts ...Alternate) {
	t.Helper()
	if err := e.SetAlternates(alts); err != nil {
		t.Fatal(err)
	}
}

// topics consumes every message of q and returns their topics.
func topics(t *testing.T, q *Queue) []string {
	t.Helper()
	c, _ := consumer(t, q, false)
	defer c.Close()
	coretest.Eventually(t, "the queue's messages in its window", 5*time.Second, func() bool {
		q.mu.Lock()
		defer q.mu.Unlock()
		return len(q.entries) == q.messages
	})
	var out []string
	for {
		d, ok := c.Next()
		if !ok {
			return out
		}
		out = append(out, d.Msg.Topic)
		c.Ack(d.ID)
	}
}

func TestAlternateOnlyWhenNobodyListens(t *testing.T) {
	e, r := newEngine(t, Options{})
	parked := declare(t, e, Config{Name: "parked"})
	declare(t, e, Config{Name: "eu", Subscriptions: []string{"orders/eu/#"}})
	setAlternates(t, e, Alternate{Prefix: "orders/", Queue: "parked"})

	publish(r, "orders/1", "nobody listens: parked")
	publish(r, "orders/eu/1", "a queue subscription takes it: not parked")
	publish(r, "orders2/x", "not under the prefix: nowhere")
	var l listener
	sub, err := r.Subscribe("orders/+", &l, core.SubOptions{QoS: 1})
	if err != nil {
		t.Fatal(err)
	}
	publish(r, "orders/2", "a live subscriber: not parked")
	r.Unsubscribe(sub)
	publish(r, "orders/3", "the subscriber left: parked")
	publish(r, "orders", "the prefix itself: parked")
	// A subscriber that skips the origin and does not say it reaches
	// anyone (the bridge) is not a live consumer of it.
	sub, _ = r.Subscribe("orders/#", &l, core.SubOptions{QoS: 1, SkipOrigin: core.ProtocolNATS})
	r.Publish(ctx, &core.Message{Topic: "orders/4", QoS: 1, Origin: core.Origin{Protocol: core.ProtocolNATS}})
	r.Unsubscribe(sub)

	if got := fmt.Sprint(topics(t, parked)); got != "[orders/1 orders/3 orders orders/4]" {
		t.Fatalf("the alternate holds %s", got)
	}
	if got := fmt.Sprint(l.got); got != "[orders/2]" {
		t.Fatalf("the subscriber got %s", got)
	}
}

func TestAlternateHoldsAckUntilStored(t *testing.T) {
	b := &gatedBackend{Memory: NewMemory(), gate: make(chan struct{})}
	e, r := newEngine(t, Options{Backend: b})
	declare(t, e, Config{Name: "parked"})
	setAlternates(t, e, Alternate{Prefix: "orders", Queue: "parked"})
	got := make(chan core.PublishResult, 1)
	r.PublishAsync(ctx, &core.Message{Topic: "orders/1", QoS: 1}, func(res core.PublishResult) { got <- res })
	select {
	case res := <-got:
		t.Fatalf("answered before the alternate stored it: %+v", res)
	default:
	}
	close(b.gate)
	if res := <-got; res.Err != nil || res.Matched != 1 {
		t.Fatalf("result %+v", res)
	}
}

func TestAlternateFullRefusesPublisher(t *testing.T) {
	e, r := newEngine(t, Options{})
	declare(t, e, Config{Name: "parked", MaxMessages: 1})
	setAlternates(t, e, Alternate{Prefix: "orders", Queue: "parked"})
	if res := publish(r, "orders/1", "x"); res.Err != nil {
		t.Fatal(res.Err)
	}
	if res := publish(r, "orders/2", "x"); !errors.Is(res.Err, ErrFull) {
		t.Fatalf("second publish: %+v, want ErrFull", res)
	}
}

func TestAlternateLongestPrefixWins(t *testing.T) {
	e, r := newEngine(t, Options{})
	all := declare(t, e, Config{Name: "all"})
	eu := declare(t, e, Config{Name: "eu"})
	// Given shortest first: the order must not matter.
	setAlternates(t, e, Alternate{Prefix: "orders/", Queue: "all"}, Alternate{Prefix: "orders/eu", Queue: "eu"})
	for _, topic := range []string{"orders/eu/1", "orders/us/1", "orders/eu", "orders/europe"} {
		publish(r, topic, "")
	}
	if got := fmt.Sprint(topics(t, eu)); got != "[orders/eu/1 orders/eu]" {
		t.Fatalf("orders/eu's alternate holds %s", got)
	}
	if got := fmt.Sprint(topics(t, all)); got != "[orders/us/1 orders/europe]" {
		t.Fatalf("orders/'s alternate holds %s", got)
	}
	if q, _ := e.AlternateFor("orders/eu/+"); q != eu {
		t.Fatalf("AlternateFor(orders/eu/+) = %v", q)
	}
	if got := len(e.AlternatesMatching("orders/+/1")); got != 2 {
		t.Fatalf("orders/+/1 overlaps %d alternates, want 2", got)
	}
	if got := len(e.AlternatesMatching("orders/us/#")); got != 1 {
		t.Fatalf("orders/us/# overlaps %d alternates, want 1", got)
	}
}

func TestSetAlternatesRefuses(t *testing.T) {
	e, r := newEngine(t, Options{})
	declare(t, e, Config{Name: "parked"})
	for _, alts := range [][]Alternate{
		{{Prefix: "orders/", Queue: "missing"}},
		{{Prefix: "orders/+", Queue: "parked"}},
		{{Prefix: "/", Queue: "parked"}},
		{{Prefix: "a", Queue: "parked"}, {Prefix: "a/", Queue: "parked"}},
	} {
		if err := e.SetAlternates(alts); err == nil {
			t.Errorf("SetAlternates(%v) took it", alts)
		}
	}
	setAlternates(t, e, Alternate{Prefix: "a", Queue: "parked"}, Alternate{Prefix: "b", Queue: "parked"})
	setAlternates(t, e)
	if r.Len() != 0 {
		t.Fatalf("the router holds %d subscriptions with no alternates", r.Len())
	}
}

func TestFilterAndFallbackConsumers(t *testing.T) {
	e, _ := newEngine(t, Options{})
	q := declare(t, e, Config{Name: "parked", Access: Exclusive})
	put := func(topic string) {
		ch := make(chan error, 1)
		e.Put("parked", &core.Message{Topic: topic, QoS: 1}, func(err error) { ch <- err })
		if err := <-ch; err != nil {
			t.Fatal(err)
		}
	}
	put("orders/eu/1")
	put("orders/us/1")
	fbWake := make(chan struct{}, 1)
	fb, err := q.Consume(ConsumerOptions{Fallback: true, Filter: "orders/#", Notify: func() {
		select {
		case fbWake <- struct{}{}:
		default:
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	euWake := make(chan struct{}, 1)
	eu, err := q.Consume(ConsumerOptions{Filter: "orders/eu/#", Notify: func() {
		select {
		case euWake <- struct{}{}:
		default:
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	// The ordinary consumer takes what its filter matches, on an
	// exclusive queue too; the fallback only what it does not.
	d := next(t, eu, euWake)
	if d.Msg.Topic != "orders/eu/1" {
		t.Fatalf("filtered consumer got %s", d.Msg.Topic)
	}
	if d, ok := eu.Next(); ok {
		t.Fatalf("filtered consumer got %s", d.Msg.Topic)
	}
	eu.Release(d.ID)
	d = next(t, fb, fbWake)
	if d.Msg.Topic != "orders/us/1" {
		t.Fatalf("fallback got %s, want orders/us/1 (nobody else takes it)", d.Msg.Topic)
	}
	fb.Ack(d.ID)
	if d, ok := fb.Next(); ok {
		t.Fatalf("fallback got %s while an ordinary consumer would take it", d.Msg.Topic)
	}
	eu.Close()
	d = next(t, fb, fbWake)
	if d.Msg.Topic != "orders/eu/1" {
		t.Fatalf("fallback got %s once the ordinary consumer left", d.Msg.Topic)
	}
}

// TestConsumerExcept: a consumer with a Filter and Except takes only the
// messages its filter matches and no exception does; the others stay for
// the queue's other consumers.
func TestConsumerExcept(t *testing.T) {
	e, _ := newEngine(t, Options{})
	q := declare(t, e, Config{Name: "parked"})
	for _, topic := range []string{"orders/1", "orders/fox", "orders/2", "other/3"} {
		ch := make(chan error, 1)
		e.Put("parked", &core.Message{Topic: topic, Payload: []byte(topic), QoS: 1}, func(err error) { ch <- err })
		if err := <-ch; err != nil {
			t.Fatal(err)
		}
	}
	except, err := match.ParseAll([]string{"orders/fox"})
	if err != nil {
		t.Fatal(err)
	}
	c, wake := consumerWith(t, q, ConsumerOptions{Filter: "orders/#", Except: except})
	defer c.Close()
	if got := take(t, c, wake, 2); got != "[orders/1 orders/2]" {
		t.Fatalf("filtered consumer took %s", got)
	}
	if d, ok := c.Next(); ok {
		t.Fatalf("filtered consumer took %s too", d.Msg.Payload)
	}
	all, aw := consumer(t, q, false)
	defer all.Close()
	if got := take(t, all, aw, 2); got != "[orders/fox other/3]" {
		t.Fatalf("the other consumer took %s", got)
	}
}
