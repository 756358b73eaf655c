package buffer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.uber.org/goleak"

	"github.com/tolsey/tolsey/core/coretest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func open(t testing.TB, dir string, o Options) *Buffer {
	t.Helper()
	b, err := Open(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

func ctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return c
}

func appendN(t testing.TB, b *Buffer, queue string, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		if _, err := b.Append(ctx(t), queue, []byte(fmt.Sprintf("%s-%d", queue, i))); err != nil {
			t.Fatalf("append %s %d: %v", queue, i, err)
		}
	}
}

// all reads a queue to its end, n records at a time.
func all(t testing.TB, b *Buffer, queue string) []Record {
	t.Helper()
	var out []Record
	after := uint64(0)
	for {
		recs, err := b.Next(queue, after, 7)
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) == 0 {
			return out
		}
		out = append(out, recs...)
		after = recs[len(recs)-1].Seq
	}
}

func seqs(recs []Record) []uint64 {
	s := make([]uint64, len(recs))
	for i, r := range recs {
		s[i] = r.Seq
	}
	return s
}

func wantSeqs(t testing.TB, recs []Record, want ...uint64) {
	t.Helper()
	if got := seqs(recs); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("seqs %v, want %v", got, want)
	}
}

func span(from, to uint64) []uint64 {
	var s []uint64
	for i := from; i <= to; i++ {
		s = append(s, i)
	}
	return s
}

// bulkAppend loads n records into queue in commits of maxBatch: the
// requests are queued without waiting, so the writer takes them together.
func bulkAppend(tb testing.TB, b *Buffer, queue string, n int, rec []byte) {
	for n > 0 {
		reqs := make([]*request, min(n, maxBatch))
		for i := range reqs {
			reqs[i] = newRequest(context.Background(), opAppend, queue)
			reqs[i].data = append(reqs[i].data[:0], rec...)
			b.reqs <- reqs[i]
		}
		for _, r := range reqs {
			<-r.done
			if r.err != nil {
				tb.Fatal(r.err)
			}
			putRequest(r)
		}
		n -= len(reqs)
	}
}

func TestOrderPerQueue(t *testing.T) {
	b := open(t, t.TempDir(), Options{})
	for i := range 100 {
		seq, err := b.Append(ctx(t), "q", []byte(fmt.Sprint(i)))
		if err != nil || seq != uint64(i+1) {
			t.Fatalf("append %d: seq %d, %v", i, seq, err)
		}
	}
	recs := all(t, b, "q")
	wantSeqs(t, recs, span(1, 100)...)
	for i, r := range recs {
		if string(r.Data) != fmt.Sprint(i) {
			t.Fatalf("record %d holds %q", i, r.Data)
		}
	}
	// Next from the middle, and past the end.
	recs, _ = b.Next("q", 50, 3)
	wantSeqs(t, recs, 51, 52, 53)
	if recs, _ := b.Next("q", 100, 10); len(recs) != 0 {
		t.Fatalf("past the end: %v", seqs(recs))
	}
	if recs, _ := b.Next("unknown", 0, 10); len(recs) != 0 {
		t.Fatal("records in a queue never written")
	}
}

func TestQueuesIndependent(t *testing.T) {
	b := open(t, t.TempDir(), Options{})
	for i := range 10 {
		appendN(t, b, "a", i, i+1)
		appendN(t, b, "b", i, i+1)
		if i%2 == 0 {
			appendN(t, b, "c", i, i+1)
		}
	}
	// Each queue numbers its own records.
	wantSeqs(t, all(t, b, "a"), span(1, 10)...)
	wantSeqs(t, all(t, b, "c"), span(1, 5)...)
	if n, err := b.AckThrough(ctx(t), "a", 10); n != 10 || err != nil {
		t.Fatalf("ack a: %d, %v", n, err)
	}
	if n, err := b.Remove(ctx(t), "c"); n != 5 || err != nil {
		t.Fatalf("remove c: %d, %v", n, err)
	}
	b2 := all(t, b, "b")
	wantSeqs(t, b2, span(1, 10)...)
	if string(b2[3].Data) != "b-3" {
		t.Fatalf("b's 4th record: %q", b2[3].Data)
	}
	st := b.Stats()
	if st.Records != 10 || st.Queues["a"].Records != 0 || st.Queues["b"].Records != 10 || st.Queues["c"].Records != 0 {
		t.Fatalf("stats: %+v", st)
	}
	// A removed queue starts again at 1; a drained one does not.
	if seq, _ := b.Append(ctx(t), "c", []byte("x")); seq != 1 {
		t.Fatalf("removed queue's next seq %d", seq)
	}
	if seq, _ := b.Append(ctx(t), "a", []byte("x")); seq != 11 {
		t.Fatalf("drained queue's next seq %d", seq)
	}
}

