package queue

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// stuckBackend's Reads block, once armed, until the test opens the gate:
// a store that does not answer.
type stuckBackend struct {
	*Memory
	armed   atomic.Bool
	reading chan struct{} // closed by the first Read that blocks
	gate    chan struct{}
}

func (b *stuckBackend) Open(ctx context.Context, cfg Config) (Log, error) {
	l, err := b.Memory.Open(ctx, cfg)
	return &stuckLog{Log: l, b: b}, err
}

type stuckLog struct {
	Log
	b *stuckBackend
}

func (l *stuckLog) Read(ctx context.Context, after uint64, max int) ([]Record, error) {
	if l.b.armed.CompareAndSwap(true, false) {
		close(l.b.reading)
		<-l.b.gate
	}
	return l.Log.Read(ctx, after, max)
}

// TestPurgeHonoursCtx: a Purge waiting for a loader stuck in a Read
// returns ctx's error once ctx ends, rather than waiting for the store.
func TestPurgeHonoursCtx(t *testing.T) {
	b := &stuckBackend{Memory: NewMemory(), reading: make(chan struct{}), gate: make(chan struct{})}
	e, _ := newEngine(t, Options{Backend: b})
	q := declare(t, e, Config{Name: "q"})
	putWait(t, e, "q", "a") // no consumer: it waits in the log
	b.armed.Store(true)
	c, _ := consumer(t, q, false) // starts the loader, whose Read blocks
	defer c.Close()
	select {
	case <-b.reading:
	case <-time.After(10 * time.Second):
		t.Fatal("no loader read")
	}
	release := sync.OnceFunc(func() { close(b.gate) })
	defer release()
	cctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := q.Purge(cctx)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("purge: %v, want context.DeadlineExceeded", err)
		}
	case <-time.After(10 * time.Second):
		release() // let the purge end, for goleak
		<-done
		t.Fatal("purge still waiting for the loader 10 s after its ctx ended")
	}
}
