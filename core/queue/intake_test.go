package queue

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/tolsey/tolsey/core"
	"github.com/tolsey/tolsey/core/coretest"
)

// TestIntakeSelectorAndNoLocal: a queue's selector and noLocal keep out of
// it, at publish, what its consumer would never take (a JMS durable
// subscription's), and both survive a restart with the configuration.
func TestIntakeSelectorAndNoLocal(t *testing.T) {
	b := NewMemory()
	e, r := newEngine(t, Options{Backend: b})
	declare(t, e, Config{Name: "sub", Subscriptions: []string{"s/#"}, Selector: "colour = 'red'", NoLocal: "me"})
	pub := func(r *core.Router, payload, colour, client string) {
		m := &core.Message{Topic: "s/x", Payload: []byte(payload), QoS: 1,
			UserProperties: []core.UserProperty{{Key: "colour", Value: colour}}}
		m.Origin.Client = client
		if res := r.Publish(ctx, m); res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	pub(r, "1", "red", "other")
	pub(r, "2", "blue", "other")
	pub(r, "3", "red", "me")
	e.Close()
	r2 := core.NewRouter(core.RouterOptions{Node: "n1"})
	e2, _ := newEngine(t, Options{Backend: b, Router: r2})
	pub(r2, "4", "red", "me")
	pub(r2, "5", "red", "")
	q, _ := e2.Queue("sub")
	c, wake := consumer(t, q, false)
	if got := take(t, c, wake, 2); got != "[1 5]" {
		t.Fatalf("queue holds %s, want [1 5]", got)
	}
	if n := q.Info().Messages; n != 0 {
		t.Fatalf("%d messages left", n)
	}
}

// TestOverflowDropDoesNotRefusePublisher: a full queue with overflow drop
// drops the message for itself alone, counted, and the publisher is
// answered as if it had no such queue; one with the default refuses.
func TestOverflowDropDoesNotRefusePublisher(t *testing.T) {
	e, r := newEngine(t, Options{})
	drop := declare(t, e, Config{Name: "drop", Subscriptions: []string{"s/#"}, MaxMessages: 1, Overflow: OverflowDrop})
	declare(t, e, Config{Name: "big", Subscriptions: []string{"s/#"}})
	for i := range 3 {
		if res := publish(r, "s/x", fmt.Sprint(i)); res.Err != nil {
			t.Fatalf("publish %d refused: %v", i, res.Err)
		}
	}
	if info := drop.Info(); info.Messages != 1 || info.Counters.Refused != 2 {
		t.Fatalf("drop queue: %d messages, %d refused; want 1, 2", info.Messages, info.Counters.Refused)
	}
	big, _ := e.Queue("big")
	coretest.Eventually(t, "big holds 3", 5*time.Second, func() bool { return big.Info().Messages == 3 })
	declare(t, e, Config{Name: "drop", Subscriptions: []string{"s/#"}, MaxMessages: 1})
	if res := publish(r, "s/x", "3"); !errors.Is(res.Err, ErrFull) {
		t.Fatalf("publish to a full refusing queue: %v, want ErrFull", res.Err)
	}
	if _, err := e.Declare(ctx, Config{Name: "bad", Overflow: "block"}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("overflow block: %v", err)
	}
	if _, err := e.Declare(ctx, Config{Name: "bad", Selector: "a = "}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a bad selector: %v", err)
	}
}

// TestAlternateWhenTheSelectorLeavesItOut: a message a queue's selector or
// noLocal keeps out reaches no consumer through it: it is parked in an
// alternate, not lost between the two.
func TestAlternateWhenTheSelectorLeavesItOut(t *testing.T) {
	e, r := newEngine(t, Options{})
	parked := declare(t, e, Config{Name: "parked"})
	declare(t, e, Config{Name: "sub", Subscriptions: []string{"orders/#"}, Selector: "vip = TRUE", NoLocal: "me"})
	setAlternates(t, e, Alternate{Prefix: "orders/", Queue: "parked"})
	pub := func(topic, vip, client string) {
		m := &core.Message{Topic: topic, QoS: 1, UserProperties: []core.UserProperty{{Key: "vip", Value: vip}}}
		m.Origin.Client = client
		r.Publish(ctx, m)
	}
	pub("orders/1", "true", "")   // the subscription takes it
	pub("orders/2", "false", "")  // not selected: parked
	pub("orders/3", "true", "me") // its own: parked
	if got := fmt.Sprint(topics(t, parked)); got != "[orders/2 orders/3]" {
		t.Fatalf("the alternate holds %s", got)
	}
}

// BenchmarkIntake is what a queue's intake adds to a publish that
// matches its subscription but that it leaves out: "selector", a JMS
// selector that does not select it; "noLocal", the subscriber's own
// publish (a string compare, for the cost of the match alone). The cost a
// JMS durable subscription puts on every publish to its topic that it does
// not store.
//
//	go test -run '^$' -bench Intake -benchtime 2s ./core/queue/
func BenchmarkIntake(b *testing.B) {
	for _, c := range []struct{ name, client string }{{"selector", "other"}, {"noLocal", "me"}} {
		b.Run(c.name, func(b *testing.B) {
			r := core.NewRouter(core.RouterOptions{Node: "n1"})
			e, err := New(ctx, Options{Router: r})
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close()
			if _, err := e.Declare(ctx, Config{Name: "sub", Subscriptions: []string{"s/#"}, NoLocal: "me",
				Selector: "region IN ('eu', 'us') AND price > 100"}); err != nil {
				b.Fatal(err)
			}
			m := &core.Message{Topic: "s/x", UserProperties: []core.UserProperty{{Key: "region", Value: "eu"}, {Key: "price", Value: "12"}}}
			m.Origin.Client = c.client
			b.ReportAllocs()
			for b.Loop() {
				_ = e.Deliver(m, core.Delivery{})
			}
			if q, _ := e.Queue("sub"); q.Info().Messages != 0 {
				b.Fatal("the queue took it")
			}
		})
	}
}
