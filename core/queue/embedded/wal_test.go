package embedded

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tolsey/tolsey/core/queue"
	"github.com/tolsey/tolsey/core/queue/queuetest"
)

// crash stops b as a kill would, after its last log commit: the writer
// and the checkpointer end, no checkpoint runs, the log stays as it is
// for the next Open to replay. A later Close does nothing.
func crash(b *Backend) {
	b.loop.Add(op{}) // the lazy removals: logged, as by a commit before the kill
	b.loop.Close()
	b.reapCheckpoint(true)
	close(b.cuts)
	<-b.ckExited
	_ = b.seg.Close()
	_ = b.db.Close()
	b.closeOnce.Do(func() {})
}

// noCheckpoints keeps everything in b's log and overlay: no checkpoint
// starts until Close (or Drop). Before the first append.
func noCheckpoints(b *Backend) {
	b.checkpointDelay = time.Hour
	b.segmentMax, b.segmentHard = 1<<40, 1<<40
}

// TestConformanceCrash runs the conformance suite with a reopen that is a
// crash (no Close, no checkpoint) and checkpoints that never start on
// their own: every record a reopened store holds comes from replaying its
// log, and the store before it read everything through the overlay.
func TestConformanceCrash(t *testing.T) {
	queuetest.Run(t, func(t *testing.T) (queue.Backend, func(queue.Backend) queue.Backend) {
		path := filepath.Join(t.TempDir(), FileName)
		b := open(t, path)
		noCheckpoints(b)
		t.Cleanup(func() { _ = b.Close() })
		return b, func(old queue.Backend) queue.Backend {
			crash(old.(*Backend))
			b := open(t, path)
			noCheckpoints(b)
			t.Cleanup(func() { _ = b.Close() })
			return b
		}
	})
}

// TestTornLogRecord: a log whose last record was cut short (a write torn
// by a crash: never acknowledged, since an append is answered after the
// fdatasync that follows its whole record) or corrupted opens, with every
// record before it, the counts agreeing, and takes appends again.
func TestTornLogRecord(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, FileName)
	b, l := openQ(t, path)
	var ids []uint64
	for i := range 20 {
		ids = append(ids, queuetest.Append(t, l, queuetest.Msg("t", i)))
	}
	l.Remove(ids[3], ids[7])
	ids = append(ids, queuetest.Append(t, l, queuetest.Msg("t", 20))) // logs the removals too
	before := b.segSize                                               // after done: the writer wrote it before
	queuetest.Append(t, l, queuetest.Msg("t", 21))                    // the record to tear
	after := b.segSize
	seg := b.segNo
	crash(b)

	var want int64
	for i := range 21 {
		if i != 3 && i != 7 {
			want += int64(queuetest.Msg("t", i).Size())
		}
	}
	cases := map[string]func(data []byte) []byte{
		"header only":      func(d []byte) []byte { return d[:before+4] },
		"one byte":         func(d []byte) []byte { return d[:before+1] },
		"half":             func(d []byte) []byte { return d[:before+(after-before)/2] },
		"all but one byte": func(d []byte) []byte { return d[:after-1] },
		"bit flipped":      func(d []byte) []byte { d[after-3] ^= 0x10; return d },
		"length too long":  func(d []byte) []byte { d[before]++; return d },
	}
	for name, tear := range cases {
		t.Run(name, func(t *testing.T) {
			cdir := t.TempDir()
			cpath := filepath.Join(cdir, FileName)
			copyFile(t, path, cpath)
			data, err := os.ReadFile(segmentName(path, seg))
			if err != nil {
				t.Fatal(err)
			}
			if int64(len(data)) != after {
				t.Fatalf("segment holds %d bytes, the writer wrote %d", len(data), after)
			}
			if err := os.WriteFile(segmentName(cpath, seg), tear(data), 0o600); err != nil {
				t.Fatal(err)
			}
			b := open(t, cpath)
			defer b.Close()
			l, err := b.Open(ctx, queue.Config{Name: "q"})
			if err != nil {
				t.Fatal(err)
			}
			recs := queuetest.ReadAll(t, l, 0)
			if len(recs) != 19 {
				t.Fatalf("%d records after the torn one was dropped, want 19", len(recs))
			}
			for i, r := range recs {
				if r.ID == ids[3] || r.ID == ids[7] {
					t.Fatalf("removed record %d is back", r.ID)
				}
				if i > 0 && r.ID <= recs[i-1].ID {
					t.Fatalf("ids out of order")
				}
			}
			if recs[18].ID != ids[20] || string(recs[18].Msg.Payload) != "m20" {
				t.Fatalf("last record %d %q, want %d m20", recs[18].ID, recs[18].Msg.Payload, ids[20])
			}
			if n, nb, err := l.Stats(ctx); err != nil || n != 19 || nb != want {
				t.Fatalf("stats %d %d %v, want 19 %d", n, nb, err, want)
			}
			if segs, _ := segments(cpath); len(segs) != 1 || segs[0] <= seg {
				t.Fatalf("segments after the open: %v (the replayed one is deleted, a new one follows)", segs)
			}
			if id := queuetest.Append(t, l, queuetest.Msg("t", 99)); id <= ids[20] {
				t.Fatalf("new append got id %d, not above %d", id, ids[20])
			}
		})
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	src, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.Create(to)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestReadsDuringCheckpoints: with checkpoints running all the time (a
// segment of 4 KiB), a record removed is never read again, whether it was
// in the overlay, being checkpointed or in bbolt; every record is read;
// and the counts end at zero, in memory and in the file (run with -race).
func TestReadsDuringCheckpoints(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), FileName)
	b := open(t, path)
	b.segmentMax = 4 << 10
	b.checkpointDelay = time.Millisecond
	l, err := b.Open(ctx, queue.Config{Name: "q"})
	if err != nil {
		t.Fatal(err)
	}
	const n = 3000
	var wg sync.WaitGroup
	stop := make(chan struct{})
	closed := false
	t.Cleanup(func() { // also when the test fails half-way
		close(stop)
		wg.Wait()
		if !closed {
			_ = b.Close()
		}
	})
	wg.Go(func() {
		window := make(chan struct{}, 16)
		for i := range n {
			select {
			case window <- struct{}{}:
			case <-stop:
				return
			}
			l.Append(queuetest.Msg("t", i), func(_ uint64, err error) {
				if err != nil {
					t.Error(err)
				}
				<-window
			})
		}
	})
	removed := map[uint64]bool{}
	deadline := time.Now().Add(2 * time.Minute)
	for len(removed) < n && time.Now().Before(deadline) {
		recs, err := l.Read(ctx, 0, 50)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			if removed[r.ID] {
				t.Fatalf("record %d read after its removal", r.ID)
			}
			removed[r.ID] = true
			l.Remove(r.ID)
		}
		if len(recs) == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	wg.Wait()
	if len(removed) != n {
		t.Fatalf("read %d of %d records", len(removed), n)
	}
	if b.Checkpoints() < 2 {
		t.Fatalf("%d checkpoints ran: the test did not read during them", b.Checkpoints())
	}
	t.Logf("%d log commits, %d checkpoints", b.Commits(), b.Checkpoints())
	queuetest.Append(t, l, queuetest.Msg("t", -1)) // so that the last removals are logged
	closed = true
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b2 := open(t, path)
	defer b2.Close()
	if l, err = b2.Open(ctx, queue.Config{Name: "q"}); err != nil {
		t.Fatal(err)
	}
	recs := queuetest.ReadAll(t, l, 0)
	if c, _, _ := l.Stats(ctx); len(recs) != 1 || c != 1 {
		t.Fatalf("%d records (stats %d) after reopen, want the last one", len(recs), c)
	}
	if segs, _ := segments(path); len(segs) != 1 {
		t.Fatalf("segments %v after Close and Open, want the new one", segs)
	}
}

