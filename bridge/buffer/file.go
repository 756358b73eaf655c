package buffer

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

var (
	bucketMeta   = []byte("meta")
	bucketQueues = []byte("queues")
	bucketSizes  = []byte("sizes")
	keyFormat    = []byte("format")
)

const formatVersion = "1"

// Open opens (creating if needed) the buffer file under dir and starts its
// writer goroutine. A damaged file fails with an error wrapping ErrCorrupt
// that names it; the caller decides whether to move it aside.
func Open(dir string, o Options) (*Buffer, error) {
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	if o.Policy != RejectNew && o.Policy != DropOldest {
		return nil, fmt.Errorf("bridge buffer: unknown policy %v", o.Policy)
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.OpenTimeout <= 0 {
		o.OpenTimeout = 5 * time.Second
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("bridge buffer: %w", err)
	}
	path := filepath.Join(dir, FileName)
	db, err := openBolt(path, o.OpenTimeout)
	if err != nil {
		return nil, err
	}
	b := &Buffer{
		db:     db,
		path:   path,
		opts:   o,
		logger: o.Logger,
		reqs:   make(chan *request, maxBatch),
		queues: map[string]*published{},
		stop:   make(chan struct{}),
		cbWake: make(chan struct{}, 1),
		// Closed by the writer when it ends: the notifier's last round.
		writerDone: make(chan struct{}),
	}
	b.w.touched = map[string]*touched{}
	if err := b.load(); err != nil {
		_ = db.Close()
		return nil, err
	}
	b.publishAll()
	b.wg.Add(2)
	go b.run()
	go b.notify()
	return b, nil
}

// openBolt opens the file, turning bbolt's refusals of a damaged file (and
// any panic or fault while it reads one) into an error naming it. When
// bbolt panics inside its Open (a damaged freelist page), it has not closed
// the file: its descriptor and lock stay held until the process exits, which
// only matters to a caller that retries on the same file in-process.
//
// The freelist stays synced (bbolt's default, unlike retain/embedded): it
// costs a page write in each commit's first fsync, where NoFreelistSync
// would make every Open walk every page of the file to rebuild it — a
// gigabyte read at start-up on an edge box's SD card, after a crash, just
// when the buffer is fullest.
func openBolt(path string, timeout time.Duration) (db *bolt.DB, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %s: %v", ErrCorrupt, path, p)
		}
	}()
	db, err = bolt.Open(path, 0o600, &bolt.Options{
		Timeout:      timeout,
		FreelistType: bolt.FreelistMapType,
	})
	switch {
	case err == nil:
		return db, nil
	case errors.Is(err, bolterrors.ErrTimeout):
		return nil, fmt.Errorf("bridge buffer: %s: locked by another process: %w", path, err)
	case errors.Is(err, bolterrors.ErrInvalid), errors.Is(err, bolterrors.ErrChecksum),
		errors.Is(err, bolterrors.ErrVersionMismatch), strings.Contains(err.Error(), "file size too small"):
		return nil, fmt.Errorf("%w: %s: %w", ErrCorrupt, path, err)
	}
	return nil, fmt.Errorf("bridge buffer: open %s: %w", path, err)
}

// load checks the file and builds the writer's state from it.
func (b *Buffer) load() (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %s: %v", ErrCorrupt, b.path, p)
		}
	}()
	fi, err := os.Stat(b.path)
	if err != nil {
		return fmt.Errorf("bridge buffer: %w", err)
	}
	// Check the size before reading any page: bbolt maps the file larger
	// than it is, and a page beyond its end faults (SIGBUS).
	err = b.db.View(func(tx *bolt.Tx) error {
		if tx.Size() > fi.Size() {
			return fmt.Errorf("%w: %s: truncated: the file is %d bytes, its pages reach %d", ErrCorrupt, b.path, fi.Size(), tx.Size())
		}
		return nil
	})
	if err != nil {
		return err
	}
	return b.db.Update(func(tx *bolt.Tx) error {
		meta, err := tx.CreateBucketIfNotExists(bucketMeta)
		if err != nil {
			return fmt.Errorf("bridge buffer: %s: %w", b.path, err)
		}
		switch v := meta.Get(keyFormat); {
		case v == nil && tx.Bucket(bucketQueues) == nil:
			if err := meta.Put(keyFormat, []byte(formatVersion)); err != nil {
				return err
			}
		case string(v) != formatVersion:
			return fmt.Errorf("%w: %s: file format %q, this gateway reads %q", ErrCorrupt, b.path, v, formatVersion)
		}
		for _, name := range [][]byte{bucketQueues, bucketSizes} {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return fmt.Errorf("bridge buffer: %s: %w", b.path, err)
			}
		}
		return b.scan(tx)
	})
}

