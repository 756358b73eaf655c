// Package buffer is the bridge's on-disk store-and-forward buffer: while a
// bridge's remote (NATS JetStream, a remote AMQP broker) cannot take a QoS 1
// message, the link appends it here before the device's publish is
// acknowledged, and sends it, in order per queue, once the remote is back;
// a record leaves the buffer only when the link says the remote
// acknowledged it.
//
// It owns one bbolt file (FileName) under the directory it is given
// (data.dir/bridge) and nothing else. It must not know what it stores: a
// record is an opaque []byte the caller encoded; no protocol, no NATS, no
// AMQP, no core.Message. Queues are plain names (one per bridge rule) that
// the caller chooses.
//
// # Guarantees
//
//   - Append is durable when it returns nil: the record is committed and
//     fsynced (bbolt's commit, fdatasync) before the call returns, so it
//     survives kill -9 and a power cut. Concurrent Appends share commits
//     (group commit, see below).
//   - AppendAsync is Append without the wait: its done function is called
//     after the same commit and fsync, never before, so a record whose
//     done said nil survives kill -9 as an Append's does (TestKill9).
//   - Each queue is FIFO: Append gives the record the queue's next sequence
//     number (1, 2, 3, … per queue, never reused while the queue exists, kept
//     across restarts), and records become visible to Next in sequence
//     order, with no holes: a record is visible only once every
//     record before it in its queue is.
//   - A record is removed only by Ack/AckThrough (the remote has it), by
//     Remove (the queue is gone), or by the DropOldest policy when the buffer
//     is full, which counts it.
//   - The byte count that MaxBytes bounds is kept in the file, in the same
//     transaction as the records, so it is exact after a restart or a crash
//     and Open costs O(queues), not a scan of the file.
//
// # Using it from a link
//
// The writer side (a device's publish, on its connection's goroutine):
//
//	seq, err := buf.Append(ctx, rule, encoded)
//	// err == nil: durable, acknowledge the device.
//	// errors.Is(err, buffer.ErrFull): refuse the publish (MQTT 5 0x97, AMQP
//	// amqp:resource-limit-exceeded), policy RejectNew.
//	// any other error (disk full, ErrClosed, ErrCorrupt): refuse too.
//
// or, when the device's acknowledgement can be sent later (core's
// Delivery.Acks) and its connection should go on reading meanwhile:
//
//	acks.Hold()
//	if err := buf.AppendAsync(rule, encoded, func(_ uint64, err error) {
//		acks.Done(err) // after the fsync, on the buffer's notifier goroutine
//	}); err != nil {
//		acks.Done(err) // refused at once (ErrFull under RejectNew, ErrClosed)
//	}
//
// The sender side (one goroutine per queue, while the link is up):
//
//	after := uint64(0) // after a reconnect: 0, to resend what was not acked
//	for {
//		recs, err := buf.Next(rule, after, 512)
//		if len(recs) == 0 {
//			err = buf.Wait(ctx, rule, after) // or select on buf.Appended(rule, after)
//			continue
//		}
//		for _, r := range recs { send r.Data; after = r.Seq }
//		// as the remote acknowledges: buf.AckThrough(ctx, rule, seq) for an
//		// in-order prefix, buf.Ack(ctx, rule, seqs...) for acks that come out
//		// of order (JetStream's async window).
//	}
//
// Order with direct sends: the buffer keeps its own queue in order; keeping
// a rule's messages in order between the buffer and direct publishing is
// the link's job. Once a queue holds records, a link that keeps order
// appends new messages to it too until it is drained (QueueStats.Records
// == 0), and only then publishes directly again.
//
// Ack and AckThrough commit like Append (they wait for the fsync and share
// commits with everything else pending): a link draining fast acknowledges
// in batches, or from a goroutine of its own. An ack lost in a crash only
// means the record is sent again (at least once; JetStream's Nats-Msg-Id
// de-duplication absorbs it). A record dropped (DropOldest) or acked while
// the link has it in flight is simply gone; acking it again is a no-op.
//
// # Full buffer
//
// MaxBytes (bridge.buffer.maxBytes, default 1 GiB) bounds the records of
// all queues together, each counted as len(rec) + RecordOverhead, so that a
// flood of tiny records is bounded too. What happens when an Append would
// exceed it is the Policy (bridge.buffer.policy):
//
//   - RejectNew: the Append fails with ErrFull and is counted in Rejected.
//   - DropOldest: the oldest records of the largest queue (most bytes) are
//     dropped, counted in Dropped, until the new record fits; the Append
//     succeeds. Largest queue rather than the appending queue or the
//     globally oldest record: a quiet rule (alarms, a few a minute) keeps its
//     records while a chatty one (telemetry) that fills the buffer pays for
//     its own growth; dropping from the appending queue would make each
//     alarm evict the previous alarm, and dropping the globally oldest would
//     evict the quiet rule's hour-old alarms for seconds of telemetry. When
//     every rule is as chatty as the others it comes to the same thing as
//     the globally oldest.
//
// A record larger than MaxBytes on its own is refused with ErrFull under
// either policy.
//
// # Group commit
//
// One writer goroutine owns every write. Append, Ack, AckThrough and Remove
// hand it a request and wait (AppendAsync hands it one and returns); it
// takes every request waiting (up to maxBatch), applies them in one bbolt
// read-write transaction, commits (one fsync), then answers them all, the
// AppendAsync ones through a notifier goroutine that calls their done
// functions in commit order while the writer goes on with the next batch.
// A caller that keeps a window of AppendAsync calls in flight puts the
// whole window into one commit, where Append gives one record per caller
// and commit. While it is fsyncing, new requests queue
// up and form the next batch, so a lone Append costs one commit and no
// timer, and N concurrent Appends cost about one commit for all. A batch
// that fails as a whole is retried one request per transaction, so that one
// bad request fails alone.
//
// # The file
//
// Bucket "meta" holds the format version; bucket "queues" one nested
// bucket per queue, keyed by the 8-byte big-endian sequence number (bbolt's
// per-bucket sequence counter assigns them, so they survive a restart);
// bucket "sizes" each queue's record and byte counts. The file grows to
// about MaxBytes plus bbolt's page slack and growth step (below 16 MiB
// bbolt grows it to a power of two, above in 16 MiB steps), then stops: it
// does not shrink, and bbolt reuses the pages acks and drops free
// (TestFileBounded). A corrupt or truncated file makes Open fail with
// an error wrapping ErrCorrupt and naming the file, never a panic;
// corruption met later (a bad page read by Next or the writer) makes every
// call fail with such an error from then on.
package buffer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	bolt "go.etcd.io/bbolt"
)

