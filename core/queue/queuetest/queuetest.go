// Package queuetest is the conformance suite every queue.Backend passes:
// configurations kept, records in append order with increasing IDs, done
// after durability and in order, Read from an ID, Remove, Stats, Drop, and
// (for durable backends) everything back after a reopen. Backends call Run
// from their own tests; the suite knows no backend. Production code must
// not import it (docs/architecture.md, rule 9).
package queuetest

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tolsey/tolsey/core"
	"github.com/tolsey/tolsey/core/coretest"
	"github.com/tolsey/tolsey/core/queue"
)

// Option changes what Run expects of a backend.
type Option func(*expect)

type expect struct {
	shared bool
}

// Shared says that the backend's Logs may be shared by several gateways
// (Redis): Read ignores after and hands each record out once (and, after
// a reopen, once more the records read and not removed before), so the
// suite reads each record once and checks removals through Stats and a
// reopen.
func Shared() Option { return func(e *expect) { e.shared = true } }

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

// Full is a message with every field of core.Message set, to check that a
// backend keeps them all.
func Full(i int) *core.Message {
	return &core.Message{
		Topic:           fmt.Sprintf("full/%d", i),
		Payload:         []byte(fmt.Sprintf("payload %d", i)),
		QoS:             2,
		Retain:          true,
		ContentType:     "application/json",
		CorrelationData: []byte{0, 1, 2, byte(i)},
		CorrelationKind: core.IDKind(2),
		ResponseTopic:   "reply/here",
		// In order, a key repeated: MQTT 5 keeps both, in order [MQTT-3.3.2-18].
		UserProperties: []core.UserProperty{{Key: "k", Value: "1"}, {Key: "a", Value: ""}, {Key: "k", Value: "2"}},
		PayloadFormat:  1,
		Created:        time.Unix(1700000000, 123456789).Add(time.Duration(i)),
		Expiry:         time.Unix(1900000000, 5).Add(time.Duration(i)),
		Origin:         core.Origin{Protocol: core.Protocol("amqp"), Node: "node-1", Client: "client-1"},
	}
}

// sameMessage reports how got differs from want, "" when it does not:
// every field, times compared as instants.
func sameMessage(got, want *core.Message) string {
	g, w := *got, *want
	if !g.Created.Equal(w.Created) || !g.Expiry.Equal(w.Expiry) {
		return fmt.Sprintf("times %v %v, want %v %v", g.Created, g.Expiry, w.Created, w.Expiry)
	}
	g.Created, g.Expiry, w.Created, w.Expiry = time.Time{}, time.Time{}, time.Time{}, time.Time{}
	// A nil and an empty payload are the same message (an MQTT PUBLISH has
	// no way to tell them apart); correlation data and user properties
	// are not (absent, or present and empty).
	if len(g.Payload) == 0 && len(w.Payload) == 0 {
		g.Payload, w.Payload = nil, nil
	}
	if !reflect.DeepEqual(g, w) {
		return fmt.Sprintf("%+v, want %+v", g, w)
	}
	return ""
}