// scan builds the writer's state from the sizes bucket and each queue's
// first and last keys: O(queues), not a read of every record. A queue whose
// stored counts cannot be right (missing, malformed, records counted in an
// empty queue or none in a non-empty one) is recounted, and fixed in the
// file when tx is writable.
func (b *Buffer) scan(tx *bolt.Tx) error {
	queues, sizes := tx.Bucket(bucketQueues), tx.Bucket(bucketSizes)
	if queues == nil || sizes == nil {
		return fmt.Errorf("%w: %s: buckets missing", ErrCorrupt, b.path)
	}
	w := &b.w
	w.queues, w.records, w.bytes = map[string]*qstate{}, 0, 0
	var fix []string
	err := queues.ForEach(func(k, v []byte) error {
		if v != nil {
			return fmt.Errorf("%w: %s: a record outside any queue", ErrCorrupt, b.path)
		}
		qb := queues.Bucket(k)
		st := &qstate{}
		st.first, st.last = bounds(qb)
		stored := sizes.Get(k)
		if len(stored) == 16 {
			st.records = int64(binary.BigEndian.Uint64(stored))
			st.bytes = int64(binary.BigEndian.Uint64(stored[8:]))
		}
		if len(stored) != 16 || (st.records == 0) != (st.last == 0) || (st.records == 0) != (st.bytes == 0) ||
			st.records < 0 || st.bytes < st.records*RecordOverhead {
			var err error
			if st.records, st.bytes, err = recount(qb); err != nil {
				return fmt.Errorf("%w: %s: queue %q: %w", ErrCorrupt, b.path, k, err)
			}
			b.logger.Warn("bridge buffer: recounted a queue whose stored size was inconsistent", "file", b.path, "queue", string(k), "records", st.records)
			fix = append(fix, string(k))
		}
		w.queues[string(k)] = st
		w.records += st.records
		w.bytes += st.bytes
		return nil
	})
	if err != nil || !tx.Writable() {
		return err
	}
	for _, name := range fix {
		st := w.queues[name]
		if err := sizes.Put([]byte(name), encodeSizes(st.records, st.bytes)); err != nil {
			return err
		}
	}
	return nil
}

// recount reads a queue's every record.
func recount(qb *bolt.Bucket) (records, bytes int64, err error) {
	err = qb.ForEach(func(k, v []byte) error {
		if len(k) != 8 || v == nil {
			return fmt.Errorf("key %x is not a record", k)
		}
		records++
		bytes += int64(len(v)) + RecordOverhead
		return nil
	})
	return records, bytes, err
}

// reload rebuilds the writer's state from the file after a transaction
// failed (the file is as it was before it) and publishes it. Writer
// goroutine only.
func (b *Buffer) reload() (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = b.corrupt("reloading", p)
		}
	}()
	err = b.db.View(b.scan)
	if err != nil {
		if errors.Is(err, ErrCorrupt) {
			b.broken.CompareAndSwap(nil, &err)
		}
		return err
	}
	b.publishAll()
	return nil
}

// corrupt records that reading the file panicked or faulted: every call
// fails with the returned error from now on.
func (b *Buffer) corrupt(doing string, p any) error {
	err := fmt.Errorf("%w: %s: %s: %v", ErrCorrupt, b.path, doing, p)
	if b.broken.CompareAndSwap(nil, &err) {
		b.logger.Error("bridge buffer: file damaged, refusing every call until it is repaired or removed", "file", b.path, "err", err)
	}
	return err
}

// read is Next's transaction: up to n records after after, copied into one
// allocation sized from hint (the queue's published counts).
func (b *Buffer) read(queue string, after uint64, n int, hint QueueStats) (recs []Record, err error) {
	if after == ^uint64(0) {
		return nil, nil
	}
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			recs, err = nil, b.corrupt("reading", p)
		}
	}()
	count := min(int64(n), hint.Records)
	avg := hint.Bytes/hint.Records - RecordOverhead
	recs = make([]Record, 0, count)
	data := make([]byte, 0, min(count*max(avg, 0), maxNextBytes))
	err = b.db.View(func(tx *bolt.Tx) error {
		qb := tx.Bucket(bucketQueues).Bucket([]byte(queue))
		if qb == nil {
			return nil
		}
		var from [8]byte
		binary.BigEndian.PutUint64(from[:], after+1)
		c := qb.Cursor()
		for k, v := c.Seek(from[:]); k != nil && len(recs) < n && len(data) < maxNextBytes; k, v = c.Next() {
			if len(k) != 8 {
				return fmt.Errorf("%w: %s: queue %q: key %x is not a record", ErrCorrupt, b.path, queue, k)
			}
			// A Data slice keeps pointing at the old array if data grows:
			// the bytes it names were copied there and stay valid.
			start := len(data)
			data = append(data, v...)
			recs = append(recs, Record{Seq: binary.BigEndian.Uint64(k), Data: data[start:len(data):len(data)]})
		}
		return nil
	})
	if err != nil {
		if !errors.Is(err, ErrCorrupt) {
			err = fmt.Errorf("bridge buffer: %s: read %q: %w", b.path, queue, err)
		}
		return nil, err
	}
	return recs, nil
}
