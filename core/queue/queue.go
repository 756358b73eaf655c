package queue

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tolsey/tolsey/core"
)

// Queue is one queue: its Log, the window of its messages in memory, and
// its consumers.
type Queue struct {
	e    *Engine
	name string
	log  Log
	// direct: the Log is an OrderedLog, so an appended message may go
	// straight into the window (Put).
	direct bool
	// states: the Log keeps delivery states (StateLog); nil if it does not.
	states StateLog
	// batch: the Log answers appends in batches (BatchLog); nil if it
	// does not. Its answers wait in arrivals until the batch's end
	// (batchEnd).
	batch    BatchLog
	ender    *batchEnd
	arrMu    sync.Mutex
	arrivals []arrival
	arrSpare []arrival
	// intake: what Deliver asks of a message beyond the subscriptions
	// (intake.go); nil for most queues. Set by Declare.
	intake atomic.Pointer[intake]

	mu       sync.Mutex
	config   Config
	deleted  bool
	messages int   // records stored (in the log, in memory, in flight)
	bytes    int64 // their core.Message.Size
	reserved int   // appends on their way to the log
	resBytes int64
	// The window: records read from the log, ready or in flight.
	entries  map[uint64]*entry
	ready    idHeap    // ready entries, oldest first
	through  uint64    // the highest ID read from the log
	more     bool      // the log may hold records not read yet
	loading  bool      // a loader runs (or Purge, which reads the log as one)
	loaded   sync.Cond // on mu: broadcast when loading ends (Purge waits for it)
	retry    bool      // the last Read failed: the poller tries again
	cons     []*Consumer
	rr       int // where the next non-exclusive notification round starts
	counters Counters
}

// Counters count what happened to a queue's messages.
type Counters struct {
	In           uint64 // stored
	Out          uint64 // delivered (redeliveries included)
	Acked        uint64 // acknowledged and removed
	Redelivered  uint64 // delivered again after a release, failure or a consumer's end
	Expired      uint64 // removed at their TTL or expiry
	DeadLettered uint64 // moved to the dead-letter queue
	Dropped      uint64 // rejected or over maxDeliveries with no dead-letter queue, or refused by it
	Refused      uint64 // publishes refused (full, store failed)
}

type entry struct {
	rec       Record
	count     uint32      // deliveries that failed (AMQP delivery-count)
	owner     *Consumer   // the consumer it is in flight to; nil when ready
	delivered bool        // delivered at least once
	skip      []*Consumer // undeliverable-here for these (unnamed) consumers
	skipNames []string    // undeliverable-here for consumers of these names (ConsumerOptions.Name); stored
	expires   time.Time   // zero: never
	prio      uint8       // the message's priority band, 0..MaxPriority (fixed: redeliveries keep it)
}

// skips reports whether c gave e back as undeliverable-here.
func (e *entry) skips(c *Consumer) bool {
	return slices.Contains(e.skip, c) || c.opts.Name != "" && slices.Contains(e.skipNames, c.opts.Name)
}

// MaxPriority is the highest priority band. A queue delivers its ready
// messages highest band first, and within a band in ID (arrival) order
// (docs/queues.md, "Priority"). Ten bands, 0 to 9, as JMS's JMSPriority
// and ActiveMQ Artemis; an AMQP header priority above 9 counts as 9.
const MaxPriority = 9

// band is m's priority band.
func band(m *core.Message) uint8 { return min(m.Priority(), MaxPriority) }

func newQueue(e *Engine, cfg Config, log Log) *Queue {
	ol, ok := log.(OrderedLog)
	sl, _ := log.(StateLog)
	q := &Queue{e: e, name: cfg.Name, log: log, direct: ok && ol.AppendsInOrder(), states: sl, config: cfg, entries: map[uint64]*entry{}}
	q.loaded.L = &q.mu
	if bl, ok := log.(BatchLog); ok {
		q.batch, q.ender = bl, &batchEnd{q}
	}
	return q
}

// Name is the queue's name.
func (q *Queue) Name() string { return q.name }

func (q *Queue) cfg() Config {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.config
}

// Info is a snapshot of a queue for the admin API and metrics.
type Info struct {
	Config    Config   `json:"config"`
	Messages  int      `json:"messages"`
	Bytes     int64    `json:"bytes"`
	InFlight  int      `json:"inFlight"`
	Consumers int      `json:"consumers"`
	Counters  Counters `json:"counters"`
}

