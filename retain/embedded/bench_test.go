package embedded

import (
	"fmt"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/tolsey/tolsey/core/codec"
	"github.com/tolsey/tolsey/retain"
	"github.com/tolsey/tolsey/retain/retaintest"
)

// bulkLoad writes n benchmark messages straight into a store file in large
// transactions (1M Sets one by one would spend minutes in fsync), so that
// Open then rebuilds its index from the file as after a restart.
func bulkLoad(tb testing.TB, dir string, n int) {
	s, err := Open(dir, retain.Limits{})
	if err != nil {
		tb.Fatal(err)
	}
	const perTx = 50_000
	for lo := 0; lo < n; lo += perTx {
		err := s.db.Update(func(tx *bolt.Tx) error {
			b := tx.Bucket(bucketMessages)
			b.FillPercent = 0.9 // keys arrive nearly sorted
			for i := lo; i < min(lo+perTx, n); i++ {
				m := retaintest.BenchMessage(i)
				if err := b.Put([]byte(m.Topic), codec.Encode(m)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			tb.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		tb.Fatal(err)
	}
}

func BenchmarkMatch(b *testing.B) {
	for _, total := range []int{10_000, 1_000_000} {
		dir := b.TempDir()
		bulkLoad(b, dir, total)
		s := open(b, dir, retain.Limits{})
		b.Run(fmt.Sprintf("total=%d/matches=100", total), func(b *testing.B) { retaintest.BenchMatch(b, s, total) })
	}
}

// BenchmarkSet: parallel Sets share bbolt batches, so one fsync covers many.
func BenchmarkSet(b *testing.B) {
	retaintest.BenchSet(b, open(b, b.TempDir(), retain.Limits{}))
}

func TestMemoryPerMessage(t *testing.T) {
	retaintest.SkipUnlessMemTest(t)
	const n = 1_000_000
	dir := t.TempDir()
	bulkLoad(t, dir, n)
	before := retaintest.ReadMem(t)
	s := open(t, dir, retain.Limits{})
	after := retaintest.ReadMem(t)
	_, rss := retaintest.ReportPerMessage(t, "embedded (index rebuilt at open, file mmapped)", n, before, after)
	if s.Stats().Count != n {
		t.Fatal("not all loaded")
	}
	if rss > 1024 {
		t.Errorf("%.0f B of RSS per message, budget 1 KiB", rss)
	}
}
