package queuetest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/tolsey/tolsey/core"
	"github.com/tolsey/tolsey/core/coretest"
	"github.com/tolsey/tolsey/core/queue"
)

// The engine over the backend under test: what the engine promises about
// a queue's messages that only holds if the backend keeps what it needs
// (a message's priority in its encoding, across a reopen).

// Engine opens an engine over b, closed when the test ends (before b's
// own cleanup, which the Factory registered earlier).
func Engine(t testing.TB, b queue.Backend) *queue.Engine {
	t.Helper()
	// A short Poll: a shared Log is read by the poller too.
	e, err := queue.New(context.Background(), queue.Options{Backend: b, Poll: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e
}

// Put puts m into the engine's queue name and waits until it is stored.
func Put(t testing.TB, e *queue.Engine, name string, m *core.Message) {
	t.Helper()
	ch := make(chan error, 1)
	e.Put(name, m, func(err error) { ch <- err })
	select {
	case err := <-ch:
		if err != nil {
			t.Fatalf("put: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("put: done never called")
	}
}

// Next waits for c's next delivery.
func Next(t testing.TB, c *queue.Consumer, wake chan struct{}) queue.Delivery {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		if d, ok := c.Next(); ok {
			return d
		}
		select {
		case <-wake:
		case <-deadline:
			t.Fatal("no delivery")
		}
	}
}

// Prio is a message with the given priority (core.PropPriority, as the
// AMQP front-end writes a header priority), or none when prio < 0 (the
// default, 4, as an MQTT publish has).
func Prio(i, prio int) *core.Message {
	m := Msg("t", i)
	if prio >= 0 {
		m.UserProperties = append(m.UserProperties, core.UserProperty{Key: core.PropPriority, Value: strconv.Itoa(prio)})
	}
	return m
}

func runEngine(t *testing.T, open Factory) {
	t.Run("priority", func(t *testing.T) {
		ctx := context.Background()
		b, reopen := open(t)
		e := Engine(t, b)
		if _, err := e.Declare(ctx, queue.Config{Name: "prio"}); err != nil {
			t.Fatal(err)
		}
		// Put while no consumer is attached: everything waits in the Log,
		// and the consumer must get the highest priority first, FIFO
		// within one; 200 (AMQP allows up to 255) counts as 9.
		prios := []int{-1, 0, 9, 4, 7, 9, 2, 200, 1}
		want := []string{"m2", "m5", "m7", "m4", "m0", "m3", "m6", "m8", "m1"}
		for i, p := range prios {
			Put(t, e, "prio", Prio(i, p))
		}
		q, _ := e.Queue("prio")
		c, wake := Consume(t, q)
		// A released and a failed delivery go back in their band, ahead of
		// the lower ones: a redelivery keeps its priority.
		d := Next(t, c, wake)
		if p := string(d.Msg.Payload); p != want[0] {
			t.Fatalf("first delivery %s, want %s", p, want[0])
		}
		c.Release(d.ID)
		d = Next(t, c, wake)
		if p := string(d.Msg.Payload); p != want[0] {
			t.Fatalf("after a release: %s, want %s again", p, want[0])
		}
		c.Modify(d.ID, true, false)
		var got []string
		for range want {
			d := Next(t, c, wake)
			got = append(got, string(d.Msg.Payload))
			if len(got) == 1 && d.DeliveryCount != 1 {
				t.Fatalf("redelivery of %s: count %d, want 1", got[0], d.DeliveryCount)
			}
			c.Ack(d.ID)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("delivered %v, want %v", got, want)
		}
		c.Close()
		if reopen == nil {
			return
		}
		// The priority is the message's, kept by the backend: the order
		// holds for messages stored before a restart.
		for i, p := range prios {
			Put(t, e, "prio", Prio(i, p))
		}
		e.Close()
		b = reopen(b)
		e = Engine(t, b)
		q, ok := e.Queue("prio")
		if !ok {
			t.Fatal("queue prio gone after a reopen")
		}
		c, wake = Consume(t, q)
		defer c.Close()
		got = got[:0]
		for range want {
			d := Next(t, c, wake)
			got = append(got, string(d.Msg.Payload))
			c.Ack(d.ID)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("after a reopen: delivered %v, want %v", got, want)
		}
	})
}

func runPurge(t *testing.T, open Factory) {
	t.Run("purge", func(t *testing.T) {
		ctx := context.Background()
		b, _ := open(t)
		e := Engine(t, b)
		for _, name := range []string{"p", "idle"} {
			if _, err := e.Declare(ctx, queue.Config{Name: name}); err != nil {
				t.Fatal(err)
			}
		}
		// A queue with a consumer: one message in flight stays, the
		// ready ones (in the window or still in the log) go.
		for i := range 5 {
			Put(t, e, "p", Msg("t", i))
		}
		q, _ := e.Queue("p")
		c, wake := Consume(t, q)
		defer c.Close()
		first := Next(t, c, wake)
		if n, err := q.Purge(ctx); err != nil || n != 4 {
			t.Fatalf("purge: %d, %v; want 4", n, err)
		}
		if got := q.Info().Messages; got != 1 {
			t.Fatalf("after the purge %d messages, want the one in flight", got)
		}
		c.Ack(first.ID)
		Put(t, e, "p", Msg("t", 9))
		if d := Next(t, c, wake); string(d.Msg.Payload) != "m9" {
			t.Fatalf("after the purge the consumer got %s, want m9 (the purged ones gone)", d.Msg.Payload)
		}
		// A queue nobody consumes: everything is in the log.
		q, _ = e.Queue("idle")
		for i := range 3 {
			Put(t, e, "idle", Msg("t", i))
		}
		if n, err := q.Purge(ctx); err != nil || n != 3 || q.Info().Messages != 0 {
			t.Fatalf("purge of an idle queue: %d, %v, %d left; want 3 and none", n, err, q.Info().Messages)
		}
		Put(t, e, "idle", Msg("t", 7))
		c2, wake2 := Consume(t, q)
		defer c2.Close()
		if d := Next(t, c2, wake2); string(d.Msg.Payload) != "m7" {
			t.Fatalf("after purging the idle queue the consumer got %s, want m7", d.Msg.Payload)
		}
		if err := e.Delete(ctx, "idle"); err != nil {
			t.Fatal(err)
		}
		if _, err := q.Purge(ctx); !errors.Is(err, queue.ErrNotFound) {
			t.Fatalf("purge of a deleted queue: %v", err)
		}
	})
}

// runPurgeWhilePublishing: purges racing puts and a consumer lose
// nothing and deliver nothing twice: every message is purged or delivered,
// once.
func runPurgeWhilePublishing(t *testing.T, open Factory) {
	t.Run("purge while publishing", func(t *testing.T) {
		ctx := context.Background()
		b, _ := open(t)
		e := Engine(t, b)
		if _, err := e.Declare(ctx, queue.Config{Name: "busy"}); err != nil {
			t.Fatal(err)
		}
		q, _ := e.Queue("busy")
		c, wake := Consume(t, q)
		defer c.Close()
		const total = 300
		done := make(chan struct{})
		go func() {
			defer close(done)
			for i := range total {
				ch := make(chan error, 1)
				e.Put("busy", Msg("t", i), func(err error) { ch <- err })
				if err := <-ch; err != nil {
					t.Errorf("put %d: %v", i, err)
					return
				}
			}
		}()
		seen := map[string]bool{}
		purged := 0
		for purges := 0; purges < 3 || len(seen)+purged < total; purges++ {
			if purges < 3 {
				n, err := q.Purge(ctx)
				if err != nil {
					t.Fatal(err)
				}
				purged += n
			}
			if len(seen)+purged >= total {
				break
			}
			d := Next(t, c, wake)
			p := string(d.Msg.Payload)
			if seen[p] {
				t.Fatalf("%s delivered twice", p)
			}
			seen[p] = true
			c.Ack(d.ID)
		}
		<-done
		if len(seen)+purged != total {
			t.Fatalf("%d delivered, %d purged; want %d in all", len(seen), purged, total)
		}
		// A shared Log's count is taken from the store now and then, which
		// applies removals batched: it comes to none in a while.
		coretest.Eventually(t, "an empty queue", 10*time.Second, func() bool { return q.Info().Messages == 0 })
	})
}

// consumeNamed is Consume with a ConsumerOptions.Name.
func consumeNamed(t testing.TB, q *queue.Queue, name string) (*queue.Consumer, chan struct{}) {
	t.Helper()
	return ConsumeWith(t, q, queue.ConsumerOptions{Name: name})
}

// want checks a delivery's message, count and redelivered flag.
func want(t testing.TB, d queue.Delivery, payload string, count uint32) {
	t.Helper()
	if string(d.Msg.Payload) != payload || d.DeliveryCount != count || d.Redelivered != (count > 0) {
		t.Fatalf("delivered %s count %d redelivered %v, want %s count %d", d.Msg.Payload, d.DeliveryCount, d.Redelivered, payload, count)
	}
}

func runDeliveryState(t *testing.T, open Factory) {
	t.Run("delivery state", func(t *testing.T) {
		ctx := context.Background()
		b, reopen := open(t)
		e := Engine(t, b)
		if _, err := e.Declare(ctx, queue.Config{Name: "ds"}); err != nil {
			t.Fatal(err)
		}
		Put(t, e, "ds", Msg("t", 0))
		Put(t, e, "ds", Msg("t", 1))
		q, _ := e.Queue("ds")
		a, wake := consumeNamed(t, q, "link-a")
		d := Next(t, a, wake)
		want(t, d, "m0", 0)
		a.Modify(d.ID, true, true) // failed, and undeliverable here
		d = Next(t, a, wake)
		want(t, d, "m1", 0) // m0 is not for link-a
		a.Modify(d.ID, true, false)
		d = Next(t, a, wake)
		want(t, d, "m1", 1)
		a.Close() // m1 unsettled: a second failed delivery
		// The mark is link-a's, not the closed consumer's: a consumer of
		// that name attaching again does not get m0.
		a, wake = consumeNamed(t, q, "link-a")
		d = Next(t, a, wake)
		want(t, d, "m1", 2)
		a.Release(d.ID) // not a failure: not counted
		a.Close()
		if reopen == nil {
			return
		}
		// Across a restart: the counts and the mark come back with the
		// records.
		e.Close()
		b = reopen(b)
		e = Engine(t, b)
		q, _ = e.Queue("ds")
		a, wake = consumeNamed(t, q, "link-a")
		defer a.Close()
		d = Next(t, a, wake)
		want(t, d, "m1", 2)
		a.Ack(d.ID)
		if d, ok := a.Next(); ok { // both were read into the window at once
			t.Fatalf("link-a got %s, which it gave back as undeliverable-here before the restart", d.Msg.Payload)
		}
		other, owake := consumeNamed(t, q, "link-b")
		defer other.Close()
		d = Next(t, other, owake)
		want(t, d, "m0", 1)
		other.Ack(d.ID)
		if i := q.Info(); i.Messages != 0 {
			t.Fatalf("%d messages left", i.Messages)
		}
	})
}
