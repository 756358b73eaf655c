// Package embedded is the default queue.Backend: every durable queue in one
// bbolt file (docs/queues.md, "Storage"). Appends and removals are queued
// to one writer goroutine that commits whatever has arrived in one fsync'd
// transaction (group commit), so durability costs one fsync per batch, not
// per message. It knows no protocol and nothing of the engine's consumers;
// it imports only the standard library, bbolt, core and core/queue.
//
// Layout:
//
//	configs/<name>        the queue's queue.Config as JSON
//	queues/<name>/n       records and bytes held (two big-endian uint64),
//	                      written in the transaction that changes them
//	queues/<name>/m/<id>  the records: big-endian uint64 ID → core/codec
//	                      compact encoding (a payload that ends the AMQP
//	                      native bytes is written once); IDs come from the bucket's sequence,
//	                      which bbolt keeps in the file, so they are never
//	                      reused after a reopen
//	queues/<name>/d/<id>  the delivery state of a record given back
//	                      (queue.DeliveryState), deleted with the record
package embedded

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
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
}

// Backend is the embedded queue.Backend. Safe for concurrent use.
type Backend struct {
	db   *bolt.DB
	path string
	loop *groupcommit.Loop[op]

	// Commits counts the transactions the writer committed (benchmarks:
	// appends per commit).
	commits atomic.Uint64

	// mu serializes Open and Drop and guards logs.
	mu   sync.Mutex
	logs map[string]*qlog

	// Owned by the writer goroutine (the loop's commit).
	touched map[*qlog]*txQueue

	// Lazy operations (lazy.go): between Remove/SetState and the writer.
	lazyMu    sync.Mutex
	lazy      []op
	lazySpare []op // the list the writer applied last, for reuse
	lazyArmed bool // a timer will ask for a commit
	lazyDelay time.Duration
}

// op is one Append (data set), Remove (ids set) or SetState (state set)
// queued to the writer.
type op struct {
	log   *qlog
	data  []byte // Append: the encoded message
	size  int64  // Append: core.Message.Size
	done  func(id uint64, err error)
	ids   []uint64 // Remove: the IDs, or nil for the single one in rm
	rm    uint64   // Remove, SetState: the ID
	state []byte   // SetState: the encoded queue.DeliveryState
	// A flush (log nil) only makes the writer commit the lazy operations
	// (lazy.go); flushed, when set, is closed once they are committed.
	flushed chan struct{}

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
)

// Open opens (creating it if needed) the bbolt file at path.
func Open(path string, o Options) (*Backend, error) {
	if o.OpenTimeout == 0 {
		o.OpenTimeout = 5 * time.Second
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
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("queue: embedded: %s: %w", path, err)
	}
	b := &Backend{db: db, path: path, logs: map[string]*qlog{}, touched: map[*qlog]*txQueue{}, lazyDelay: lazyDelay}
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
	err = b.db.Update(func(tx *bolt.Tx) error {
		if err := tx.Bucket(bucketConfigs).Put(key, js); err != nil {
			return err
		}
		qb, err := tx.Bucket(bucketQueues).CreateBucketIfNotExists(key)
		if err != nil {
			return err
		}
		if _, err := qb.CreateBucketIfNotExists(bucketRecords); err != nil {
			return err
		}
		records, bytes = readCounts(qb)
		return nil
	})
	if err != nil {
		return nil, b.unavailable(err)
	}
	if l := b.logs[cfg.Name]; l != nil {
		return l, nil
	}
	l := &qlog{b: b, name: cfg.Name, key: key}
	l.records.Store(records)
	l.bytes.Store(bytes)
	b.logs[cfg.Name] = l
	return l, nil
}

// Drop implements queue.Backend: the configuration and the queue's bucket
// go in one transaction. Appends still queued for it then fail.
func (b *Backend) Drop(_ context.Context, name string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	l := b.logs[name]
	key := []byte(name)
	err := b.db.Update(func(tx *bolt.Tx) error {
		if err := tx.Bucket(bucketConfigs).Delete(key); err != nil {
			return err
		}
		if err := tx.Bucket(bucketQueues).DeleteBucket(key); err != nil && !errors.Is(err, bolterrors.ErrBucketNotFound) {
			return err
		}
		// Set within the transaction: the writer's next one, which bbolt
		// runs after this commit, sees it (bbolt has one writer at a time).
		if l != nil {
			l.dropped.Store(true)
		}
		return nil
	})
	if err != nil {
		if l != nil {
			l.dropped.Store(false)
		}
		return b.unavailable(err)
	}
	delete(b.logs, name)
	return nil
}

