package buffer

import (
	"context"
	"encoding/binary"
	"fmt"
	"runtime"
	"runtime/debug"
	"slices"
	"sync"

	bolt "go.etcd.io/bbolt"
)

// maxBatch and maxBatchBytes bound one commit: enough to share an fsync
// among every writer a gateway has, small enough that one transaction's
// dirty pages stay a few MiB.
const (
	maxBatch      = 1024
	maxBatchBytes = 16 << 20
)

type op uint8

const (
	opAppend op = iota
	opAck
	opAckThrough
	opRemove
)

// request is one call handed to the writer goroutine. The caller fills the
// arguments and waits on done; the writer fills the results, then sends on
// done. A request whose caller gave up (ctx) is abandoned to the writer
// and never reused; the others go back to requestPool. An AppendAsync
// request has cb instead of a waiting caller: the writer hands it to the
// notifier goroutine, which calls cb and pools it.
type request struct {
	ctx   context.Context
	op    op
	queue string
	data  []byte   // opAppend: a copy of the record
	seqs  []uint64 // opAck
	seq   uint64   // opAckThrough: the argument; opAppend: the result, set last

	n        int   // opAck, opAckThrough, opRemove: records removed
	err      error // the answer
	rejected bool  // opAppend refused with ErrFull: counted once committed

	// reserve is what the append counts in Buffer.reserved until answered.
	reserve int64
	cb      func(seq uint64, err error) // AppendAsync's done

	done chan struct{} // capacity 1
}

var requestPool = sync.Pool{New: func() any { return &request{done: make(chan struct{}, 1)} }}

func newRequest(ctx context.Context, o op, queue string) *request {
	r := requestPool.Get().(*request)
	r.ctx, r.op, r.queue = ctx, o, queue
	return r
}

func putRequest(r *request) {
	r.ctx, r.queue, r.seq, r.n, r.err, r.rejected, r.reserve, r.cb = nil, "", 0, 0, nil, false, 0, nil
	if cap(r.data) > 64<<10 {
		r.data = nil // keep large records' memory out of the pool
	}
	r.data, r.seqs = r.data[:0], r.seqs[:0]
	requestPool.Put(r)
}

// answer ends r's stay in the writer, once, on the writer goroutine: its
// reservation is released, and its caller woken, or its callback queued
// for the notifier (handOver).
func (b *Buffer) answer(r *request) {
	if r.reserve != 0 {
		b.reserved.Add(-r.reserve)
		r.reserve = 0
	}
	if r.cb != nil {
		b.w.answered = append(b.w.answered, r)
		return
	}
	r.done <- struct{}{}
}

// writer is the writer goroutine's own state: what the file holds, as of
// the transaction in progress. Owned by that goroutine (and by Open before
// it starts); readers see the copy in Buffer.queues, published after each
// commit.
type writer struct {
	queues  map[string]*qstate
	records int64
	bytes   int64

	// touched collects, during one transaction, the queues it changed and
	// what the readers must learn about them once it commits.
	touched map[string]*touched

	// fullNext: the last append of the transaction dropped or was refused
	// to make room; appended: the transaction held an append. Buffer.full
	// is what was logged last (logFull).
	fullNext, appended bool

	// answered holds the AppendAsync requests answered since the last
	// handOver, in the order of their commits.
	answered []*request
}

// qstate is one queue in the writer's state. first and last are refreshed
// from the file at the end of each transaction that touched the queue.
type qstate struct {
	records, bytes int64
	first, last    uint64
}

type touched struct {
	appended     bool
	dropped      uint64
	droppedBytes uint64
}

func (w *writer) touch(queue string) *touched {
	t := w.touched[queue]
	if t == nil {
		t = &touched{}
		w.touched[queue] = t
	}
	return t
}

