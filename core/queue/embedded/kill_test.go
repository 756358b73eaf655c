package embedded

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tolsey/tolsey/core"
	"github.com/tolsey/tolsey/core/coretest"
	"github.com/tolsey/tolsey/core/queue"
	"github.com/tolsey/tolsey/core/queue/queuetest"
)

// killEnv names the file TestKillChild works on; set only by TestKill9.
// killCheckpointEnv, when set, makes the child checkpoint every few
// commits (a small segment), so that kills land in checkpoints too.
const (
	killEnv           = "QUEUE_EMBEDDED_KILL_FILE"
	killCheckpointEnv = "QUEUE_EMBEDDED_KILL_CHECKPOINT"
)

const (
	killQueues  = 3  // q0..q2
	killWriters = 2  // per queue: their records interleave in one queue
	killWindow  = 32 // appends in flight per writer (a front-end's window)
)

// TestKillChild is the child of TestKill9. It appends to q0..q2 from two
// writers each, each keeping killWindow appends in flight, while a remover
// reads q0 behind them and removes every other record, and reports on file
// descriptor 3 (a pipe to the parent), one line per event, each written
// only once what it reports has happened:
//
//	A <queue> <writer> <i> <id>  the writer's i-th append's done(id, nil) was called
//	X <id>                       Remove(id) on q0 is about to be called
//
// It appends until it is killed.
func TestKillChild(t *testing.T) {
	path := os.Getenv(killEnv)
	if path == "" {
		t.Skip("child of TestKill9 only")
	}
	pipe := os.NewFile(3, "acks")
	var mu sync.Mutex
	report := func(format string, args ...any) {
		line := fmt.Appendf(nil, format+"\n", args...)
		mu.Lock()
		defer mu.Unlock()
		if _, err := pipe.Write(line); err != nil {
			os.Exit(5)
		}
	}
	fail := func(what string, err error) {
		fmt.Fprintln(os.Stderr, what, err)
		os.Exit(3)
	}
	b, err := Open(path, Options{})
	if err != nil {
		fail("open:", err)
	}
	if os.Getenv(killCheckpointEnv) != "" {
		b.segmentMax = 64 << 10 // set before the first append: the writer reads it after
	}
	ctx := context.Background()
	pad := strings.Repeat("p", 1024)
	writer := func(l queue.Log, name string, w int) {
		window := make(chan struct{}, killWindow)
		for i := 0; ; i++ {
			window <- struct{}{}
			m := &core.Message{Topic: name, Payload: fmt.Appendf(nil, "%d/%d/%s", w, i, pad), QoS: 1}
			l.Append(m, func(id uint64, err error) {
				if err != nil {
					fail("append:", err)
				}
				report("A %s %d %d %d", name, w, i, id)
				<-window
			})
		}
	}
	var q0 queue.Log
	for q := range killQueues {
		name := fmt.Sprint("q", q)
		l, err := b.Open(ctx, queue.Config{Name: name})
		if err != nil {
			fail("open queue:", err)
		}
		if q == 0 {
			q0 = l
		}
		for w := range killWriters {
			go writer(l, name, w)
		}
	}
	go func() {
		after := uint64(0)
		for {
			recs, err := q0.Read(ctx, after, 64)
			if err != nil {
				fail("read:", err)
			}
			for _, r := range recs {
				after = r.ID
				if r.ID%2 == 0 {
					report("X %d", r.ID)
					q0.Remove(r.ID)
				}
			}
			if len(recs) == 0 {
				time.Sleep(time.Millisecond) // a test child: nothing to wait on
			}
		}
	}()
	time.Sleep(time.Minute) // a child not killed by then says so by its exit
	os.Exit(4)
}

type ackLine struct {
	queue string
	w, i  int
	id    uint64
}

// TestKill9 kills a process appending to queues with SIGKILL while its
// appends and removals are in flight, then reopens the file: every record
// whose done(nil) the child saw is there (unless it was being removed), in
// each writer's order, once; nothing beyond the appends in flight; and the
// counts Stats keeps agree with the records the file holds.
//
// A done called before its commit reached the file loses records only if
// the kill lands before bbolt writes the commit's meta page, so one kill
// may miss it; three children are killed, each at another point.
//
// The store acknowledges an append once its log record is synced
// (wal.go), and checkpoints the log into bbolt in the background: the
// "checkpoints" rounds make the child checkpoint every 64 KiB of log, so
// that kills land during checkpoints too (a segment applied to bbolt but
// not yet deleted is replayed again on open), and the "torn" rounds then
// append half a record to the last segment, as a write cut short by a
// power loss leaves it: the open must stop there and lose nothing
// acknowledged.
func TestKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("starts child processes")
	}
	for _, after := range []int{1000, 3000, 6000} {
		t.Run(fmt.Sprintf("after=%d", after), func(t *testing.T) { killRound(t, after, false, false) })
	}
	for _, after := range []int{2000, 5000} {
		t.Run(fmt.Sprintf("checkpoints/after=%d", after), func(t *testing.T) { killRound(t, after, true, false) })
		t.Run(fmt.Sprintf("checkpoints/torn/after=%d", after), func(t *testing.T) { killRound(t, after, true, true) })
	}
}

