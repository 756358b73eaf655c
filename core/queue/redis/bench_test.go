package redis

import (
	"context"
	"fmt"
	"testing"

	"github.com/tolsey/tolsey/core/queue"
	"github.com/tolsey/tolsey/core/queue/queuetest"
	"github.com/tolsey/tolsey/retain/redistest"
)

// BenchmarkAppend: 1 KiB messages from 1, 4 and 16 appenders, each with a
// window of 64 appends in flight, against a real redis-server (no
// persistence: what is measured is the round trips); appends/trip says how
// many records share one.
//
//	go test -run '^$' -bench . -benchtime 3s ./core/queue/redis/
func BenchmarkAppend(b *testing.B) { benchAppend(b, false) }

// BenchmarkAppendRemove: the same, each record removed (XACK + XDEL) as
// soon as its append is done.
func BenchmarkAppendRemove(b *testing.B) { benchAppend(b, true) }

func benchAppend(b *testing.B, remove bool) {
	srv := redistest.Start(b)
	for _, appenders := range []int{1, 4, 16} {
		b.Run(fmt.Sprintf("appenders=%d", appenders), func(b *testing.B) {
			be := open(b, srv, "bench", 0)
			defer be.Close()
			ctx := context.Background()
			name := fmt.Sprintf("q%d-%d", appenders, b.N)
			l, err := be.Open(ctx, queue.Config{Name: name})
			if err != nil {
				b.Fatal(err)
			}
			defer be.Drop(ctx, name)
			before := be.Commits()
			queuetest.BenchAppend(b, l, appenders, 64, remove)
			b.ReportMetric(float64(b.N)/float64(be.Commits()-before), "appends/trip")
		})
	}
}