// Close commits what is queued and closes the file.
func (b *Backend) Close() error {
	b.loop.Add(op{}) // the lazy operations too
	b.loop.Close()
	return b.db.Close()
}

// Commits is the number of transactions the writer has committed.
func (b *Backend) Commits() uint64 { return b.commits.Load() }

func (b *Backend) unavailable(err error) error {
	return fmt.Errorf("%w: embedded %s: %w", queue.ErrUnavailable, b.path, err)
}

// commit applies batch in one transaction, then answers its appends in
// order. On the writer goroutine.
func (b *Backend) commit(batch []op) {
	lazy := b.takeLazy()
	defer b.giveLazy(lazy)
	if len(lazy) == 0 && onlyFlushes(batch) {
		answerFlushes(batch)
		return // nothing to write: no transaction, no fsync
	}
	clear(b.touched)
	err := b.db.Update(func(tx *bolt.Tx) error {
		queues := tx.Bucket(bucketQueues)
		// The lazy ones first: each was queued after the commit of the
		// record it names, so none names an append of this batch.
		for i := range lazy {
			if err := b.apply(queues, &lazy[i]); err != nil {
				return err
			}
		}
		for i := range batch {
			if err := b.apply(queues, &batch[i]); err != nil {
				return err
			}
		}
		for _, q := range b.touched {
			if err := q.counts.Put(keyCounts, encodeCounts(q.records, q.bytes)); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil {
		b.commits.Add(1)
		// Before the answers, so that a caller told its record is stored
		// sees it counted.
		for l, q := range b.touched {
			l.records.Store(q.records)
			l.bytes.Store(q.bytes)
		}
	} else {
		err = b.unavailable(err)
	}
	answerFlushes(batch)
	for i := range batch {
		o := &batch[i]
		if o.done == nil {
			continue // a flush
		}
		if err != nil {
			o.id, o.err = 0, err
		}
		o.done(o.id, o.err)
	}
}

// apply writes one operation in the writer's transaction. An error fails
// the whole transaction; a dropped queue fails the append alone.
func (b *Backend) apply(queues *bolt.Bucket, o *op) error {
	o.id, o.err = 0, nil
	if o.log == nil {
		return nil // a flush
	}
	q := b.touched[o.log]
	if q == nil {
		qb := queues.Bucket(o.log.key)
		if o.log.dropped.Load() || qb == nil {
			if o.done != nil {
				o.err = fmt.Errorf("queue %q: %w", o.log.name, errDropped)
			}
			return nil
		}
		q = &txQueue{bucket: qb.Bucket(bucketRecords), counts: qb}
		if d := qb.Bucket(bucketStates); d != nil {
			if k, _ := d.Cursor().First(); k != nil {
				q.states = d
			}
		}
		q.records, q.bytes = readCounts(qb)
		// Keys only ever grow: full pages instead of half-full ones on split.
		q.bucket.FillPercent = 1.0
		b.touched[o.log] = q
	}
	var key [8]byte
	if o.done != nil {
		id, err := q.bucket.NextSequence()
		if err != nil {
			return err
		}
		binary.BigEndian.PutUint64(key[:], id)
		if err := q.bucket.Put(key[:], o.data); err != nil {
			return err
		}
		q.records++
		q.bytes += o.size
		o.id = id
		return nil
	}
	if o.state != nil {
		binary.BigEndian.PutUint64(key[:], o.rm)
		if q.bucket.Get(key[:]) == nil {
			return nil // removed meanwhile: its state goes with it
		}
		if q.states == nil {
			d, err := q.counts.CreateBucketIfNotExists(bucketStates)
			if err != nil {
				return err
			}
			q.states = d
		}
		return q.states.Put(key[:], o.state)
	}
	ids := o.ids
	if ids == nil {
		ids = []uint64{o.rm} // does not escape: no allocation
	}
	if q.cur == nil {
		q.cur = q.bucket.Cursor()
	}
	for _, id := range ids {
		binary.BigEndian.PutUint64(key[:], id)
		k, v := q.cur.Seek(key[:])
		if !bytes.Equal(k, key[:]) {
			continue // removed before, or never stored
		}
		meta, err := codec.ReadMeta(v)
		if err != nil {
			return fmt.Errorf("queue %q record %d: %w", o.log.name, id, err)
		}
		if err := q.cur.Delete(); err != nil {
			return err
		}
		if q.states != nil {
			if q.stateCur == nil {
				q.stateCur = q.states.Cursor()
			}
			if k, _ := q.stateCur.Seek(key[:]); bytes.Equal(k, key[:]) {
				if err := q.stateCur.Delete(); err != nil {
					return err
				}
			}
		}
		q.records--
		q.bytes -= int64(meta.Size)
	}
	return nil
}

// qlog is one queue's queue.Log.
type qlog struct {
	b    *Backend
	name string
	key  []byte

	dropped atomic.Bool // set by Drop, read by the writer
	// The counts as of the last commit: written by the writer (and Open),
	// read by Stats.
	records, bytes atomic.Int64
}

// Append implements queue.Log: the message is encoded on the caller's
// goroutine and queued to the writer; done comes after the commit that
// holds it. EncodeCompact: a message received over AMQP would otherwise
// carry its payload twice (in its native bytes too), and a record of 2 KiB
// instead of 1 fills a bbolt page alone, so every leaf of two spans two
// pages (an allocation per spill, and twice the bytes to write and fsync).
func (l *qlog) Append(m *core.Message, done func(uint64, error)) {
	o := op{log: l, data: codec.EncodeCompact(m), size: int64(m.Size()), done: done}
	if !l.b.loop.Add(o) {
		done(0, fmt.Errorf("%w: embedded %s: closed", queue.ErrUnavailable, l.b.path))
	}
}

// Read implements queue.Log.
// Browse implements queue.Log: one engine reads this Log, so it is Read.
func (l *qlog) Browse(ctx context.Context, after uint64, max int) ([]queue.Record, error) {
	// What was acknowledged must not be listed, on any page: the removals
	// waiting for a commit (lazy.go) are committed first. With none
	// waiting this costs a round trip to the writer, no transaction.
	l.b.flush()
	return l.Read(ctx, after, max)
}

func (l *qlog) Read(_ context.Context, after uint64, max int) ([]queue.Record, error) {
	var out []queue.Record
	err := l.b.db.View(func(tx *bolt.Tx) error {
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
		for k, v := c.Seek(from[:]); k != nil && len(out) < max; k, v = c.Next() {
			id := binary.BigEndian.Uint64(k)
			// Decode copies: v lives only as long as the transaction.
			m, err := codec.Decode(v)
			if err != nil {
				return fmt.Errorf("queue %q record %d: %w", l.name, id, err)
			}
			r := queue.Record{ID: id, Msg: m}
			for sk != nil && binary.BigEndian.Uint64(sk) < id {
				sk, sv = sc.Next()
			}
			if sk != nil && binary.BigEndian.Uint64(sk) == id {
				if err := r.State.UnmarshalBinary(sv); err != nil {
					return fmt.Errorf("queue %q record %d: %w", l.name, id, err)
				}
			}
			out = append(out, r)
		}
		return nil
	})
	if err != nil {
		return nil, l.b.unavailable(err)
	}
	return out, nil
}

// Remove implements queue.Log: committed with the next append's batch,
// or within lazyDelay (lazy.go).
func (l *qlog) Remove(ids ...uint64) {
	switch len(ids) {
	case 0:
	case 1:
		// A consumer's Ack: one ID, carried without a slice of its own.
		l.b.addLazy(op{log: l, rm: ids[0]})
	default:
		l.b.addLazy(op{log: l, ids: append([]uint64(nil), ids...)})
	}
}

// SetState implements queue.StateLog: committed as a Remove is.
func (l *qlog) SetState(id uint64, st queue.DeliveryState) {
	b, _ := st.AppendBinary(nil)
	l.b.addLazy(op{log: l, rm: id, state: b})
}

// AppendsInOrder implements queue.OrderedLog: the writer answers the
// appends of a commit in order, one commit after another, after the
// commit, and no other engine reads the file.
func (l *qlog) AppendsInOrder() bool { return true }

// Stats implements queue.Log from the counts the last commit wrote.
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