// Info returns a snapshot.
func (q *Queue) Info() Info {
	q.mu.Lock()
	defer q.mu.Unlock()
	// In flight is what the attached consumers hold: a consumer that
	// leaves gives its deliveries back (Close), so no walk of the window.
	inflight := 0
	for _, c := range q.cons {
		inflight += len(c.inflight)
	}
	return Info{Config: q.config, Messages: q.messages, Bytes: q.bytes, InFlight: inflight,
		Consumers: len(q.cons), Counters: q.counters}
}

// Put stores m and calls done once it is durable in the queue, or with
// the refusal: ErrFull (wrapped with the queue and the limit) at once,
// ErrNotFound for a deleted queue, or the store's error. done runs on any
// goroutine, possibly before Put returns.
func (q *Queue) Put(m *core.Message, done func(error)) {
	size := int64(m.Size())
	q.mu.Lock()
	err := q.admitLocked(size)
	if errors.Is(err, ErrFull) && q.shared() {
		// Other gateways append and remove too: count again before
		// refusing.
		q.mu.Unlock()
		q.resync()
		q.mu.Lock()
		err = q.admitLocked(size)
	}
	if err != nil {
		q.counters.Refused++
		q.mu.Unlock()
		done(err)
		return
	}
	q.reserved++
	q.resBytes += size
	q.mu.Unlock()
	if q.batch != nil {
		q.batch.AppendIn(m, q.ender, func(id uint64, err error) {
			q.arrMu.Lock()
			q.arrivals = append(q.arrivals, arrival{m: m, size: size, id: id, err: err, done: done})
			q.arrMu.Unlock()
		})
		return
	}
	q.log.Append(m, func(id uint64, err error) {
		q.mu.Lock()
		q.reserved--
		q.resBytes -= size
		if err != nil {
			q.counters.Refused++
			q.mu.Unlock()
			done(fmt.Errorf("queue %q: %w", q.name, err))
			return
		}
		q.messages++
		q.bytes += size
		q.counters.In++
		if q.direct && id > q.through && !q.more && !q.loading && !q.deleted &&
			len(q.cons) > 0 && len(q.entries) < q.e.opts.Window {
			// The window holds every record before id (nothing more to
			// read, no loader reading): id goes in as the loader would put
			// it, without reading it back (OrderedLog).
			q.through = id
			q.addLocked(Record{ID: id, Msg: m}) // immutable once put, as once published
			var buf [8]*Consumer
			wake := q.appendWakeLocked(buf[:0])
			q.mu.Unlock()
			notify(wake)
			done(nil)
			return
		}
		q.more = true
		q.mu.Unlock()
		q.fill()
		done(nil)
	})
}

// arrival is an append a BatchLog answered, waiting for its batch's end.
type arrival struct {
	m    *core.Message
	size int64
	id   uint64
	err  error
	done func(error)
}

// batchEnd is a queue's BatchEnder (its own type, so that Queue's methods
// stay what they are).
type batchEnd struct{ q *Queue }

// BatchEnd takes the appends answered since the last one into the queue
// as Put's answer to each does for a Log that answers one at a time, but
// under one lock and with one wake, then answers Put's callers in order.
func (b *batchEnd) BatchEnd() {
	q := b.q
	q.arrMu.Lock()
	list := q.arrivals
	q.arrivals, q.arrSpare = q.arrSpare[:0], nil
	q.arrMu.Unlock()
	if len(list) == 0 {
		return
	}
	q.mu.Lock()
	fill := false
	for i := range list {
		a := &list[i]
		q.reserved--
		q.resBytes -= a.size
		if a.err != nil {
			q.counters.Refused++
			continue
		}
		q.messages++
		q.bytes += a.size
		q.counters.In++
		if q.direct && a.id > q.through && !q.more && !q.loading && !q.deleted &&
			len(q.cons) > 0 && len(q.entries) < q.e.opts.Window {
			// As in Put: the window holds every record before this one.
			q.through = a.id
			q.addLocked(Record{ID: a.id, Msg: a.m})
			continue
		}
		q.more, fill = true, true
	}
	var buf [8]*Consumer
	wake := q.appendWakeLocked(buf[:0])
	q.mu.Unlock()
	notify(wake)
	if fill {
		q.fill()
	}
	for i := range list {
		a := &list[i]
		if a.err != nil {
			a.done(fmt.Errorf("queue %q: %w", q.name, a.err))
		} else {
			a.done(nil)
		}
	}
	clear(list)
	q.arrMu.Lock()
	q.arrSpare = list[:0]
	q.arrMu.Unlock()
}

