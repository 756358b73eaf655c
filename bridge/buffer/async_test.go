package buffer

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tolsey/tolsey/core/coretest"
)

// asyncDone collects AppendAsync's done calls.
type asyncDone struct {
	mu    sync.Mutex
	calls map[string]int // record → done calls
	seqs  []uint64       // in call order
	errs  []error
	all   sync.WaitGroup
	// pending counts the done functions made and not called yet.
	pending atomic.Int64
}

func newAsyncDone() *asyncDone { return &asyncDone{calls: map[string]int{}} }

// fn is the done of the record rec; it checks that the record is visible
// by the time it is told durable.
func (a *asyncDone) fn(t *testing.T, b *Buffer, queue, rec string) func(uint64, error) {
	a.all.Add(1)
	a.pending.Add(1)
	return func(seq uint64, err error) {
		defer a.all.Done()
		defer a.pending.Add(-1)
		if err == nil && b.QueueStats(queue).Last < seq {
			t.Errorf("done(%d) before the commit was published", seq)
		}
		a.mu.Lock()
		defer a.mu.Unlock()
		a.calls[rec]++
		if err != nil {
			a.errs = append(a.errs, err)
			return
		}
		a.seqs = append(a.seqs, seq)
	}
}

// TestAppendAsyncOrder: concurrent AppendAsync calls into one queue keep
// each caller's order in the file, take sequence numbers 1..n with no gap,
// and get their done calls in sequence order, once each.
func TestAppendAsyncOrder(t *testing.T) {
	const writers, per = 8, 300
	b := open(t, t.TempDir(), Options{})
	d := newAsyncDone()
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range per {
				rec := fmt.Sprintf("%d/%d", w, i)
				if err := b.AppendAsync("q", []byte(rec), d.fn(t, b, "q", rec)); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	d.all.Wait()
	if len(d.errs) > 0 {
		t.Fatal(d.errs)
	}
	for i, seq := range d.seqs {
		if seq != uint64(i+1) {
			t.Fatalf("done call %d for seq %d: not in sequence order", i, seq)
		}
	}
	for rec, n := range d.calls {
		if n != 1 {
			t.Fatalf("%s: %d done calls", rec, n)
		}
	}
	recs := all(t, b, "q")
	wantSeqs(t, recs, span(1, writers*per)...)
	next := map[string]int{}
	for _, r := range recs {
		w, i, _ := strings.Cut(string(r.Data), "/")
		if n, _ := strconv.Atoi(i); n != next[w] {
			t.Fatalf("seq %d holds %s, writer %s's record %d was due", r.Seq, r.Data, w, next[w])
		}
		next[w]++
	}
	if b.commits.Load() >= writers*per {
		t.Fatalf("%d commits for %d appends: none shared", b.commits.Load(), writers*per)
	}
}

// TestAppendAsyncFull: under RejectNew a full buffer refuses at once (no
// done call, counted); a record larger than the buffer is refused under
// either policy; DropOldest takes it and drops.
func TestAppendAsyncFull(t *testing.T) {
	rec := bytes.Repeat([]byte("x"), 100)
	size := int64(len(rec) + RecordOverhead)
	never := func(seq uint64, err error) { t.Errorf("done(%d, %v) for a refused append", seq, err) }

	b := open(t, t.TempDir(), Options{MaxBytes: 10 * size})
	d := newAsyncDone()
	for i := range 10 {
		if err := b.AppendAsync("q", rec, d.fn(t, b, "q", fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	// The ten are reserved, maybe not committed yet: the eleventh is
	// refused all the same.
	if err := b.AppendAsync("q", rec, never); !errors.Is(err, ErrFull) {
		t.Fatalf("append to a full buffer: %v", err)
	}
	if err := b.AppendAsync("q", make([]byte, 10*size), never); !errors.Is(err, ErrFull) {
		t.Fatalf("a record larger than the buffer: %v", err)
	}
	d.all.Wait()
	if len(d.errs) > 0 || len(d.seqs) != 10 {
		t.Fatalf("done: %v, %v", d.seqs, d.errs)
	}
	if st := b.Stats(); st.Rejected != 2 || st.Records != 10 || b.reserved.Load() != 0 {
		t.Fatalf("stats %+v, reserved %d", st, b.reserved.Load())
	}

	b = open(t, t.TempDir(), Options{MaxBytes: 10 * size, Policy: DropOldest})
	d = newAsyncDone()
	for i := range 15 {
		if err := b.AppendAsync("q", rec, d.fn(t, b, "q", fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.AppendAsync("q", make([]byte, 10*size), never); !errors.Is(err, ErrFull) {
		t.Fatalf("DropOldest, a record larger than the buffer: %v", err)
	}
	d.all.Wait()
	if st := b.QueueStats("q"); len(d.errs) > 0 || st.Records != 10 || st.Dropped != 5 || st.First != 6 {
		t.Fatalf("DropOldest: %+v, %v", st, d.errs)
	}
}

// TestAppendAsyncClose: Close with appends handed over and not committed
// commits them, and calls every done once before it returns; after it,
// AppendAsync refuses.
func TestAppendAsyncClose(t *testing.T) {
	dir := t.TempDir()
	b, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	d := newAsyncDone()
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				rec := fmt.Sprintf("%d/%d", w, i)
				done := d.fn(t, b, "q", rec)
				if err := b.AppendAsync("q", []byte(rec), done); err != nil {
					done(0, err) // never called by the buffer: balance the count
					if !errors.Is(err, ErrClosed) {
						t.Error(err)
					}
					return
				}
			}
		})
	}
	coretest.Eventually(t, "appends in flow", 10*time.Second, func() bool { return b.QueueStats("q").Records >= 100 })
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	// An AppendAsync that returned nil did so before Close began: its done
	// was called before Close returned.
	if n := d.pending.Load(); n != 0 {
		t.Fatalf("%d done calls missing after Close", n)
	}
	for rec, n := range d.calls {
		if n != 1 {
			t.Fatalf("%s: %d done calls", rec, n)
		}
	}
	for _, err := range d.errs {
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("done: %v", err)
		}
	}
	b = open(t, dir, Options{})
	if got := b.QueueStats("q").Records; got != int64(len(d.seqs)) {
		t.Fatalf("the file holds %d records, %d were told durable", got, len(d.seqs))
	}
}

// TestAppendAsyncClosePending: appends still queued for the writer when
// Close stops it are committed, and their done calls made, before Close
// returns. A write transaction of the test's holds the writer back while
// they queue up.
func TestAppendAsyncClosePending(t *testing.T) {
	dir := t.TempDir()
	b, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	tx, err := b.db.Begin(true)
	if err != nil {
		t.Fatal(err)
	}
	d := newAsyncDone()
	if err := b.AppendAsync("q", []byte("first"), d.fn(t, b, "q", "first")); err != nil {
		t.Fatal(err)
	}
	coretest.Eventually(t, "the writer took the first", 10*time.Second, func() bool { return len(b.reqs) == 0 })
	for i := range 500 {
		rec := fmt.Sprint(i)
		if err := b.AppendAsync("q", []byte(rec), d.fn(t, b, "q", rec)); err != nil {
			t.Fatal(err)
		}
	}
	closed := make(chan error, 1)
	go func() { closed <- b.Close() }()
	coretest.Eventually(t, "Close stopped the writer", 10*time.Second, func() bool {
		select {
		case <-b.stop:
			return true
		default:
			return false
		}
	})
	_ = tx.Rollback()
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if n := d.pending.Load(); n != 0 {
		t.Fatalf("%d done calls missing after Close", n)
	}
	if len(d.errs) > 0 || len(d.seqs) != 501 {
		t.Fatalf("%d durable, errors %v", len(d.seqs), d.errs)
	}
	if err := b.AppendAsync("q", nil, func(uint64, error) { t.Error("done after Close") }); !errors.Is(err, ErrClosed) {
		t.Fatalf("AppendAsync after Close: %v", err)
	}
	b = open(t, dir, Options{})
	if got := b.QueueStats("q").Records; got != 501 {
		t.Fatalf("the file holds %d records, 501 were told durable", got)
	}
}
