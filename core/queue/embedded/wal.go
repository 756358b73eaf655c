package embedded

// The write-ahead log in front of bbolt (docs/queues.md, "Storage" and
// "Group commit"). A bbolt commit writes its dirty pages and its meta page
// with two fdatasyncs, tens of writes in all; a commit of the log is one
// write at the end of an append-only file and one fdatasync. So the writer
// logs every batch (appends, removals, delivery states) and answers the
// appends once the log is synced; the records also go into an in-memory
// overlay that reads merge with bbolt. A checkpoint, off the writer's path,
// applies what the overlay holds in one bbolt transaction (fsync'd as
// ever: bbolt never runs with NoSync) and deletes the log segments it
// covers. Opening replays the segments left over into bbolt first.
//
// Segment files are <path>.wal.<16 hex digits>, numbered in the order they
// were written. A record is
//
//	u32 length of body, u32 CRC-32C of body, body
//
// and a body is one of
//
//	1 name id:u64 size:uvarint data   an append (data: the compact encoding)
//	2 name n:uvarint id:u64 ...       removals
//	3 name id:u64 state               a delivery state (queue.DeliveryState)
//
// with name a uvarint length and the queue's name. Replay of a segment
// stops at its first record that is short or fails its CRC (a torn write:
// never acknowledged, since an append is answered after the fdatasync that
// follows its whole record) and goes on with the next segment.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/tolsey/tolsey/core"
	"github.com/tolsey/tolsey/core/codec"
	"github.com/tolsey/tolsey/core/queue"
)

const (
	recAppend byte = 1
	recRemove byte = 2
	recState  byte = 3
)

