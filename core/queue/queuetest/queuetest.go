// Package queuetest is the conformance suite every queue.Backend passes:
// configurations kept, records in append order with increasing IDs, done
// after durability and in order, Read from an ID, Remove, Stats, Drop, and
// (for durable backends) everything back after a reopen. Backends call Run
// from their own tests; the suite knows no backend.
package queuetest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tolsey/tolsey/core"
	"github.com/tolsey/tolsey/core/queue"
)

// Factory opens the backend under test. Durable backends return a reopen
// function that closes b and opens the same storage again; memory
// backends return nil.
type Factory func(t *testing.T) (b queue.Backend, reopen func(b queue.Backend) queue.Backend)

// Msg is the i-th test message on topic.
func Msg(topic string, i int) *core.Message {
	return &core.Message{Topic: topic, Payload: []byte(fmt.Sprintf("m%d", i)), QoS: 1,
		Created: time.Unix(1700000000, int64(i)), ContentType: "text/plain",
		UserProperties: []core.UserProperty{{Key: "i", Value: fmt.Sprint(i)}}}
}

// Append appends m and waits for its done.
func Append(t testing.TB, l queue.Log, m *core.Message) uint64 {
	t.Helper()
	type res struct {
		id  uint64
		err error
	}
	ch := make(chan res, 1)
	l.Append(m, func(id uint64, err error) { ch <- res{id, err} })
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("append: %v", r.err)
		}
		return r.id
	case <-time.After(30 * time.Second):
		t.Fatal("append: done never called")
	}
	return 0
}

// ReadAll reads every record after after.
func ReadAll(t testing.TB, l queue.Log, after uint64) []queue.Record {
	t.Helper()
	var out []queue.Record
	for {
		recs, err := l.Read(context.Background(), after, 7)
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) == 0 {
			return out
		}
		out = append(out, recs...)
		after = recs[len(recs)-1].ID
	}
}

func payloads(recs []queue.Record) []string {
	var out []string
	for _, r := range recs {
		out = append(out, string(r.Msg.Payload))
	}
	return out
}

