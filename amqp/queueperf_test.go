package amqp

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/tolsey/tolsey/amqp/internal/buffer"
	"github.com/tolsey/tolsey/amqp/internal/frames"
	"github.com/tolsey/tolsey/core/queue"
	"github.com/tolsey/tolsey/core/queue/embedded"
)

// startDurableServer is startServer with an engine on the embedded
// backend (in a temporary directory), whose group commits answer Puts on
// their own goroutine: the held-outcome path a queue send takes in
// production, which the memory backend (answering inline) skips.
func startDurableServer(t *testing.T) *env {
	t.Helper()
	return startServer(t, func(o *Options) {
		b, err := embedded.Open(filepath.Join(t.TempDir(), embedded.FileName), embedded.Options{})
		if err != nil {
			t.Fatal(err)
		}
		eng, err := queue.New(context.Background(), queue.Options{Router: o.Router, Backend: b, Logger: testLogger()})
		if err != nil {
			t.Fatal(err)
		}
		o.Queues = eng
		t.Cleanup(func() { // after the server's shutdown (registered later)
			eng.Close()
			_ = b.Close()
		})
	})
}

// TestQueueSendDispositionRanges: unsettled sends to a durable queue,
// pipelined, are answered after their group commit with ranges of
// accepted deliveries, not one disposition each, and every delivery is
// answered exactly once.
func TestQueueSendDispositionRanges(t *testing.T) {
	e := startDurableServer(t)
	q := e.declare(t, queue.Config{Name: "ranges"})
	c, _ := rawSender(t, e, "queue://ranges")
	m := encodeMessage(t, &frames.Message{Data: [][]byte{[]byte("x")}})
	var b buffer.Buffer
	const n = 100
	for i := range n {
		if err := frames.AppendFrame(&b, frames.TypeAMQP, 0, transfer(uint32(i), false), m); err != nil {
			t.Fatal(err)
		}
	}
	c.writeRaw(b.Written())
	next, answers := uint32(0), 0
	for next < n {
		d := expectFrame[*frames.Disposition](c)
		last := d.First
		if d.Last != nil {
			last = *d.Last
		}
		if _, ok := d.State.(*frames.Accepted); d.First != next || last < d.First || !d.Settled || !ok {
			t.Fatalf("disposition %+v (state %T), want accepted from %d", d, d.State, next)
		}
		next = last + 1
		answers++
	}
	if next != n {
		t.Fatalf("dispositions up to %d, want %d", next-1, n-1)
	}
	// One commit answers many: the writer sends what has come in one pass.
	if answers > n/2 {
		t.Fatalf("%d pipelined queue sends answered in %d dispositions", n, answers)
	}
	if got := q.Info().Messages; got != n {
		t.Fatalf("queue holds %d messages, want %d", got, n)
	}
}
