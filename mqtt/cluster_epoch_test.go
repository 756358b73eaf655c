package mqtt

import (
	"errors"
	"sync"
	"testing"

	"github.com/tolsey/tolsey/mqtt/session"
)

// failTake is the Redis store whose TakeClient fails (a Redis error).
type failTake struct{ *session.Redis }

func (f failTake) TakeClient(string, func(session.Kind, string, []byte, []byte) error) (uint64, error) {
	return 0, errors.New("injected redis error")
}

// A client that connected once before (its epoch 1 in the store) resumes
// while the read of its session fails: it starts a new session, which is
// written unfenced. Before, it was never written: every op carried epoch
// 0 and was refused (found by review).
func TestSessionAfterTakeErrorIsWritten(t *testing.T) {
	var r *session.Redis
	s := startClusterServer(t, claimFunc(answered), func(rr *session.Redis) session.Backend {
		r = rr
		return failTake{rr}
	})
	if _, err := r.TakeEpoch("dev"); err != nil { // an earlier connect took the id
		t.Fatal(err)
	}
	cur, _ := dialSession(t, s.Addr(), "dev", 5, false)
	cur.subscribeQoS1(t, "d/#")
	waitUntil(t, "dev's session known", func() bool { return s.sessions.isKnown("dev") })
	settled(s)
	if n := r.Refused(); n != 0 {
		t.Errorf("%d writes of the session refused", n)
	}
	if subs := storedSubs(t, r, "dev"); len(subs) != 1 {
		t.Fatalf("stored subscriptions %v; want 1", subs)
	}
}

// gated is the Redis store whose next Apply, once armed, waits for release.
type gated struct {
	*session.Redis
	armed   chan struct{}
	release chan struct{}
}

func (g *gated) Apply(ops []session.Op) error {
	select {
	case <-g.armed:
		<-g.release
	default:
	}
	return g.Redis.Apply(ops)
}

// One gateway, no takeover: an operator deletes dev's session and dev
// reconnects at once, its delete still queued behind a slow commit. The
// reconnect waits for the delete before it reads the store: it starts a
// new session, nothing is refused, and only the new session's filter is
// stored. Before, the reconnect read the deleted session back (session
// present, d/# with it) and the delete, of an older epoch, was refused.
func TestAdminDeleteThenReconnectIsWritten(t *testing.T) {
	var r *session.Redis
	g := &gated{armed: make(chan struct{}, 1), release: make(chan struct{})}
	s := startClusterServer(t, claimFunc(answered), func(rr *session.Redis) session.Backend {
		r = rr
		g.Redis = rr
		return g
	})
	var once sync.Once
	free := func() { once.Do(func() { close(g.release) }) }
	t.Cleanup(free)
	dev, _ := dialSession(t, s.Addr(), "dev", 5, false)
	dev.subscribeQoS1(t, "d/#")
	waitUntil(t, "dev's session known", func() bool { return s.sessions.isKnown("dev") })
	settled(s)
	g.armed <- struct{}{}
	other, _ := dialSession(t, s.Addr(), "other", 5, false) // its write blocks the loop
	_ = other
	waitUntil(t, "the gate taken", func() bool { return len(g.armed) == 0 })
	if !s.DeleteSession("dev") {
		t.Fatal("no session deleted")
	}
	// The reconnect waiting for the delete lets the commit go on.
	hook := func(string) { free() }
	testHookDeleteWait.Store(&hook)
	t.Cleanup(func() { testHookDeleteWait.Store(nil) })
	dev2, present := dialSession(t, s.Addr(), "dev", 5, false)
	if present {
		t.Error("the deleted session came back (session present)")
	}
	dev2.subscribeQoS1(t, "e/#")
	free()
	settled(s)
	if n := r.Refused(); n != 0 {
		t.Errorf("%d writes refused, want 0", n)
	}
	if subs := storedSubs(t, r, "dev"); len(subs) != 1 || !subs["e/#"] {
		t.Fatalf("stored subscriptions %v; want e/# alone", subs)
	}
}

// storedSubs is the filters of id's session in the shared store, read as
// a gateway taking it would (TakeClient).
func storedSubs(t *testing.T, r *session.Redis, id string) map[string]bool {
	t.Helper()
	subs := map[string]bool{}
	if _, err := r.TakeClient(id, func(kind session.Kind, _ string, key, _ []byte) error {
		if kind == session.PutSub {
			subs[string(key)] = true
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return subs
}