func TestAckInOrder(t *testing.T) {
	b := open(t, t.TempDir(), Options{})
	appendN(t, b, "q", 0, 20)
	if n, err := b.AckThrough(ctx(t), "q", 5); n != 5 || err != nil {
		t.Fatalf("ack through 5: %d, %v", n, err)
	}
	wantSeqs(t, all(t, b, "q"), span(6, 20)...)
	if n, _ := b.AckThrough(ctx(t), "q", 5); n != 0 {
		t.Fatalf("acked again: %d removed", n)
	}
	if st := b.QueueStats("q"); st.Records != 15 || st.First != 6 || st.Last != 20 {
		t.Fatalf("stats %+v", st)
	}
	if n, _ := b.AckThrough(ctx(t), "q", 1000); n != 15 {
		t.Fatalf("ack through past the end: %d", n)
	}
	if st := b.QueueStats("q"); st.Records != 0 || st.Bytes != 0 || st.First != 0 || st.Last != 0 {
		t.Fatalf("stats when drained %+v", st)
	}
}

func TestAckOutOfOrder(t *testing.T) {
	b := open(t, t.TempDir(), Options{})
	appendN(t, b, "q", 0, 10)
	// A JetStream window completing out of order, with a duplicate ack and
	// an unknown seq in it.
	if n, err := b.Ack(ctx(t), "q", 7, 2, 10, 7, 99); n != 3 || err != nil {
		t.Fatalf("ack: %d, %v", n, err)
	}
	wantSeqs(t, all(t, b, "q"), 1, 3, 4, 5, 6, 8, 9)
	if st := b.QueueStats("q"); st.Records != 7 || st.First != 1 || st.Last != 9 {
		t.Fatalf("stats %+v", st)
	}
	// The hole left by 2 does not stop an in-order ack behind it.
	if n, _ := b.AckThrough(ctx(t), "q", 4); n != 3 {
		t.Fatalf("ack through 4: %d", n)
	}
	wantSeqs(t, all(t, b, "q"), 5, 6, 8, 9)
	recs, _ := b.Next("q", 6, 10)
	wantSeqs(t, recs, 8, 9)
}

func TestFullRejectNew(t *testing.T) {
	rec := bytes.Repeat([]byte("x"), 100)
	size := int64(len(rec) + RecordOverhead)
	var log coretest.SyncBuffer
	b := open(t, t.TempDir(), Options{MaxBytes: 10 * size, Policy: RejectNew, Logger: slog.New(slog.NewTextHandler(&log, nil))})
	for range 10 {
		if _, err := b.Append(ctx(t), "q", rec); err != nil {
			t.Fatal(err)
		}
	}
	_, err := b.Append(ctx(t), "other", rec)
	if !errors.Is(err, ErrFull) {
		t.Fatalf("append to a full buffer: %v", err)
	}
	if _, err := b.Append(ctx(t), "q", make([]byte, 10*size)); !errors.Is(err, ErrFull) {
		t.Fatalf("a record larger than the buffer: %v", err)
	}
	st := b.Stats()
	if st.Rejected != 2 || st.Queues["other"].Rejected != 1 || st.Queues["q"].Rejected != 1 || st.Records != 10 || st.Bytes != 10*size || st.Dropped != 0 {
		t.Fatalf("stats %+v", st)
	}
	// Acked records make room.
	if _, err := b.AckThrough(ctx(t), "q", 1); err != nil {
		t.Fatal(err)
	}
	if seq, err := b.Append(ctx(t), "other", rec); err != nil || seq != 1 {
		t.Fatalf("append after an ack: %d, %v", seq, err)
	}
	// Logged once when it filled (not per refusal), once when it had room.
	if n := strings.Count(log.String(), "bridge buffer full: rejecting new records"); n != 1 {
		t.Fatalf("%d full logs:\n%s", n, log.String())
	}
	// The writer logs after it answered: the append that found room again
	// is the one that logs it, once, however many follow.
	_, _ = b.AckThrough(ctx(t), "q", 5)
	appendN(t, b, "other", 0, 1)
	b.Close() // the writer is done: every line is written
	if n := strings.Count(log.String(), "has room again"); n != 1 {
		t.Fatalf("%d room-again logs:\n%s", n, log.String())
	}
}