// FileName is the file the buffer keeps under its directory.
const FileName = "buffer.db"

// DefaultMaxBytes is bridge.buffer.maxBytes's default: 1 GiB.
const DefaultMaxBytes = 1 << 30

// RecordOverhead is what each record counts against MaxBytes beyond its own
// length: its 8-byte key and bbolt's 16-byte leaf element header.
const RecordOverhead = 24

// MaxQueueName bounds a queue name, in bytes.
const MaxQueueName = 1024

var (
	// ErrFull: the record does not fit under MaxBytes and the policy is
	// RejectNew, or the record alone is larger than MaxBytes.
	ErrFull = errors.New("bridge buffer full")
	// ErrClosed: the buffer was closed.
	ErrClosed = errors.New("bridge buffer closed")
	// ErrCorrupt: the file is damaged (unreadable, truncated, inconsistent).
	// The error wrapping it names the file.
	ErrCorrupt = errors.New("bridge buffer file corrupt")
)

// Policy says what an Append does when the buffer is full.
type Policy uint8

const (
	// RejectNew refuses the new record with ErrFull.
	RejectNew Policy = iota
	// DropOldest drops the oldest records of the largest queue to make room.
	DropOldest
)

// String is the policy's configuration spelling.
func (p Policy) String() string {
	switch p {
	case RejectNew:
		return "rejectNew"
	case DropOldest:
		return "dropOldest"
	}
	return fmt.Sprintf("Policy(%d)", uint8(p))
}