// run is the writer goroutine: it takes every request waiting, commits them
// together and answers them.
func (b *Buffer) run() {
	defer b.wg.Done()
	defer close(b.writerDone)
	// A page past the end of a file truncated under us faults (SIGBUS);
	// this turns the fault into a panic that commit recovers as ErrCorrupt.
	debug.SetPanicOnFault(true)
	batch := make([]*request, 0, maxBatch)
	prev := 0
	for {
		select {
		case <-b.stop:
			// Before taking more: what is queued goes in drainOnStop.
			b.drainOnStop(batch)
			return
		default:
		}
		select {
		case r := <-b.reqs:
			batch = append(batch[:0], r)
		case <-b.stop:
			b.drainOnStop(batch)
			return
		}
		if prev > 1 {
			// The writers the last commit answered are runnable now; let
			// them queue their next request before this batch is cut, or
			// they split into two cohorts that alternate, each with half
			// the commits' worth (measured: 8 of 16 writers per commit
			// without, 13 with). A lone writer (prev 1) never yields.
			runtime.Gosched()
		}
		size := len(batch[0].data)
	fill:
		for len(batch) < maxBatch && size < maxBatchBytes {
			select {
			case r := <-b.reqs:
				batch = append(batch, r)
				size += len(r.data)
			default:
				break fill
			}
		}
		b.commit(batch)
		b.handOver()
		prev = len(batch)
		clear(batch) // no reference to answered requests
	}
}

// drainOnStop commits the requests still queued when Close stopped the
// writer: only AppendAsync ones can be (Close waited for every caller
// that waits), and each was promised a done call; committing them keeps
// the promise with the better answer.
func (b *Buffer) drainOnStop(batch []*request) {
	for {
		batch = batch[:0]
	fill:
		for len(batch) < maxBatch {
			select {
			case r := <-b.reqs:
				batch = append(batch, r)
			default:
				break fill
			}
		}
		if len(batch) == 0 {
			return
		}
		b.commit(batch)
		b.handOver()
		clear(batch)
	}
}

// handOver gives the notifier the callbacks the last commit answered.
// Writer goroutine. The list is unbounded rather than a channel the writer
// could block on: a done that calls AppendAsync while the request channel
// is full would otherwise wait for the writer, which would wait for it.
// What bounds it is the callers, who wait for their done calls (a
// front-end's window of unacknowledged publishes).
func (b *Buffer) handOver() {
	w := &b.w
	if len(w.answered) == 0 {
		return
	}
	b.cbMu.Lock()
	b.cbs = append(b.cbs, w.answered...)
	b.cbMu.Unlock()
	clear(w.answered)
	w.answered = w.answered[:0]
	select {
	case b.cbWake <- struct{}{}:
	default:
	}
}

// notify is the notifier goroutine: it calls AppendAsync's done
// functions, in the order of the commits that answered them (so a queue's
// come in sequence order), off the writer goroutine, so that a slow done
// (a front-end's acknowledgement) never delays the next commit. It ends
// once the writer has ended and every callback it handed over was called.
func (b *Buffer) notify() {
	defer b.wg.Done()
	var run []*request
	for {
		last := false
		select {
		case <-b.cbWake:
		case <-b.writerDone:
			last = true // the writer handed over all it had before it ended
		}
		b.cbMu.Lock()
		run, b.cbs = b.cbs, run[:0]
		b.cbMu.Unlock()
		for i, r := range run {
			cb, seq, err := r.cb, r.seq, r.err
			putRequest(r)
			run[i] = nil
			cb(seq, err)
		}
		if last {
			return
		}
	}
}

// commit applies batch in one transaction and answers every request. If
// the transaction fails, the file is as before it: the state is reloaded
// and each request retried alone, so that one bad request fails alone.
func (b *Buffer) commit(batch []*request) {
	live := batch[:0]
	for _, r := range batch {
		if err := r.ctx.Err(); err != nil {
			r.err = err // nobody may be waiting any more: never applied
			b.answer(r)
			continue
		}
		if e := b.broken.Load(); e != nil {
			r.err = *e
			b.answer(r)
			continue
		}
		live = append(live, r)
	}
	if len(live) == 0 {
		return
	}
	err := b.apply(live)
	if err == nil {
		b.commits.Add(1)
		b.publish(live)
		for _, r := range live {
			b.answer(r)
		}
		b.logFull()
		return
	}
	if rerr := b.reload(); rerr != nil {
		err = rerr
	}
	if len(live) == 1 || b.broken.Load() != nil {
		b.logger.Error("bridge buffer: commit failed", "file", b.path, "requests", len(live), "err", err)
		for _, r := range live {
			r.err = err
			b.answer(r)
		}
		return
	}
	for _, r := range live {
		b.commit([]*request{r})
	}
}

