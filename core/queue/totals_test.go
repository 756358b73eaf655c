package queue

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tolsey/tolsey/core"
	"github.com/tolsey/tolsey/core/coretest"
)

// TestTotals: Totals counts what Queues and each one's Info say.
func TestTotals(t *testing.T) {
	e, _ := newEngine(t, Options{Backend: NewMemory()})
	if n, m := e.Totals(); n != 0 || m != 0 {
		t.Fatalf("empty engine: %d queues, %d messages", n, m)
	}
	for i := range 3 {
		name := fmt.Sprint("q", i)
		declare(t, e, Config{Name: name})
		for j := range i * 2 {
			putWait(t, e, name, fmt.Sprint(j))
		}
	}
	wantN, wantM := 0, 0
	for _, q := range e.Queues() {
		wantN++
		wantM += q.Info().Messages
	}
	if n, m := e.Totals(); n != wantN || m != wantM || m != 6 {
		t.Fatalf("Totals %d queues, %d messages; Queues says %d, %d (want 3, 6)", n, m, wantN, wantM)
	}
}

// BenchmarkStatsTotals is GET /api/v1/stats's count of 10,000 queues
// (queues.maxQueues' default): Totals, and the walk of Queues (which
// sorts them) and Info it replaces.
//
//	go test -run '^$' -bench StatsTotals ./core/queue/
func BenchmarkStatsTotals(b *testing.B) {
	e, err := New(ctx, Options{Backend: NewMemory()})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	for i := range 10_000 {
		if _, err := e.Declare(ctx, Config{Name: fmt.Sprintf("queue-%05d", (i*7919)%10_000)}); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("Totals", func(b *testing.B) {
		for b.Loop() {
			e.Totals()
		}
	})
	b.Run("QueuesInfo", func(b *testing.B) {
		for b.Loop() {
			n, m := 0, 0
			for _, q := range e.Queues() {
				n++
				m += q.Info().Messages
			}
			_, _ = n, m
		}
	})
}

// inflatedBackend's Logs report 100 bytes more than they hold, as a store
// does whose records were counted before core.Message.Size counted a
// native AMQP body once.
type inflatedBackend struct{ *Memory }

func (b inflatedBackend) Open(ctx context.Context, cfg Config) (Log, error) {
	l, err := b.Memory.Open(ctx, cfg)
	return inflatedLog{l}, err
}

type inflatedLog struct{ Log }

func (l inflatedLog) Stats(ctx context.Context) (int, int64, error) {
	n, bytes, err := l.Log.Stats(ctx)
	return n, bytes + 100, err
}

// TestEmptiedQueueHoldsNoBytes: once its last message goes, a queue holds
// 0 bytes, whatever the store counted for it at the start.
func TestEmptiedQueueHoldsNoBytes(t *testing.T) {
	b := NewMemory()
	e1, _ := newEngine(t, Options{Backend: b})
	declare(t, e1, Config{Name: "q"})
	putWait(t, e1, "q", "a")
	e1.Close()
	e, _ := newEngine(t, Options{Backend: inflatedBackend{b}})
	q, _ := e.Queue("q")
	if i := q.Info(); i.Messages != 1 || i.Bytes <= 100 {
		t.Fatalf("at the start: %d messages, %d bytes", i.Messages, i.Bytes)
	}
	c, w := consumer(t, q, false)
	c.Ack(next(t, c, w).ID)
	if i := q.Info(); i.Messages != 0 || i.Bytes != 0 {
		t.Fatalf("emptied: %d messages, %d bytes; want 0, 0", i.Messages, i.Bytes)
	}
}

// gatedFirstAppend's Logs hold back the answer of their first Append
// (the record is stored at once) until gate is closed.
type gatedFirstAppend struct {
	*Memory
	gate chan struct{}
}

func (b gatedFirstAppend) Open(ctx context.Context, cfg Config) (Log, error) {
	l, err := b.Memory.Open(ctx, cfg)
	return &firstGatedLog{Log: l, gate: b.gate}, err
}

type firstGatedLog struct {
	Log
	gate  chan struct{}
	count atomic.Int32
}

func (l *firstGatedLog) Append(m *core.Message, done func(uint64, error)) {
	if l.count.Add(1) != 1 {
		l.Log.Append(m, done)
		return
	}
	l.Log.Append(m, func(id uint64, err error) {
		go func() {
			<-l.gate
			done(id, err)
		}()
	})
}

// TestEmptyResetWaitsForAppends: a message handed out and acknowledged
// before its append's answer (which counts it) has run takes the queue's
// count through 0 with its bytes still to come; the count of bytes must
// not be reset then. Before, the queue below held 1 message of 1 byte
// and reported 101 (found by review).
func TestEmptyResetWaitsForAppends(t *testing.T) {
	gate := make(chan struct{})
	e, _ := newEngine(t, Options{Backend: gatedFirstAppend{Memory: NewMemory(), gate: gate}})
	q := declare(t, e, Config{Name: "q"})
	big := &core.Message{Topic: "t", Payload: make([]byte, 100), QoS: 1, Created: time.Now()}
	small := &core.Message{Topic: "t", Payload: []byte("c"), QoS: 1, Created: time.Now()}
	bigDone := make(chan error, 1)
	e.Put("q", big, func(err error) { bigDone <- err })
	putWait(t, e, "q", "c")
	c, w := consumer(t, q, false)
	d := next(t, c, w)
	if len(d.Msg.Payload) != 100 {
		t.Fatalf("first delivery of %d bytes, want the 100-byte message", len(d.Msg.Payload))
	}
	c.Ack(d.ID)
	close(gate)
	if err := <-bigDone; err != nil {
		t.Fatal(err)
	}
	coretest.Eventually(t, "the count settled", 5*time.Second, func() bool { return q.Info().Messages == 1 })
	if i := q.Info(); i.Bytes != int64(small.Size()) {
		t.Fatalf("1 message of %d bytes held, the queue counts %d bytes", small.Size(), i.Bytes)
	}
}
