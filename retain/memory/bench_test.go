package memory

import (
	"context"
	"fmt"
	"testing"

	"github.com/tolsey/tolsey/retain"
	"github.com/tolsey/tolsey/retain/retaintest"
)

func load(tb testing.TB, n int) *Store {
	s := New(retain.Limits{})
	for i := range n {
		if err := s.Set(context.Background(), retaintest.BenchMessage(i)); err != nil {
			tb.Fatal(err)
		}
	}
	return s
}

func BenchmarkMatch(b *testing.B) {
	for _, total := range []int{10_000, 1_000_000} {
		s := load(b, total)
		b.Run(fmt.Sprintf("total=%d/matches=100", total), func(b *testing.B) { retaintest.BenchMatch(b, s, total) })
	}
}

func BenchmarkSet(b *testing.B) { retaintest.BenchSet(b, New(retain.Limits{})) }

func TestMemoryPerMessage(t *testing.T) {
	retaintest.SkipUnlessMemTest(t)
	const n = 1_000_000
	before := retaintest.ReadMem(t)
	s := load(t, n)
	after := retaintest.ReadMem(t)
	_, rss := retaintest.ReportPerMessage(t, "memory", n, before, after)
	if s.Stats().Count != n {
		t.Fatal("not all loaded")
	}
	if rss > 1024 {
		t.Errorf("%.0f B of RSS per message, budget 1 KiB", rss)
	}
}