func killRound(t *testing.T, killAfter int, checkpoints, torn bool) {
	path := filepath.Join(t.TempDir(), FileName)
	var acks []ackLine
	removing := map[uint64]bool{}
	env := []string{killEnv + "=" + path}
	if checkpoints {
		env = append(env, killCheckpointEnv+"=1")
	}
	coretest.KillChild(t, "TestKillChild", env, func(line string) bool {
		switch line[0] {
		case 'A':
			var a ackLine
			if _, err := fmt.Sscanf(line, "A %s %d %d %d", &a.queue, &a.w, &a.i, &a.id); err != nil {
				t.Fatalf("child wrote %q", line)
			}
			acks = append(acks, a)
		case 'X':
			var id uint64
			_, _ = fmt.Sscanf(line, "X %d", &id)
			removing[id] = true
		}
		return len(acks) >= killAfter
	})
	t.Logf("child saw %d appends done and removed %d records before SIGKILL", len(acks), len(removing))
	segs, err := segments(path)
	if err != nil || len(segs) == 0 {
		t.Fatalf("no log segment after the kill: %v %v", segs, err)
	}
	t.Logf("log segments left: %v", segs)
	if torn {
		tearLastSegment(t, path, segs[len(segs)-1])
	}

	b := open(t, path)
	defer b.Close()
	type writerKey struct {
		queue string
		w     int
	}
	lastAcked := map[writerKey]int{}
	byID := map[string]map[uint64]ackLine{}
	for _, a := range acks {
		k := writerKey{a.queue, a.w}
		if i, ok := lastAcked[k]; ok && a.i != i+1 {
			t.Fatalf("child reported %+v after i=%d: done out of order", a, i)
		}
		lastAcked[k] = a.i
		if byID[a.queue] == nil {
			byID[a.queue] = map[uint64]ackLine{}
		}
		byID[a.queue][a.id] = a
	}
	for q := range killQueues {
		name := fmt.Sprint("q", q)
		l, err := b.Open(context.Background(), queue.Config{Name: name})
		if err != nil {
			t.Fatal(err)
		}
		recs := queuetest.ReadAll(t, l, 0)
		present := map[uint64]bool{}
		next := map[int]int{} // writer → the i its next record must not be below
		var bytes int64
		for _, r := range recs {
			present[r.ID] = true
			bytes += int64(r.Msg.Size())
			var w, i int
			if _, err := fmt.Sscanf(string(r.Msg.Payload), "%d/%d/", &w, &i); err != nil {
				t.Fatalf("%s id %d holds %q", name, r.ID, r.Msg.Payload)
			}
			// In each writer's order, once, and without a gap (but in q0,
			// which has holes where the child removed).
			if n, seen := next[w]; i < n || (q != 0 && (seen || i != 0) && i != n) {
				t.Fatalf("%s: writer %d's record %d where %d was due", name, w, i, n)
			}
			next[w] = i + 1
			if a, ok := byID[name][r.ID]; ok && (a.w != w || a.i != i) {
				t.Fatalf("%s id %d holds %d/%d, the child was told %d/%d", name, r.ID, w, i, a.w, a.i)
			}
			// Beyond what was acknowledged, only the appends in flight.
			if last, ok := lastAcked[writerKey{name, w}]; i > last+killWindow || (!ok && i >= killWindow) {
				t.Fatalf("%s: writer %d's record %d stored, but only %d acknowledged", name, w, i, last)
			}
		}
		for id, a := range byID[name] {
			if !present[id] && !(q == 0 && removing[id]) {
				t.Fatalf("acknowledged append lost after kill -9: %+v", a)
			}
		}
		n, nb, err := l.Stats(context.Background())
		if err != nil || n != len(recs) || nb != bytes {
			t.Fatalf("%s: stats say %d records, %d bytes (%v); the file holds %d, %d", name, n, nb, err, len(recs), bytes)
		}
	}
}

// tearLastSegment appends the first half of a record to segment n: a
// header that promises more bytes than follow, as a write cut short
// leaves it.
func tearLastSegment(t *testing.T, path string, n uint64) {
	t.Helper()
	m := &op{log: &qlog{name: "q0"}, msg: &core.Message{Topic: "q0", Payload: []byte(strings.Repeat("x", 1000))}, size: 1000, done: func(uint64, error) {}, id: 1 << 40}
	rec := encodeOp(nil, m)
	f, err := os.OpenFile(segmentName(path, n), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(rec[:len(rec)/2]); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}
