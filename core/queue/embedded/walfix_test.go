package embedded

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tolsey/tolsey/core/coretest"
	"github.com/tolsey/tolsey/core/queue"
	"github.com/tolsey/tolsey/core/queue/queuetest"
)

// TestTornRecordInEarlierSegment: a segment that is not the last may end
// in a record that is not whole (a write that failed and was cut back in
// the page cache only, then the segment was closed for a checkpoint that
// failed): its garbage ends that segment's replay, not the log's. The
// records of the later segments were acknowledged and are replayed.
func TestTornRecordInEarlierSegment(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), FileName)
	b, l := openQ(t, path)
	queuetest.Append(t, l, queuetest.Msg("t", 0))
	first := b.segNo
	b.checkpointFault = func() error { return errors.New("disk full (test)") }
	if err := b.checkpointSync(); err == nil { // a new segment; the first stays
		t.Fatal("checkpoint succeeded")
	}
	id1 := queuetest.Append(t, l, queuetest.Msg("t", 1)) // acknowledged, in the second segment
	if b.segNo == first {
		t.Fatal("no new segment")
	}
	crash(b)
	f, err := os.OpenFile(segmentName(path, first), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	// The head of a record whose body never made it.
	if _, err := f.Write([]byte{40, 0, 0, 0, 1, 2, 3, 4, recAppend}); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()

	b = open(t, path)
	defer b.Close()
	if l, err = b.Open(ctx, queue.Config{Name: "q"}); err != nil {
		t.Fatal(err)
	}
	recs := queuetest.ReadAll(t, l, 0)
	if len(recs) != 2 || recs[1].ID != id1 {
		t.Fatalf("%d records after the reopen, want 2 (the acknowledged append of the later segment lost)", len(recs))
	}
	if n, _, _ := l.Stats(ctx); n != 2 {
		t.Fatalf("stats %d, want 2", n)
	}
}

// TestFailedCheckpointRetriedWhenIdle: a checkpoint that failed is tried
// again on its own, appends or no appends, and the log's segments go once
// it succeeds.
func TestFailedCheckpointRetriedWhenIdle(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), FileName)
	b := open(t, path)
	defer b.Close()
	b.checkpointDelay = 5 * time.Millisecond
	var fail atomic.Bool
	var tries atomic.Int64
	fail.Store(true)
	b.checkpointFault = func() error {
		tries.Add(1)
		if fail.Load() {
			return errors.New("disk full (test)")
		}
		return nil
	}
	l, err := b.Open(ctx, queue.Config{Name: "q"})
	if err != nil {
		t.Fatal(err)
	}
	queuetest.Append(t, l, queuetest.Msg("t", 0))
	deadline := time.Now().Add(10 * time.Second)
	for tries.Load() < 1 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if tries.Load() < 1 {
		t.Fatal("no checkpoint tried")
	}
	fail.Store(false)
	for b.Checkpoints() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if b.Checkpoints() == 0 {
		t.Fatalf("no checkpoint succeeded after %d tries: the failed one is not retried without appends", tries.Load())
	}
}