// ParsePolicy reads bridge.buffer.policy: "rejectNew" or "dropOldest"
// (case-insensitive).
func ParsePolicy(s string) (Policy, error) {
	switch strings.ToLower(s) {
	case "rejectnew":
		return RejectNew, nil
	case "dropoldest":
		return DropOldest, nil
	}
	return 0, fmt.Errorf("bridge buffer policy %q: want rejectNew or dropOldest", s)
}

// Options configures Open. The zero value is the default configuration.
type Options struct {
	// MaxBytes bounds the records of all queues together, each counted as
	// len(rec) + RecordOverhead. 0 means DefaultMaxBytes. Lowering it below
	// what the file holds keeps every record; Appends then see a full
	// buffer until enough are acked (or dropped).
	MaxBytes int64
	// Policy applies when an Append would exceed MaxBytes.
	Policy Policy
	// Logger gets warnings and errors (default slog.Default()).
	Logger *slog.Logger
	// OpenTimeout bounds the wait for the file lock another process holds
	// (default 5 s).
	OpenTimeout time.Duration
}

// Record is one buffered record, as Next returns it.
type Record struct {
	Seq  uint64 // the queue's sequence number, from Append
	Data []byte // the caller's bytes, a copy the caller may keep
}

// QueueStats describes one queue.
type QueueStats struct {
	Records int64 // held now
	Bytes   int64 // held now, each record counted as len + RecordOverhead
	// First and Last are the sequence numbers of the oldest and newest
	// records held; 0 when the queue is empty.
	First, Last uint64
	// Counted since Open (a restart starts them at 0, as Prometheus
	// counters expect).
	Dropped      uint64 // records dropped from this queue by DropOldest
	DroppedBytes uint64 // their bytes, counted as Bytes is
	Rejected     uint64 // Appends to this queue refused with ErrFull
}

// Stats describes the whole buffer.
type Stats struct {
	Records, Bytes int64 // held now, all queues
	MaxBytes       int64
	Policy         Policy
	Dropped        uint64 // since Open, all queues
	DroppedBytes   uint64
	Rejected       uint64
	// Queues holds every queue that holds records, was written to, or
	// waited on since Open.
	Queues map[string]QueueStats
}

// Buffer is the store-and-forward buffer. It is safe for concurrent use.
type Buffer struct {
	// Set by Open, read-only after.
	db     *bolt.DB
	path   string
	opts   Options
	logger *slog.Logger

	// Owned by the writer goroutine (writer.go): the authoritative state,
	// changed inside its transactions and published to mu's side after
	// each commit.
	w writer

	// reqs carries requests to the writer goroutine. Its order is the
	// order of the records of a queue.
	reqs chan *request
	// held is the bytes the file holds as of the last commit (the
	// writer's, published with it); reserved the bytes of the appends
	// handed to the writer and not answered yet. Together they let an
	// append under RejectNew be refused at once (reserve), without a
	// commit.
	held, reserved atomic.Int64
	// full: "buffer full" was logged last, not "room again" (logFull).
	full atomic.Bool

	// Between the writer and the notifier goroutine (notify): the
	// answered AppendAsync requests whose done is still to be called.
	cbMu       sync.Mutex
	cbs        []*request
	cbWake     chan struct{} // capacity 1: cbs has grown
	writerDone chan struct{} // closed when the writer has ended
	// commits counts the writer's transactions (for the benchmarks' and
	// tests' appends per commit).
	commits atomic.Uint64

	// Guarded by mu: what readers see, as of the last commit.
	mu     sync.Mutex
	queues map[string]*published
	totals Stats // Records, Bytes, Dropped, DroppedBytes, Rejected; Queues unused
	shut   bool  // Close has begun: Appended returns a closed channel

	// Lifecycle. life is held shared by every call that touches the file
	// and exclusively by Close, so that Close waits for calls in flight
	// (which the writer still serves) before it stops the writer and closes
	// the file.
	life   sync.RWMutex
	closed atomic.Bool
	broken atomic.Pointer[error] // sticky ErrCorrupt met after Open
	stop   chan struct{}
	wg     sync.WaitGroup
	once   sync.Once
}

