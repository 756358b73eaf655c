package session

import (
	"errors"
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
	release := make(chan struct{})
	b.compactHook = func() { <-release }
	l := NewLog(b, nil)
	defer l.Close()

	m := l.Mark()
	l.Enqueue(Op{Kind: PutClient, Client: "c", Value: []byte("rec")})
	answered := make(chan error, 1)
	l.After(m, func(err error) { answered <- err })
	select {
	case err := <-answered:
		close(release)
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second): // a deadline against hanging, not a measurement
		close(release)
		t.Fatal("the waiter was not answered while the compaction copied the file")
	}
}

// TestCompactionReopenFailureRecovers: when the file cannot be reopened
// after the swap, the store is not left closed for good (every later
// commit failed until a restart): the next commit opens it again.
func TestCompactionReopenFailureRecovers(t *testing.T) {
	b := compactableBolt(t)
	defer func() { b.Close() }()
	failed := false
	b.open = func(path string) (*bolt.DB, error) {
		if !failed {
			failed = true
			return nil, errors.New("injected: no file handles left")
		}
		return openFile(path)
	}
	b.Maintain()
	if !failed {
		t.Fatal("no compaction was tried")
	}
	if err := b.Apply([]Op{{Kind: PutClient, Client: "after", Value: []byte("rec")}}); err != nil {
		t.Fatalf("the commit after a failed reopen: %v", err)
	}
	got := loadAll(t, b)
	if len(got) != 1 || got[0].client != "after" {
		t.Fatalf("after the failed reopen the store holds %v, want the one client written after it", got)
	}
}