// TestFailedCheckpointIsReported: a checkpoint that fails is logged
// (once, then once every checkpointLogEvery while they go on), counted
// and said by CheckpointErr; the one that succeeds again is logged and
// clears CheckpointErr.
func TestFailedCheckpointIsReported(t *testing.T) {
	ctx := context.Background()
	var out coretest.SyncBuffer
	b, err := Open(filepath.Join(t.TempDir(), FileName),
		Options{Logger: slog.New(slog.NewTextHandler(&out, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	noCheckpoints(b)
	b.checkpointLogEvery = time.Hour
	var fail atomic.Bool
	fail.Store(true)
	b.checkpointFault = func() error {
		if fail.Load() {
			return errors.New("disk full (test)")
		}
		return nil
	}
	l, err := b.Open(ctx, queue.Config{Name: "q"})
	if err != nil {
		t.Fatal(err)
	}
	if b.CheckpointErr() != nil {
		t.Fatal("CheckpointErr before any failed")
	}
	for i := range 3 {
		queuetest.Append(t, l, queuetest.Msg("t", i))
		if err := b.checkpointSync(); err == nil {
			t.Fatal("checkpoint succeeded")
		}
	}
	if n := strings.Count(out.String(), "checkpoint failed"); n != 1 {
		t.Fatalf("%d lines of the first failure, want 1:\n%s", n, out.String())
	}
	if strings.Contains(out.String(), "still failing") {
		t.Fatalf("logged again within checkpointLogEvery:\n%s", out.String())
	}
	if err := b.CheckpointErr(); err == nil || !strings.Contains(err.Error(), "disk full (test)") || !strings.Contains(err.Error(), "3 tries") {
		t.Fatalf("CheckpointErr %v", err)
	}
	if n := b.CheckpointFailures(); n != 3 {
		t.Fatalf("CheckpointFailures %d, want 3", n)
	}
	b.checkpointLogEvery = 0 // the next failure is a minute later
	if err := b.checkpointSync(); err == nil {
		t.Fatal("checkpoint succeeded")
	}
	if n := strings.Count(out.String(), "checkpoint still failing"); n != 1 {
		t.Fatalf("%d lines of failures going on, want 1:\n%s", n, out.String())
	}
	fail.Store(false)
	if err := b.checkpointSync(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "checkpoint succeeded again") || !strings.Contains(out.String(), "failures=4") {
		t.Fatalf("no recovery logged:\n%s", out.String())
	}
	if err := b.CheckpointErr(); err != nil {
		t.Fatalf("CheckpointErr after a success: %v", err)
	}
	if n := len(queuetest.ReadAll(t, l, 0)); n != 3 {
		t.Fatalf("%d records, want 3", n)
	}
}

// TestFailedDropKeepsRecords: a Drop whose transaction fails (after the
// checkpoint it starts with) leaves the queue as it was: the records
// acknowledged before it are read, counted, and kept across a reopen.
func TestFailedDropKeepsRecords(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), FileName)
	b, l := openQ(t, path)
	for i := range 3 {
		queuetest.Append(t, l, queuetest.Msg("t", i))
	}
	b.dropFault = func() error { return errors.New("disk full (test)") }
	if err := b.Drop(ctx, "q"); err == nil {
		t.Fatal("Drop succeeded")
	}
	b.dropFault = nil
	if n := len(queuetest.ReadAll(t, l, 0)); n != 3 {
		t.Fatalf("%d records after a failed Drop, want 3", n)
	}
	queuetest.Append(t, l, queuetest.Msg("t", 3))
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b = open(t, path)
	defer b.Close()
	l, err := b.Open(ctx, queue.Config{Name: "q"})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(queuetest.ReadAll(t, l, 0)); n != 4 {
		t.Fatalf("%d records after a failed Drop and a reopen, want 4", n)
	}
	if n, _, _ := l.Stats(ctx); n != 4 {
		t.Fatalf("stats %d, want 4", n)
	}
}

// TestFullLogRefusesAppends: while checkpoints fail, appends go on until
// the log holds maxLog that no checkpoint applied; past it the engine
// refuses puts as a full queue's (queue.ErrFull, counted as refused, the
// cause named), removals still go, and once a checkpoint succeeds puts
// are taken again. Every put acknowledged is kept.
func TestFullLogRefusesAppends(t *testing.T) {
	ctx := context.Background()
	b := open(t, filepath.Join(t.TempDir(), FileName))
	t.Cleanup(func() { _ = b.Close() }) // after the engine's Close
	noCheckpoints(b)
	b.maxLog = 4 << 10
	var fail atomic.Bool
	fail.Store(true)
	b.checkpointFault = func() error {
		if fail.Load() {
			return errors.New("disk full (test)")
		}
		return nil
	}
	e := queuetest.Engine(t, b)
	q, err := e.Declare(ctx, queue.Config{Name: "q"})
	if err != nil {
		t.Fatal(err)
	}
	put := func(i int) error {
		ch := make(chan error, 1)
		e.Put("q", queuetest.Msg("t", i), func(err error) { ch <- err })
		return <-ch
	}
	// Past the limit before any checkpoint failed: taken (a store that
	// works is not refused; its checkpoints bound the log).
	n := 0
	for ; b.logBytes.Load() < 2*b.maxLog; n++ {
		queuetest.Put(t, e, "q", queuetest.Msg("t", n))
	}
	if err := b.checkpointSync(); err == nil {
		t.Fatal("checkpoint succeeded")
	}
	err = put(n)
	if !errors.Is(err, queue.ErrUnavailable) || errors.Is(err, queue.ErrFull) || !strings.Contains(err.Error(), "write-ahead log") ||
		!strings.Contains(err.Error(), "disk full (test)") {
		t.Fatalf("put past the log's limit while checkpoints fail: %v, want a refusal wrapping queue.ErrUnavailable (not ErrFull: a store fault) that names the log and the cause", err)
	}
	if r := q.Info().Counters.Refused; r != 1 {
		t.Fatalf("refused %d, want 1", r)
	}
	if err := b.CheckpointErr(); err == nil || !strings.Contains(err.Error(), "appends refused") {
		t.Fatalf("CheckpointErr %v: does not say appends are refused", err)
	}
	// Removals are still logged: consumers drain the queue meanwhile.
	c, wake := queuetest.Consume(t, q)
	d := queuetest.Next(t, c, wake)
	c.Ack(d.ID)
	fail.Store(false)
	if err := b.checkpointSync(); err != nil {
		t.Fatal(err)
	}
	if left := b.logBytes.Load(); left != 0 {
		t.Fatalf("the log holds %d bytes no checkpoint applied after one applied all of it", left)
	}
	if err := put(n + 1); err != nil {
		t.Fatalf("put after a checkpoint succeeded: %v", err)
	}
	if err := b.CheckpointErr(); err != nil {
		t.Fatalf("CheckpointErr after a success: %v", err)
	}
	c.Close()
	l, err := b.Open(ctx, queue.Config{Name: "q"})
	if err != nil {
		t.Fatal(err)
	}
	if got := len(queuetest.ReadAll(t, l, 0)); got != n {
		t.Fatalf("%d records, want %d (%d put, one acknowledged, one refused, one put after)", got, n, n)
	}
}
