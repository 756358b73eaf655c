package redis

import (
	"container/heap"
	"context"
	"slices"
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
// rate. Concurrent Sets now share round trips, group-commit style: a Set
// that finds a flusher's place free sends the queue itself, as one
// pipeline (one write, one read); Sets that arrive meanwhile queue, and
// when a flusher is done it hands its place to the first of them, which
// sends everything queued behind it. Each caller gets the reply to its
// own command, so a publisher is told when Redis refused or failed its
// message. The batch grows with the load; a lone publisher waits for no
// batch to fill and no other goroutine to wake.

// maxPipeline bounds the messages of one pipeline: a larger batch would
// hold Redis (one script at a time) and the reply buffer for longer
// without saving a round trip that matters.
const maxPipeline = 512

// flushers is the number of pipelines in flight at once: while Redis runs
// one batch, the next is being sent.
const flushers = 2

// setCall is one Set's script call.
type setCall struct {
	ctx context.Context // the caller's: a call it gave up on is not sent
	key string          // the message's
	// value, PEXPIREAT ms or "0", expiry ns, size, topic: setScript's
	// arguments for one message.
	args [5]any
	// Written by the flusher before done is closed.
	seq  int64
	err  error
	done chan struct{}
	// lead is closed when this call is handed a flusher's place: it must
	// flush once, whatever happened to its own call.
	lead chan struct{}
	// Under Store.wmu.
	queued bool // in wqueue
	leader bool // lead was closed
}

// enqueue sends c, or queues it for a flusher, and waits for its reply,
// for ctx, or for Close.
func (s *Store) enqueue(c *setCall) (int64, error) {
	s.wmu.Lock()
	s.wqueue = append(s.wqueue, c)
	c.queued = true
	free := s.wflushers < flushers
	if free {
		s.wflushers++
	}
	s.wmu.Unlock()
	if free {
		// The queue holds at most the calls handed a place ahead of c
		// (a flusher hands its place on while it finds calls queued):
		// c goes in this batch.
		s.flushOne()
	}
	lead := c.lead
	for {
		select {
		case <-c.done:
			if lead != nil {
				select {
				case <-lead: // handed a place before another flusher took c
					s.flushOne()
				default:
				}
			}
			return c.seq, c.err
		case <-lead:
			lead = nil
			s.flushOne() // sends c too, unless another flusher did
		case <-c.ctx.Done():
			return 0, s.abandon(c, lead != nil, c.ctx.Err())
		case <-s.lifetime.Done():
			return 0, s.abandon(c, lead != nil, retain.ErrClosed)
		}
	}
}

// abandon takes c out of the queue for a caller that stops waiting, and
// returns err. A call handed a flusher's place (and that has not flushed:
// mayLead) flushes first: the calls queued behind it count on that.
func (s *Store) abandon(c *setCall, mayLead bool, err error) error {
	s.wmu.Lock()
	lead := mayLead && c.leader
	if c.queued && !lead {
		i := slices.Index(s.wqueue, c)
		s.wqueue = slices.Delete(s.wqueue, i, i+1)
		c.queued = false
	}
	s.wmu.Unlock()
	if lead {
		s.flushOne()
	}
	return err
}

// flushOne sends one batch from the head of the queue, then hands this
// flusher's place to the first queued call that has none, or gives it
// back (the queued calls, if any, hold places already).
func (s *Store) flushOne() {
	s.wmu.Lock()
	n := min(len(s.wqueue), maxPipeline)
	batch := slices.Clone(s.wqueue[:n])
	rest := copy(s.wqueue, s.wqueue[n:]) // shift: the array is reused
	clear(s.wqueue[rest:])
	s.wqueue = s.wqueue[:rest]
	for _, c := range batch {
		c.queued = false
	}
	s.wmu.Unlock()
	if n > 0 {
		s.flush(batch)
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	for _, c := range s.wqueue {
		if !c.leader {
			c.leader = true
			close(c.lead)
			return
		}
	}
	s.wflushers--
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