// logFull logs the buffer becoming full and having room again. Writer
// goroutine, after a commit.
func (b *Buffer) logFull() {
	w := &b.w
	if !w.appended {
		return // only an append tells whether there is room
	}
	w.appended = false
	if w.fullNext == b.full.Load() {
		return
	}
	if w.fullNext {
		b.logFullOnce(w.records, w.bytes)
		return
	}
	b.full.Store(false)
	b.logger.Info("bridge buffer has room again", "file", b.path, "maxBytes", b.opts.MaxBytes, "bytes", w.bytes)
}

// logFullOnce logs the buffer becoming full, unless that was logged last:
// once per episode rather than once per record, whether the writer or
// an append's early check (reserve) found it full.
func (b *Buffer) logFullOnce(records, bytes int64) {
	if !b.full.CompareAndSwap(false, true) {
		return
	}
	what := "rejecting new records"
	if b.opts.Policy == DropOldest {
		what = "dropping the oldest records of the largest queue"
	}
	b.logger.Warn("bridge buffer full: "+what, "file", b.path, "maxBytes", b.opts.MaxBytes, "records", records, "bytes", bytes)
}

// apply runs live's requests in one read-write transaction and commits it.
func (b *Buffer) apply(live []*request) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = b.corrupt("writing", p)
		}
	}()
	clear(b.w.touched)
	err = b.db.Update(func(tx *bolt.Tx) error {
		queues := tx.Bucket(bucketQueues)
		for _, r := range live {
			r.err, r.n, r.rejected = nil, 0, false // a retry starts afresh
			if err := b.applyOne(queues, r); err != nil {
				return err
			}
		}
		return b.w.save(tx)
	})
	if err != nil {
		return fmt.Errorf("bridge buffer: %s: %w", b.path, err)
	}
	return nil
}

func (b *Buffer) applyOne(queues *bolt.Bucket, r *request) error {
	w := &b.w
	switch r.op {
	case opAppend:
		return b.appendOne(queues, r)
	case opAck:
		qb, st := queues.Bucket([]byte(r.queue)), w.queues[r.queue]
		if qb == nil || st == nil {
			return nil
		}
		c := qb.Cursor()
		var key [8]byte
		for _, seq := range r.seqs {
			binary.BigEndian.PutUint64(key[:], seq)
			k, v := c.Seek(key[:])
			if k == nil || string(k) != string(key[:]) {
				continue
			}
			if err := w.remove(c, r.queue, st, int64(len(v))); err != nil {
				return err
			}
			r.n++
		}
	case opAckThrough:
		qb, st := queues.Bucket([]byte(r.queue)), w.queues[r.queue]
		if qb == nil || st == nil {
			return nil
		}
		n, _, err := w.removeHead(qb.Cursor(), r.queue, st, func(seq uint64, _ int64) bool { return seq <= r.seq })
		r.n = n
		return err
	case opRemove:
		st := w.queues[r.queue]
		if st == nil {
			return nil
		}
		if err := queues.DeleteBucket([]byte(r.queue)); err != nil {
			return err
		}
		r.n = int(st.records)
		w.records -= st.records
		w.bytes -= st.bytes
		delete(w.queues, r.queue)
		w.touch(r.queue)
	}
	return nil
}

