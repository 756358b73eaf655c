package redis

import (
	"container/heap"
	"context"
	"strings"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tolsey/tolsey/retain"
)

// This file batches Set's writes (group commit) and wakes each waiting Set
// when its own event has come back.
//
// Every retained publish is stored on its publisher's goroutine before it is
// delivered (retain.Retainer), so one Set is one round trip to Redis on the
// publisher's critical path, and at one script per round trip the store
// capped a bulk load (a bridge, many MQTT publishers) at the round-trip
// rate. Concurrent Sets now queue their script call; one writer sends
// whatever has queued as a single pipeline (one write, one read) and hands
// each caller the reply to its own command, so that a publisher is told
// when Redis refused or failed its message, whatever happened to the
// others. While a pipeline is in flight the next batch gathers, so the
// batch grows with the load and a lone publisher pays no wait for a batch
// to fill.

// maxPipeline bounds the commands of one pipeline: a larger batch would
// hold Redis (one script at a time) and the reply buffer for longer
// without saving a round trip that matters.
const maxPipeline = 512

// writers is the number of pipelines in flight at once: while Redis runs
// one batch, the next is being sent.
const writers = 2

// setCall is one Set's script call waiting for the writer.
type setCall struct {
	ctx context.Context // the caller's: a call it gave up on is not sent
	key string          // the message's
	// value, PEXPIREAT ms or "0", expiry ns, size, topic: setScript's
	// arguments for one message.
	args [5]any
	// Written by the writer before done is closed.
	seq  int64
	err  error
	done chan struct{}
}

// enqueue hands c to the writer and waits for its reply, for ctx, or for
// Close.
func (s *Store) enqueue(c *setCall) (int64, error) {
	s.wmu.Lock()
	s.wqueue = append(s.wqueue, c)
	s.wmu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default: // the writer is already due to look
	}
	select {
	case <-c.done:
		return c.seq, c.err
	case <-c.ctx.Done():
		return 0, c.ctx.Err()
	case <-s.lifetime.Done():
		return 0, retain.ErrClosed
	}
}

// writer sends the queued calls, one pipeline per batch, until Close.
func (s *Store) writer() {
	var batch []*setCall
	for {
		select {
		case <-s.lifetime.Done():
			s.wmu.Lock()
			for _, c := range s.wqueue {
				c.err = retain.ErrClosed
				close(c.done)
			}
			s.wqueue = nil
			s.wmu.Unlock()
			return
		case <-s.wake:
		}
		for {
			s.wmu.Lock()
			n := min(len(s.wqueue), maxPipeline)
			batch = append(batch[:0], s.wqueue[:n]...)
			// Shift rather than reslice, so the queue's array is reused
			// instead of growing for ever.
			rest := copy(s.wqueue, s.wqueue[n:])
			clear(s.wqueue[rest:])
			s.wqueue = s.wqueue[:rest]
			s.wmu.Unlock()
			if n == 0 {
				break
			}
			s.flush(batch)
			clear(batch) // let the callers' messages go
		}
	}
}

// flush runs one batch as a pipeline and answers every call in it.
func (s *Store) flush(batch []*setCall) {
	live := batch[:0:0]
	for _, c := range batch {
		if err := c.ctx.Err(); err != nil {
			c.err = err
			close(c.done)
			continue
		}
		live = append(live, c)
	}
	if len(live) == 0 {
		return
	}
	retry := s.exec(live)
	if len(retry) > 0 {
		// NOSCRIPT: Redis lost its script cache (a restart the events
		// connection did not notice, SCRIPT FLUSH). Load it and send
		// those calls once more; a second NOSCRIPT is reported as is.
		if err := setScript.Load(s.lifetime, s.client).Err(); err != nil {
			for _, c := range retry {
				c.err = err
			}
		} else {
			s.exec(retry)
		}
	}
	for _, c := range live {
		close(c.done)
	}
}

// exec sends calls as one pipeline and stores each reply in its call. It
// returns the calls Redis answered NOSCRIPT.
func (s *Store) exec(calls []*setCall) (noscript []*setCall) {
	pipe := s.client.Pipeline()
	type chunk struct {
		cmd   *goredis.Cmd
		calls []*setCall
	}
	var chunks []chunk
	for rest := calls; len(rest) > 0; {
		part := rest[:min(len(rest), perScript)]
		rest = rest[len(part):]
		keys := make([]string, 0, len(part)+1)
		args := make([]any, 0, 5*len(part)+1)
		keys = append(keys, s.seqKey)
		args = append(args, s.channel)
		for _, c := range part {
			keys = append(keys, c.key)
			args = append(args, c.args[:]...)
		}
		chunks = append(chunks, chunk{setScript.EvalSha(s.lifetime, pipe, keys, args...), part})
	}
	// Exec's error is the first failed command's; each chunk reads its own.
	_, _ = pipe.Exec(s.lifetime)
	for _, ch := range chunks {
		last, err := ch.cmd.Int64()
		for i, c := range ch.calls {
			// One script's messages take consecutive seqs, in order.
			c.seq, c.err = last-int64(len(ch.calls)-1-i), err
		}
		if err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
			noscript = append(noscript, ch.calls...)
		}
	}
	return noscript
}

// perScript bounds the messages one script call stores: Redis runs one
// script at a time, and one call per message cost Redis more in script
// set-up than in the writes.
const perScript = 32

// seqWaiter is one Set or Delete waiting for its event to be applied.
type seqWaiter struct {
	seq      int64
	deadline int64         // unix ns: EventWait from the start of the wait
	ch       chan struct{} // closed when woken
	index    int           // in Store.waitq, -1 once removed
	late     bool          // woken by the deadline, not the event
}

// seqHeap orders waiters by seq, so that applying an event wakes exactly
// the waiters it satisfies: waking every waiter on every event, as a
// broadcast did, costs waiters × events wake-ups under a bulk load.
type seqHeap []*seqWaiter

func (h seqHeap) Len() int           { return len(h) }
func (h seqHeap) Less(i, j int) bool { return h[i].seq < h[j].seq }
func (h seqHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *seqHeap) Push(x any) {
	w := x.(*seqWaiter)
	w.index = len(*h)
	*h = append(*h, w)
}
func (h *seqHeap) Pop() any {
	old := *h
	w := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	w.index = -1
	return w
}

// wakeAppliedLocked wakes the waiters whose event has been applied.
func (s *Store) wakeAppliedLocked() {
	for len(s.waitq) > 0 && s.waitq[0].seq <= s.applied {
		close(heap.Pop(&s.waitq).(*seqWaiter).ch)
	}
}

// wakeLate wakes the waiters whose deadline has passed at now.
func (s *Store) wakeLate(now int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var late []*seqWaiter
	for _, w := range s.waitq {
		if w.deadline <= now {
			late = append(late, w)
		}
	}
	for _, w := range late {
		heap.Remove(&s.waitq, w.index)
		w.late = true
		close(w.ch)
	}
}

// broadcastLocked wakes every waiter: the session, readiness or Close
// changed, and each re-checks what it waits for.
func (s *Store) broadcastLocked() {
	for _, w := range s.waitq {
		w.index = -1
		close(w.ch)
	}
	clear(s.waitq)
	s.waitq = s.waitq[:0]
}