// shared reports whether other gateways use the queue's Log too.
func (q *Queue) shared() bool {
	sl, ok := q.log.(SharedLog)
	return ok && sl.Shared()
}

// resync takes the queue's counts from its Log: for a shared Log, where
// other gateways' appends and removals do not pass through this engine.
func (q *Queue) resync() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	n, bytes, err := q.log.Stats(ctx)
	if err != nil {
		return // refused on the counts we have: the store is what failed
	}
	q.mu.Lock()
	q.messages, q.bytes = n, bytes
	q.mu.Unlock()
}

func (q *Queue) admitLocked(size int64) error {
	if q.deleted {
		return fmt.Errorf("%w: %q", ErrNotFound, q.name)
	}
	lim := q.e.opts.Limits
	maxMsgs, maxBytes := q.config.MaxMessages, q.config.MaxBytes
	if maxMsgs == 0 {
		maxMsgs = lim.MaxMessages
	}
	if maxBytes == 0 {
		maxBytes = lim.MaxBytes
	}
	if q.messages+q.reserved >= maxMsgs {
		return fmt.Errorf("%w: queue %q holds %d messages, its maxMessages", ErrFull, q.name, maxMsgs)
	}
	if q.bytes+q.resBytes+size > maxBytes {
		return fmt.Errorf("%w: queue %q would hold more than its maxBytes %d", ErrFull, q.name, maxBytes)
	}
	return nil
}

// fill starts a loader when the window has room, the log has more, and
// someone consumes.
func (q *Queue) fill() {
	q.mu.Lock()
	// Only for consumers: a queue nobody consumes keeps its messages in
	// the Log, and a shared Log's records stay free for the gateways
	// that have consumers.
	start := !q.loading && !q.deleted && q.more && len(q.cons) > 0 && len(q.entries) < q.e.opts.Window
	if start {
		q.loading = true
	}
	q.mu.Unlock()
	if !start {
		return
	}
	e := q.e
	e.mu.Lock() // Close waits for loaders: none may start once it has begun
	if e.closed {
		e.mu.Unlock()
		q.mu.Lock()
		q.loading = false
		q.loaded.Broadcast()
		q.mu.Unlock()
		return
	}
	e.wg.Add(1)
	e.mu.Unlock()
	go q.load()
}

// load reads records into the window until it is full or the log has no
// more, and wakes the consumers. One loader runs per queue at a time.
func (q *Queue) load() {
	defer q.e.wg.Done()
	for {
		q.mu.Lock()
		room := q.e.opts.Window - len(q.entries)
		if q.deleted || !q.more || room <= 0 {
			q.loading = false
			q.loaded.Broadcast()
			q.mu.Unlock()
			return
		}
		q.more = false // an Append completing from now on sets it again
		after := q.through
		q.mu.Unlock()
		recs, err := q.log.Read(context.Background(), after, room)
		q.mu.Lock()
		if err != nil {
			// Retried by the engine's poller (Options.Poll), or sooner by
			// the next append or acknowledgement.
			q.more, q.loading, q.retry = true, false, true
			q.loaded.Broadcast()
			q.mu.Unlock()
			q.e.opts.Logger.Warn("queue: reading stored messages failed", "queue", q.name, "error", err)
			return
		}
		if len(recs) == room {
			q.more = true
		}
		for _, r := range recs {
			if r.ID > q.through {
				q.through = r.ID
			}
			if _, dup := q.entries[r.ID]; dup || q.deleted {
				continue
			}
			q.addLocked(r)
		}
		wake := q.wakeLocked()
		q.mu.Unlock()
		notify(wake)
	}
}

// addLocked puts a record into the window, ready.
func (q *Queue) addLocked(r Record) {
	e := &entry{rec: r, expires: r.Msg.Expiry, prio: band(r.Msg)}
	if st := r.State; st.Count > 0 || len(st.Skip) > 0 {
		// Given back before a restart: it was delivered.
		e.count, e.skipNames, e.delivered = st.Count, st.Skip, true
	}
	if ttl := time.Duration(q.config.TTL); ttl > 0 {
		if t := r.Msg.Created.Add(ttl); e.expires.IsZero() || t.Before(e.expires) {
			e.expires = t
		}
	}
	q.entries[r.ID] = e
	heap.Push(&q.ready, e)
}

