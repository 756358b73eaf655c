package bridge

import (
	"sync"
	"sync/atomic"
	"time"
)

// writeQueue hands messages from Deliver (any publisher's goroutine) to
// the one goroutine that writes them to a connection: the NATS bridge's
// core NATS writer, an AMQP bridge's QoS 0 sender per rule. That writer
// takes everything queued at once, swapping the slice for the one it has
// just written out: one lock per burst on its side instead of a channel
// receive per message (the NATS writer is one goroutine for every
// outbound rule, so what it spends per message bounds the bridge's rate
// out: docs/benchmarks.md, "Bridge, the per-message path"). It gives back room every writeChunk messages of a
// burst (release), so that a publisher waiting for room (putStall) goes on
// while the writer is still busy with the rest of a long burst.
type writeQueue[T any] struct {
	mu   sync.Mutex
	msgs []T // guarded by mu: waiting for the writer
	held int // guarded by mu: the writer's burst in hand not yet released, which counts towards max
	// ended is set by takeLast: the writer has ended, and a put fails
	// (a publisher that matched before the stop delivers after it: the
	// router calls Deliver outside its lock). Guarded by mu.
	ended bool
	max   int // bound of msgs and held together: NATSOptions.QueueLen, AMQPOptions.QueueLen
	// ready has a token when msgs may have turned non-empty since the
	// writer last looked.
	ready chan struct{}

	// Publishers stalled on a full queue (putStall): room is made by the
	// first of them and closed as soon as the writer freed some of the
	// queue (release, take). noStall is set when a stall ran out and
	// cleared when the writer freed room again, so that a writer stuck on
	// its connection holds each publisher once, not once per message.
	room    chan struct{} // guarded by mu
	noStall atomic.Bool
}

// writeChunk is how many messages of a burst the writer publishes before
// it gives their room back (release): one lock per chunk. Small, because
// a stalled publisher waits for a chunk: at the 80,000 msgs/s the NATS
// writer reaches under load on a 2-core box, 256 messages took about as
// long as the 5 ms stall, and bridgeload -n 60000 still lost 10% of a
// round; 32 (0.4 ms) lost none.
const writeChunk = 32

// newWriteQueue makes a queue of at most max messages.
func newWriteQueue[T any](max int) *writeQueue[T] {
	return &writeQueue[T]{max: max, ready: make(chan struct{}, 1)}
}

// chunk is how many messages the writer publishes between releases: at
// most writeChunk, and an eighth of a small queue.
func (q *writeQueue[T]) chunk() int { return max(1, min(writeChunk, q.max/8)) }

// put queues x, or reports false when max messages are queued or in the
// writer's hand.
func (q *writeQueue[T]) put(x T) bool {
	ok, _ := q.tryPut(x, tryOnce)
	return ok
}

// putStall is put for a publisher that may wait: when the queue is full it
// waits up to stall for the writer to free room (woken by release or
// take, not by polling), then tries once more, and reports false if the
// queue is still full or done is closed. After a stall ran out, the next
// puts do not wait until the writer freed room again: a writer stuck on
// the network holds each publisher at most stall, once. stall <= 0: put.
// No lock is held while waiting.
func (q *writeQueue[T]) putStall(x T, stall time.Duration, done <-chan struct{}) bool {
	mode := tryOnce
	if stall > 0 && !q.noStall.Load() {
		mode = tryWait
	}
	ok, room := q.tryPut(x, mode)
	if ok || room == nil {
		return ok
	}
	t := time.NewTimer(stall)
	defer t.Stop()
	for {
		select {
		case <-room:
		case <-t.C:
			ok, _ = q.tryPut(x, tryLast)
			return ok
		case <-done:
			return false
		}
		if ok, room = q.tryPut(x, tryWait); ok || room == nil {
			return ok
		}
	}
}

// How tryPut treats a full queue.
const (
	tryOnce = iota // report it
	tryWait        // return the channel the writer closes once there is room
	tryLast        // a stall ran out: turn the stalls off (noStall)
)

// tryPut queues x unless the queue is full; then it does as mode says.
// noStall is set under mu, as freed clears it: set after the lock, a
// stall that ran out just as the writer freed room would turn the stalls
// off with room in the queue (found by review).
func (q *writeQueue[T]) tryPut(x T, mode int) (bool, chan struct{}) {
	q.mu.Lock()
	if q.ended {
		q.mu.Unlock()
		return false, nil
	}
	n := len(q.msgs)
	if n+q.held >= q.max {
		var room chan struct{}
		switch mode {
		case tryWait:
			if q.room == nil {
				q.room = make(chan struct{})
			}
			room = q.room
		case tryLast:
			q.noStall.Store(true)
		}
		q.mu.Unlock()
		return false, room
	}
	q.msgs = append(q.msgs, x)
	q.mu.Unlock()
	if n == 0 {
		select {
		case q.ready <- struct{}{}:
		default: // a token is there already
		}
	}
	return true, nil
}

// take returns what is queued and queues into spare (emptied, its
// messages cleared) from now on. What the writer held before is done
// with: its room is free.
func (q *writeQueue[T]) take(spare []T) []T {
	q.mu.Lock()
	got := q.msgs
	q.msgs, q.held = spare[:0], len(got)
	q.freed()
	q.mu.Unlock()
	return got
}

// takeLast is take for a writer that ends: nothing is queued after it
// (puts fail), so what it returns is the last there will be.
func (q *writeQueue[T]) takeLast(spare []T) []T {
	q.mu.Lock()
	q.ended = true
	q.mu.Unlock()
	return q.take(spare)
}

// pending is how many messages wait for the writer (not counting its
// burst in hand).
func (q *writeQueue[T]) pending() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.msgs)
}

// release gives back the room of n messages of the writer's burst, which
// it has written.
func (q *writeQueue[T]) release(n int) {
	q.mu.Lock()
	q.held = max(0, q.held-n)
	q.freed()
	q.mu.Unlock()
}

// freed wakes the stalled publishers if there is room; the caller holds
// q.mu.
func (q *writeQueue[T]) freed() {
	if len(q.msgs)+q.held >= q.max {
		return
	}
	q.noStall.Store(false)
	if q.room != nil {
		close(q.room)
		q.room = nil
	}
}
