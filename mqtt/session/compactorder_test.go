package session

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// compactableBolt is a store whose next compaction check is due and finds
// most of a file over minCompactSize free.
func compactableBolt(t *testing.T) *Bolt {
	t.Helper()
	b, err := OpenBolt(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	b.minCompactSize = 1 << 20
	applyBatches(t, b, sessionOps("gone", 4000, 512))
	applyBatches(t, b, deleteOps("gone", 4000))
	b.nextCheck = time.Time{}
	return b
}

// TestCompactionAfterTheAnswers: the commit that makes a compaction due
// answers its waiters (the deferred PUBACKs of QoS 1 publishes to
// persistent sessions) before the file is copied. The compaction ran
// inside the commit, so they waited for the whole copy: seconds for a
// file of hundreds of MiB.
func TestCompactionAfterTheAnswers(t *testing.T) {
	b := compactableBolt(t)
	b.nextCheck = time.Now().Add(time.Hour) // not due until the batch below
	answered := make(chan error, 1)
	var wasAnswered atomic.Bool // set by the waiter, on the committer
	var sawAnswer bool
	b.compactHook = func() { sawAnswer = wasAnswered.Load() }
	l := NewLog(b, nil)

	// Hold the committer in a batch of its own that writes nothing (so
	// no compaction check follows it), while the op and its waiter queue
	// up behind it: they then make one batch.
	m0 := l.Mark()
	l.Enqueue(Op{Kind: PutClient, Client: "first", Value: []byte("rec")})
	done0 := make(chan error, 1)
	l.After(m0, func(err error) { done0 <- err })
	if err := <-done0; err != nil {
		t.Fatal(err)
	}
	gate, held := make(chan struct{}), make(chan struct{})
	l.After(m0, func(error) { close(held); <-gate })
	<-held
	m := l.Mark()
	l.Enqueue(Op{Kind: PutClient, Client: "c", Value: []byte("rec")})
	l.After(m, func(err error) { wasAnswered.Store(true); answered <- err })
	b.nextCheck = time.Time{} // due: the committer is held, and reads it after the gate
	close(gate)
	if err := <-answered; err != nil {
		t.Fatal(err)
	}
	l.Close() // waits for the committer, and so for the compaction
	if b.compactions != 1 {
		t.Fatalf("%d compactions, want 1", b.compactions)
	}
	if !sawAnswer {
		t.Fatal("the compaction began before the commit's waiter was answered")
	}
}

// TestCompactionReopenFailureRecovers: when the file cannot be reopened
// after the swap, the store is not left closed for good (every later
// commit failed until a restart): the next commit opens it again.
func TestCompactionReopenFailureRecovers(t *testing.T) {
	b := compactableBolt(t)
	defer func() { b.Close() }()
	applyBatches(t, b, []Op{{Kind: PutClient, Client: "kept", Value: []byte("rec")}})
	failed := false
	b.open = func(path string) (*bolt.DB, error) {
		if path == b.path && !failed { // the reopen after the swap, not the copy's file
			failed = true
			return nil, errors.New("injected: no file handles left")
		}
		return openFile(path)
	}
	b.Maintain()
	if !failed || b.db != nil {
		t.Fatalf("the reopen after the swap did not fail as injected (tried %v)", failed)
	}
	if err := b.Apply([]Op{{Kind: PutClient, Client: "after", Value: []byte("rec")}}); err != nil {
		t.Fatalf("the commit after a failed reopen: %v", err)
	}
	got := loadAll(t, b)
	if len(got) != 2 || got[0].client != "after" || got[1].client != "kept" {
		t.Fatalf("after the failed reopen the store holds %v, want the client kept by the compaction and the one written after it", got)
	}
}
