// Package embedded is the default queue.Backend: every durable queue in one
// bbolt file and its write-ahead log (docs/queues.md, "Storage"). Appends
// and removals are queued to one writer goroutine that logs whatever has
// arrived with one write and one fdatasync of an append-only segment
// (group commit, wal.go), so durability costs one fdatasync per batch, not
// per message, and not bbolt's commit; a checkpoint applies the log to
// bbolt in the background, and reads merge bbolt with what the log holds
// beyond it (the overlay). It knows no protocol and nothing of the
// engine's consumers; it imports only the standard library, bbolt, core
// and core/queue.
//
// Layout:
//
//	configs/<name>        the queue's queue.Config as JSON
//	queues/<name>/n       records and bytes held (two big-endian uint64),
//	                      written in the transaction that changes them
//	queues/<name>/m/<id>  the records: big-endian uint64 ID → core/codec
//	                      compact encoding (a payload that ends the AMQP
//	                      native bytes is written once); the bucket's
//	                      sequence is the highest ID a checkpoint applied,
//	                      where the writer's counter starts after a reopen,
//	                      so IDs are never reused
//	queues/<name>/d/<id>  the delivery state of a record given back
//	                      (queue.DeliveryState), deleted with the record
package embedded

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/tolsey/tolsey/core"
	"github.com/tolsey/tolsey/core/codec"
	"github.com/tolsey/tolsey/core/groupcommit"
	"github.com/tolsey/tolsey/core/queue"
)

// FileName is the file's usual name in the gateway's data.dir.
const FileName = "queues.db"

// maxBatch bounds one commit: enough to share an fsync among every
// appender a gateway has, small enough that one transaction's dirty pages
// stay a few MiB (4096 records of 1 KiB).
const maxBatch = 4096

var (
	bucketConfigs = []byte("configs")
	bucketQueues  = []byte("queues")
	keyCounts     = []byte("n")
	bucketRecords = []byte("m")
	bucketStates  = []byte("d")
)

// errDropped answers an Append to a queue dropped since its Log was opened.
var errDropped = errors.New("queue dropped")

// Options configure Open.
type Options struct {
	// OpenTimeout bounds the wait for the file's lock, held by another
	// process (default 5 s).
	OpenTimeout time.Duration
	// Logger takes the checkpoints' failures and recoveries and what
	// replay skips (default slog.Default()).
	Logger *slog.Logger
	// MaxLog bounds the log not yet applied to bbolt while checkpoints
	// fail (default 256 MiB): past it, appends fail with an error that
	// wraps queue.ErrUnavailable (a store fault, not a full queue: a
	// queue that drops when full must not drop these) until a checkpoint
	// succeeds (docs/queues.md, "The write-ahead log"). It bounds the
	// overlay's memory and the log's growth by appends meanwhile.
	MaxLog int64
}

// maxLogDefault is Options.MaxLog's default: twice what the log holds
// beyond bbolt at most while checkpoints succeed (the cut being applied
// and the segment being written, up to segmentHard each), so
// that a store that works never comes near it.
const maxLogDefault = 256 << 20

