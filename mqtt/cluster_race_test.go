package mqtt

// Two races of a session between two gateways (docs/cluster.md, "Races
// fixed"): two front-ends in this process, A and B, on one real Redis
// session store, their claims answered by functions, so that each test
// holds the one interleaving it is about.

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tolsey/tolsey/mqtt/session"
	"github.com/tolsey/tolsey/retain"
	"github.com/tolsey/tolsey/retain/memory"
	"github.com/tolsey/tolsey/retain/redistest"
)

// startGatewayPair runs two front-ends, nodes "a" and "b", whose sessions
// are in one Redis store and whose claims ca and cb answer.
func startGatewayPair(t *testing.T, ca, cb Cluster) (a, b *Server) {
	t.Helper()
	rs := redistest.Start(t)
	start := func(node string, c Cluster) *Server {
		r, err := session.OpenRedis(context.Background(), rs.URL(), t.Name()+":")
		if err != nil {
			t.Fatal(err)
		}
		return startTestServer(t, memory.New(retain.Limits{}), func(o *Options) {
			o.Sessions, o.Cluster, o.Node = r, c, node
		})
	}
	return start("a", ca), start("b", cb)
}

// settled waits until everything s queued for its session store is
// written (or refused).
func settled(s *Server) {
	done := make(chan struct{})
	if s.sessions.log.After(session.Mark{}, func(error) { close(done) }) {
		<-done
	}
}

// A clean start on B after a claim A did not answer in time deletes the
// stored session; A, only slow, goes on writing it (a message queued for
// it, its disconnect). What A writes after the delete must not put the
// session back: a later resume would find that stale copy. With the
// epoch, B's clean start takes the id with a new epoch and A's writes,
// with the old one, are refused. Before, A's writes recreated the session
// and the resume on B found it (session present 1).
func TestCleanStartAfterUnansweredClaimIsNotWrittenBack(t *testing.T) {
	var bAnswered atomic.Bool
	a, b := startGatewayPair(t, claimFunc(answered), claimFunc(func(string, int64) bool { return bAnswered.Load() }))

	dev, _ := dialSession(t, a.Addr(), "dev", 5, false)
	dev.subscribeQoS1(t, "d/#")
	waitUntil(t, "dev's session stored on A", func() bool { return a.sessions.isKnown("dev") })
	settled(a)

	// B: dev connects with clean start; A never answers the claim.
	c, present := dialSessionExpiry(t, b.Addr(), "dev", 5, true, 0)
	if present {
		t.Fatal("a clean start found a session")
	}
	c.disconnect(t)

	// A, slow, has not let go: a message is queued for dev there (its
	// PUBACK waits for the write), then dev's connection there ends.
	pub := dialRaw(t, a.Addr(), "pub", 0)
	pub.publishWait(t, "d/x", "late", 1, 1)
	dev.disconnect(t)
	waitOffline(t, a, "dev")
	settled(a)

	// dev resumes on B, every claim answered now.
	bAnswered.Store(true)
	_, present = dialSession(t, b.Addr(), "dev", 5, false)
	if present {
		t.Fatal("the resume found the session the clean start deleted: a slow gateway wrote it back")
	}
}

// A takeover on A (B's claim) while a new connection of the id on A is
// still claiming lets the session go like any other; the new connection's
// claim makes B let go in turn and reads the session back, with what B
// added to it. Before, A kept its copy for the new connection: what B did
// with the session meanwhile (here a subscription) was lost, and A went
// on writing a session B had taken.
func TestLocalConnectDuringTakeoverReadsTheSessionBack(t *testing.T) {
	release := make(chan struct{})
	var holdDev atomic.Bool
	a, b := startGatewayPair(t, claimFunc(func(client string, _ int64) bool {
		if client == "dev" && holdDev.Load() {
			<-release // B's answer to the new connection's claim comes later
		}
		return true
	}), claimFunc(answered))

	old, _ := dialSession(t, a.Addr(), "dev", 5, false)
	old.subscribeQoS1(t, "a/#")
	waitUntil(t, "dev's session stored on A", func() bool { return a.sessions.isKnown("dev") })
	old.disconnect(t)
	waitOffline(t, a, "dev")
	settled(a)

	// B's claim reaches A; as A lets the session go, dev connects to A
	// again and claims (held until released).
	holdDev.Store(true)
	type dialed struct {
		c       *rawClient
		present bool
	}
	cur := make(chan dialed, 1)
	hook := func(string) {
		go func() {
			var d dialed
			// Sent also when dialSession's t.Fatal ends this goroutine:
			// the test's own goroutine then reports the failed dial.
			defer func() { cur <- d }()
			d.c, d.present = dialSession(t, a.Addr(), "dev", 5, false)
		}()
		waitUntil(t, "the new connection claiming", func() bool {
			a.ids.mu.Lock()
			defer a.ids.mu.Unlock()
			_, ok := a.ids.local["dev"]
			return ok
		})
	}
	testHookTakenOver.Store(&hook)
	t.Cleanup(func() { testHookTakenOver.Store(nil) })
	letGo := make(chan struct{})
	a.TakenOver("dev", time.Now().UnixNano(), "b", func(bool) { close(letGo) })
	<-letGo
	testHookTakenOver.Store(nil)

	// B's claim was answered: dev's connection there reads the session
	// and subscribes to b/#.
	onB, present := dialSession(t, b.Addr(), "dev", 5, false)
	if !present {
		t.Fatal("B found no session")
	}
	onB.subscribeQoS1(t, "b/#")
	// The new connection's claim reaches B: B lets the session go.
	bLetGo := make(chan struct{})
	b.TakenOver("dev", time.Now().UnixNano(), "a", func(bool) { close(bLetGo) })
	<-bLetGo
	close(release)

	d := <-cur
	if d.c == nil {
		t.Fatal("the new connection on A failed")
	}
	if !d.present {
		t.Fatal("the new connection on A found no session")
	}
	for _, topic := range []string{"a/x", "b/x"} {
		if subs := a.mochi.Topics.Subscribers(topic); len(subs.Subscriptions) == 0 {
			t.Errorf("the session on A has no subscription for %s", topic)
		}
	}
	pub := dialRaw(t, a.Addr(), "pub", 0)
	pub.publishWait(t, "b/x", "m1", 1, 1)
	d.c.expectPublish(t, "b/x", "m1", 1, false)
}

// A persistent session started while a connection of the id whose
// session was not stored holds it here (no fetch: mochi holds the id)
// takes an epoch of its own: its writes are not refused. (Without,
// they carried epoch 0 while the clean start had raised the id's.)
func TestSessionNewOverUnstoredLocalIsWritten(t *testing.T) {
	var r *session.Redis
	s := startClusterServer(t, claimFunc(answered), func(rr *session.Redis) session.Backend {
		r = rr
		return rr
	})
	first, present := dialSessionExpiry(t, s.Addr(), "dev", 5, true, 0)
	if present {
		t.Fatal("a clean start found a session")
	}
	_ = first
	cur, _ := dialSession(t, s.Addr(), "dev", 5, false)
	cur.subscribeQoS1(t, "d/#")
	waitUntil(t, "dev's session stored", func() bool { return s.sessions.isKnown("dev") })
	settled(s)
	if n := r.Refused(); n != 0 {
		t.Fatalf("%d writes of the new session refused", n)
	}
	if subs := storedSubs(t, r, "dev"); len(subs) != 1 {
		t.Fatalf("stored subscriptions %v; want 1", subs)
	}
}