// Run runs the suite.
func Run(t *testing.T, open Factory) {
	ctx := context.Background()
	t.Run("configs", func(t *testing.T) {
		b, reopen := open(t)
		cfg := queue.Config{Name: "q1", Subscriptions: []string{"a/#", "!a/b"}, Access: queue.Exclusive,
			MaxMessages: 10, MaxBytes: 1000, TTL: queue.Duration(time.Minute), DeadLetter: "dlq", MaxDeliveries: 3}
		if _, err := b.Open(ctx, cfg); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Open(ctx, queue.Config{Name: "q2"}); err != nil {
			t.Fatal(err)
		}
		cfg.MaxMessages = 20 // changed by a second Open
		if _, err := b.Open(ctx, cfg); err != nil {
			t.Fatal(err)
		}
		check := func(b queue.Backend, want ...queue.Config) {
			t.Helper()
			got, err := b.Declared(ctx)
			if err != nil {
				t.Fatal(err)
			}
			slices.SortFunc(got, func(a, b queue.Config) int { return cmpString(a.Name, b.Name) })
			if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", want) {
				t.Fatalf("declared\n%+v\nwant\n%+v", got, want)
			}
		}
		check(b, cfg, queue.Config{Name: "q2"})
		if err := b.Drop(ctx, "q2"); err != nil {
			t.Fatal(err)
		}
		check(b, cfg)
		if reopen != nil {
			b = reopen(b)
			check(b, cfg)
		}
		b.Close()
	})
	t.Run("append read remove", func(t *testing.T) {
		b, reopen := open(t)
		l, err := b.Open(ctx, queue.Config{Name: "q"})
		if err != nil {
			t.Fatal(err)
		}
		var ids []uint64
		for i := range 20 {
			ids = append(ids, Append(t, l, Msg("t", i)))
		}
		for i := 1; i < len(ids); i++ {
			if ids[i] <= ids[i-1] {
				t.Fatalf("ids not increasing: %v", ids)
			}
		}
		recs := ReadAll(t, l, 0)
		if len(recs) != 20 || recs[0].ID != ids[0] || string(recs[19].Msg.Payload) != "m19" {
			t.Fatalf("read %v", payloads(recs))
		}
		m := recs[3].Msg
		want := Msg("t", 3)
		if m.Topic != want.Topic || m.ContentType != want.ContentType || !m.Created.Equal(want.Created) ||
			len(m.UserProperties) != 1 || m.UserProperties[0] != want.UserProperties[0] || m.QoS != 1 {
			t.Fatalf("record 3 is %+v, want %+v", m, want)
		}
		if got := ReadAll(t, l, ids[9]); len(got) != 10 || string(got[0].Msg.Payload) != "m10" {
			t.Fatalf("read after %d: %v", ids[9], payloads(got))
		}
		l.Remove(ids[0], ids[5], ids[19])
		l.Remove(ids[5]) // twice is harmless
		check := func(l queue.Log) {
			t.Helper()
			got := payloads(ReadAll(t, l, 0))
			if len(got) != 17 || got[0] != "m1" || got[4] != "m6" || got[16] != "m18" {
				t.Fatalf("after remove: %v", got)
			}
			n, bytes, err := l.Stats(ctx)
			if err != nil || n != 17 || bytes <= 0 {
				t.Fatalf("stats %d %d %v", n, bytes, err)
			}
		}
		// Remove may be batched: give it until a reopen (durable) or a read.
		if reopen != nil {
			b = reopen(b)
			if l, err = b.Open(ctx, queue.Config{Name: "q"}); err != nil {
				t.Fatal(err)
			}
			check(l)
			// IDs are never reused after a reopen.
			if id := Append(t, l, Msg("t", 99)); id <= ids[19] {
				t.Fatalf("id %d reused (last was %d)", id, ids[19])
			}
		} else {
			check(l)
		}
		b.Close()
	})
	t.Run("concurrent appends keep call order per goroutine", func(t *testing.T) {
		b, _ := open(t)
		defer b.Close()
		l, err := b.Open(ctx, queue.Config{Name: "q"})
		if err != nil {
			t.Fatal(err)
		}
		const writers, each = 4, 200
		var wg sync.WaitGroup
		for w := range writers {
			wg.Go(func() {
				var mu sync.Mutex
				var last uint64
				done := make(chan struct{}, each)
				for i := range each {
					l.Append(Msg(fmt.Sprintf("w%d", w), i), func(id uint64, err error) {
						if err != nil {
							t.Error(err)
						}
						mu.Lock()
						if id <= last {
							t.Errorf("writer %d: done for id %d after %d", w, id, last)
						}
						last = id
						mu.Unlock()
						done <- struct{}{}
					})
				}
				for range each {
					<-done
				}
			})
		}
		wg.Wait()
		per := map[string][]string{}
		for _, r := range ReadAll(t, l, 0) {
			per[r.Msg.Topic] = append(per[r.Msg.Topic], string(r.Msg.Payload))
		}
		for w := range writers {
			got := per[fmt.Sprintf("w%d", w)]
			if len(got) != each {
				t.Fatalf("writer %d: %d records", w, len(got))
			}
			for i, p := range got {
				if p != fmt.Sprintf("m%d", i) {
					t.Fatalf("writer %d: record %d is %s", w, i, p)
				}
			}
		}
	})
	t.Run("drop removes messages", func(t *testing.T) {
		b, _ := open(t)
		defer b.Close()
		l, err := b.Open(ctx, queue.Config{Name: "q"})
		if err != nil {
			t.Fatal(err)
		}
		Append(t, l, Msg("t", 1))
		if err := b.Drop(ctx, "q"); err != nil {
			t.Fatal(err)
		}
		l, err = b.Open(ctx, queue.Config{Name: "q"})
		if err != nil {
			t.Fatal(err)
		}
		if got := ReadAll(t, l, 0); len(got) != 0 {
			t.Fatalf("after drop: %v", payloads(got))
		}
	})
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