// published is one queue as readers see it. Guarded by Buffer.mu.
type published struct {
	stats QueueStats
	// appended is closed, and replaced, by the first commit that appends to
	// the queue after it was handed out: Wait and Appended block on it.
	appended chan struct{}
}

// closedChan is returned by Appended when there is no need to wait.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// checkQueue refuses names the file cannot key or a log cannot print.
func checkQueue(queue string) error {
	switch {
	case queue == "":
		return errors.New("bridge buffer: empty queue name")
	case len(queue) > MaxQueueName:
		return fmt.Errorf("bridge buffer: queue name of %d bytes, limit %d", len(queue), MaxQueueName)
	case !utf8.ValidString(queue):
		return fmt.Errorf("bridge buffer: queue name %q is not UTF-8", queue)
	}
	return nil
}

// enter marks a call in flight; the caller must call b.life.RUnlock.
func (b *Buffer) enter() error {
	b.life.RLock()
	if b.closed.Load() {
		b.life.RUnlock()
		return ErrClosed
	}
	if e := b.broken.Load(); e != nil {
		b.life.RUnlock()
		return *e
	}
	return nil
}

// Path is the buffer's file.
func (b *Buffer) Path() string { return b.path }

// Append adds rec at the end of queue and returns its sequence number once
// it is durable (committed and fsynced). rec is copied; the caller may reuse
// it when Append returns.
//
// It fails with an error wrapping ErrFull when the buffer is full and the
// policy is RejectNew (or rec alone exceeds MaxBytes), ErrClosed after
// Close, an error wrapping ErrCorrupt if the file is damaged, and ctx's
// error if ctx ends first. After ctx ended, the record may still have been
// stored (it was already in a commit): it will then be sent, which
// at-least-once allows.
//
// It runs on the caller's goroutine (a device's publish) and blocks for
// about one commit: an fsync, shared with every other pending request.
// AppendAsync is the same without the wait.
func (b *Buffer) Append(ctx context.Context, queue string, rec []byte) (uint64, error) {
	r, err := b.newAppend(ctx, queue, rec)
	if err != nil {
		return 0, err
	}
	if err := b.do(ctx, r); err != nil {
		return 0, err
	}
	seq, err := r.seq, r.err
	putRequest(r)
	return seq, err
}

// AppendAsync is Append for a caller that must not wait for the disk (a
// bridge rule's Deliver, on a publisher's goroutine, whose acknowledgement
// the front-end sends later: core.Delivery.Acks). The record's place is
// fixed when it returns: the records of a queue are committed in the order
// of the Append and AppendAsync calls that returned, whichever goroutines
// made them.
//
// A non-nil return is a refusal given at once, with nothing stored and
// done never called: a bad queue name, ErrClosed, a broken file
// (ErrCorrupt), or ErrFull, under RejectNew when the records held and
// those on their way to the disk leave no room (or rec alone exceeds
// MaxBytes, under either policy), counted in Rejected as Append's. On a
// nil return done is called exactly once: with the sequence number and
// nil once the record is durable, or with the error that kept it from
// the file (ErrFull too, when appends racing for the last room overtook
// it; a failed commit). Close commits what was handed over before it, so
// its done calls come before Close returns.
//
// done runs on the buffer's notifier goroutine, in the order of the
// commits (so a queue's in sequence order), one after the other: it must
// be quick and not wait for the buffer (Append, Ack, AckThrough, Remove,
// Close); AppendAsync is allowed. rec is copied. AppendAsync blocks only
// when the writer is maxBatch requests behind: backpressure from the disk.
func (b *Buffer) AppendAsync(queue string, rec []byte, done func(seq uint64, err error)) error {
	r, err := b.newAppend(context.Background(), queue, rec)
	if err != nil {
		return err
	}
	r.cb = done
	if err := b.enter(); err != nil {
		b.release(r)
		return err
	}
	b.reqs <- r
	b.life.RUnlock()
	return nil
}

