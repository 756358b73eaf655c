package queue_test

import (
	"context"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tolsey/tolsey/core"
	"github.com/tolsey/tolsey/core/queue"
	"github.com/tolsey/tolsey/core/queue/embedded"
	"github.com/tolsey/tolsey/core/queue/queuetest"
)

// BenchmarkQueuePutConsumeAck is queueload's path (docs/benchmarks.md,
// "Queues") without the protocol: 4 producers Put 1 KiB messages into a
// durable queue of the embedded backend (fsync'd group commits, a file in
// a temporary directory), each keeping 64 Puts in flight as an AMQP sender
// keeps unsettled sends; 4 consumers take them with Next as they are
// notified and Ack each. An op is one message put, consumed and acked;
// appends/commit says how many Puts shared an fsync.
//
//	go test -run '^$' -bench QueuePutConsumeAck -benchtime 3s ./core/queue/
func BenchmarkQueuePutConsumeAck(b *testing.B) {
	const producers, consumers, window = 4, 4, 64
	be, err := embedded.Open(filepath.Join(b.TempDir(), embedded.FileName), embedded.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer be.Close()
	e, err := queue.New(context.Background(), queue.Options{Backend: be})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	q, err := e.Declare(context.Background(), queue.Config{Name: "load", MaxMessages: 1 << 30, MaxBytes: 1 << 40})
	if err != nil {
		b.Fatal(err)
	}
	payload := make([]byte, 1024)
	var acked atomic.Int64
	all := make(chan struct{})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range consumers {
		c, wake := queuetest.Consume(b, q)
		wg.Go(func() {
			defer c.Close()
			for {
				d, ok := c.Next()
				if !ok {
					select {
					case <-wake:
						continue
					case <-stop:
						return
					}
				}
				c.Ack(d.ID)
				if acked.Add(1) == int64(b.N) {
					close(all)
				}
			}
		})
	}
	commits := be.Commits()
	b.ReportAllocs()
	b.SetBytes(int64(len(payload)))
	b.ResetTimer()
	var puts sync.WaitGroup
	for p := range producers {
		n := b.N / producers
		if p == 0 {
			n += b.N % producers
		}
		puts.Go(func() {
			slots := make(chan struct{}, window)
			for range n {
				slots <- struct{}{}
				m := &core.Message{Topic: "load", Payload: payload, QoS: 1}
				q.Put(m, func(err error) {
					if err != nil {
						b.Error(err)
					}
					<-slots
				})
			}
			for range window {
				slots <- struct{}{}
			}
		})
	}
	puts.Wait()
	<-all
	b.StopTimer()
	close(stop)
	wg.Wait()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	b.ReportMetric(float64(b.N)/float64(be.Commits()-commits), "appends/commit")
}