// TestFailedCheckpointIsRetried: a checkpoint whose transaction fails (a
// full disk) gives what it held back to the overlay: reads and counts are
// as before, appends go on, a removal of a record it held now drops it
// from the overlay, and the next checkpoint writes everything; a reopen
// agrees.
func TestFailedCheckpointIsRetried(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), FileName)
	b, l := openQ(t, path)
	var ids []uint64
	for i := range 5 {
		ids = append(ids, queuetest.Append(t, l, queuetest.Msg("t", i)))
	}
	if err := b.checkpointSync(); err != nil { // 0–4 in bbolt
		t.Fatal(err)
	}
	for i := 5; i < 10; i++ {
		ids = append(ids, queuetest.Append(t, l, queuetest.Msg("t", i)))
	}
	l.Remove(ids[0]) // in bbolt: for the checkpoint to delete
	var fail atomic.Bool
	fail.Store(true)
	b.checkpointFault = func() error {
		if fail.Load() {
			return errors.New("disk full (test)")
		}
		return nil
	}
	if err := b.checkpointSync(); err == nil {
		t.Fatal("checkpoint succeeded")
	}
	check := func(l queue.Log, want ...int) {
		t.Helper()
		recs := queuetest.ReadAll(t, l, 0)
		var got []int
		for _, r := range recs {
			var i int
			if _, err := fmt.Sscanf(string(r.Msg.Payload), "m%d", &i); err != nil {
				t.Fatal(err)
			}
			got = append(got, i)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("records %v, want %v", got, want)
		}
		if n, _, _ := l.Stats(ctx); n != len(want) {
			t.Fatalf("stats %d, want %d", n, len(want))
		}
	}
	// 0 is removed but still in bbolt: not listed, counted until deleted.
	recs := queuetest.ReadAll(t, l, 0)
	if len(recs) != 9 {
		t.Fatalf("%d records after the failed checkpoint, want 9", len(recs))
	}
	l.Remove(ids[5])                               // back in the overlay: dropped there
	queuetest.Append(t, l, queuetest.Msg("t", 10)) // appends go on
	fail.Store(false)
	if err := b.checkpointSync(); err != nil {
		t.Fatal(err)
	}
	check(l, 1, 2, 3, 4, 6, 7, 8, 9, 10)
	crash(b) // the log after the checkpoint holds nothing more
	b = open(t, path)
	defer b.Close()
	l, err := b.Open(ctx, queue.Config{Name: "q"})
	if err != nil {
		t.Fatal(err)
	}
	check(l, 1, 2, 3, 4, 6, 7, 8, 9, 10)
}

// openQ opens the store at path with its checkpoints left to the test
// (noCheckpoints) and its queue "q".
func openQ(t *testing.T, path string) (*Backend, queue.Log) {
	t.Helper()
	b := open(t, path)
	noCheckpoints(b)
	l, err := b.Open(context.Background(), queue.Config{Name: "q"})
	if err != nil {
		t.Fatal(err)
	}
	return b, l
}