// newAppend checks an append's arguments, reserves its room and copies rec
// into a request.
func (b *Buffer) newAppend(ctx context.Context, queue string, rec []byte) (*request, error) {
	if err := checkQueue(queue); err != nil {
		return nil, err
	}
	if len(rec) > bolt.MaxValueSize {
		return nil, fmt.Errorf("%w: record of %d bytes, bbolt's limit is %d", ErrFull, len(rec), bolt.MaxValueSize)
	}
	size, err := b.reserve(queue, len(rec))
	if err != nil {
		return nil, err
	}
	r := newRequest(ctx, opAppend, queue)
	r.reserve = size
	r.data = append(r.data[:0], rec...)
	return r, nil
}

// reserve refuses a record that cannot fit, before it costs a commit:
// under either policy one larger than MaxBytes; under RejectNew one that
// does not fit beside the records held and those reserved by appends on
// their way to the disk (acks on their way are not counted: an append
// that races an ack may be refused although the ack makes room). It
// returns what the append reserves (0 under DropOldest, which makes room
// in the writer). The writer checks again in its transaction.
func (b *Buffer) reserve(queue string, n int) (int64, error) {
	size, max := int64(n)+RecordOverhead, b.opts.MaxBytes
	var err error
	held, full := int64(0), false
	switch {
	case size > max:
		err = fmt.Errorf("%w: record of %d bytes (+%d) larger than maxBytes %d", ErrFull, n, RecordOverhead, max)
	case b.opts.Policy != RejectNew:
		return 0, nil
	default:
		// Add, then check: two appends racing for the last room cannot
		// both see it free.
		held = b.held.Load()
		if held+b.reserved.Add(size) <= max {
			return size, nil
		}
		b.reserved.Add(-size)
		err = fmt.Errorf("%w: %d of maxBytes %d held", ErrFull, held, max)
		full = true
	}
	b.mu.Lock()
	b.entry(queue).stats.Rejected++
	b.totals.Rejected++
	records := b.totals.Records
	b.mu.Unlock()
	if full {
		b.logFullOnce(records, held)
	}
	return 0, err
}

// release gives back a request that never reached the writer.
func (b *Buffer) release(r *request) {
	b.reserved.Add(-r.reserve)
	putRequest(r)
}

// Ack removes the records with these sequence numbers from queue, in any
// order (JetStream acks within a window may complete out of order), and
// returns how many it removed: a seq not held (acked before, dropped, never
// appended) is ignored. It returns once the removal is committed; see
// Append for ctx.
func (b *Buffer) Ack(ctx context.Context, queue string, seqs ...uint64) (int, error) {
	if err := checkQueue(queue); err != nil {
		return 0, err
	}
	if len(seqs) == 0 {
		return 0, nil
	}
	r := newRequest(ctx, opAck, queue)
	r.seqs = append(r.seqs[:0], seqs...)
	return b.doCount(ctx, r)
}

// AckThrough removes every record of queue with a sequence number up to and
// including seq (the in-order case: the remote acknowledged a prefix) and
// returns how many it removed.
func (b *Buffer) AckThrough(ctx context.Context, queue string, seq uint64) (int, error) {
	if err := checkQueue(queue); err != nil {
		return 0, err
	}
	r := newRequest(ctx, opAckThrough, queue)
	r.seq = seq
	return b.doCount(ctx, r)
}

// Remove deletes queue and its records (a rule removed from the
// configuration whose buffered messages will never be sent) and returns how
// many records it held. Its sequence numbers start again at 1, so a sender
// still reading it must start again from after = 0.
func (b *Buffer) Remove(ctx context.Context, queue string) (int, error) {
	if err := checkQueue(queue); err != nil {
		return 0, err
	}
	return b.doCount(ctx, newRequest(ctx, opRemove, queue))
}

func (b *Buffer) doCount(ctx context.Context, r *request) (int, error) {
	if err := b.do(ctx, r); err != nil {
		return 0, err
	}
	n, err := r.n, r.err
	putRequest(r)
	return n, err
}