// TestNextBoundedInBytes: a large n over large records stops at about
// maxNextBytes, and a record larger than that still comes, alone.
func TestNextBoundedInBytes(t *testing.T) {
	b := open(t, t.TempDir(), Options{})
	big := make([]byte, 1<<20)
	for range 20 {
		if _, err := b.Append(ctx(t), "q", big); err != nil {
			t.Fatal(err)
		}
	}
	recs, err := b.Next("q", 0, 100)
	if err != nil || len(recs) != maxNextBytes/len(big) {
		t.Fatalf("Next of 1 MiB records: %d records, %v", len(recs), err)
	}
	if _, err := b.Append(ctx(t), "huge", make([]byte, maxNextBytes+1)); err != nil {
		t.Fatal(err)
	}
	if recs, err := b.Next("huge", 0, 100); err != nil || len(recs) != 1 || len(recs[0].Data) != maxNextBytes+1 {
		t.Fatalf("Next of a record over the limit: %d records, %v", len(recs), err)
	}
}

func TestFullDropOldest(t *testing.T) {
	rec := bytes.Repeat([]byte("x"), 100)
	size := int64(len(rec) + RecordOverhead)
	b := open(t, t.TempDir(), Options{MaxBytes: 10 * size, Policy: DropOldest})
	for range 8 {
		if _, err := b.Append(ctx(t), "chatty", rec); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		if _, err := b.Append(ctx(t), "quiet", rec); err != nil {
			t.Fatal(err)
		}
	}
	// Full: a quiet rule's new record evicts the chatty rule's oldest, not
	// its own.
	for range 3 {
		if _, err := b.Append(ctx(t), "quiet", rec); err != nil {
			t.Fatalf("dropOldest refused: %v", err)
		}
	}
	wantSeqs(t, all(t, b, "quiet"), 1, 2, 3, 4, 5)
	wantSeqs(t, all(t, b, "chatty"), 4, 5, 6, 7, 8)
	// The chatty rule, now as large as the other, loses its own oldest
	// (ties go to the first name).
	if _, err := b.Append(ctx(t), "chatty", rec); err != nil {
		t.Fatal(err)
	}
	wantSeqs(t, all(t, b, "chatty"), 5, 6, 7, 8, 9)
	// A larger record drops several.
	if _, err := b.Append(ctx(t), "quiet", make([]byte, 2*len(rec))); err != nil {
		t.Fatal(err)
	}
	st := b.Stats()
	if st.Dropped != 6 || st.Queues["chatty"].Dropped != 6 || st.Queues["quiet"].Dropped != 0 ||
		st.DroppedBytes != uint64(6*size) || st.Rejected != 0 || st.Bytes > 10*size {
		t.Fatalf("stats %+v", st)
	}
	wantSeqs(t, all(t, b, "chatty"), 7, 8, 9)
	// Too large for the whole buffer: refused, nothing dropped.
	if _, err := b.Append(ctx(t), "quiet", make([]byte, 10*size)); !errors.Is(err, ErrFull) {
		t.Fatalf("a record larger than the buffer: %v", err)
	}
	if st := b.Stats(); st.Dropped != 6 || st.Rejected != 1 {
		t.Fatalf("stats after an oversized record %+v", st)
	}
}