// Checkpoint policy (Backend fields of the same names; tests change them).
const (
	// segmentMax starts a checkpoint once the segment being written holds
	// this much: what a checkpoint transaction writes at most, roughly.
	segmentMax = 16 << 20
	// segmentHard makes the writer wait for the checkpoint running before
	// it starts the next: the overlay's memory is bounded by about twice
	// this.
	segmentHard = 64 << 20
	// checkpointDelay starts a checkpoint of whatever the log holds this
	// long after it was written to: how long the overlay keeps records
	// when appends are few.
	checkpointDelay = time.Second
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ovRec is one appended record in a queue's overlay: the message as
// appended (immutable), nil once it is removed. The log holds its
// encoding; a checkpoint encodes it again for bbolt, for the few records
// still there by then (most are removed first, never encoded but once).
type ovRec struct {
	id   uint64
	size int64
	msg  *core.Message
}

// overlay is what a queue's log holds beyond bbolt. Guarded by
// Backend.ovMu.
type overlay struct {
	// recs are the appends since the last checkpoint, by ID. Those up to
	// frozenHi are being written by the running checkpoint: a removal of
	// one goes to removed (bbolt's copy must go too), where a removal of a
	// later one just drops it here, and bbolt never sees it.
	recs     []ovRec
	frozenHi uint64
	// removed: IDs to delete from bbolt at the next checkpoint; removing:
	// those the running checkpoint deletes. Reads skip both.
	removed, removing map[uint64]struct{}
	// states: delivery states for the next checkpoint; statesCk: those the
	// running checkpoint writes. Reads prefer them to bbolt's.
	states, statesCk map[uint64][]byte
}

// find returns the index of id in recs, or -1.
func (o *overlay) find(id uint64) int {
	i := sort.Search(len(o.recs), func(i int) bool { return o.recs[i].id >= id })
	if i < len(o.recs) && o.recs[i].id == id {
		return i
	}
	return -1
}

func (o *overlay) empty() bool {
	return len(o.recs) == 0 && len(o.removed) == 0 && len(o.removing) == 0 &&
		len(o.states) == 0 && len(o.statesCk) == 0
}

// cutQueue is one queue's part of a checkpoint.
type cutQueue struct {
	l        *qlog
	hi       uint64  // the highest ID appended: bbolt's sequence
	recs     []ovRec // live appends to write
	removing map[uint64]struct{}
	states   map[uint64][]byte

	gone, goneBytes int64 // what the transaction deleted (counts)
}

// cut is one checkpoint: what the overlay held when the writer closed
// segment seg; the checkpoint deletes segments up to seg.
type cut struct {
	queues []cutQueue
	seg    uint64
	// logBytes is what the log held when the cut was taken: all of it is
	// in the segments up to seg.
	logBytes int64
}

func segmentName(path string, n uint64) string {
	return fmt.Sprintf("%s.wal.%016x", path, n)
}

// segments lists the log's segment numbers, in order.
func segments(path string) ([]uint64, error) {
	names, err := filepath.Glob(path + ".wal.*")
	if err != nil {
		return nil, err
	}
	var out []uint64
	prefix := path + ".wal."
	for _, name := range names {
		n, err := strconv.ParseUint(strings.TrimPrefix(name, prefix), 16, 64)
		if err != nil || len(name) != len(prefix)+16 {
			continue
		}
		out = append(out, n)
	}
	slices.Sort(out)
	return out, nil
}

// syncDir makes file creations and removals in path's directory durable.
func syncDir(path string) error {
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// frame frames the body (which the caller appended to buf after
// reserving 8 bytes at start) with its length and CRC.
func frame(buf []byte, start int) {
	body := buf[start+8:]
	binary.LittleEndian.PutUint32(buf[start:], uint32(len(body)))
	binary.LittleEndian.PutUint32(buf[start+4:], crc32.Checksum(body, castagnoli))
}

func appendName(buf []byte, name string) []byte {
	buf = binary.AppendUvarint(buf, uint64(len(name)))
	return append(buf, name...)
}

// encodeOp appends o's log record to buf.
func encodeOp(buf []byte, o *op) []byte {
	start := len(buf)
	buf = append(buf, 0, 0, 0, 0, 0, 0, 0, 0)
	switch {
	case o.done != nil:
		buf = append(buf, recAppend)
		buf = appendName(buf, o.log.name)
		buf = binary.BigEndian.AppendUint64(buf, o.id)
		buf = binary.AppendUvarint(buf, uint64(o.size))
		// AppendCompact: a message received over AMQP would otherwise
		// carry its payload twice (in its native bytes too), twice the
		// bytes to log, keep and checkpoint.
		buf = codec.AppendCompact(buf, o.msg)
	case o.state != nil:
		buf = append(buf, recState)
		buf = appendName(buf, o.log.name)
		buf = binary.BigEndian.AppendUint64(buf, o.rm)
		buf = append(buf, o.state...)
	default:
		buf = append(buf, recRemove)
		buf = appendName(buf, o.log.name)
		if o.ids == nil {
			buf = binary.AppendUvarint(buf, 1)
			buf = binary.BigEndian.AppendUint64(buf, o.rm)
		} else {
			buf = binary.AppendUvarint(buf, uint64(len(o.ids)))
			for _, id := range o.ids {
				buf = binary.BigEndian.AppendUint64(buf, id)
			}
		}
	}
	frame(buf, start)
	return buf
}

// walRecord is one decoded log record.
type walRecord struct {
	kind byte
	name string
	id   uint64   // append, state
	size int64    // append
	data []byte   // append: the encoding; state: the state
	ids  []uint64 // remove
}

var errTorn = errors.New("torn or invalid record")

// nextRecord decodes the record at the start of b and returns the rest.
func nextRecord(b []byte) (walRecord, []byte, error) {
	var r walRecord
	if len(b) < 8 {
		return r, nil, errTorn
	}
	n := binary.LittleEndian.Uint32(b)
	sum := binary.LittleEndian.Uint32(b[4:])
	if n == 0 || uint64(n) > uint64(len(b)-8) {
		return r, nil, errTorn
	}
	body := b[8 : 8+n]
	if crc32.Checksum(body, castagnoli) != sum {
		return r, nil, errTorn
	}
	rest := b[8+n:]
	r.kind = body[0]
	body = body[1:]
	ln, k := binary.Uvarint(body)
	if k <= 0 || ln > uint64(len(body)-k) {
		return r, nil, errTorn
	}
	r.name = string(body[k : k+int(ln)])
	body = body[k+int(ln):]
	switch r.kind {
	case recAppend, recState:
		if len(body) < 8 {
			return r, nil, errTorn
		}
		r.id = binary.BigEndian.Uint64(body)
		body = body[8:]
		if r.kind == recAppend {
			s, k := binary.Uvarint(body)
			if k <= 0 {
				return r, nil, errTorn
			}
			r.size = int64(s)
			body = body[k:]
		}
		r.data = body
	case recRemove:
		c, k := binary.Uvarint(body)
		if k <= 0 || c > uint64(len(body)-k)/8 {
			return r, nil, errTorn
		}
		body = body[k:]
		r.ids = make([]uint64, c)
		for i := range r.ids {
			r.ids[i] = binary.BigEndian.Uint64(body[8*i:])
		}
	default:
		return r, nil, errTorn
	}
	return r, rest, nil
}

// replay applies the segments a previous run left into bbolt, in one
// transaction, deletes them, and returns the number the next segment
// takes. Applying is idempotent (a segment a checkpoint applied but had
// not deleted yet is applied again to the same effect).
func (b *Backend) replay() (uint64, error) {
	segs, err := segments(b.path)
	if err != nil || len(segs) == 0 {
		return 1, err
	}
	err = b.db.Update(func(tx *bolt.Tx) error {
		queues := tx.Bucket(bucketQueues)
		touched := map[string]*txQueue{}
		hi := map[string]uint64{}
		for _, n := range segs {
			data, err := os.ReadFile(segmentName(b.path, n))
			if err != nil {
				return err
			}
			for len(data) > 0 {
				r, rest, err := nextRecord(data)
				if err != nil {
					if n != segs[len(segs)-1] {
						b.log.Warn("queue store: log segment ends in a torn record; replay goes on with the next segment",
							"segment", segmentName(b.path, n), "bytesSkipped", len(data))
					}
					// A torn write ends its segment: nothing after it in
					// the segment was acknowledged. Not the log: a later
					// segment was started after this one's last good
					// record was synced (a failed write is cut back in
					// the page cache only, and a segment closed after
					// it may keep its head), and holds acknowledged
					// records.
					break
				}
				data = rest
				q := touched[r.name]
				if q == nil {
					qb := queues.Bucket([]byte(r.name))
					if qb == nil {
						continue // dropped
					}
					q = newTxQueue(qb)
					touched[r.name] = q
				}
				switch r.kind {
				case recAppend:
					if err := q.put(r.id, r.data, r.size); err != nil {
						return err
					}
					hi[r.name] = max(hi[r.name], r.id)
				case recState:
					if err := q.setState(r.id, r.data); err != nil {
						return err
					}
				case recRemove:
					for _, id := range r.ids {
						if _, _, err := q.remove(r.name, id); err != nil {
							return err
						}
					}
				}
			}
		}
		return replayDone(touched, hi)
	})
	if err != nil {
		return 0, fmt.Errorf("replay the log: %w", err)
	}
	for _, n := range segs {
		if err := os.Remove(segmentName(b.path, n)); err != nil {
			return 0, err
		}
	}
	return segs[len(segs)-1] + 1, syncDir(b.path)
}

func replayDone(touched map[string]*txQueue, hi map[string]uint64) error {
	for name, q := range touched {
		if err := q.finish(hi[name]); err != nil {
			return err
		}
	}
	return nil
}

// newTxQueue starts a queue's part of a transaction.
func newTxQueue(qb *bolt.Bucket) *txQueue {
	q := &txQueue{bucket: qb.Bucket(bucketRecords), counts: qb}
	if d := qb.Bucket(bucketStates); d != nil {
		if k, _ := d.Cursor().First(); k != nil {
			q.states = d
		}
	}
	q.records, q.bytes = readCounts(qb)
	// Keys only ever grow: full pages instead of half-full ones on split.
	q.bucket.FillPercent = 1.0
	return q
}

// put stores a record unless it is there already (a replay).
func (q *txQueue) put(id uint64, data []byte, size int64) error {
	var key [8]byte
	binary.BigEndian.PutUint64(key[:], id)
	if q.bucket.Get(key[:]) == nil {
		q.records++
		q.bytes += size
	}
	return q.bucket.Put(key[:], data)
}

// setState stores a delivery state for a record that is there.
func (q *txQueue) setState(id uint64, state []byte) error {
	var key [8]byte
	binary.BigEndian.PutUint64(key[:], id)
	if q.bucket.Get(key[:]) == nil {
		return nil // removed meanwhile: its state goes with it
	}
	if q.states == nil {
		d, err := q.counts.CreateBucketIfNotExists(bucketStates)
		if err != nil {
			return err
		}
		q.states = d
		q.stateCur = nil
	}
	return q.states.Put(key[:], state)
}

// remove deletes a record and its state, and says whether it was there
// and its size. One seek of a cursor kept for the transaction finds the
// record, reads its size and deletes it.
func (q *txQueue) remove(name string, id uint64) (bool, int64, error) {
	var key [8]byte
	binary.BigEndian.PutUint64(key[:], id)
	if q.cur == nil {
		q.cur = q.bucket.Cursor()
	}
	k, v := q.cur.Seek(key[:])
	if k == nil || binary.BigEndian.Uint64(k) != id {
		return false, 0, nil // removed before, or never stored
	}
	meta, err := codec.ReadMeta(v)
	if err != nil {
		return false, 0, fmt.Errorf("queue %q record %d: %w", name, id, err)
	}
	if err := q.cur.Delete(); err != nil {
		return false, 0, err
	}
	if q.states != nil {
		if q.stateCur == nil {
			q.stateCur = q.states.Cursor()
		}
		if k, _ := q.stateCur.Seek(key[:]); k != nil && binary.BigEndian.Uint64(k) == id {
			if err := q.stateCur.Delete(); err != nil {
				return false, 0, err
			}
		}
	}
	q.records--
	q.bytes -= int64(meta.Size)
	return true, int64(meta.Size), nil
}

// finish writes the counts and raises the sequence to hi: IDs are never
// reused after a reopen. A queue that holds no record holds no bytes:
// records stored before core.Message.Size counted an AMQP body once were
// counted with the larger size and are deleted with the smaller.
func (q *txQueue) finish(hi uint64) error {
	if hi > q.bucket.Sequence() {
		if err := q.bucket.SetSequence(hi); err != nil {
			return err
		}
	}
	if q.records == 0 {
		q.bytes = 0
	}
	return q.counts.Put(keyCounts, encodeCounts(q.records, q.bytes))
}

// newSegment creates segment n and makes its name durable. On the writer
// goroutine (or Open).
func (b *Backend) newSegment(n uint64) error {
	f, err := os.OpenFile(segmentName(b.path, n), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if err := syncDir(b.path); err != nil {
		_ = f.Close()
		return err
	}
	b.seg, b.segNo, b.segSize = f, n, 0
	return nil
}

// writeLog writes buf at the end of the segment and syncs it. A failed
// write is cut off again, so that the next one follows the last good
// record. On the writer goroutine.
func (b *Backend) writeLog(buf []byte) error {
	b.walMu.Lock()
	defer b.walMu.Unlock()
	_, err := b.seg.WriteAt(buf, b.segSize)
	if err == nil {
		err = fdatasync(b.seg)
	}
	if err != nil {
		if terr := b.seg.Truncate(b.segSize); terr != nil {
			b.failed = fmt.Errorf("the log cannot be cut back after a failed write: %w", terr)
		}
		return err
	}
	b.segSize += int64(len(buf))
	b.logBytes.Add(int64(len(buf)))
	return nil
}

// logFull is the refusal of appends while checkpoints fail and the log
// holds maxLog or more that none applied, or nil. Removals and states
// are still logged: they let consumers drain the queues meanwhile. On
// the writer goroutine.
func (b *Backend) logFull() error {
	if !b.ckFailed {
		return nil
	}
	n := b.logBytes.Load()
	if n < b.maxLog {
		return nil
	}
	return fmt.Errorf("%w: embedded %s: its write-ahead log holds %d bytes that no checkpoint applied, its limit %d (queues.embedded.maxLog), while checkpoints fail (%v); appends are refused until one succeeds",
		queue.ErrUnavailable, b.path, n, b.maxLog, b.ckRep.lastErr())
}

// takeCut closes the segment being written (a new one follows unless
// last) and freezes what the overlay holds for a checkpoint. On the
// writer goroutine, with no checkpoint running.
func (b *Backend) takeCut(last bool) (*cut, error) {
	c := &cut{seg: b.segNo, logBytes: b.logBytes.Load()}
	switch {
	case last:
		_ = b.seg.Close() // synced with its last write
	case b.segSize == 0:
		// Nothing written since the last cut (a failed checkpoint tried
		// again): the segments before this one hold all the overlay
		// does, and no empty segment is made per try.
		c.seg = b.segNo - 1
	default:
		old := b.seg
		if err := b.newSegment(b.segNo + 1); err != nil {
			return nil, err
		}
		_ = old.Close() // synced with its last write
	}
	b.ovMu.Lock()
	defer b.ovMu.Unlock()
	for l := range b.ovQueues {
		o := &l.ov
		if o.empty() {
			delete(b.ovQueues, l)
			continue
		}
		cq := cutQueue{l: l}
		for _, r := range o.recs {
			if r.msg != nil {
				cq.recs = append(cq.recs, r)
			}
		}
		if len(o.recs) > 0 {
			cq.hi = o.recs[len(o.recs)-1].id
		}
		o.frozenHi = cq.hi
		o.removing, o.removed = o.removed, nil
		o.statesCk, o.states = o.states, nil
		cq.removing, cq.states = o.removing, o.statesCk
		c.queues = append(c.queues, cq)
	}
	return c, nil
}

// checkpoint applies c in one bbolt transaction, drops what it wrote
// from the overlay, and deletes the segments it covers. On the
// checkpointer goroutine (or the writer's, for Drop; or Close).
func (b *Backend) checkpoint(c *cut) error {
	if len(c.queues) > 0 {
		err := b.db.Update(func(tx *bolt.Tx) error {
			if b.checkpointFault != nil {
				if err := b.checkpointFault(); err != nil {
					return err
				}
			}
			queues := tx.Bucket(bucketQueues)
			for i := range c.queues {
				cq := &c.queues[i]
				// A queue being dropped is written too: if the Drop's
				// transaction fails, the queue stays, with its records
				// in bbolt (the overlay forgets them below, and the
				// segments go).
				qb := queues.Bucket(cq.l.key)
				if qb == nil || cq.l.gone.Load() {
					continue
				}
				q := newTxQueue(qb)
				// The encodings in one buffer: bbolt keeps a value's
				// bytes until the transaction ends, so each is a slice of
				// its own (earlier ones stay valid when append moves on
				// to a larger array).
				var need int64
				for _, r := range cq.recs {
					need += r.size + 64
				}
				slab := make([]byte, 0, need)
				for _, r := range cq.recs {
					start := len(slab)
					slab = codec.AppendCompact(slab, r.msg)
					if err := q.put(r.id, slab[start:len(slab):len(slab)], r.size); err != nil {
						return err
					}
				}
				for id, st := range cq.states {
					if err := q.setState(id, st); err != nil {
						return err
					}
				}
				for id := range cq.removing {
					ok, size, err := q.remove(cq.l.name, id)
					if err != nil {
						return err
					}
					if ok {
						cq.gone++
						cq.goneBytes += size
					}
				}
				if err := q.finish(cq.hi); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.unfreeze(c)
			return err
		}
		b.checkpoints.Add(1)
	}
	// Readers hold ckMu while they read bbolt and the overlay: one that
	// began before the commit still finds what it wrote in the overlay,
	// and what it deleted in removing.
	b.ckMu.Lock()
	b.ovMu.Lock()
	for i := range c.queues {
		cq := &c.queues[i]
		o := &cq.l.ov
		n := sort.Search(len(o.recs), func(i int) bool { return o.recs[i].id > cq.hi })
		clear(o.recs[:n])
		o.recs = o.recs[n:]
		o.frozenHi = 0
		o.removing, o.statesCk = nil, nil
		cq.l.records.Add(-cq.gone)
		cq.l.bytes.Add(-cq.goneBytes)
	}
	b.ovMu.Unlock()
	b.ckMu.Unlock()
	segs, err := segments(b.path)
	if err != nil {
		return err
	}
	for _, n := range segs {
		if n <= c.seg {
			if err := os.Remove(segmentName(b.path, n)); err != nil {
				return err
			}
		}
	}
	return syncDir(b.path)
}

// unfreeze gives a cut that failed back to the overlay: its records stay
// there, and its segments on disk, until a later checkpoint (whose cut
// holds everything the overlay does) succeeds.
func (b *Backend) unfreeze(c *cut) {
	b.ovMu.Lock()
	defer b.ovMu.Unlock()
	for i := range c.queues {
		cq := &c.queues[i]
		o := &cq.l.ov
		o.frozenHi = 0
		for id := range o.removing {
			if o.removed == nil {
				o.removed = map[uint64]struct{}{}
			}
			o.removed[id] = struct{}{}
		}
		for id, st := range o.statesCk {
			if _, newer := o.states[id]; !newer {
				if o.states == nil {
					o.states = map[uint64][]byte{}
				}
				o.states[id] = st
			}
		}
		o.removing, o.statesCk = nil, nil
		b.ovQueues[cq.l] = struct{}{}
	}
}

// checkpointer runs the checkpoints the writer hands it, one at a time.
func (b *Backend) checkpointer() {
	defer close(b.ckExited)
	for c := range b.cuts {
		b.ckDone <- b.checkpoint(c)
	}
}

// maybeCheckpoint, after a commit, starts a checkpoint when the segment
// is full or old enough (tick), and waits for the running one when the
// log has grown too far ahead of bbolt. On the writer goroutine.
func (b *Backend) maybeCheckpoint(tick bool) {
	b.reapCheckpoint(false)
	if (b.segSize == 0 && !b.ckFailed) || b.failed != nil {
		return
	}
	if b.segSize < b.segmentMax && !tick {
		return
	}
	if b.ckBusy {
		if b.segSize < b.segmentHard {
			return // the next commit or tick tries again
		}
		b.reapCheckpoint(true)
		if b.failed != nil {
			return
		}
	}
	c, err := b.takeCut(false)
	if err != nil {
		// No new segment (a full disk?): the next commit or tick tries
		// again.
		b.ckFailed = true
		b.noteCheckpoint(fmt.Errorf("start a log segment: %w", err))
		return
	}
	b.ckBusy = true
	b.ckCutBytes = c.logBytes
	b.cuts <- c
}

// reapCheckpoint notes the end of the running checkpoint; wait blocks
// for it. A failed checkpoint gave its cut back to the overlay
// (unfreeze): the next tick tries again, and until one succeeds the log
// keeps everything. On the writer goroutine.
func (b *Backend) reapCheckpoint(wait bool) {
	if !b.ckBusy {
		return
	}
	var err error
	if wait {
		err = <-b.ckDone
	} else {
		select {
		case err = <-b.ckDone:
		default:
			return
		}
	}
	b.ckBusy = false
	b.ckFailed = err != nil
	if err == nil {
		b.logBytes.Add(-b.ckCutBytes)
	}
	b.noteCheckpoint(err)
}

// checkpointNow applies everything logged so far to bbolt before it
// returns (Drop; tests). On the writer goroutine.
func (b *Backend) checkpointNow() error {
	b.reapCheckpoint(true)
	if b.failed != nil {
		return b.failed
	}
	c, err := b.takeCut(false)
	if err != nil {
		err = fmt.Errorf("start a log segment: %w", err)
	} else if err = b.checkpoint(c); err != nil {
		err = fmt.Errorf("checkpoint: %w", err)
	} else {
		b.logBytes.Add(-c.logBytes)
	}
	b.ckFailed = err != nil
	b.noteCheckpoint(err)
	return err
}

// armTick asks for a commit (and with it a checkpoint) checkpointDelay
// from now, while the log holds something or the last checkpoint failed
// (it is tried again, appends or none). On the writer goroutine.
func (b *Backend) armTick() {
	if b.tickArmed || (b.segSize == 0 && !b.ckBusy && !b.ckFailed) {
		return
	}
	b.tickArmed = true
	time.AfterFunc(b.checkpointDelay, func() { b.loop.Add(op{tick: true}) })
}

// checkpointLogEvery is how often a checkpoint that keeps failing is
// logged again (Backend.checkpointLogEvery; tests change it).
const checkpointLogEvery = time.Minute

// ckReport is what the checkpoints' failures show operators
// (CheckpointErr, the log).
type ckReport struct {
	mu     sync.Mutex
	err    error     // the last failure; nil once one succeeds
	since  time.Time // the first failure of this run of them
	fails  uint64    // failures in this run
	logged time.Time // the last line logged of this run
}

// noteCheckpoint records a checkpoint's outcome (nil: it succeeded) for
// CheckpointErr and logs it: the first failure, then once every
// checkpointLogEvery while they go on, and the recovery.
func (b *Backend) noteCheckpoint(err error) {
	r := &b.ckRep
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	if err == nil {
		if r.err != nil {
			b.log.Info("queue store: checkpoint succeeded again", "path", b.path,
				"failures", r.fails, "failingFor", now.Sub(r.since).Round(time.Millisecond))
		}
		r.err, r.fails = nil, 0
		return
	}
	b.ckFailures.Add(1)
	if r.err == nil {
		r.since, r.logged, r.fails, r.err = now, now, 1, err
		b.log.Error("queue store: checkpoint failed; the write-ahead log keeps every record, memory and log grow until one succeeds, appends are refused once the log holds maxLog; tried again",
			"path", b.path, "maxLog", b.maxLog, "error", err)
		return
	}
	r.fails++
	r.err = err
	if now.Sub(r.logged) >= b.checkpointLogEvery {
		r.logged = now
		b.log.Error("queue store: checkpoint still failing", "path", b.path,
			"since", r.since.UTC().Format(time.RFC3339), "failures", r.fails, "error", err)
	}
}

// lastErr is the last checkpoint's failure, or nil.
func (r *ckReport) lastErr() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// CheckpointErr says why checkpoints are failing, since when and how
// many times, and whether appends are refused, or nil when the last one
// succeeded (none failed since it). The store takes appends meanwhile
// (they are in the log) until the log holds Options.MaxLog.
func (b *Backend) CheckpointErr() error {
	r := &b.ckRep
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err == nil {
		return nil
	}
	appends := "appends taken"
	if n := b.logBytes.Load(); n >= b.maxLog {
		appends = fmt.Sprintf("appends refused (the log holds %d bytes, its limit %d)", n, b.maxLog)
	}
	return fmt.Errorf("embedded %s: checkpoints failing since %s (%d tries), %s: %w",
		b.path, r.since.UTC().Format(time.RFC3339), r.fails, appends, r.err)
}

// CheckpointFailures counts the checkpoints that failed since Open.
func (b *Backend) CheckpointFailures() uint64 { return b.ckFailures.Load() }
