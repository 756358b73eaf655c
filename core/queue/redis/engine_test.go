package redis

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tolsey/tolsey/core"
	"github.com/tolsey/tolsey/core/coretest"
	"github.com/tolsey/tolsey/core/queue"
	"github.com/tolsey/tolsey/retain/redistest"
)

// TestTwoEnginesShareAQueue: two gateways' engines on one Redis queue.
// What one gateway's publisher puts reaches a consumer on the other (the
// engine polls a shared Log), and with consumers on both, each message is
// delivered exactly once across them.
func TestTwoEnginesShareAQueue(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	engine := func(node string) *queue.Engine {
		b := open(t, srv, node, time.Minute)
		t.Cleanup(func() { _ = b.Close() })
		e, err := queue.New(ctx, queue.Options{Backend: b, Poll: 20 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(e.Close)
		if _, err := e.Declare(ctx, queue.Config{Name: "shared"}); err != nil {
			t.Fatal(err)
		}
		return e
	}
	a, b := engine("gw-a"), engine("gw-b")
	put := func(e *queue.Engine, from, to int) {
		for i := from; i < to; i++ {
			ch := make(chan error, 1)
			e.Put("shared", &core.Message{Topic: "t", Payload: []byte(fmt.Sprint(i)), QoS: 1}, func(err error) { ch <- err })
			if err := <-ch; err != nil {
				t.Fatal(err)
			}
		}
	}
	attach := func(e *queue.Engine) (*queue.Consumer, chan struct{}) {
		q, _ := e.Queue("shared")
		wake := make(chan struct{}, 1)
		c, err := q.Consume(queue.ConsumerOptions{Notify: func() {
			select {
			case wake <- struct{}{}:
			default:
			}
		}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c, wake
	}
	seen := map[string]string{}
	receive := func(who string, c *queue.Consumer, wake chan struct{}, until func() bool) {
		deadline := time.After(10 * time.Second)
		for !until() {
			d, ok := c.Next()
			if !ok {
				select {
				case <-wake:
				case <-deadline:
					t.Fatalf("%s: stuck with %d of the messages", who, len(seen))
				}
				continue
			}
			p := string(d.Msg.Payload)
			if prev, dup := seen[p]; dup {
				t.Fatalf("message %s delivered to %s and %s", p, prev, who)
			}
			seen[p] = who
			c.Ack(d.ID)
		}
	}
	cb, wb := attach(b)
	put(a, 0, 50)
	receive("b", cb, wb, func() bool { return len(seen) == 50 })

	ca, wa := attach(a)
	put(a, 50, 100)
	put(b, 100, 150)
	// Both pull in turns until every message is in.
	deadline := time.Now().Add(10 * time.Second)
	for len(seen) < 150 && time.Now().Before(deadline) {
		for _, c := range []struct {
			who  string
			c    *queue.Consumer
			wake chan struct{}
		}{{"a", ca, wa}, {"b", cb, wb}} {
			for {
				d, ok := c.c.Next()
				if !ok {
					break
				}
				p := string(d.Msg.Payload)
				if prev, dup := seen[p]; dup {
					t.Fatalf("message %s delivered to %s and %s", p, prev, c.who)
				}
				seen[p] = c.who
				c.c.Ack(d.ID)
			}
		}
		select {
		case <-wa:
		case <-wb:
		case <-time.After(100 * time.Millisecond):
		}
	}
	if len(seen) != 150 {
		t.Fatalf("%d of 150 messages delivered", len(seen))
	}
}

// A browser on a Redis queue (the admin API's browse, AMQP
// distribution-mode copy) takes nothing: the consumer attached afterwards
// gets every message.
func TestRedisBrowseTakesNothing(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	b := open(t, srv, "gw-a", time.Minute)
	t.Cleanup(func() { _ = b.Close() })
	e, err := queue.New(ctx, queue.Options{Backend: b, Poll: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	q, err := e.Declare(ctx, queue.Config{Name: "b"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		ch := make(chan error, 1)
		e.Put("b", &core.Message{Topic: "t", Payload: []byte(fmt.Sprint(i)), QoS: 1}, func(err error) { ch <- err })
		if err := <-ch; err != nil {
			t.Fatal(err)
		}
	}
	br, err := q.Consume(queue.ConsumerOptions{Browse: true})
	if err != nil {
		t.Fatal(err)
	}
	var browsed []string
	for {
		d, ok := br.Next()
		if !ok {
			break
		}
		browsed = append(browsed, string(d.Msg.Payload))
	}
	br.Close()
	if fmt.Sprint(browsed) != "[0 1 2]" {
		t.Fatalf("browsed %v", browsed)
	}
	wake := make(chan struct{}, 1)
	c, err := q.Consume(queue.ConsumerOptions{Notify: func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var got []string
	deadline := time.After(10 * time.Second)
	for len(got) < 3 {
		d, ok := c.Next()
		if !ok {
			select {
			case <-wake:
			case <-deadline:
				t.Fatalf("consumer got %v after a browse", got)
			}
			continue
		}
		got = append(got, string(d.Msg.Payload))
		c.Ack(d.ID)
	}
}

// Counts on a shared queue follow what other gateways do: gateway a
// publishes up to maxMessages, gateway b consumes them all, and a may
// publish again (it once refused, counting only its own appends).
func TestSharedQueueLimitsCountOtherGateways(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	engine := func(node string) *queue.Engine {
		b := open(t, srv, node, time.Minute)
		t.Cleanup(func() { _ = b.Close() })
		e, err := queue.New(ctx, queue.Options{Backend: b, Poll: 20 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(e.Close)
		if _, err := e.Declare(ctx, queue.Config{Name: "lim", MaxMessages: 5}); err != nil {
			t.Fatal(err)
		}
		return e
	}
	a, b := engine("gw-a"), engine("gw-b")
	put := func(i int) error {
		ch := make(chan error, 1)
		a.Put("lim", &core.Message{Topic: "t", Payload: []byte(fmt.Sprint(i)), QoS: 1}, func(err error) { ch <- err })
		return <-ch
	}
	for i := range 5 {
		if err := put(i); err != nil {
			t.Fatal(err)
		}
	}
	qb, _ := b.Queue("lim")
	wake := make(chan struct{}, 1)
	c, err := qb.Consume(queue.ConsumerOptions{Notify: func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	deadline := time.After(10 * time.Second)
	for n := 0; n < 5; {
		d, ok := c.Next()
		if !ok {
			select {
			case <-wake:
			case <-deadline:
				t.Fatalf("b consumed %d of 5", n)
			}
			continue
		}
		c.Ack(d.ID)
		n++
	}
	coretest.Eventually(t, "the acknowledgements removed", 10*time.Second, func() bool {
		lb, _ := b.Queue("lim")
		n := lb.Info().Messages
		return n == 0
	})
	if err := put(5); err != nil {
		t.Fatalf("a's publish into the emptied queue: %v", err)
	}
}

// TestPurgeOfASharedQueueCountsOtherGateways: a purge through one gateway
// removes what another gateway put into the shared queue, which this
// engine's own count did not know yet (it took its budget from that count
// and removed nothing). Found by review.
func TestPurgeOfASharedQueueCountsOtherGateways(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	engine := func(node string) *queue.Engine {
		b := open(t, srv, node, time.Minute)
		t.Cleanup(func() { _ = b.Close() })
		e, err := queue.New(ctx, queue.Options{Backend: b, Poll: time.Hour}) // no poll resyncs the counts meanwhile
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(e.Close)
		if _, err := e.Declare(ctx, queue.Config{Name: "p"}); err != nil {
			t.Fatal(err)
		}
		return e
	}
	a, b := engine("gw-a"), engine("gw-b")
	for i := range 5 {
		ch := make(chan error, 1)
		b.Put("p", &core.Message{Topic: "t", Payload: []byte(fmt.Sprint(i)), QoS: 1}, func(err error) { ch <- err })
		if err := <-ch; err != nil {
			t.Fatal(err)
		}
	}
	qa, _ := a.Queue("p")
	n, err := qa.Purge(ctx)
	if err != nil || n != 5 {
		t.Fatalf("purge through the other gateway: %d, %v; want 5", n, err)
	}
	if m := qa.Info().Messages; m != 0 {
		t.Fatalf("%d messages left after the purge", m)
	}
}