// Backend is the embedded queue.Backend. Safe for concurrent use.
type Backend struct {
	db   *bolt.DB
	path string
	loop *groupcommit.Loop[op]

	// commits counts the log commits (one write, one fdatasync) and
	// checkpoints the bbolt transactions that applied them (benchmarks:
	// appends per commit).
	commits, checkpoints atomic.Uint64

	// mu serializes Open and Drop and guards logs.
	mu   sync.Mutex
	logs map[string]*qlog

	// Owned by the writer goroutine (the loop's commit); Close takes them
	// over once the loop has ended.
	seg       *os.File // the log segment being written
	segNo     uint64
	segSize   int64
	buf       []byte
	failed    error // the log cannot be cut back after a failed write: every append fails
	ckBusy    bool  // a cut was handed to the checkpointer, not reaped
	ckFailed  bool  // the last checkpoint failed: tried again on the next tick
	tickArmed bool
	// ckCutBytes is what the cut handed to the checkpointer covers of
	// logBytes: gone from it once that checkpoint succeeds.
	ckCutBytes int64
	// ends: the BatchEnders of a batch beyond its last one (endBatch),
	// kept empty between batches.
	ends map[queue.BatchEnder]struct{}
	// walMu is held around a log write (tests hold it to stall the
	// writer).
	walMu sync.Mutex

	// The checkpointer goroutine (wal.go): cuts in, results out.
	cuts     chan *cut
	ckDone   chan error
	ckExited chan struct{}

	// ovMu guards every qlog's overlay and ovQueues, the queues whose
	// overlay may hold something. ckMu is held (read) by a reader across
	// its bbolt transaction and its look at the overlay, and (write) by a
	// checkpoint while it drops from the overlay what it committed.
	ovMu     sync.Mutex
	ovQueues map[*qlog]struct{}
	ckMu     sync.RWMutex

	closeOnce sync.Once
	closeErr  error

	// Lazy operations (lazy.go): between Remove/SetState and the writer.
	lazyMu    sync.Mutex
	lazy      []op
	lazySpare []op // the list the writer applied last, for reuse
	lazyArmed bool // a timer will ask for a commit
	lazyDelay time.Duration

	// logBytes is what the log holds that no checkpoint applied (written
	// by the writer, read by CheckpointErr); maxLog its bound while
	// checkpoints fail (Options.MaxLog).
	logBytes atomic.Int64
	maxLog   int64

	// Checkpoint policy (wal.go; tests change them before use).
	segmentMax, segmentHard int64
	checkpointDelay         time.Duration
	// checkpointFault, set by tests only, fails a checkpoint's transaction
	// when it returns an error.
	checkpointFault func() error
	// dropFault, set by tests only, fails Drop's transaction.
	dropFault func() error

	log *slog.Logger
	// ckRep and ckFailures report the checkpoints' failures (wal.go).
	ckRep              ckReport
	ckFailures         atomic.Uint64
	checkpointLogEvery time.Duration
}

// op is one Append (done set), Remove (ids or rm set) or SetState (state
// set) queued to the writer, or a request (log nil): tick (start a
// checkpoint if the log holds anything) or ckpt (apply everything to
// bbolt now, answer on ckpt).
type op struct {
	log   *qlog
	msg   *core.Message // Append: the message, encoded by the writer into the log
	size  int64         // Append: core.Message.Size
	done  func(id uint64, err error)
	end   queue.BatchEnder // AppendIn: told after the batch's answers
	ids   []uint64         // Remove: the IDs, or nil for the single one in rm
	rm    uint64           // Remove, SetState: the ID
	state []byte           // SetState: the encoded queue.DeliveryState
	tick  bool
	ckpt  chan error

	id  uint64 // the writer's answer to an Append
	err error
}

// txQueue is one queue during a transaction: its records bucket and its
// counts as the transaction leaves them.
type txQueue struct {
	bucket         *bolt.Bucket
	counts         *bolt.Bucket // the queue's bucket, which holds keyCounts
	records, bytes int64
	// states is the queue's states bucket, nil while it has none (most
	// queues: nothing given back), so that a removal looks for a state
	// only where there may be one.
	states *bolt.Bucket
	// Cursors on records and states for removals, made once per
	// transaction: bbolt's Get and Delete each make a cursor and grow its
	// stack, and a removal through one seek of a kept cursor does both.
	cur, stateCur *bolt.Cursor
}

var (
	_ queue.Backend    = (*Backend)(nil)
	_ queue.OrderedLog = (*qlog)(nil)
	_ queue.StateLog   = (*qlog)(nil)
	_ queue.BatchLog   = (*qlog)(nil)
)