// TestDropOldestInOneBatch: appends committed together still drop in
// order, including records appended earlier in the same transaction.
func TestDropOldestInOneBatch(t *testing.T) {
	rec := bytes.Repeat([]byte("x"), 100)
	size := int64(len(rec) + RecordOverhead)
	b := open(t, t.TempDir(), Options{MaxBytes: 4 * size, Policy: DropOldest})
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			if _, err := b.Append(ctx(t), "q", rec); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	wantSeqs(t, all(t, b, "q"), 29, 30, 31, 32)
	if st := b.Stats(); st.Dropped != 28 || st.Records != 4 {
		t.Fatalf("stats %+v", st)
	}
}

func TestRestart(t *testing.T) {
	dir := t.TempDir()
	rec := bytes.Repeat([]byte("r"), 50)
	size := int64(len(rec) + RecordOverhead)
	o := Options{MaxBytes: 30 * size}
	b := open(t, dir, o)
	for i := range 20 {
		if _, err := b.Append(ctx(t), []string{"a", "b"}[i%2], rec); err != nil {
			t.Fatal(err)
		}
	}
	_, _ = b.Ack(ctx(t), "a", 3, 1)
	_, _ = b.AckThrough(ctx(t), "b", 4)
	before := b.Stats()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b = open(t, dir, o)
	after := b.Stats()
	if after.Records != 14 || after.Bytes != 14*size || fmt.Sprint(after.Queues) != fmt.Sprint(before.Queues) {
		t.Fatalf("stats before %+v, after a restart %+v", before, after)
	}
	wantSeqs(t, all(t, b, "a"), 2, 4, 5, 6, 7, 8, 9, 10)
	wantSeqs(t, all(t, b, "b"), span(5, 10)...)
	// Sequence numbers go on; the byte count still bounds the buffer.
	if seq, _ := b.Append(ctx(t), "b", rec); seq != 11 {
		t.Fatalf("seq after a restart %d, want 11", seq)
	}
	for range 15 {
		if _, err := b.Append(ctx(t), "a", rec); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.Append(ctx(t), "a", rec); !errors.Is(err, ErrFull) {
		t.Fatalf("the 31st record after a restart: %v", err)
	}
	// A queue drained before a restart keeps counting.
	if _, err := b.AckThrough(ctx(t), "b", 11); err != nil {
		t.Fatal(err)
	}
	_ = b.Close()
	b = open(t, dir, o)
	if seq, _ := b.Append(ctx(t), "b", rec); seq != 12 {
		t.Fatalf("seq of a queue drained before the restart %d, want 12", seq)
	}
}

// TestStoredSizesMatchFile: after a mix of every operation, the counts kept
// in the file are what a full recount finds.
func TestStoredSizesMatchFile(t *testing.T) {
	dir := t.TempDir()
	b := open(t, dir, Options{MaxBytes: 16 << 10, Policy: DropOldest})
	for i := range 600 {
		q := fmt.Sprint("q", i%5)
		if _, err := b.Append(ctx(t), q, make([]byte, i%300)); err != nil {
			t.Fatal(err)
		}
		switch i % 7 {
		case 0:
			_, _ = b.AckThrough(ctx(t), q, uint64(i/10))
		case 3:
			_, _ = b.Ack(ctx(t), q, uint64(i/5), uint64(i/5+2))
		}
		if i == 400 {
			_, _ = b.Remove(ctx(t), "q2")
		}
	}
	st := b.Stats()
	_ = b.Close()
	db, err := bolt.Open(dir+"/"+FileName, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var records, total int64
	_ = db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketQueues).ForEach(func(k, _ []byte) error {
			r, n, err := recount(tx.Bucket(bucketQueues).Bucket(k))
			if err != nil {
				t.Fatal(err)
			}
			stored := st.Queues[string(k)]
			if stored.Records != r || stored.Bytes != n {
				t.Errorf("queue %s: stats %d records %d bytes, file %d, %d", k, stored.Records, stored.Bytes, r, n)
			}
			records += r
			total += n
			return nil
		})
	})
	if records != st.Records || total != st.Bytes || st.Bytes > 16<<10 || st.Dropped == 0 {
		t.Fatalf("stats %+v, file %d records %d bytes", st, records, total)
	}
}

