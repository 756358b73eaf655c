package embedded

import (
	"bytes"
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.uber.org/goleak"

	"github.com/tolsey/tolsey/core"
	"github.com/tolsey/tolsey/core/coretest"
	"github.com/tolsey/tolsey/core/queue"
	"github.com/tolsey/tolsey/core/queue/queuetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func open(t testing.TB, path string) *Backend {
	t.Helper()
	b, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestConformance(t *testing.T) {
	queuetest.Run(t, func(t *testing.T) (queue.Backend, func(queue.Backend) queue.Backend) {
		path := filepath.Join(t.TempDir(), FileName)
		b := open(t, path)
		t.Cleanup(func() { _ = b.Close() }) // a second Close does nothing harmful
		return b, func(old queue.Backend) queue.Backend {
			if err := old.Close(); err != nil {
				t.Fatal(err)
			}
			b := open(t, path)
			t.Cleanup(func() { _ = b.Close() })
			return b
		}
	})
}

// TestAppendsShareACommit: appends queued while the writer cannot commit
// (the test holds the log's lock) return at once, and go to the log
// together, in call order, once it can: Append never waits for the disk,
// and many appends cost one fdatasync.
func TestAppendsShareACommit(t *testing.T) {
	b := open(t, filepath.Join(t.TempDir(), FileName))
	defer b.Close()
	l, err := b.Open(context.Background(), queue.Config{Name: "q"})
	if err != nil {
		t.Fatal(err)
	}
	b.walMu.Lock() // the writer's next log write waits for it
	before := b.Commits()
	const n = 100
	ids := make(chan uint64, n)
	returned := make(chan struct{})
	go func() {
		for i := range n {
			l.Append(queuetest.Msg("t", i), func(id uint64, err error) {
				if err != nil {
					t.Error(err)
				}
				ids <- id
			})
		}
		close(returned)
	}()
	select {
	case <-returned:
	case <-time.After(10 * time.Second):
		t.Fatal("Append waited for the disk")
	}
	if len(ids) != 0 {
		t.Fatal("done called before the commit")
	}
	b.walMu.Unlock()
	var last uint64
	for range n {
		id := <-ids
		if id <= last {
			t.Fatalf("done for id %d after %d", id, last)
		}
		last = id
	}
	// The writer may have taken the first append alone before it blocked.
	if c := b.Commits() - before; c > 2 {
		t.Fatalf("%d appends took %d commits", n, c)
	}
}

// TestDroppedQueueRefusesAppends: an Append through a Log whose queue was
// dropped fails rather than recreating the queue or writing into a queue
// of the same name opened since.
func TestDroppedQueueRefusesAppends(t *testing.T) {
	ctx := context.Background()
	b := open(t, filepath.Join(t.TempDir(), FileName))
	defer b.Close()
	old, err := b.Open(ctx, queue.Config{Name: "q"})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Drop(ctx, "q"); err != nil {
		t.Fatal(err)
	}
	l, err := b.Open(ctx, queue.Config{Name: "q"})
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 1)
	old.Append(queuetest.Msg("t", 1), func(_ uint64, err error) { errs <- err })
	if err := <-errs; err == nil {
		t.Fatal("append to a dropped queue succeeded")
	}
	if got := queuetest.ReadAll(t, l, 0); len(got) != 0 {
		t.Fatalf("the new queue holds %d records", len(got))
	}
}

// TestCommitsAreSynced guards what TestKill9 cannot see (a SIGKILL leaves
// unsynced writes in the page cache, where they survive it): the settings
// that make bbolt's Commit fdatasync before it returns, which is when
// Append answers.
func TestCommitsAreSynced(t *testing.T) {
	b := open(t, filepath.Join(t.TempDir(), FileName))
	defer b.Close()
	if b.db.NoSync || b.db.NoGrowSync {
		t.Fatalf("commits not synced: NoSync %v, NoGrowSync %v", b.db.NoSync, b.db.NoGrowSync)
	}
}

// TestConcurrentDropAndAppend: appends racing a Drop of their queue are
// each answered, and the file stays consistent (run with -race).
func TestConcurrentDropAndAppend(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), FileName)
	b := open(t, path)
	var wg sync.WaitGroup
	for round := range 20 {
		l, err := b.Open(ctx, queue.Config{Name: "q"})
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(50)
		for i := range 50 {
			l.Append(queuetest.Msg("t", i), func(uint64, error) { wg.Done() })
		}
		if round%2 == 0 {
			if err := b.Drop(ctx, "q"); err != nil {
				t.Fatal(err)
			}
		}
	}
	wg.Wait()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	_ = db.View(func(tx *bolt.Tx) error {
		for err := range tx.Check() { // drained: the checker goroutine ends
			t.Error(err)
		}
		return nil
	})
}