// wakeLocked lists the consumers to notify that messages are ready: the
// active one of an exclusive queue; every consumer of a non-exclusive
// one, starting with a different one each time so that none is always
// first to pull. Browsers too.
func (q *Queue) wakeLocked() []*Consumer { return q.appendWakeLocked(nil) }

// appendWakeLocked is wakeLocked appending to out: a caller on the hot
// path passes an array of its stack, so that a wake costs no allocation.
func (q *Queue) appendWakeLocked(out []*Consumer) []*Consumer {
	if len(q.ready) == 0 || len(q.cons) == 0 {
		return out
	}
	if q.config.Access == Exclusive {
		if a := q.activeLocked(); a != nil {
			out = append(out, a)
		}
		for _, c := range q.cons {
			if c.opts.Browse || c.opts.selective() {
				out = append(out, c)
			}
		}
		return out
	}
	q.rr++
	for i := range q.cons {
		out = append(out, q.cons[(q.rr+i)%len(q.cons)])
	}
	return out
}

func notify(cs []*Consumer) {
	for _, c := range cs {
		c.notify()
	}
}

// activeLocked is the consumer of an exclusive queue that receives: the
// first attached that is neither a browser nor selective.
func (q *Queue) activeLocked() *Consumer {
	for _, c := range q.cons {
		if !c.opts.Browse && !c.opts.selective() {
			return c
		}
	}
	return nil
}

// removeLocked forgets entry e (acknowledged, expired, dead-lettered): the
// caller removes it from the log.
func (q *Queue) removeLocked(e *entry) {
	delete(q.entries, e.rec.ID)
	q.messages--
	q.bytes -= int64(e.rec.Msg.Size())
	q.emptyHoldsNoBytesLocked()
	if e.owner != nil {
		delete(e.owner.inflight, e.rec.ID)
		e.owner = nil
	}
}

// emptyHoldsNoBytesLocked: a queue that holds no message holds no bytes.
// Records stored before core.Message.Size counted an AMQP body once
// (kept native, it was counted in the payload and in the native bytes)
// were added with the larger size and are subtracted with the smaller.
// Not while an append is on its way (reserved): a loader may hand out
// and see acknowledged a record whose append's answer, which counts it,
// has not run yet, so messages passes 0 with that record's bytes still
// to be added.
func (q *Queue) emptyHoldsNoBytesLocked() {
	if q.messages == 0 && q.reserved == 0 {
		q.bytes = 0
	}
}

// delete marks the queue deleted and returns its consumers, detached.
func (q *Queue) delete() []*Consumer {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.deleted = true
	cons := q.cons
	q.cons = nil
	for _, c := range cons {
		c.closed = true
	}
	q.entries, q.ready = map[uint64]*entry{}, nil
	return cons
}

// deadLetter takes e out of the queue: into the dead-letter queue when
// one is configured and takes it, dropped and counted otherwise. q.mu is
// held; it is released and taken again around the dead-letter Put.
func (q *Queue) deadLetterLocked(e *entry) {
	q.removeLocked(e)
	dl := q.config.DeadLetter
	id := e.rec.ID
	if dl == "" {
		q.counters.Dropped++
		q.log.Remove(id)
		return
	}
	m := e.rec.Msg
	q.mu.Unlock()
	q.e.Put(dl, m, func(err error) {
		q.mu.Lock()
		if err != nil {
			q.counters.Dropped++
			q.e.opts.Logger.Warn("queue: dead-letter queue refused a message; dropped", "queue", q.name, "deadLetter", dl, "error", err)
		} else {
			q.counters.DeadLettered++
		}
		q.mu.Unlock()
		q.log.Remove(id) // once the dead-letter queue has it: never lost in between
	})
	q.mu.Lock()
}

// idHeap orders ready entries by priority band, highest first, then by
// ID: within a band a released message goes back ahead of newer ones, and
// a redelivered one keeps its band.
type idHeap []*entry

func (h idHeap) Len() int { return len(h) }
func (h idHeap) Less(i, j int) bool {
	if h[i].prio != h[j].prio {
		return h[i].prio > h[j].prio
	}
	return h[i].rec.ID < h[j].rec.ID
}
func (h idHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *idHeap) Push(x any)   { *h = append(*h, x.(*entry)) }
func (h *idHeap) Pop() any {
	old := *h
	n := len(old)
	x := old[n-1]
	old[n-1] = nil
	*h = old[:n-1]
	return x
}
