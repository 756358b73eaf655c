package core

import (
	"context"
	"fmt"
	"sync"
	"testing"
)

// sink is a Subscriber that only counts, so that benchmarks measure the
// router, not the subscriber.
type sink struct{ n int }

func (s *sink) Deliver(*Message, Delivery) error { s.n++; return nil }

// benchRouter builds a router holding n subscriptions, each with its own
// subscriber (one AMQP link or queue each), shaped like an IoT deployment:
// n/100 sites of 100 devices. Per 50 subscriptions, 48 are exact
// (site/S/dev/D/temp), one is site/S/dev/+/temp and one is site/S/#; a few
// cross-site filters (site/+/dev/D/alarm, +/+/dev/+/alarm) sit on top.
// A topic site/S/dev/7/temp matches a handful: its exact filter, two
// site/S/dev/+/temp and two site/S/#.
func benchRouter(tb testing.TB, n int) *Router {
	r := NewRouter(RouterOptions{})
	for i := range n {
		s, d := i/100, i%100
		var f string
		switch i % 50 {
		case 0:
			f = fmt.Sprintf("site/%d/dev/+/temp", s)
		case 1:
			f = fmt.Sprintf("site/%d/#", s)
		default:
			f = fmt.Sprintf("site/%d/dev/%d/temp", s, d)
		}
		mustSubscribe(tb, r, f, &sink{}, SubOptions{QoS: 1})
	}
	for d := range 10 {
		mustSubscribe(tb, r, fmt.Sprintf("site/+/dev/%d/alarm", d), &sink{}, SubOptions{QoS: 1})
	}
	mustSubscribe(tb, r, "+/+/dev/+/alarm", &sink{}, SubOptions{QoS: 1})
	return r
}

var benchRouters sync.Map // n -> *Router, built once per process

func cachedRouter(b *testing.B, n int) *Router {
	if r, ok := benchRouters.Load(n); ok {
		return r.(*Router)
	}
	r := benchRouter(b, n)
	benchRouters.Store(n, r)
	return r
}

func BenchmarkRouterPublish(b *testing.B) {
	for _, n := range []int{10_000, 1_000_000} {
		b.Run(fmt.Sprintf("subs=%d", n), func(b *testing.B) {
			r := cachedRouter(b, n)
			s := n / 100 / 2
			m := &Message{Topic: fmt.Sprintf("site/%d/dev/7/temp", s), QoS: 1}
			ctx := context.Background()
			if res := r.Publish(ctx, m); res.Matched != 5 {
				b.Fatalf("Matched = %d, want 5", res.Matched)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				r.Publish(ctx, m)
			}
		})
	}
	// A topic no one subscribes to: the cost of the walk alone.
	b.Run("subs=1000000/nomatch", func(b *testing.B) {
		r := cachedRouter(b, 1_000_000)
		m := &Message{Topic: "site/x/dev/7/humidity", QoS: 1}
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			r.Publish(ctx, m)
		}
	})
	// A cross-site topic: site/+/dev/3/alarm, +/+/dev/+/alarm, two site/5/#.
	b.Run("subs=1000000/alarm", func(b *testing.B) {
		r := cachedRouter(b, 1_000_000)
		m := &Message{Topic: "site/5/dev/3/alarm", QoS: 1}
		ctx := context.Background()
		if res := r.Publish(ctx, m); res.Matched != 4 {
			b.Fatalf("Matched = %d, want 4", res.Matched)
		}
		b.ReportAllocs()
		for b.Loop() {
			r.Publish(ctx, m)
		}
	})
	// More than 16 matches take the map path of dedupe.
	for _, fan := range []int{16, 64} {
		b.Run(fmt.Sprintf("fanout=%d", fan), func(b *testing.B) {
			r := NewRouter(RouterOptions{})
			for range fan {
				mustSubscribe(b, r, "fan/#", &sink{}, SubOptions{QoS: 1})
			}
			m := &Message{Topic: "fan/x", QoS: 1}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				r.Publish(ctx, m)
			}
		})
	}
}

// BenchmarkRouterPublishParallel shows Publish under the read lock scaling
// across publishers.
func BenchmarkRouterPublishParallel(b *testing.B) {
	r := cachedRouter(b, 10_000)
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		// Each goroutine its own message: Publish stamps it.
		m := &Message{Topic: "site/50/dev/7/temp", QoS: 1}
		for pb.Next() {
			r.Publish(ctx, m)
		}
	})
}

// benchIndex holds sites×100 devices×10 metrics topics:
// site/S/dev/D/M. sites=1000 gives 1M topics, sites=10 gives 10k.
func benchIndex(sites int) *TopicIndex[int] {
	var x TopicIndex[int]
	metrics := []string{"temp", "hum", "co2", "pm25", "noise", "lux", "volt", "amp", "rssi", "state"}
	i := 0
	for s := range sites {
		for d := range 100 {
			for _, m := range metrics {
				x.Set(fmt.Sprintf("site/%d/dev/%d/%s", s, d, m), i)
				i++
			}
		}
	}
	return &x
}

var benchIndexes sync.Map // sites -> *TopicIndex[int]

func cachedIndex(sites int) *TopicIndex[int] {
	if x, ok := benchIndexes.Load(sites); ok {
		return x.(*TopicIndex[int])
	}
	x := benchIndex(sites)
	benchIndexes.Store(sites, x)
	return x
}

// BenchmarkTopicIndexMatch shows the cost grows with the matches, not the
// topics held: match=100 costs about the same on 10k and on 1M topics.
func BenchmarkTopicIndexMatch(b *testing.B) {
	cases := []struct {
		name   string
		sites  int
		filter string
		want   int
	}{
		{"topics=10k/match=100", 10, "site/5/dev/+/temp", 100},
		{"topics=1M/match=100", 1000, "site/500/dev/+/temp", 100},
		{"topics=1M/match=1000/hash", 1000, "site/500/#", 1000},
		{"topics=1M/match=1000/plus", 1000, "site/+/dev/7/temp", 1000},
		{"topics=1M/match=1", 1000, "site/500/dev/7/temp", 1},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			x := cachedIndex(c.sites)
			count := 0
			fn := func(string, int) bool { count++; return true }
			x.Match(c.filter, fn)
			if count != c.want {
				b.Fatalf("%s matched %d, want %d", c.filter, count, c.want)
			}
			b.ReportAllocs()
			for b.Loop() {
				x.Match(c.filter, fn)
			}
		})
	}
}

func BenchmarkMatch(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		Match("site/+/dev/+/temp", "site/500/dev/7/temp")
		Match("site/500/#", "site/500/dev/7/temp")
		Match("#", "$SYS/broker/load")
	}
}

func BenchmarkValidateFilter(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_ = ValidateFilter("$share/group/site/+/dev/+/temp")
		_ = ValidateTopic("site/500/dev/7/temp")
	}
}

// TestPublishDoesNotAllocate guards the hot path the benchmarks measure.
func TestPublishDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items under -race")
	}
	r := benchRouter(t, 10_000)
	for range 64 {
		mustSubscribe(t, r, "fan/#", &sink{}, SubOptions{QoS: 1})
	}
	ctx := context.Background()
	for _, topic := range []string{"site/50/dev/7/temp", "site/x/none", "fan/x"} {
		m := &Message{Topic: topic, QoS: 1}
		if n := testing.AllocsPerRun(100, func() { r.Publish(ctx, m) }); n != 0 {
			t.Errorf("Publish(%q) allocates %v times per call", topic, n)
		}
	}
}