// Open opens (creating it if needed) the bbolt file at path, and applies
// to it what its log (path.wal.*) holds.
func Open(path string, o Options) (*Backend, error) {
	if o.OpenTimeout == 0 {
		o.OpenTimeout = 5 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.MaxLog <= 0 {
		o.MaxLog = maxLogDefault
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{
		Timeout: o.OpenTimeout,
		// The freelist is rebuilt by scanning at open instead of being
		// written on every commit: cheaper commits for a write-heavy file
		// (as retain/embedded).
		NoFreelistSync: true,
		FreelistType:   bolt.FreelistMapType,
	})
	if err != nil {
		return nil, fmt.Errorf("queue: embedded: open %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		if _, err := tx.CreateBucketIfNotExists(bucketConfigs); err != nil {
			return err
		}
		_, err := tx.CreateBucketIfNotExists(bucketQueues)
		return err
	})
	b := &Backend{db: db, path: path, logs: map[string]*qlog{}, lazyDelay: lazyDelay,
		ovQueues: map[*qlog]struct{}{}, cuts: make(chan *cut), ckDone: make(chan error, 1),
		ckExited: make(chan struct{}), segmentMax: segmentMax, segmentHard: segmentHard,
		checkpointDelay: checkpointDelay, log: o.Logger, checkpointLogEvery: checkpointLogEvery,
		maxLog: o.MaxLog}
	if err == nil {
		var next uint64
		if next, err = b.replay(); err == nil {
			err = b.newSegment(next)
		}
	}
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("queue: embedded: %s: %w", path, err)
	}
	go b.checkpointer()
	b.loop = groupcommit.Start(maxBatch, b.commit)
	return b, nil
}

// Declared implements queue.Backend.
func (b *Backend) Declared(context.Context) ([]queue.Config, error) {
	var out []queue.Config
	err := b.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketConfigs).ForEach(func(k, v []byte) error {
			var c queue.Config
			if err := json.Unmarshal(v, &c); err != nil {
				return fmt.Errorf("queue %q: config: %w", k, err)
			}
			out = append(out, c)
			return nil
		})
	})
	if err != nil {
		return nil, b.unavailable(err)
	}
	return out, nil
}

// Open implements queue.Backend: it stores cfg and creates the queue's
// buckets in one transaction.
func (b *Backend) Open(_ context.Context, cfg queue.Config) (queue.Log, error) {
	js, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	key := []byte(cfg.Name)
	var records, bytes int64
	var seq uint64
	err = b.db.Update(func(tx *bolt.Tx) error {
		if err := tx.Bucket(bucketConfigs).Put(key, js); err != nil {
			return err
		}
		qb, err := tx.Bucket(bucketQueues).CreateBucketIfNotExists(key)
		if err != nil {
			return err
		}
		rb, err := qb.CreateBucketIfNotExists(bucketRecords)
		if err != nil {
			return err
		}
		records, bytes = readCounts(qb)
		seq = rb.Sequence()
		return nil
	})
	if err != nil {
		return nil, b.unavailable(err)
	}
	if l := b.logs[cfg.Name]; l != nil {
		return l, nil
	}
	l := &qlog{b: b, name: cfg.Name, key: key, lastID: seq}
	l.records.Store(records)
	l.bytes.Store(bytes)
	b.logs[cfg.Name] = l
	return l, nil
}

// Drop implements queue.Backend: what the log holds goes to bbolt first
// (so that no record of this queue is replayed into one of the same name
// declared later), then the configuration and the queue's bucket go in
// one transaction. Appends still queued for it fail.
func (b *Backend) Drop(_ context.Context, name string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	l := b.logs[name]
	if l != nil {
		// Before the checkpoint: the writer logs no append, removal or
		// state of l after it.
		l.dropped.Store(true)
		if err := b.checkpointSync(); err != nil {
			l.dropped.Store(false)
			return b.unavailable(err)
		}
	}
	key := []byte(name)
	err := b.db.Update(func(tx *bolt.Tx) error {
		if b.dropFault != nil {
			if err := b.dropFault(); err != nil {
				return err
			}
		}
		if err := tx.Bucket(bucketConfigs).Delete(key); err != nil {
			return err
		}
		if err := tx.Bucket(bucketQueues).DeleteBucket(key); err != nil && !errors.Is(err, bolterrors.ErrBucketNotFound) {
			return err
		}
		return nil
	})
	if err != nil {
		if l != nil {
			l.dropped.Store(false)
		}
		return b.unavailable(err)
	}
	if l != nil {
		l.gone.Store(true)
		b.ovMu.Lock()
		l.ov = overlay{}
		delete(b.ovQueues, l)
		b.ovMu.Unlock()
	}
	delete(b.logs, name)
	return nil
}

// checkpointSync has the writer apply everything logged so far to bbolt,
// and waits for it.
func (b *Backend) checkpointSync() error {
	ch := make(chan error, 1)
	if !b.loop.Add(op{ckpt: ch}) {
		return errors.New("closed")
	}
	return <-ch
}

