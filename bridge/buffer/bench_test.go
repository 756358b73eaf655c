package buffer

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
)

// BenchmarkAppend: 200-byte records from 1, 16 and 64 concurrent writers
// over four queues. Each Append is durable when it returns; concurrent ones
// share a commit, so appends/s grows with writers while one fsync costs the
// same. allocs/op includes the writer goroutine's share of each commit.
func BenchmarkAppend(b *testing.B) {
	for _, writers := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			buf := open(b, b.TempDir(), Options{})
			rec := make([]byte, 200)
			queues := []string{"q0", "q1", "q2", "q3"}
			var next atomic.Int64
			var wg sync.WaitGroup
			b.ReportAllocs()
			b.SetBytes(int64(len(rec)))
			b.ResetTimer()
			for w := range writers {
				wg.Go(func() {
					for next.Add(1) <= int64(b.N) {
						if _, err := buf.Append(context.Background(), queues[w%len(queues)], rec); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "appends/s")
			b.ReportMetric(float64(b.N)/float64(buf.commits.Load()), "appends/commit")
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(buf.commits.Load()), "µs/commit")
		})
	}
}

// BenchmarkDrain: a sender draining 100k buffered records of 200 bytes,
// Next then ack, one batch after the other (no pipelining: the buffer's own
// cost). ack=through is the in-order case, ack=each acknowledges every
// sequence number of the batch one by one (JetStream acks out of order).
func BenchmarkDrain(b *testing.B) {
	const total = 100_000
	for _, bc := range []struct {
		batch int
		each  bool
	}{{100, false}, {1000, false}, {1000, true}} {
		name := fmt.Sprintf("batch=%d/ack=through", bc.batch)
		if bc.each {
			name = fmt.Sprintf("batch=%d/ack=each", bc.batch)
		}
		b.Run(name, func(b *testing.B) {
			buf := open(b, b.TempDir(), Options{})
			rec := make([]byte, 200)
			ctx := context.Background()
			seqs := make([]uint64, 0, bc.batch)
			b.ReportAllocs()
			b.SetBytes(total * int64(len(rec)))
			drained := 0
			for range b.N {
				b.StopTimer()
				bulkAppend(b, buf, "q", total, rec)
				b.StartTimer()
				after := uint64(0)
				for {
					recs, err := buf.Next("q", after, bc.batch)
					if err != nil {
						b.Fatal(err)
					}
					if len(recs) == 0 {
						break
					}
					after = recs[len(recs)-1].Seq
					if bc.each {
						seqs = seqs[:0]
						for i := len(recs) - 1; i >= 0; i-- { // out of order
							seqs = append(seqs, recs[i].Seq)
						}
						_, err = buf.Ack(ctx, "q", seqs...)
					} else {
						_, err = buf.AckThrough(ctx, "q", after)
					}
					if err != nil {
						b.Fatal(err)
					}
					drained += len(recs)
				}
			}
			if drained != b.N*total {
				b.Fatalf("drained %d of %d", drained, b.N*total)
			}
			b.ReportMetric(float64(drained)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}

// BenchmarkOpen: opening a buffer that holds records (after a restart, with
// the link still down) costs O(queues), not a read of every record.
func BenchmarkOpen(b *testing.B) {
	for _, n := range []int{1000, 200_000} {
		b.Run(fmt.Sprintf("records=%d", n), func(b *testing.B) {
			dir := b.TempDir()
			buf, err := Open(dir, Options{})
			if err != nil {
				b.Fatal(err)
			}
			for q := range 4 {
				bulkAppend(b, buf, fmt.Sprint("q", q), n/4, make([]byte, 200))
			}
			_ = buf.Close()
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				buf, err := Open(dir, Options{})
				if err != nil {
					b.Fatal(err)
				}
				if buf.Stats().Records != int64(n) {
					b.Fatal("records lost")
				}
				_ = buf.Close()
			}
		})
	}
}

// BenchmarkAppendAsync: 200-byte records from one goroutine keeping a
// window of AppendAsync calls in flight (a front-end's unacknowledged
// publishes), next to BenchmarkAppend's writers, each of which has one.
func BenchmarkAppendAsync(b *testing.B) {
	for _, window := range []int{1, 64, 512} {
		b.Run(fmt.Sprintf("window=%d", window), func(b *testing.B) {
			buf := open(b, b.TempDir(), Options{})
			rec := make([]byte, 200)
			slots := make(chan struct{}, window)
			done := func(_ uint64, err error) {
				if err != nil {
					b.Error(err)
				}
				<-slots
			}
			b.ReportAllocs()
			b.SetBytes(int64(len(rec)))
			b.ResetTimer()
			for range b.N {
				slots <- struct{}{}
				if err := buf.AppendAsync("q", rec, done); err != nil {
					b.Fatal(err)
				}
			}
			for range window {
				slots <- struct{}{}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "appends/s")
			b.ReportMetric(float64(b.N)/float64(buf.commits.Load()), "appends/commit")
		})
	}
}
