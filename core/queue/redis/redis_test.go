package redis

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tolsey/tolsey/core/coretest"
	"github.com/tolsey/tolsey/core/queue"
	"github.com/tolsey/tolsey/core/queue/queuetest"
	"github.com/tolsey/tolsey/retain/redistest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func open(t testing.TB, srv *redistest.Server, node string, claim time.Duration) *Backend {
	t.Helper()
	b, err := Open(context.Background(), Options{URL: srv.URL(), Node: node, ClaimTime: claim})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestConformance(t *testing.T) {
	srv := redistest.Start(t)
	n := 0
	queuetest.Run(t, func(t *testing.T) (queue.Backend, func(queue.Backend) queue.Backend) {
		// Each subtest a prefix of its own on the one server.
		n++
		o := Options{URL: srv.URL(), Node: "node-a", Prefix: fmt.Sprintf("t%d:", n)}
		b, err := Open(context.Background(), o)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close() })
		return b, func(old queue.Backend) queue.Backend {
			if err := old.Close(); err != nil {
				t.Fatal(err)
			}
			b, err := Open(context.Background(), o)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = b.Close() })
			return b
		}
	}, queuetest.Shared())
}

// TestTwoGateways: two gateways (two backends with their own node ids) on
// one queue. Each record is read by exactly one of them; a record one of
// them read and never removed (it "died") is claimed by the other once the
// claim time has passed, and by nobody before; a gateway never claims its
// own pending records back.
func TestTwoGateways(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	// Long enough that a's claims, made over a few claim rounds on a
	// loaded machine, are all still fresh when b reads below.
	const claim = 2 * time.Second
	a := open(t, srv, "gw-a", claim)
	defer a.Close()
	b := open(t, srv, "gw-b", claim)
	defer b.Close()
	la, err := a.Open(ctx, queue.Config{Name: "q"})
	if err != nil {
		t.Fatal(err)
	}
	lb, err := b.Open(ctx, queue.Config{Name: "q"})
	if err != nil {
		t.Fatal(err)
	}

	// Exactly once: both read in turns while a appends.
	const n = 200
	seen := map[uint64]string{}
	var fromB []uint64
	readSome := func(l queue.Log, who string) {
		recs, err := l.Read(ctx, 0, 7)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			if prev, ok := seen[r.ID]; ok {
				t.Fatalf("record %d read by %s and %s", r.ID, prev, who)
			}
			seen[r.ID] = who
			if who == "b" {
				fromB = append(fromB, r.ID)
			}
		}
	}
	for i := range n {
		queuetest.Append(t, la, queuetest.Msg("t", i))
		if i%3 == 0 {
			readSome(la, "a")
		}
		if i%3 == 1 {
			readSome(lb, "b")
		}
	}
	coretest.Eventually(t, "every record read", 10*time.Second, func() bool {
		readSome(la, "a")
		readSome(lb, "b")
		return len(seen) == n
	})
	if len(fromB) == 0 || len(fromB) == n {
		t.Fatalf("b read %d of %d: the test shares nothing", len(fromB), n)
	}
	// a removes its records; b "dies" with its records pending.
	for id, who := range seen {
		if who == "a" {
			la.Remove(id)
		}
	}
	coretest.Eventually(t, "a's removals", 10*time.Second, func() bool {
		m, _, err := la.Stats(ctx)
		return err == nil && m == len(fromB)
	})

	// Before the claim time, a claims nothing (and b's Read gives nothing:
	// its own pending records are not claimed back).
	start := time.Now()
	recs, err := la.Read(ctx, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 0 && time.Since(start) < claim {
		t.Fatalf("a read %d records before the claim time", len(recs))
	}
	var claimed []uint64
	var firstClaim time.Time
	coretest.Eventually(t, "a claims what b left", 10*time.Second, func() bool {
		recs, err := la.Read(ctx, 0, 1000)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			if seen[r.ID] != "b" {
				t.Fatalf("a got record %d, which %s had", r.ID, seen[r.ID])
			}
			if firstClaim.IsZero() {
				firstClaim = time.Now()
			}
			claimed = append(claimed, r.ID)
		}
		return len(claimed) >= len(fromB)
	})
	if len(claimed) != len(fromB) {
		t.Fatalf("a claimed %d records, b had left %d", len(claimed), len(fromB))
	}
	// b, still alive, never gets back what a now holds, nor its own.
	time.Sleep(claim / 4)
	recs, err = lb.Read(ctx, 0, 1000)
	if age := time.Since(firstClaim); age >= claim {
		t.Fatalf("a's first claim is %v old, not fresh: the test ran too slowly to tell", age)
	}
	if err != nil || len(recs) != 0 {
		t.Fatalf("b read %d records after a claimed them (%v)", len(recs), err)
	}
	la.Remove(claimed...)
	coretest.Eventually(t, "queue empty", 10*time.Second, func() bool {
		m, bytes, err := la.Stats(ctx)
		return err == nil && m == 0 && bytes == 0
	})
}

// TestOwnPendingNotClaimedBack: a record this gateway read and has not
// removed yet (its consumer is slow) is not handed to it again once the
// claim time passes; XAUTOCLAIM would.
func TestOwnPendingNotClaimedBack(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	const claim = 100 * time.Millisecond
	a := open(t, srv, "gw-a", claim)
	defer a.Close()
	l, err := a.Open(ctx, queue.Config{Name: "q"})
	if err != nil {
		t.Fatal(err)
	}
	queuetest.Append(t, l, queuetest.Msg("t", 1))
	if got := queuetest.ReadAll(t, l, 0); len(got) != 1 {
		t.Fatalf("read %d", len(got))
	}
	deadline := time.Now().Add(4 * claim)
	for time.Now().Before(deadline) {
		if got := queuetest.ReadAll(t, l, 0); len(got) != 0 {
			t.Fatalf("own pending record read again: %d", got[0].ID)
		}
		time.Sleep(claim / 4)
	}
}

func TestRecordIDs(t *testing.T) {
	for _, c := range []struct {
		stream string
		id     uint64
	}{{"0-1", 1}, {"1-0", 1 << 20}, {"1700000000000-5", 1700000000000<<20 | 5}} {
		id, err := recordID(c.stream)
		if err != nil || id != c.id || streamID(id) != c.stream {
			t.Fatalf("%s: %d %v, back %s", c.stream, id, err, streamID(id))
		}
	}
	for _, bad := range []string{"1-1048576", "x-1", "1", "17592186044416-0"} {
		if _, err := recordID(bad); err == nil {
			t.Fatalf("%s accepted", bad)
		}
	}
}