// Close commits what is queued, applies the log to bbolt, deletes it and
// closes the file. A second Close returns the first one's answer.
func (b *Backend) Close() error {
	b.closeOnce.Do(func() {
		b.loop.Add(op{}) // the lazy operations too
		b.loop.Close()
		// The writer has ended: its state is this goroutine's now.
		b.reapCheckpoint(true)
		err := b.failed
		if err == nil {
			// The last cut; if it fails, the log stays for the next Open.
			var c *cut
			if c, err = b.takeCut(true); err == nil {
				err = b.checkpoint(c)
			}
		} else {
			_ = b.seg.Close()
		}
		close(b.cuts)
		<-b.ckExited
		if e := b.db.Close(); err == nil {
			err = e
		}
		if err != nil {
			err = b.unavailable(err)
		}
		b.closeErr = err
	})
	return b.closeErr
}

// Commits is the number of log commits the writer has made.
func (b *Backend) Commits() uint64 { return b.commits.Load() }

// Checkpoints is the number of bbolt transactions that applied the log.
func (b *Backend) Checkpoints() uint64 { return b.checkpoints.Load() }

func (b *Backend) unavailable(err error) error {
	return fmt.Errorf("%w: embedded %s: %w", queue.ErrUnavailable, b.path, err)
}

// commit logs batch and the lazy operations in one write and one
// fdatasync, puts the appends in the overlay, then answers them in order.
// On the writer goroutine.
func (b *Backend) commit(batch []op) {
	lazy := b.takeLazy()
	defer b.giveLazy(lazy)
	buf := b.buf[:0]
	for i := range lazy {
		if o := &lazy[i]; !o.log.dropped.Load() {
			buf = encodeOp(buf, o)
		}
	}
	err := b.failed
	full := b.logFull()
	tick := false
	for i := range batch {
		o := &batch[i]
		o.id, o.err = 0, nil
		tick = tick || o.tick
		switch {
		case o.done == nil, err != nil:
		case o.log.dropped.Load():
			o.err = fmt.Errorf("queue %q: %w", o.log.name, errDropped)
		case full != nil:
			o.err = full
		default:
			o.log.lastID++
			o.id = o.log.lastID
			buf = encodeOp(buf, o)
		}
	}
	if err == nil && len(buf) > 0 {
		if err = b.writeLog(buf); err == nil {
			b.commits.Add(1)
		}
	}
	if cap(buf) <= 4<<20 {
		b.buf = buf
	} else {
		b.buf = nil // a burst's buffer is not kept
	}
	if err == nil {
		// Before the answers, so that a caller told its record is stored
		// reads it and sees it counted.
		b.ovMu.Lock()
		for i := range batch {
			o := &batch[i]
			if o.id == 0 {
				continue
			}
			l := o.log
			l.ov.recs = append(l.ov.recs, ovRec{id: o.id, size: o.size, msg: o.msg})
			l.records.Add(1)
			l.bytes.Add(o.size)
			b.ovQueues[l] = struct{}{}
		}
		b.ovMu.Unlock()
	} else {
		err = b.unavailable(err)
	}
	for i := range batch {
		o := &batch[i]
		if o.done == nil {
			continue
		}
		if err != nil {
			o.id, o.err = 0, err
		}
		o.done(o.id, o.err)
	}
	b.endBatch(batch)
	for i := range batch {
		if ch := batch[i].ckpt; ch != nil {
			ch <- b.checkpointNow()
		}
	}
	if tick {
		b.tickArmed = false
	}
	b.maybeCheckpoint(tick)
	b.armTick()
}

// endBatch tells each BatchEnder of batch's appends, once, that their
// answers are given (queue.BatchLog). On the writer goroutine.
func (b *Backend) endBatch(batch []op) {
	var last queue.BatchEnder
	for i := range batch {
		e := batch[i].end
		if e == nil || e == last {
			continue
		}
		if last != nil {
			if b.ends == nil {
				b.ends = map[queue.BatchEnder]struct{}{}
			}
			b.ends[last] = struct{}{}
		}
		last = e
	}
	if last == nil {
		return
	}
	if _, ok := b.ends[last]; !ok {
		last.BatchEnd()
	}
	for e := range b.ends {
		e.BatchEnd()
	}
	clear(b.ends)
}