// appendOne adds r's record, first making room as the policy says.
func (b *Buffer) appendOne(queues *bolt.Bucket, r *request) error {
	w := &b.w
	size := int64(len(r.data)) + RecordOverhead
	max := b.opts.MaxBytes
	if size > max {
		r.err = fmt.Errorf("%w: record of %d bytes (+%d) larger than maxBytes %d", ErrFull, len(r.data), RecordOverhead, max)
		r.rejected = true
		return nil
	}
	w.fullNext = w.bytes+size > max
	w.appended = true
	for w.bytes+size > max {
		victim := w.largest()
		if b.opts.Policy == RejectNew || victim == "" { // "": counts disagree with the file
			r.err = fmt.Errorf("%w: %d of maxBytes %d held", ErrFull, w.bytes, max)
			r.rejected = true
			return nil
		}
		qb := queues.Bucket([]byte(victim))
		need := w.bytes + size - max
		n, freed, err := w.removeHead(qb.Cursor(), victim, w.queues[victim], func(_ uint64, freed int64) bool { return freed < need })
		if err != nil {
			return err
		}
		t := w.touch(victim)
		t.dropped += uint64(n)
		t.droppedBytes += uint64(freed)
	}
	st := w.queues[r.queue]
	qb := queues.Bucket([]byte(r.queue))
	if qb == nil {
		var err error
		if qb, err = queues.CreateBucket([]byte(r.queue)); err != nil {
			return err
		}
	}
	if st == nil {
		st = &qstate{}
		w.queues[r.queue] = st
	}
	// Keys only ever grow: full pages instead of half-full ones on split.
	qb.FillPercent = 1.0
	seq, err := qb.NextSequence()
	if err != nil {
		return err
	}
	var key [8]byte
	binary.BigEndian.PutUint64(key[:], seq)
	if err := qb.Put(key[:], r.data); err != nil {
		return err
	}
	st.records++
	st.bytes += size
	w.records++
	w.bytes += size
	w.touch(r.queue).appended = true
	r.seq = seq
	return nil
}

// remove deletes the record under c (of value length vlen) and counts it.
func (w *writer) remove(c *bolt.Cursor, queue string, st *qstate, vlen int64) error {
	if err := c.Delete(); err != nil {
		return err
	}
	size := vlen + RecordOverhead
	st.records--
	st.bytes -= size
	w.records--
	w.bytes -= size
	w.touch(queue)
	return nil
}

// removeHead deletes queue's records from the oldest on while more(seq,
// bytes freed so far) holds, and returns how many it deleted and the bytes
// freed.
func (w *writer) removeHead(c *bolt.Cursor, queue string, st *qstate, more func(seq uint64, freed int64) bool) (int, int64, error) {
	n, freed := 0, int64(0)
	if st.records == 0 {
		return 0, 0, nil
	}
	var next [8]byte
	for k, v := c.First(); k != nil; k, v = c.Seek(next[:]) {
		seq := binary.BigEndian.Uint64(k)
		if !more(seq, freed) {
			break
		}
		vlen := int64(len(v))
		if err := w.remove(c, queue, st, vlen); err != nil {
			return n, freed, err
		}
		n++
		freed += vlen + RecordOverhead
		// Seek past the deleted key rather than Next: after Cursor.Delete
		// the cursor's index already points at the following element, so
		// Next would skip it. Seek is O(depth) and steps over leaves the
		// deletions emptied, which First would walk again each time.
		binary.BigEndian.PutUint64(next[:], seq+1)
	}
	return n, freed, nil
}

// largest is the queue DropOldest takes from: the most bytes held (ties:
// the first name, to be deterministic). Only called when something is held,
// since a record alone larger than maxBytes is refused before.
func (w *writer) largest() string {
	best, bestBytes := "", int64(-1)
	for name, st := range w.queues {
		if st.records == 0 {
			continue
		}
		if st.bytes > bestBytes || (st.bytes == bestBytes && name < best) {
			best, bestBytes = name, st.bytes
		}
	}
	return best
}

// save writes the touched queues' counts into the sizes bucket, in the
// transaction that changed them, and refreshes their first and last
// sequence numbers from the file.
func (w *writer) save(tx *bolt.Tx) error {
	queues, sizes := tx.Bucket(bucketQueues), tx.Bucket(bucketSizes)
	for name := range w.touched {
		key := []byte(name)
		st := w.queues[name]
		if st == nil {
			if err := sizes.Delete(key); err != nil {
				return err
			}
			continue
		}
		st.first, st.last = 0, 0
		if st.records > 0 { // see bounds
			st.first, st.last = bounds(queues.Bucket(key))
		}
		if err := sizes.Put(key, encodeSizes(st.records, st.bytes)); err != nil {
			return err
		}
	}
	return nil
}

