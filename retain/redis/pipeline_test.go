package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tolsey/tolsey/retain"
	"github.com/tolsey/tolsey/retain/redistest"
	"github.com/tolsey/tolsey/retain/retaintest"
)

// readsProcessed is redis-server's count of socket reads that carried
// commands (INFO stats): pipelined commands arrive in one read, so it
// counts round trips, not commands.
func readsProcessed(t testing.TB, addr string) int64 {
	v, ok := infoField(t, addr, "stats", "total_reads_processed:")
	if !ok {
		t.Fatal("no total_reads_processed in INFO stats")
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// concurrentSets runs rounds of n Sets started together and fails the
// test on any error.
func concurrentSets(t *testing.T, s *Store, rounds, n int) {
	t.Helper()
	for r := range rounds {
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				<-start
				m := retaintest.Msg(fmt.Sprintf("bulk/%d/%d", r, i), "x")
				if err := s.Set(retaintest.Ctx(t), m); err != nil {
					t.Error(err)
				}
			})
		}
		close(start)
		wg.Wait()
	}
}

// TestConcurrentSetsShareRoundTrips: Sets made at the same time go to
// Redis as pipelines, not one command per round trip, which capped a bulk
// load (a bridge, many MQTT publishers) at the round-trip rate: ~7k
// retained msgs/s however many publishers (docs/benchmarks.md, "Retained at scale").
func TestConcurrentSetsShareRoundTrips(t *testing.T) {
	srv := redistest.Start(t)
	s := open(t, srv.URL(), newPrefix(), retain.Limits{})
	const rounds, n = 10, 64
	before := readsProcessed(t, srv.Addr)
	concurrentSets(t, s, rounds, n)
	reads := readsProcessed(t, srv.Addr) - before
	if s.Stats().Count != rounds*n {
		t.Fatalf("index holds %d, want %d", s.Stats().Count, rounds*n)
	}
	// One read per Set (and a few for pings and INFO) without pipelining;
	// the first Set of a round goes alone, the others gather behind it.
	if reads > rounds*n/4 {
		t.Fatalf("%d Sets took %d reads in redis-server: not pipelined", rounds*n, reads)
	}
	t.Logf("%d Sets in %d reads", rounds*n, reads)
}

// TestPipelinedSetRecoversLostScripts: a pipeline sends the script by its
// SHA only; when Redis has lost its script cache (SCRIPT FLUSH, or a
// restart the events connection did not notice) the writer loads it again
// instead of failing every Set.
func TestPipelinedSetRecoversLostScripts(t *testing.T) {
	srv := redistest.Start(t)
	s := open(t, srv.URL(), newPrefix(), retain.Limits{})
	retaintest.Set(t, s, retaintest.Msg("before", "x"))
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr})
	defer c.Close()
	if err := c.ScriptFlush(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	concurrentSets(t, s, 1, 16)
	if got := s.Stats().Count; got != 17 {
		t.Fatalf("index holds %d, want 17", got)
	}
}

// TestEachSetGetsItsOwnAnswer: in one batch, a caller whose context has
// ended gets its own error and its message is not sent, while the others
// are stored; and when Redis refuses writes every caller is told, with
// Redis's reply, not a success.
func TestEachSetGetsItsOwnAnswer(t *testing.T) {
	srv := redistest.Start(t)
	p := newPrefix()
	s := open(t, srv.URL(), p, retain.Limits{})
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr})
	defer c.Close()
	ctx := context.Background()
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := s.Set(cancelled, retaintest.Msg("gone", "x")); !errors.Is(err, context.Canceled) {
		t.Fatalf("Set with an ended context: %v", err)
	}
	concurrentSets(t, s, 1, 8)
	if n, err := c.Exists(ctx, p+"msg:gone").Result(); err != nil || n != 0 {
		t.Fatalf("a cancelled Set was stored: %d %v", n, err)
	}

	// maxmemory 1 with noeviction: Redis answers every write OOM.
	if err := c.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() { errs[i] = s.Set(retaintest.Ctx(t), retaintest.Msg(fmt.Sprintf("oom/%d", i), "x")) })
	}
	wg.Wait()
	for i, err := range errs {
		if err == nil || errors.Is(err, retain.ErrUnavailable) {
			t.Fatalf("Set %d while Redis refuses writes: %v, want Redis's refusal", i, err)
		}
	}
	if err := s.Ready(); err != nil {
		t.Fatalf("a refused write made the store unready: %v", err)
	}
	if err := c.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	retaintest.Set(t, s, retaintest.Msg("after", "x"))
}

// TestAwaitGivesUpAfterEventWait: a Set whose event never comes back (the
// events connection lost it) returns after about EventWait, woken by the
// sweeper, and leaves no waiter behind.
func TestAwaitGivesUpAfterEventWait(t *testing.T) {
	srv := redistest.Start(t)
	s, err := Open(context.Background(), Options{
		URL:           srv.URL(),
		Prefix:        newPrefix(),
		Logger:        quietLogger(),
		SweepInterval: 20 * time.Millisecond,
		EventWait:     50 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	session, err := s.available()
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.await(context.Background(), session, 1<<62) // a seq nobody takes
	}()
	select {
	case <-done:
	case <-retaintest.Ctx(t).Done():
		t.Fatal("await did not give up")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.waitq) != 0 {
		t.Fatalf("%d waiters left", len(s.waitq))
	}
}

// TestSetsGivenUpWhileQueued: callers that stop waiting (their context
// ends) while queued or while handed a flusher's place neither lose the
// calls queued behind them nor keep a place: every other Set is stored,
// and the queue ends empty with every place given back.
func TestSetsGivenUpWhileQueued(t *testing.T) {
	srv := redistest.Start(t)
	s := open(t, srv.URL(), newPrefix(), retain.Limits{})
	const n = 400
	var wg sync.WaitGroup
	var stored sync.Map
	for i := range n {
		wg.Go(func() {
			ctx := retaintest.Ctx(t)
			if i%2 == 1 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, time.Duration(i%7)*50*time.Microsecond)
				defer cancel()
			}
			topic := fmt.Sprintf("give-up/%d", i)
			err := s.Set(ctx, retaintest.Msg(topic, "x"))
			switch {
			case err == nil:
				stored.Store(topic, true)
			case i%2 == 0 || !errors.Is(err, context.DeadlineExceeded):
				t.Errorf("Set %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	s.wmu.Lock()
	queued, places := len(s.wqueue), s.wflushers
	s.wmu.Unlock()
	if queued != 0 || places != 0 {
		t.Fatalf("after every Set returned: %d queued, %d places taken", queued, places)
	}
	// A Set whose context ended after its command went out may be stored
	// though it failed; every success must be.
	for i := range n {
		topic := fmt.Sprintf("give-up/%d", i)
		if _, ok := stored.Load(topic); ok && retaintest.Get(t, s, topic) == nil {
			t.Fatalf("%s reported stored, not in Redis", topic)
		}
	}
	retaintest.Set(t, s, retaintest.Msg("after", "x"))
}