// TestInconsistentSizesRecounted: a sizes entry that cannot be right is
// recounted at Open, with a warning, rather than trusted or fatal.
func TestInconsistentSizesRecounted(t *testing.T) {
	dir := t.TempDir()
	b := open(t, dir, Options{})
	appendN(t, b, "q", 0, 5)
	want := b.QueueStats("q")
	_ = b.Close()
	db, err := bolt.Open(dir+"/"+FileName, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketSizes).Put([]byte("q"), encodeSizes(0, 0)) })
	_ = db.Close()
	var log coretest.SyncBuffer
	b = open(t, dir, Options{Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if got := b.QueueStats("q"); got != want {
		t.Fatalf("recounted %+v, want %+v", got, want)
	}
	if !strings.Contains(log.String(), "recounted") {
		t.Fatalf("no warning: %q", log.String())
	}
	// Bytes counted in an empty queue would hold room no record holds (and
	// leave DropOldest nothing to drop).
	_, _ = b.AckThrough(ctx(t), "q", 5)
	_ = b.Close()
	db, err = bolt.Open(dir+"/"+FileName, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketSizes).Put([]byte("q"), encodeSizes(0, 5000)) })
	_ = db.Close()
	b = open(t, dir, Options{MaxBytes: 1000, Policy: DropOldest})
	if st := b.Stats(); st.Bytes != 0 {
		t.Fatalf("recounted %+v", st)
	}
	appendN(t, b, "q", 0, 1)
}

// TestConcurrentAppenders: writers sharing queues (and commits) get
// distinct, gap-free sequence numbers, in each writer's own order.
func TestConcurrentAppenders(t *testing.T) {
	b := open(t, t.TempDir(), Options{})
	const writers, each, queues = 32, 50, 4
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			q := fmt.Sprint("q", w%queues)
			last := uint64(0)
			for i := range each {
				seq, err := b.Append(ctx(t), q, []byte(fmt.Sprintf("%d/%d", w, i)))
				if err != nil {
					t.Error(err)
					return
				}
				if seq <= last {
					t.Errorf("writer %d: seq %d after %d", w, seq, last)
				}
				last = seq
			}
		})
	}
	// A reader and an acker run meanwhile.
	wg.Go(func() {
		for after := uint64(0); after < 20; {
			if err := b.Wait(ctx(t), "q0", after); err != nil {
				t.Error(err)
				return
			}
			recs, _ := b.Next("q0", after, 5)
			for _, r := range recs {
				after = r.Seq
			}
		}
		_, _ = b.AckThrough(ctx(t), "q0", 20)
	})
	wg.Wait()
	perQueue := writers / queues * each
	for q := range queues {
		recs := all(t, b, fmt.Sprint("q", q))
		from := uint64(1)
		if q == 0 {
			from = 21
		}
		wantSeqs(t, recs, span(from, uint64(perQueue))...)
		next := map[int]int{}
		for _, r := range recs {
			var w, i int
			fmt.Sscanf(string(r.Data), "%d/%d", &w, &i)
			if _, seen := next[w]; seen && i != next[w] {
				t.Fatalf("queue %d: writer %d's record %d after %d", q, w, i, next[w]-1)
			}
			next[w] = i + 1
		}
	}
	if st := b.Stats(); st.Records != writers*each-20 {
		t.Fatalf("stats %+v", st)
	}
}