// bounds is the first and last sequence numbers a queue's bucket holds.
//
// Only for a bucket that holds a record, or one read from the file as
// committed: bbolt's Cursor.Last (v1.4.3) never returns on a bucket whose
// leaves were all emptied by deletes in the transaction in progress (the
// tree is rebalanced only at commit). Last steps back over empty leaves
// with prev; at the first leaf prev calls first, which moves forward to the
// last empty leaf again, and so on. First has no such loop. The fix
// upstream would be for Cursor.Last to stop when prev finds no element
// (cursor.go, Last); until then save does not ask an emptied queue.
func bounds(qb *bolt.Bucket) (first, last uint64) {
	c := qb.Cursor()
	if k, _ := c.First(); len(k) == 8 {
		first = binary.BigEndian.Uint64(k)
	}
	if k, _ := c.Last(); len(k) == 8 {
		last = binary.BigEndian.Uint64(k)
	}
	return first, last
}

// publish copies what the commit changed to the readers' side, counts
// drops and rejections, and wakes the waiters of queues that grew. It runs
// before the requests are answered, so a caller whose Append returned sees
// its record in Stats and Next.
func (b *Buffer) publish(live []*request) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for name, t := range b.w.touched {
		p := b.entry(name)
		p.stats.Records, p.stats.Bytes, p.stats.First, p.stats.Last = 0, 0, 0, 0
		if st := b.w.queues[name]; st != nil {
			p.stats.Records, p.stats.Bytes, p.stats.First, p.stats.Last = st.records, st.bytes, st.first, st.last
		}
		p.stats.Dropped += t.dropped
		p.stats.DroppedBytes += t.droppedBytes
		b.totals.Dropped += t.dropped
		b.totals.DroppedBytes += t.droppedBytes
		if t.appended && p.appended != nil {
			close(p.appended)
			p.appended = nil
		}
	}
	for _, r := range live {
		if r.rejected {
			b.entry(r.queue).stats.Rejected++
			b.totals.Rejected++
		}
	}
	b.totals.Records, b.totals.Bytes = b.w.records, b.w.bytes
	b.held.Store(b.w.bytes)
}

// publishAll replaces the readers' view of every queue by the writer's
// state (at Open, and after a failed commit reloaded it).
func (b *Buffer) publishAll() {
	b.mu.Lock()
	defer b.mu.Unlock()
	names := make([]string, 0, len(b.queues)+len(b.w.queues))
	for name := range b.queues {
		names = append(names, name)
	}
	for name := range b.w.queues {
		names = append(names, name)
	}
	for _, name := range slices.Compact(slices.Sorted(slices.Values(names))) {
		p := b.entry(name)
		p.stats.Records, p.stats.Bytes, p.stats.First, p.stats.Last = 0, 0, 0, 0
		if st := b.w.queues[name]; st != nil {
			p.stats.Records, p.stats.Bytes, p.stats.First, p.stats.Last = st.records, st.bytes, st.first, st.last
		}
		if p.stats.Records > 0 && p.appended != nil {
			close(p.appended)
			p.appended = nil
		}
	}
	b.totals.Records, b.totals.Bytes = b.w.records, b.w.bytes
	b.held.Store(b.w.bytes)
}

// entry is the readers' record of queue, created on first use. b.mu held.
func (b *Buffer) entry(queue string) *published {
	p := b.queues[queue]
	if p == nil {
		p = &published{}
		b.queues[queue] = p
	}
	return p
}

func encodeSizes(records, bytes int64) []byte {
	v := make([]byte, 16)
	binary.BigEndian.PutUint64(v, uint64(records))
	binary.BigEndian.PutUint64(v[8:], uint64(bytes))
	return v
}
