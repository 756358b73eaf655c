package embedded

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/tolsey/tolsey/core/queue"
	"github.com/tolsey/tolsey/core/queue/queuetest"
)

// BenchmarkAppend: 1 KiB messages from 1, 4 and 16 appenders, each with a
// window of 64 appends in flight, fsync'd group commits; appends/commit
// says how many records share an fsync.
//
//	go test -run '^$' -bench . -benchtime 3s ./core/queue/embedded/
func BenchmarkAppend(b *testing.B) { benchAppend(b, false) }

// BenchmarkAppendRemove: the same, each record removed as soon as its
// append is done (a consumer acknowledging at once), so removes ride the
// same commits as appends.
func BenchmarkAppendRemove(b *testing.B) { benchAppend(b, true) }

func benchAppend(b *testing.B, remove bool) {
	for _, appenders := range []int{1, 4, 16} {
		b.Run(fmt.Sprintf("appenders=%d", appenders), func(b *testing.B) {
			be := open(b, filepath.Join(b.TempDir(), FileName))
			defer be.Close()
			l, err := be.Open(context.Background(), queue.Config{Name: "q"})
			if err != nil {
				b.Fatal(err)
			}
			before := be.Commits()
			queuetest.BenchAppend(b, l, appenders, 64, remove)
			b.ReportMetric(float64(b.N)/float64(be.Commits()-before), "appends/commit")
		})
	}
}

// BenchmarkAppendSync: one appender that waits for each append before the
// next (a JMS producer's synchronous PERSISTENT send): every record is a
// commit of its own, so this is the commit's latency, fsyncs included.
//
//	go test -run '^$' -bench AppendSync -benchtime 2s ./core/queue/embedded/
func BenchmarkAppendSync(b *testing.B) {
	be := open(b, filepath.Join(b.TempDir(), FileName))
	defer be.Close()
	l, err := be.Open(context.Background(), queue.Config{Name: "q"})
	if err != nil {
		b.Fatal(err)
	}
	queuetest.BenchAppend(b, l, 1, 1, true)
}