// qlog is one queue's queue.Log.
type qlog struct {
	b    *Backend
	name string
	key  []byte

	dropped atomic.Bool // set by Drop, read by the writer
	// gone is set by a Drop that succeeded, before another queue of the
	// name can be opened: a checkpoint writes nothing of this qlog after
	// it (its name's bucket may be the new queue's).
	gone atomic.Bool
	// The counts: written by the writer (appends), removers and
	// checkpoints; read by Stats.
	records, bytes atomic.Int64
	// lastID is the last ID given out. Owned by the writer.
	lastID uint64
	// ov is what the log holds beyond bbolt (wal.go). Guarded by b.ovMu.
	ov overlay
}

// Append implements queue.Log: the message is queued to the writer,
// which encodes it straight into the log's write (no copy of its own: the
// message is immutable once appended, and the overlay keeps it, not its
// encoding, until a checkpoint encodes what is still there); done comes
// after the log commit that holds it.
func (l *qlog) Append(m *core.Message, done func(uint64, error)) {
	l.AppendIn(m, nil, done)
}

// AppendIn implements queue.BatchLog: Append, and end is told once the
// commit that holds it has answered all its appends.
func (l *qlog) AppendIn(m *core.Message, end queue.BatchEnder, done func(uint64, error)) {
	o := op{log: l, msg: m, size: int64(m.Size()), done: done, end: end}
	if !l.b.loop.Add(o) {
		done(0, fmt.Errorf("%w: embedded %s: closed", queue.ErrUnavailable, l.b.path))
		if end != nil {
			end.BatchEnd()
		}
	}
}

// Browse implements queue.Log: one engine reads this Log, so it is Read.
// A removal is in the overlay when Remove returns, so no page lists an
// acknowledged record.
func (l *qlog) Browse(ctx context.Context, after uint64, max int) ([]queue.Record, error) {
	return l.Read(ctx, after, max)
}

// candidate is a record Read found, in bbolt (data, its encoding) or the
// overlay (msg, the message appended).
type candidate struct {
	id          uint64
	data, state []byte
	msg         *core.Message
}

// Read implements queue.Log: bbolt's records merged with the overlay's,
// without those removed since the last checkpoint.
func (l *qlog) Read(_ context.Context, after uint64, max int) ([]queue.Record, error) {
	b := l.b
	b.ckMu.RLock()
	defer b.ckMu.RUnlock()
	var out []queue.Record
	err := b.db.View(func(tx *bolt.Tx) error {
		qb := tx.Bucket(bucketQueues).Bucket(l.key)
		if qb == nil || l.dropped.Load() {
			return nil
		}
		var from [8]byte
		binary.BigEndian.PutUint64(from[:], after+1)
		c := qb.Bucket(bucketRecords).Cursor()
		// States walk beside the records (both ordered by ID): one seek,
		// not a lookup per record.
		var sc *bolt.Cursor
		var sk, sv []byte
		if d := qb.Bucket(bucketStates); d != nil {
			sc = d.Cursor()
			sk, sv = sc.Seek(from[:])
		}
		var disk, mem []candidate
		b.ovMu.Lock()
		o := &l.ov
		for i := sort.Search(len(o.recs), func(i int) bool { return o.recs[i].id > after }); i < len(o.recs) && len(mem) < max; i++ {
			r := o.recs[i]
			if r.msg == nil || o.isRemoved(r.id) {
				continue
			}
			mem = append(mem, candidate{id: r.id, msg: r.msg, state: o.state(r.id)})
		}
		for k, v := c.Seek(from[:]); k != nil && len(disk) < max; k, v = c.Next() {
			id := binary.BigEndian.Uint64(k)
			if o.isRemoved(id) {
				continue
			}
			st := o.state(id)
			for sk != nil && binary.BigEndian.Uint64(sk) < id {
				sk, sv = sc.Next()
			}
			if st == nil && sk != nil && binary.BigEndian.Uint64(sk) == id {
				st = sv
			}
			disk = append(disk, candidate{id: id, data: v, state: st})
		}
		b.ovMu.Unlock()
		for len(out) < max && (len(disk) > 0 || len(mem) > 0) {
			var r candidate
			switch {
			case len(mem) == 0 || (len(disk) > 0 && disk[0].id < mem[0].id):
				r, disk = disk[0], disk[1:]
			default:
				if len(disk) > 0 && disk[0].id == mem[0].id {
					disk = disk[1:] // checkpointed while this read began
				}
				r, mem = mem[0], mem[1:]
			}
			// The overlay's message as appended (immutable); bbolt's
			// decoded, which copies: its bytes live only as long as the
			// transaction.
			m := r.msg
			if m == nil {
				var err error
				if m, err = codec.Decode(r.data); err != nil {
					return fmt.Errorf("queue %q record %d: %w", l.name, r.id, err)
				}
			}
			rec := queue.Record{ID: r.id, Msg: m}
			if r.state != nil {
				if err := rec.State.UnmarshalBinary(r.state); err != nil {
					return fmt.Errorf("queue %q record %d: %w", l.name, r.id, err)
				}
			}
			out = append(out, rec)
		}
		return nil
	})
	if err != nil {
		return nil, b.unavailable(err)
	}
	return out, nil
}