// do hands r to the writer and waits for its answer. A nil return means r
// was answered (its err says how); otherwise r is abandoned to the writer
// and must not be reused.
func (b *Buffer) do(ctx context.Context, r *request) error {
	if err := b.enter(); err != nil {
		b.release(r)
		return err
	}
	defer b.life.RUnlock()
	select {
	case b.reqs <- r:
	case <-ctx.Done():
		b.release(r)
		return ctx.Err()
	}
	select {
	case <-r.done:
		return nil
	case <-ctx.Done():
		select {
		case <-r.done: // answered as ctx ended: the answer wins
			return nil
		default:
			return ctx.Err()
		}
	}
}

// Next returns up to n records of queue (n < 1 counts as 1; at most 65536,
// and no more once they hold maxNextBytes, 16 MiB, but always one) with a
// sequence number above after, oldest first; none when there are none yet.
// It reads committed records only, on the caller's goroutine, without
// waiting for the writer; the records are copies.
func (b *Buffer) Next(queue string, after uint64, n int) ([]Record, error) {
	if err := b.enter(); err != nil {
		return nil, err
	}
	defer b.life.RUnlock()
	n = min(max(n, 1), maxNext)
	b.mu.Lock()
	var hint QueueStats
	if p := b.queues[queue]; p != nil {
		hint = p.stats
	}
	b.mu.Unlock()
	if hint.Records == 0 || hint.Last <= after {
		// Nothing committed after after (the writer publishes after each
		// commit, so a record is never in the file unseen here for longer
		// than that).
		return nil, nil
	}
	return b.read(queue, after, n, hint)
}

// maxNext and maxNextBytes bound one Next, so that a careless n does not
// copy the whole buffer into memory at once.
const (
	maxNext      = 1 << 16
	maxNextBytes = 16 << 20
)

// Appended returns a channel that is closed once queue holds a record with a
// sequence number above after, or the buffer is closed: already closed if
// that is so now. It may also close when a record was appended and dropped
// or acked since: the caller then finds nothing in Next and asks again.
// For a sender that selects on other events too (link state, acks); Wait is
// the plain form.
func (b *Buffer) Appended(queue string, after uint64) <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.shut {
		return closedChan
	}
	p := b.entry(queue)
	if p.stats.Records > 0 && p.stats.Last > after {
		return closedChan
	}
	if p.appended == nil {
		p.appended = make(chan struct{})
	}
	return p.appended
}

// Wait blocks until queue holds a record with a sequence number above after
// (nil), the buffer is closed (ErrClosed) or ctx ends (its error). As with
// Appended, a nil return may find nothing in Next.
func (b *Buffer) Wait(ctx context.Context, queue string, after uint64) error {
	select {
	case <-b.Appended(queue, after):
		if b.closed.Load() {
			return ErrClosed
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// QueueStats describes one queue (zero if unknown); cheap enough for a
// metrics scrape per rule.
func (b *Buffer) QueueStats(queue string) QueueStats {
	b.mu.Lock()
	defer b.mu.Unlock()
	if p := b.queues[queue]; p != nil {
		return p.stats
	}
	return QueueStats{}
}

// Stats describes the buffer and every queue it knows.
func (b *Buffer) Stats() Stats {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.totals
	s.MaxBytes = b.opts.MaxBytes
	s.Policy = b.opts.Policy
	s.Queues = make(map[string]QueueStats, len(b.queues))
	for name, p := range b.queues {
		s.Queues[name] = p.stats
	}
	return s
}

// Close wakes every Wait (ErrClosed), waits for the calls in flight, stops
// the writer (which first commits the AppendAsync records handed to it and
// has their done functions called) and closes the file. Calls after Close fail with ErrClosed.
func (b *Buffer) Close() error {
	var err error
	b.once.Do(func() {
		b.closed.Store(true)
		b.mu.Lock()
		b.shut = true
		for _, p := range b.queues {
			if p.appended != nil {
				close(p.appended)
				p.appended = nil
			}
		}
		b.mu.Unlock()
		b.life.Lock()
		defer b.life.Unlock()
		close(b.stop)
		b.wg.Wait()
		err = b.db.Close()
	})
	return err
}