func TestWaitWakesOnAppend(t *testing.T) {
	b := open(t, t.TempDir(), Options{})
	ch := b.Appended("q", 0)
	select {
	case <-ch:
		t.Fatal("ready before any append")
	default:
	}
	woke := make(chan error, 1)
	go func() { woke <- b.Wait(ctx(t), "q", 0) }()
	appendN(t, b, "q", 0, 1)
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("Appended's channel not closed by an append")
	}
	if err := <-woke; err != nil {
		t.Fatalf("Wait: %v", err)
	}
	// Ready at once while something is there; not for what was read.
	select {
	case <-b.Appended("q", 0):
	default:
		t.Fatal("not ready with a record after 0")
	}
	select {
	case <-b.Appended("q", 1):
		t.Fatal("ready with nothing after 1")
	default:
	}
	// Another queue's appends do not wake it.
	ch = b.Appended("q", 1)
	appendN(t, b, "other", 0, 1)
	select {
	case <-ch:
		t.Fatal("woken by another queue")
	default:
	}
	c, cancel := context.WithCancel(ctx(t))
	cancel()
	if err := b.Wait(c, "q", 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait with a cancelled ctx: %v", err)
	}
}

func TestWaitWakesOnClose(t *testing.T) {
	b := open(t, t.TempDir(), Options{})
	ch := b.Appended("q", 0)
	woke := make(chan error, 1)
	go func() { woke <- b.Wait(ctx(t), "q", 0) }()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	<-ch
	if err := <-woke; !errors.Is(err, ErrClosed) {
		t.Fatalf("Wait across Close: %v", err)
	}
	if err := b.Wait(ctx(t), "q", 0); !errors.Is(err, ErrClosed) {
		t.Fatalf("Wait after Close: %v", err)
	}
	if _, err := b.Append(ctx(t), "q", nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("Append after Close: %v", err)
	}
	if _, err := b.Next("q", 0, 1); !errors.Is(err, ErrClosed) {
		t.Fatalf("Next after Close: %v", err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// TestCloseWaitsForAppends: Appends in flight when Close begins are
// answered (committed or ErrClosed), never left hanging.
func TestCloseWaitsForAppends(t *testing.T) {
	dir := t.TempDir()
	b := open(t, dir, Options{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	acked := map[uint64]bool{}
	for range 16 {
		wg.Go(func() {
			for {
				seq, err := b.Append(ctx(t), "q", []byte("x"))
				if errors.Is(err, ErrClosed) {
					return
				}
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				acked[seq] = true
				mu.Unlock()
			}
		})
	}
	coretest.Eventually(t, "some appends", 10*time.Second, func() bool { return b.QueueStats("q").Records > 50 })
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	b = open(t, dir, Options{})
	for _, r := range all(t, b, "q") {
		delete(acked, r.Seq)
	}
	if len(acked) != 0 {
		t.Fatalf("%d acknowledged appends lost by Close", len(acked))
	}
}

func TestCancelledContext(t *testing.T) {
	b := open(t, t.TempDir(), Options{})
	c, cancel := context.WithCancel(ctx(t))
	cancel()
	if _, err := b.Append(c, "q", []byte("x")); !errors.Is(err, context.Canceled) {
		t.Fatalf("Append: %v", err)
	}
	if _, err := b.Ack(c, "q", 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("Ack: %v", err)
	}
	if st := b.Stats(); st.Records != 0 {
		t.Fatalf("a cancelled append was stored: %+v", st)
	}
}

func TestBadArguments(t *testing.T) {
	dir := t.TempDir()
	if _, err := Open(dir, Options{Policy: 7}); err == nil {
		t.Fatal("opened with an unknown policy")
	}
	b := open(t, dir, Options{})
	for _, q := range []string{"", strings.Repeat("q", MaxQueueName+1), "\xff"} {
		if _, err := b.Append(ctx(t), q, nil); err == nil {
			t.Fatalf("append to queue %q", q)
		}
	}
	for s, want := range map[string]Policy{"rejectNew": RejectNew, "dropoldest": DropOldest} {
		if p, err := ParsePolicy(s); err != nil || p != want || !strings.EqualFold(p.String(), s) {
			t.Fatalf("ParsePolicy(%q) = %v, %v", s, p, err)
		}
	}
	if _, err := ParsePolicy("dropNewest"); err == nil || !strings.Contains(err.Error(), "dropNewest") {
		t.Fatalf("ParsePolicy of a bad value: %v", err)
	}
}

// TestAckEmptiesLargeQueue: acking every record of a queue that spans many
// pages, in one transaction. bbolt's Cursor.Last never returns on a bucket
// whose leaves were all emptied in the transaction (writer.go, bounds);
// the writer then spun for ever and every call behind it hung.
func TestAckEmptiesLargeQueue(t *testing.T) {
	b := open(t, t.TempDir(), Options{})
	rec := bytes.Repeat([]byte("l"), 200)
	for _, ack := range []func(c context.Context) (int, error){
		func(c context.Context) (int, error) { return b.AckThrough(c, "q", 1<<62) },
		func(c context.Context) (int, error) {
			st := b.QueueStats("q")
			var seqs []uint64
			for s := st.Last; s >= st.First; s-- { // out of order: last first
				seqs = append(seqs, s)
			}
			return b.Ack(c, "q", seqs...)
		},
	} {
		bulkAppend(t, b, "q", 2000, rec)
		c, cancel := context.WithTimeout(ctx(t), 20*time.Second)
		n, err := ack(c)
		cancel()
		if n != 2000 || err != nil {
			t.Fatalf("acking 2000 records: %d, %v", n, err)
		}
		if st := b.QueueStats("q"); st.Records != 0 || st.First != 0 || st.Last != 0 {
			t.Fatalf("stats %+v", st)
		}
	}
	// Emptied leaves at both ends, live ones between: First and Last step
	// over them.
	bulkAppend(t, b, "q", 3000, rec)
	st := b.QueueStats("q")
	var seqs []uint64
	for s := st.Last; s > st.Last-1000; s-- {
		seqs = append(seqs, s)
	}
	for s := st.First; s < st.First+1000; s++ {
		seqs = append(seqs, s)
	}
	if n, err := b.Ack(ctx(t), "q", seqs...); n != 2000 || err != nil {
		t.Fatalf("acking both ends: %d, %v", n, err)
	}
	if got := b.QueueStats("q"); got.Records != 1000 || got.First != st.First+1000 || got.Last != st.Last-1000 {
		t.Fatalf("stats %+v after acking both ends of %+v", got, st)
	}
	wantSeqs(t, all(t, b, "q"), span(st.First+1000, st.Last-1000)...)
}

// TestFileBounded: under churn (a full buffer dropping its oldest records
// for new ones, and a sender acking behind), the file stops growing: bbolt
// reuses the pages acks and drops free. (Its size is bbolt's: below 16 MiB
// the file is grown to its mmap size, a power of two, so 8 MiB here; above,
// the high-water mark plus 16 MiB.)
func TestFileBounded(t *testing.T) {
	const max = 4 << 20
	dir := t.TempDir()
	b := open(t, dir, Options{MaxBytes: max, Policy: DropOldest})
	rec := make([]byte, 1000)
	size := func() int64 {
		fi, err := os.Stat(filepath.Join(dir, FileName))
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	var mid int64
	for round := range 60 { // 60 MiB through a 4 MiB buffer
		bulkAppend(t, b, "q", 1024, rec)
		if round%4 == 3 {
			_, _ = b.AckThrough(ctx(t), "q", b.QueueStats("q").First+500)
		}
		if round == 19 {
			mid = size()
		}
	}
	st := b.Stats()
	t.Logf("file %d bytes after 20 MiB, %d after 60 MiB, for maxBytes %d; holds %d bytes in %d records, %d dropped",
		mid, size(), max, st.Bytes, st.Records, st.Dropped)
	if st.Bytes > max || size() != mid || size() > 2*max {
		t.Fatalf("file grew from %d to %d bytes (holding %d) for maxBytes %d", mid, size(), st.Bytes, max)
	}
}