func (o *overlay) isRemoved(id uint64) bool {
	if _, ok := o.removed[id]; ok {
		return true
	}
	_, ok := o.removing[id]
	return ok
}

func (o *overlay) state(id uint64) []byte {
	if st, ok := o.states[id]; ok {
		return st
	}
	return o.statesCk[id]
}

// Remove implements queue.Log: the records leave the overlay (or are
// marked for the next checkpoint to delete from bbolt) at once, and the
// removal is logged with the next append's commit, or within lazyDelay
// (lazy.go).
func (l *qlog) Remove(ids ...uint64) {
	if len(ids) == 0 || l.dropped.Load() {
		return
	}
	l.b.forget(l, ids)
	if len(ids) == 1 {
		// A consumer's Ack: one ID, carried without a slice of its own.
		l.b.addLazy(op{log: l, rm: ids[0]})
		return
	}
	l.b.addLazy(op{log: l, ids: append([]uint64(nil), ids...)})
}

// forget takes removed records out of reads and counts: one the overlay
// holds, not being checkpointed, is dropped there (bbolt never sees it);
// any other is marked for the next checkpoint, which counts it when it
// deletes it.
func (b *Backend) forget(l *qlog, ids []uint64) {
	b.ovMu.Lock()
	defer b.ovMu.Unlock()
	o := &l.ov
	for _, id := range ids {
		delete(o.states, id)
		if i := o.find(id); i >= 0 {
			r := &o.recs[i]
			if r.msg == nil {
				continue // removed before
			}
			if id > o.frozenHi {
				r.msg = nil
				l.records.Add(-1)
				l.bytes.Add(-r.size)
				continue
			}
		}
		if o.removed == nil {
			o.removed = map[uint64]struct{}{}
		}
		o.removed[id] = struct{}{}
	}
	b.ovQueues[l] = struct{}{}
}

// SetState implements queue.StateLog: kept in the overlay at once,
// logged as a Remove is.
func (l *qlog) SetState(id uint64, st queue.DeliveryState) {
	if l.dropped.Load() {
		return
	}
	s, _ := st.AppendBinary(nil)
	l.b.ovMu.Lock()
	if l.ov.states == nil {
		l.ov.states = map[uint64][]byte{}
	}
	l.ov.states[id] = s
	l.b.ovQueues[l] = struct{}{}
	l.b.ovMu.Unlock()
	l.b.addLazy(op{log: l, rm: id, state: s})
}

// AppendsInOrder implements queue.OrderedLog: the writer answers the
// appends of a commit in order, one commit after another, after the
// commit, and no other engine reads the file.
func (l *qlog) AppendsInOrder() bool { return true }

// Stats implements queue.Log from the counts kept in memory (as the file
// will hold them once checkpointed).
func (l *qlog) Stats(context.Context) (int, int64, error) {
	return int(l.records.Load()), l.bytes.Load(), nil
}

func readCounts(qb *bolt.Bucket) (records, bytes int64) {
	if v := qb.Get(keyCounts); len(v) == 16 {
		return int64(binary.BigEndian.Uint64(v)), int64(binary.BigEndian.Uint64(v[8:]))
	}
	return 0, 0
}

func encodeCounts(records, bytes int64) []byte {
	v := make([]byte, 16)
	binary.BigEndian.PutUint64(v, uint64(records))
	binary.BigEndian.PutUint64(v[8:], uint64(bytes))
	return v
}
