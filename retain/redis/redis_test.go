package redis

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/tolsey/tolsey/core"
	"github.com/tolsey/tolsey/retain"
	"github.com/tolsey/tolsey/retain/redistest"
	"github.com/tolsey/tolsey/retain/retaintest"
)

func TestMain(m *testing.M) {
	// go-redis logs every failed dial; the outage tests make many on purpose.
	flag.Parse()
	if !testing.Verbose() {
		goredis.SetLogger(voidLogger{})
	}
	goleak.VerifyTestMain(m)
}

type voidLogger struct{}

func (voidLogger) Printf(context.Context, string, ...any) {}

var prefixes atomic.Int64

// newPrefix isolates each test's keys and channel on a shared server.
func newPrefix() string { return fmt.Sprintf("test%d:", prefixes.Add(1)) }

func quietLogger() *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

func open(t testing.TB, url, prefix string, limits retain.Limits) *Store {
	t.Helper()
	s, err := Open(context.Background(), Options{
		URL:           url,
		Prefix:        prefix,
		Limits:        limits,
		Logger:        quietLogger(),
		PingInterval:  100 * time.Millisecond,
		SweepInterval: 50 * time.Millisecond,
		MaxBackoff:    200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	srv := redistest.Start(t)
	retaintest.Run(t, func(t *testing.T, limits retain.Limits) retain.Store {
		s := open(t, srv.URL(), newPrefix(), limits)
		if err := s.Ready(); err != nil {
			t.Fatal(err)
		}
		return s
	})
}

func TestBadURL(t *testing.T) {
	if _, err := Open(context.Background(), Options{URL: "http://x"}); err == nil {
		t.Fatal("accepted a non-redis URL")
	}
	if _, err := Open(context.Background(), Options{}); err == nil {
		t.Fatal("accepted no URL")
	}
}

func TestTwoGateways(t *testing.T) {
	srv := redistest.Start(t)
	p := newPrefix()
	a := open(t, srv.URL(), p, retain.Limits{})
	b := open(t, srv.URL(), p, retain.Limits{})
	m := retaintest.Msg("sensors/1/temp", "21")
	retaintest.Set(t, a, m)
	retaintest.Eventually(t, "B to see A's set", func() bool {
		return slices.Equal(retaintest.Topics(t, b, "sensors/+/temp"), []string{"sensors/1/temp"})
	})
	if n, err := b.Delete(retaintest.Ctx(t), "sensors/#"); err != nil || n != 1 {
		t.Fatalf("Delete on B: %d %v", n, err)
	}
	retaintest.Eventually(t, "A to see B's delete", func() bool {
		return len(retaintest.Topics(t, a, "#")) == 0 && a.Stats().Count == 0
	})
	if got := retaintest.Get(t, a, "sensors/1/temp"); got != nil {
		t.Fatalf("A still gets %+v", got)
	}
}

// TestRacingGateways: two gateways Set one topic concurrently; Redis, A's
// index and B's index must agree on the last message.
func TestRacingGateways(t *testing.T) {
	srv := redistest.Start(t)
	p := newPrefix()
	a := open(t, srv.URL(), p, retain.Limits{})
	b := open(t, srv.URL(), p, retain.Limits{})
	var wg sync.WaitGroup
	for i, s := range []*Store{a, b} {
		wg.Go(func() {
			for j := range 50 {
				m := retaintest.Msg("race", fmt.Sprintf("%d-%0*d", i, j+1, j)) // sizes differ
				if j%2 == 0 {
					m.Expiry = time.Now().Add(time.Duration(j+1) * time.Hour)
				}
				if err := s.Set(retaintest.Ctx(t), m); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	want := retaintest.Get(t, a, "race")
	retaintest.Eventually(t, "both indexes to agree with Redis", func() bool {
		return a.Stats() == b.Stats() && a.Stats().Bytes == int64(want.Size()) && a.Stats().Count == 1
	})
	for _, s := range []*Store{a, b} {
		meta, _ := s.cat.Load().Get("race")
		if meta.Expiry != want.Expiry.UnixNano() && !(meta.Expiry == 0 && want.Expiry.IsZero()) {
			t.Fatalf("index expiry %d, Redis has %v", meta.Expiry, want.Expiry)
		}
	}
}

func TestReopenRebuildsFromScan(t *testing.T) {
	srv := redistest.Start(t)
	p := newPrefix()
	a := open(t, srv.URL(), p, retain.Limits{})
	for i := range 1500 { // more than one SCAN page
		retaintest.Set(t, a, retaintest.Msg(fmt.Sprintf("r/%d", i), "x"))
	}
	retaintest.Set(t, a, retaintest.Msg("$SYS/up", "1"))
	short := retaintest.Msg("r/short", "x")
	short.Expiry = time.Now().Add(50 * time.Millisecond)
	retaintest.Set(t, a, short)
	want := a.Stats()
	_ = a.Close()
	// A foreign key under another prefix and a glob-looking one are ignored.
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr})
	defer c.Close()
	c.Set(context.Background(), "other:msg:x", "junk", 0)
	time.Sleep(100 * time.Millisecond)
	b := open(t, srv.URL(), p, retain.Limits{})
	got := b.Stats()
	if got.Count != want.Count-1 {
		t.Fatalf("rebuilt %+v, want %d (all but the expired one)", got, want.Count-1)
	}
	if n := len(retaintest.Topics(t, b, "r/+")); n != 1500 {
		t.Fatalf("Match r/+ found %d", n)
	}
}

func TestUnreachableAtOpen(t *testing.T) {
	srv := redistest.Start(t)
	url := srv.URL()
	srv.Stop()
	s := open(t, url, newPrefix(), retain.Limits{})
	if err := s.Ready(); !errors.Is(err, retain.ErrUnavailable) {
		t.Fatalf("Ready with redis down: %v", err)
	}
	unavailable(t, s)
	srv.Restart()
	retaintest.Eventually(t, "store to become ready", func() bool { return s.Ready() == nil })
	retaintest.Set(t, s, retaintest.Msg("a", "x"))
}

// unavailable checks every call fails with ErrUnavailable.
func unavailable(t *testing.T, s *Store) {
	t.Helper()
	ctx := retaintest.Ctx(t)
	if err := s.Set(ctx, retaintest.Msg("a", "x")); !errors.Is(err, retain.ErrUnavailable) {
		t.Fatalf("Set: %v", err)
	}
	if _, err := s.Get(ctx, "a"); !errors.Is(err, retain.ErrUnavailable) {
		t.Fatalf("Get: %v", err)
	}
	if err := s.Match(ctx, "#", func(*core.Message) bool { return true }); !errors.Is(err, retain.ErrUnavailable) {
		t.Fatalf("Match: %v", err)
	}
	if _, err := s.Delete(ctx, "#"); !errors.Is(err, retain.ErrUnavailable) {
		t.Fatalf("Delete: %v", err)
	}
}

// TestRedisRestart kills redis-server mid-test and starts an empty one on
// the same port: both gateways report the outage, then converge on the new
// Redis's state, including a Set made on A before B has recovered.
func TestRedisRestart(t *testing.T) {
	srv := redistest.Start(t)
	p := newPrefix()
	a := open(t, srv.URL(), p, retain.Limits{})
	b := open(t, srv.URL(), p, retain.Limits{})
	retaintest.Set(t, a, retaintest.Msg("before", "x"))
	retaintest.Eventually(t, "B to see it", func() bool { return b.Stats().Count == 1 })

	srv.Stop()
	for _, s := range []*Store{a, b} {
		retaintest.Eventually(t, "outage to be noticed", func() bool {
			return errors.Is(s.Ready(), retain.ErrUnavailable)
		})
		unavailable(t, s)
	}
	srv.Restart() // empty: nothing was persisted
	// Set on A as soon as A is back, whether or not B is yet.
	retaintest.Eventually(t, "A to recover", func() bool { return a.Ready() == nil })
	retaintest.Set(t, a, retaintest.Msg("after", "y"))
	for _, s := range []*Store{a, b} {
		retaintest.Eventually(t, "convergence", func() bool {
			return s.Ready() == nil && slices.Equal(retaintest.Topics(t, s, "#"), []string{"after"})
		})
	}
}

// TestPartitionedGateway cuts B alone off Redis: A keeps working, and what A
// changes meanwhile (events B cannot receive) reaches B's index by the
// rebuild when the link is back.
func TestPartitionedGateway(t *testing.T) {
	srv := redistest.Start(t)
	proxy := redistest.NewProxy(t, srv.Addr)
	p := newPrefix()
	a := open(t, srv.URL(), p, retain.Limits{})
	b := open(t, proxy.URL(), p, retain.Limits{})
	retaintest.Set(t, a, retaintest.Msg("x/old", "1"))
	retaintest.Set(t, a, retaintest.Msg("x/keep", "1"))
	retaintest.Eventually(t, "B to see them", func() bool { return b.Stats().Count == 2 })

	proxy.Cut()
	retaintest.Eventually(t, "B to notice", func() bool { return errors.Is(b.Ready(), retain.ErrUnavailable) })
	unavailable(t, b)
	if err := a.Ready(); err != nil {
		t.Fatalf("A affected by B's partition: %v", err)
	}
	retaintest.Set(t, a, &core.Message{Topic: "x/old"}) // delete
	retaintest.Set(t, a, retaintest.Msg("x/new", "2"))
	proxy.Restore()
	retaintest.Eventually(t, "B to converge", func() bool {
		return b.Ready() == nil && slices.Equal(retaintest.Topics(t, b, "x/+"), []string{"x/keep", "x/new"})
	})
	if got := retaintest.Get(t, b, "x/new"); got == nil || string(got.Payload) != "2" {
		t.Fatalf("B Get x/new: %+v", got)
	}
}

func TestExpiresInRedisToo(t *testing.T) {
	srv := redistest.Start(t)
	p := newPrefix()
	s := open(t, srv.URL(), p, retain.Limits{})
	m := retaintest.Msg("e", "x")
	m.Expiry = time.Now().Add(time.Hour)
	retaintest.Set(t, s, m)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr})
	defer c.Close()
	at, err := c.PExpireTime(context.Background(), p+"msg:e").Result()
	if err != nil {
		t.Fatal(err)
	}
	if d := time.UnixMilli(int64(at / time.Millisecond)).Sub(m.Expiry); d < 0 || d > time.Millisecond {
		t.Fatalf("PEXPIRETIME %v, expiry %v", at, m.Expiry)
	}
}

// The backoff cap is the longest the store can stay unavailable after
// Redis is back, however long the outage was: drill 2 of
// docs/reliability.md promises /readyz 200 within 2 s after a 30 s outage,
// which a 5 s cap (as before) broke by up to 5 s.
func TestDefaultBackoffLeavesRoomForReadyPromise(t *testing.T) {
	var o Options
	o.defaults()
	if o.MaxBackoff > time.Second {
		t.Fatalf("default MaxBackoff %v: after a long outage the store stays unavailable up to that long once Redis is back; the promise is ready within 2 s", o.MaxBackoff)
	}
}
