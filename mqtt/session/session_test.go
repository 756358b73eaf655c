package session

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"

	"github.com/tolsey/tolsey/retain/redistest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type entry struct {
	kind        Kind
	client, key string
	value       string
}

func loadAll(t *testing.T, b Backend) []entry {
	t.Helper()
	var out []entry
	if err := b.Load(func(kind Kind, client string, key, value []byte) error {
		out = append(out, entry{kind, client, string(key), string(value)})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestLogCommitsInOrderAndCloseDrains: ops are applied in the order they
// were queued (a put then a delete of the same key leaves nothing), a
// session's delete takes its subscriptions and messages and no other
// client's, After waits only when something was queued since its mark and
// answers once that is durable, and Close commits
// what is still queued: the file opened again holds exactly that.
func TestLogCommitsInOrderAndCloseDrains(t *testing.T) {
	for name, open := range backends(t) {
		t.Run(name, func(t *testing.T) { logCommitsInOrder(t, open) })
	}
}

// backends are the stores under test: each entry opens the same store
// (again, after a Close).
func backends(t *testing.T) map[string]func() (Backend, error) {
	dir := t.TempDir()
	rs := redistest.Start(t)
	return map[string]func() (Backend, error){
		"embedded": func() (Backend, error) { return OpenBolt(dir) },
		"redis": func() (Backend, error) {
			return OpenRedis(context.Background(), rs.URL(), "test:")
		},
	}
}

func logCommitsInOrder(t *testing.T, open func() (Backend, error)) {
	b, err := open()
	if err != nil {
		t.Fatal(err)
	}
	l := NewLog(b, nil)
	l.Enqueue(
		Op{Kind: PutClient, Client: "a", Value: []byte("A")},
		Op{Kind: PutSub, Client: "a", Key: []byte("x/#"), Value: []byte("s1")},
		Op{Kind: PutInflight, Client: "a", Key: []byte{0, 1}, Value: []byte("m1")},
		Op{Kind: PutClient, Client: "ab", Value: []byte("AB")}, // a prefix of another id: not deleted with it
		Op{Kind: PutSub, Client: "ab", Key: []byte("y"), Value: []byte("s2")},
		Op{Kind: PutInflight, Client: "ab", Key: []byte{0, 2}, Value: []byte("m2")},
		Op{Kind: DeleteInflight, Client: "ab", Key: []byte{0, 2}},
	)
	m := l.Mark()
	if l.After(m, func(error) { t.Error("called with nothing queued since its mark") }) {
		t.Fatal("After waits with nothing queued since its mark")
	}
	l.Enqueue(Op{Kind: DeleteSession, Client: "a"})
	done := make(chan error, 1)
	if !l.After(m, func(err error) { done <- err }) {
		t.Fatal("After does not wait for an op queued since its mark")
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	l.Enqueue(Op{Kind: PutInflight, Client: "ab", Key: []byte{0, 3}, Value: []byte("m3")})
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	b, err = open()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	got := fmt.Sprint(loadAll(t, b))
	want := fmt.Sprint([]entry{{PutClient, "ab", "", "AB"}, {PutSub, "ab", "y", "s2"}, {PutInflight, "ab", "\x00\x03", "m3"}})
	if got != want {
		t.Fatalf("stored %s, want %s", got, want)
	}
}

// TestLogGroupsConcurrentWrites: 64 writers each queue an op and wait for
// it to be durable; the committer takes what has queued up while it
// commits, so there are fewer commits than writes.
func TestLogGroupsConcurrentWrites(t *testing.T) {
	b, err := OpenBolt(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	l := NewLog(b, nil)
	defer l.Close()
	const writers, each = 64, 20
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				m := l.Mark()
				l.Enqueue(Op{Kind: PutInflight, Client: fmt.Sprint(w), Key: []byte{byte(i >> 8), byte(i)}, Value: []byte("m")})
				done := make(chan error, 1)
				l.After(m, func(err error) { done <- err })
				if err := <-done; err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	if c := l.Commits(); c >= writers*each {
		t.Fatalf("%d commits for %d writes: no group commit", c, writers*each)
	} else {
		t.Logf("%d commits for %d writes", c, writers*each)
	}
}

// BenchmarkCommitPerWrite is what a store that commits each write on its
// own (as mochi's bolt storage hook does) costs: one transaction, one
// fsync round, per message.
//
//	go test -run '^$' -bench CommitPerWrite -benchtime=200x ./mqtt/session/
func BenchmarkCommitPerWrite(b *testing.B) {
	bb, err := OpenBolt(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer bb.Close()
	for i := range b.N {
		if err := bb.Apply([]Op{{Kind: PutInflight, Client: "c", Key: []byte{byte(i >> 8), byte(i)}, Value: make([]byte, 200)}}); err != nil {
			b.Fatal(err)
		}
	}
}

// failingBackend fails every Apply while fail is set.
type failingBackend struct {
	Backend
	fail atomic.Bool
}

func (f *failingBackend) Apply(ops []Op) error {
	if f.fail.Load() {
		return errors.New("disk full")
	}
	return f.Backend.Apply(ops)
}

// TestLogAfterReportsFailure: a waiter whose ops were in a commit that
// failed gets ErrCommitFailed, also when that commit came before the
// waiter's own (empty) batch.
func TestLogAfterReportsFailure(t *testing.T) {
	b, err := OpenBolt(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	f := &failingBackend{Backend: b}
	f.fail.Store(true)
	l := NewLog(f, slog.New(slog.NewTextHandler(io.Discard, nil)))
	defer l.Close()
	m := l.Mark()
	l.Enqueue(Op{Kind: PutClient, Client: "a", Value: []byte("A")})
	first := make(chan error, 1)
	l.After(Mark{}, func(err error) { first <- err }) // the failed commit itself, or after it
	if err := <-first; err == nil {
		t.Fatal("a failed commit answered nil")
	}
	f.fail.Store(false)
	done := make(chan error, 1)
	l.After(m, func(err error) { done <- err })
	if err := <-done; !errors.Is(err, ErrCommitFailed) {
		t.Fatalf("after a failed commit since the mark: %v, want ErrCommitFailed", err)
	}
}

// BenchmarkRedisApply: one batch of 64 in-flight messages of 8 clients
// applied to a real Redis (the epoch test of each client in the script,
// shared.go).
func BenchmarkRedisApply(b *testing.B) {
	rs := redistest.Start(b)
	r, err := OpenRedis(context.Background(), rs.URL(), "bench:")
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	ops := make([]Op, 64)
	v := make([]byte, 256)
	for i := range ops {
		ops[i] = Op{Kind: PutInflight, Client: fmt.Sprint("c", i%8), Key: []byte{0, byte(i)}, Value: v}
	}
	b.ResetTimer()
	for range b.N {
		if err := r.Apply(ops); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRedisEpoch is the epoch check a resume on the gateway holding
// the session makes (one HGET; docs/cluster.md, "A resume on a gateway
// holding a stale copy").
func BenchmarkRedisEpoch(b *testing.B) {
	rs := redistest.Start(b)
	r, err := OpenRedis(context.Background(), rs.URL(), "bench:")
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	if _, err := r.TakeEpoch("c"); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		if _, err := r.Epoch("c"); err != nil {
			b.Fatal(err)
		}
	}
}

// Epoch reads a client's epoch as the last take left it, 0 for one never
// taken, and raises nothing.
func TestRedisEpochReads(t *testing.T) {
	rs := redistest.Start(t)
	r, err := OpenRedis(context.Background(), rs.URL(), "epr:")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if e, err := r.Epoch("c"); err != nil || e != 0 {
		t.Fatalf("never taken: epoch %d, %v; want 0", e, err)
	}
	taken, err := r.TakeClient("c", func(Kind, string, []byte, []byte) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if e, err := r.Epoch("c"); err != nil || e != taken {
			t.Fatalf("epoch %d, %v; want %d", e, err, taken)
		}
	}
}

// A session taken with a new epoch (TakeClient, DropClient) refuses the
// writes of an older one; writes with the present epoch, and those of
// another client, go through.
func TestRedisEpochRefusesOlderWrites(t *testing.T) {
	rs := redistest.Start(t)
	r, err := OpenRedis(context.Background(), rs.URL(), "ep:")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	put := func(client string, epoch uint64, v string) {
		t.Helper()
		if err := r.Apply([]Op{{Kind: PutClient, Client: client, Value: []byte(v), Epoch: epoch}}); err != nil {
			t.Fatal(err)
		}
	}
	stored := func(client string) (string, uint64) {
		t.Helper()
		var got string
		e, err := r.TakeClient(client, func(kind Kind, _ string, _, value []byte) error {
			if kind == PutClient {
				got = string(value)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return got, e
	}
	put("c", 0, "v0") // never taken: epoch 0
	got, e := stored("c")
	if got != "v0" || e != 1 {
		t.Fatalf("take: %q epoch %d, want v0 epoch 1", got, e)
	}
	put("c", 0, "stale") // the old holder
	put("d", 0, "other") // another client, never taken
	if got, _ := stored("c"); got != "v0" {
		t.Fatalf("a write with an older epoch went through: %q", got)
	}
	e, err = r.DropClient("c") // epoch 3
	if err != nil || e != 3 {
		t.Fatalf("drop: epoch %d, %v; want 3", e, err)
	}
	put("c", 2, "stale")
	put("c", 3, "new")
	got, _ = stored("c")
	if got != "new" {
		t.Fatalf("after the drop: %q, want new", got)
	}
	if n := r.Refused(); n != 2 {
		t.Errorf("refused %d, want 2", n)
	}
	if ep, err := r.Epochs(); err != nil || ep["c"] != 4 || ep["d"] != 0 {
		t.Errorf("epochs %v, %v; want c 4, d absent", ep, err)
	}
	var d string
	if _, err := r.TakeClient("d", func(kind Kind, _ string, _, value []byte) error { d = string(value); return nil }); err != nil || d != "other" {
		t.Errorf("d: %q, %v", d, err)
	}
}