// TestRemovalsRideTheNextAppend: a removal starts no commit (a log write
// and an fdatasync) of its own: it rides the next append's, so that a
// consumer's acknowledgement does not hold a synchronous producer's next
// send behind a commit; a browse never lists an acknowledged record (the
// removal is in the overlay before it is logged); and without appends
// they are logged within lazyDelay.
func TestRemovalsRideTheNextAppend(t *testing.T) {
	ctx := context.Background()
	b := open(t, filepath.Join(t.TempDir(), FileName))
	defer b.Close()
	b.lazyDelay = time.Hour // only an append or a browse commits them here
	l, err := b.Open(ctx, queue.Config{Name: "q"})
	if err != nil {
		t.Fatal(err)
	}
	id1 := queuetest.Append(t, l, queuetest.Msg("t", 1))
	before := b.Commits()
	l.Remove(id1)
	l.(queue.StateLog).SetState(id1, queue.DeliveryState{Count: 1}) // removed meanwhile: dropped
	queuetest.Append(t, l, queuetest.Msg("t", 2))
	if c := b.Commits() - before; c != 1 {
		t.Fatalf("a removal and an append took %d commits, want 1", c)
	}
	if n, _, _ := l.Stats(ctx); n != 1 {
		t.Fatalf("%d records after the commit, want 1: the removal rode it", n)
	}
	id3 := queuetest.Append(t, l, queuetest.Msg("t", 3))
	l.Remove(id3)
	recs, err := l.Browse(ctx, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 || string(recs[0].Msg.Payload) != "m2" {
		t.Fatalf("browse lists %d records, want m2 alone", len(recs))
	}
	if len(recs[0].State.Skip) != 0 || recs[0].State.Count != 0 {
		t.Fatalf("m2 has a state: %+v", recs[0].State)
	}

	b.lazyDelay = time.Millisecond
	l.Remove(recs[0].ID)
	coretest.Eventually(t, "the removal committed without an append", 10*time.Second, func() bool {
		n, _, _ := l.Stats(ctx)
		return n == 0
	})
}

// TestBrowseLaterPagesListNoAcknowledged: no page of a browse lists a
// record removed before it, not only the first page (a record removed
// between two pages was listed on the second, when a browse committed
// the waiting removals first).
func TestBrowseLaterPagesListNoAcknowledged(t *testing.T) {
	ctx := context.Background()
	b := open(t, filepath.Join(t.TempDir(), FileName))
	defer b.Close()
	b.lazyDelay = time.Hour
	l, err := b.Open(ctx, queue.Config{Name: "q"})
	if err != nil {
		t.Fatal(err)
	}
	var ids []uint64
	for i := range 4 {
		ids = append(ids, queuetest.Append(t, l, queuetest.Msg("t", i)))
	}
	page1, err := l.Browse(ctx, 0, 2)
	if err != nil || len(page1) != 2 {
		t.Fatalf("page 1: %d records, %v", len(page1), err)
	}
	l.Remove(ids[3])
	page2, err := l.Browse(ctx, page1[1].ID, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(page2) != 1 || page2[0].ID != ids[2] {
		t.Fatalf("page 2 lists %d records (want only the third): an acknowledged record was listed", len(page2))
	}
}

// TestNativeTailStoredOnce: a message received over AMQP (one data
// section, no footer: its payload ends its native bytes) is written with
// its payload once, and reads back whole after a reopen.
func TestNativeTailStoredOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	b := open(t, path)
	l, err := b.Open(context.Background(), queue.Config{Name: "q"})
	if err != nil {
		t.Fatal(err)
	}
	payload := bytes.Repeat([]byte("p"), 1024)
	native := append([]byte{0, 0x53, 0x75, 0xb0, 0, 0, 4, 0}, payload...)
	m := &core.Message{Topic: "$queue/q", QoS: 1, Payload: native[8:],
		Native: core.Native{Protocol: core.ProtocolAMQP, Bytes: native}}
	done := make(chan error, 1)
	l.Append(m, func(_ uint64, err error) { done <- err })
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := b.checkpointSync(); err != nil {
		t.Fatal(err)
	}
	var stored int
	if err := b.db.View(func(tx *bolt.Tx) error {
		_, v := tx.Bucket(bucketQueues).Bucket([]byte("q")).Bucket(bucketRecords).Cursor().First()
		stored = len(v)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if stored >= len(native)+len(payload) {
		t.Fatalf("record of %d bytes for %d native bytes: the payload is stored twice", stored, len(native))
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b = open(t, path)
	defer b.Close()
	if l, err = b.Open(context.Background(), queue.Config{Name: "q"}); err != nil {
		t.Fatal(err)
	}
	recs, err := l.Read(context.Background(), 0, 10)
	if err != nil || len(recs) != 1 {
		t.Fatalf("read %d records: %v", len(recs), err)
	}
	got := recs[0].Msg
	if !bytes.Equal(got.Payload, payload) || !bytes.Equal(got.Native.Bytes, native) || got.Size() != m.Size() {
		t.Fatalf("read back payload %d B, native %d B, size %d; want %d, %d, %d",
			len(got.Payload), len(got.Native.Bytes), got.Size(), len(payload), len(native), m.Size())
	}
}

// TestEmptiedQueueHoldsNoBytes: a queue whose stored byte count is higher
// than its records' sizes (records stored before core.Message.Size
// counted a native AMQP body once) holds 0 bytes once its last record is
// deleted, in the file and after a reopen.
func TestEmptiedQueueHoldsNoBytes(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), FileName)
	b, l := openQ(t, path)
	id := queuetest.Append(t, l, queuetest.Msg("t", 0))
	if err := b.checkpointSync(); err != nil {
		t.Fatal(err)
	}
	// As an older version counted it: 100 bytes more.
	if err := b.db.Update(func(tx *bolt.Tx) error {
		qb := tx.Bucket(bucketQueues).Bucket([]byte("q"))
		n, bytes := readCounts(qb)
		return qb.Put(keyCounts, encodeCounts(n, bytes+100))
	}); err != nil {
		t.Fatal(err)
	}
	l.Remove(id)
	if err := b.checkpointSync(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b = open(t, path)
	defer b.Close()
	if l, err := b.Open(ctx, queue.Config{Name: "q"}); err != nil {
		t.Fatal(err)
	} else if n, bytes, _ := l.Stats(ctx); n != 0 || bytes != 0 {
		t.Fatalf("stats %d records, %d bytes after the last went; want 0, 0", n, bytes)
	}
}
