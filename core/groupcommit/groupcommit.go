// Package groupcommit is the group commit both durable queue backends run
// (core/queue/embedded: one bbolt transaction; core/queue/redis: one
// MULTI/EXEC round trip), and the MQTT front-end's session store
// (mqtt/session): any goroutine queues an operation without
// waiting, one goroutine takes every operation queued so far and writes
// them together, so that N appends that arrive together cost one fsync (or
// one round trip) instead of N. It knows no storage: the backend's commit
// function writes a batch and answers each operation in it.
//
// The bridge's buffer (bridge/buffer, writer.go) has a writer of the same
// shape but not this one: its callers may wait with a context and give up,
// requests are pooled, and appends reserve room before they are queued;
// none of which a queue Log has (its Append never waits, its Remove is
// fire-and-forget).
package groupcommit

import (
	"runtime"
	"sync"
)

// Loop queues operations of type T and commits them in batches of at most
// Max, in the order they were queued, on a goroutine of its own.
type Loop[T any] struct {
	commit func(batch []T)
	max    int

	// Between the callers of Add and the loop goroutine.
	mu      sync.Mutex
	pending []T
	closed  bool

	wake chan struct{} // capacity 1: "pending is not empty, or closed"
	done chan struct{} // closed when the loop goroutine has ended
}

// Start starts a loop that calls commit with batches of at most max
// operations, in queue order. commit runs on the loop's goroutine, one
// batch at a time, and must answer every operation of its batch (call its
// done) before it returns; it must not keep batch, which is reused.
func Start[T any](max int, commit func(batch []T)) *Loop[T] {
	l := &Loop[T]{commit: commit, max: max, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go l.run()
	return l
}

// Add queues t for the next commit and returns at once, without waiting
// for the disk or the network: the pending list is unbounded, since what
// bounds it is the callers, who wait for their answers (a front-end's
// window of unacknowledged publishes). It returns false, and queues
// nothing, once Close has begun: the caller answers t itself.
func (l *Loop[T]) Add(t T) bool {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return false
	}
	l.pending = append(l.pending, t)
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
	return true
}

// Close stops taking operations, commits those already queued, and waits
// for the loop goroutine to end.
func (l *Loop[T]) Close() {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
	<-l.done
}

func (l *Loop[T]) run() {
	defer close(l.done)
	// Two lists take turns: callers append to one while this goroutine
	// commits the other (spare, once its batch is answered).
	var spare []T
	prev := 0
	for range l.wake {
		if prev > 1 {
			// The callers the last commit answered are runnable now; let
			// them queue their next operations before this batch is cut, or
			// they split into two cohorts that alternate, each with half the
			// commits' worth (measured in bridge/buffer: 8 of 16 writers per
			// commit without, 13 with). A lone caller (prev 1) never yields.
			runtime.Gosched()
		}
		l.mu.Lock()
		batch := l.pending
		l.pending = spare[:0]
		closed := l.closed
		l.mu.Unlock()
		prev = len(batch)
		for rest := batch; len(rest) > 0; {
			n := min(len(rest), l.max)
			l.commit(rest[:n])
			rest = rest[n:]
		}
		clear(batch) // no reference to answered operations
		spare = batch
		if closed {
			// Add refuses once closed is set, so nothing can follow what
			// this round took.
			return
		}
	}
}