// Run runs the suite.
func Run(t *testing.T, open Factory, opts ...Option) {
	var e expect
	for _, o := range opts {
		o(&e)
	}
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
		if !e.shared {
			if got := ReadAll(t, l, ids[9]); len(got) != 10 || string(got[0].Msg.Payload) != "m10" {
				t.Fatalf("read after %d: %v", ids[9], payloads(got))
			}
		}
		l.Remove(ids[0], ids[5], ids[19])
		l.Remove(ids[5]) // twice is harmless
		var left int64   // Stats's bytes: the Size of the records left
		for i := range 20 {
			if i != 0 && i != 5 && i != 19 {
				left += int64(Msg("t", i).Size())
			}
		}
		check := func(l queue.Log, read bool) {
			t.Helper()
			if read {
				got := payloads(ReadAll(t, l, 0))
				if len(got) != 17 || got[0] != "m1" || got[4] != "m6" || got[16] != "m18" {
					t.Fatalf("after remove: %v", got)
				}
			}
			n, bytes, err := l.Stats(ctx)
			if err != nil || n != 17 || bytes != left {
				t.Fatalf("stats %d %d %v, want 17 %d", n, bytes, err, left)
			}
		}
		// Remove may be batched: give it until a reopen (durable) or a read.
		if reopen != nil {
			b = reopen(b)
			if l, err = b.Open(ctx, queue.Config{Name: "q"}); err != nil {
				t.Fatal(err)
			}
			check(l, true)
			// IDs are never reused after a reopen.
			if id := Append(t, l, Msg("t", 99)); id <= ids[19] {
				t.Fatalf("id %d reused (last was %d)", id, ids[19])
			}
		} else {
			// A shared Log has handed its records out already: Stats
			// tells what is left.
			check(l, !e.shared)
		}
		b.Close()
	})
	t.Run("every field kept", func(t *testing.T) {
		b, reopen := open(t)
		l, err := b.Open(ctx, queue.Config{Name: "q"})
		if err != nil {
			t.Fatal(err)
		}
		// And a message with nothing but a topic: nil and empty differ.
		bare := &core.Message{Topic: "bare"}
		Append(t, l, Full(1))
		Append(t, l, bare)
		check := func(l queue.Log) {
			t.Helper()
			recs := ReadAll(t, l, 0)
			if len(recs) != 2 {
				t.Fatalf("read %d records", len(recs))
			}
			if d := sameMessage(recs[0].Msg, Full(1)); d != "" {
				t.Fatalf("full message: %s", d)
			}
			if d := sameMessage(recs[1].Msg, bare); d != "" {
				t.Fatalf("bare message: %s", d)
			}
		}
		if reopen == nil {
			check(l)
			b.Close()
			return
		}
		if !e.shared {
			check(l) // a shared Log hands them out once: after the reopen
		}
		b = reopen(b)
		defer b.Close()
		if l, err = b.Open(ctx, queue.Config{Name: "q"}); err != nil {
			t.Fatal(err)
		}
		check(l)
	})
	t.Run("remove is counted", func(t *testing.T) {
		b, _ := open(t)
		defer b.Close()
		l, err := b.Open(ctx, queue.Config{Name: "q"})
		if err != nil {
			t.Fatal(err)
		}
		var ids []uint64
		var sizes []int64
		var total int64
		for i := range 10 {
			m := Msg("t", i)
			m.Payload = make([]byte, 100*i) // sizes differ: bytes must be each one's
			sizes = append(sizes, int64(m.Size()))
			total += sizes[i]
			ids = append(ids, Append(t, l, m))
		}
		ReadAll(t, l, 0) // a shared Log removes what it handed out
		if n, bytes, err := l.Stats(ctx); err != nil || n != 10 || bytes != total {
			t.Fatalf("stats %d %d %v, want 10 %d", n, bytes, err, total)
		}
		l.Remove(ids[9], ids[2])
		total -= sizes[9] + sizes[2]
		// Remove may be batched: Stats catches up.
		coretest.Eventually(t, "stats after remove", 10*time.Second, func() bool {
			n, bytes, err := l.Stats(ctx)
			return err == nil && n == 8 && bytes == total
		})
	})
	t.Run("ids never reused, even when the queue was emptied", func(t *testing.T) {
		b, reopen := open(t)
		l, err := b.Open(ctx, queue.Config{Name: "q"})
		if err != nil {
			t.Fatal(err)
		}
		var last uint64
		for i := range 3 {
			last = Append(t, l, Msg("t", i))
		}
		recs := ReadAll(t, l, 0)
		for _, r := range recs {
			l.Remove(r.ID)
		}
		coretest.Eventually(t, "empty", 10*time.Second, func() bool {
			n, _, err := l.Stats(ctx)
			return err == nil && n == 0
		})
		if reopen != nil {
			b = reopen(b)
			if l, err = b.Open(ctx, queue.Config{Name: "q"}); err != nil {
				t.Fatal(err)
			}
		}
		defer b.Close()
		if id := Append(t, l, Msg("t", 3)); id <= last {
			t.Fatalf("id %d after %d", id, last)
		}
		if got := ReadAll(t, l, 0); len(got) != 1 || string(got[0].Msg.Payload) != "m3" {
			t.Fatalf("read %v", payloads(got))
		}
	})
	t.Run("read returns at most max", func(t *testing.T) {
		b, _ := open(t)
		defer b.Close()
		l, err := b.Open(ctx, queue.Config{Name: "q"})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 5 {
			Append(t, l, Msg("t", i))
		}
		recs, err := l.Read(ctx, 0, 3)
		if err != nil || len(recs) != 3 || string(recs[2].Msg.Payload) != "m2" {
			t.Fatalf("read 3: %v %v", payloads(recs), err)
		}
		recs, err = l.Read(ctx, recs[2].ID, 3)
		if err != nil || len(recs) != 2 || string(recs[0].Msg.Payload) != "m3" {
			t.Fatalf("read the rest: %v %v", payloads(recs), err)
		}
	})
	t.Run("append after close is answered", func(t *testing.T) {
		b, _ := open(t)
		l, err := b.Open(ctx, queue.Config{Name: "q"})
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
		answered := make(chan struct{})
		// Either answer is fine (memory takes it); none is not.
		l.Append(Msg("t", 1), func(uint64, error) { close(answered) })
		select {
		case <-answered:
		case <-time.After(10 * time.Second):
			t.Fatal("append after close: done never called")
		}
		l.Remove(1) // must not panic or block
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
	t.Run("browse takes nothing", func(t *testing.T) {
		b, _ := open(t)
		defer b.Close()
		l, err := b.Open(ctx, queue.Config{Name: "q"})
		if err != nil {
			t.Fatal(err)
		}
		var ids []uint64
		for i := range 5 {
			ids = append(ids, Append(t, l, Msg("t", i)))
		}
		for range 2 { // twice: the first browse handed nothing out
			got, err := l.Browse(ctx, ids[1], 2)
			if err != nil {
				t.Fatal(err)
			}
			if p := payloads(got); len(p) != 2 || p[0] != "m2" || p[1] != "m3" {
				t.Fatalf("browse after %d: %v", ids[1], p)
			}
		}
		if p := payloads(ReadAll(t, l, 0)); len(p) != 5 {
			t.Fatalf("read after browsing: %v, want all 5", p)
		}
	})
	t.Run("drop removes messages", func(t *testing.T) {
		b, reopen := open(t)
		l, err := b.Open(ctx, queue.Config{Name: "q"})
		if err != nil {
			t.Fatal(err)
		}
		Append(t, l, Msg("t", 1))
		other, err := b.Open(ctx, queue.Config{Name: "other"})
		if err != nil {
			t.Fatal(err)
		}
		Append(t, other, Msg("o", 1))
		if err := b.Drop(ctx, "q"); err != nil {
			t.Fatal(err)
		}
		if reopen != nil {
			b = reopen(b)
			if other, err = b.Open(ctx, queue.Config{Name: "other"}); err != nil {
				t.Fatal(err)
			}
		}
		defer b.Close()
		l, err = b.Open(ctx, queue.Config{Name: "q"})
		if err != nil {
			t.Fatal(err)
		}
		if got := ReadAll(t, l, 0); len(got) != 0 {
			t.Fatalf("after drop: %v", payloads(got))
		}
		if n, bytes, err := l.Stats(ctx); err != nil || n != 0 || bytes != 0 {
			t.Fatalf("stats after drop: %d %d %v", n, bytes, err)
		}
		// Dropping one queue leaves the others alone.
		if got := ReadAll(t, other, 0); len(got) != 1 || string(got[0].Msg.Payload) != "m1" {
			t.Fatalf("other queue after drop: %v", payloads(got))
		}
	})
	runEngine(t, open)
	runDeliveryState(t, open)
	runPurge(t, open)
	runPurgeWhilePublishing(t, open)
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

// BenchAppend appends b.N messages of 1 KiB to l from appenders
// goroutines, each keeping window appends in flight (a front-end's window
// of unacknowledged publishes: an Append's done frees a slot), and reports
// appends/s. With remove, each record is removed once its append is done,
// as a consumer that acknowledges at once would: the same rate of removes.
// Backends run it from their own BenchmarkAppend and BenchmarkAppendRemove.
func BenchAppend(b *testing.B, l queue.Log, appenders, window int, remove bool) {
	payload := make([]byte, 1024)
	var next sync.WaitGroup
	per := b.N / appenders
	b.ReportAllocs()
	b.SetBytes(int64(len(payload)))
	b.ResetTimer()
	for w := range appenders {
		n := per
		if w == 0 {
			n += b.N % appenders
		}
		next.Go(func() {
			slots := make(chan struct{}, window)
			m := &core.Message{Topic: fmt.Sprintf("bench/%d", w), Payload: payload, QoS: 1}
			for range n {
				slots <- struct{}{}
				l.Append(m, func(id uint64, err error) {
					if err != nil {
						b.Error(err)
					} else if remove {
						l.Remove(id)
					}
					<-slots
				})
			}
			for range window {
				slots <- struct{}{}
			}
		})
	}
	next.Wait()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "appends/s")
}

// Consume attaches a consumer to q whose notifications land in the
// returned channel (capacity 1: "Next may have something"); the caller
// closes it.
func Consume(t testing.TB, q *queue.Queue) (*queue.Consumer, chan struct{}) {
	t.Helper()
	return ConsumeWith(t, q, queue.ConsumerOptions{})
}

// ConsumeWith is Consume with opts (their Notify replaced).
func ConsumeWith(t testing.TB, q *queue.Queue, opts queue.ConsumerOptions) (*queue.Consumer, chan struct{}) {
	t.Helper()
	wake := make(chan struct{}, 1)
	opts.Notify = func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	c, err := q.Consume(opts)
	if err != nil {
		t.Fatal(err)
	}
	return c, wake
}
