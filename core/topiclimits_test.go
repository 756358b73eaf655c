package core

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestTopicLimits(t *testing.T) {
	lim := TopicLimits{MaxLevels: 3, MaxLength: 10}
	tests := []struct {
		s                string
		topic, filter    error // CheckTopic, CheckFilter
		validT, validF   error // ValidateTopic, ValidateFilter
		reasonT, reasonF string
	}{
		{s: "a/b/c"},
		{s: "a/b/c/d", topic: ErrTopicLevels, filter: ErrTopicLevels, validT: ErrTopicLevels, validF: ErrTopicLevels, reasonT: "levels", reasonF: "levels"},
		{s: "//", validT: nil}, // three empty levels
		{s: "///", topic: ErrTopicLevels, filter: ErrTopicLevels, validT: ErrTopicLevels, validF: ErrTopicLevels, reasonT: "levels", reasonF: "levels"},
		{s: "0123456789"}, // at the length limit
		{s: "0123456789a", topic: ErrTopicLength, filter: ErrTopicLength, validT: ErrTopicLength, validF: ErrTopicLength, reasonT: "length", reasonF: "length"},
		{s: "a/+/#", validT: ErrTopicWildcard}, // limits first, then the grammar
		{s: "a/#/b", validT: ErrTopicWildcard, validF: ErrFilterHash},
		{s: "$share/g/a/b/c", topic: ErrTopicLength, filter: ErrTopicLength, validT: ErrTopicLength, validF: ErrTopicLength, reasonT: "length", reasonF: "length"},
	}
	for _, tt := range tests {
		for _, c := range []struct {
			name string
			got  error
			want error
		}{
			{"CheckTopic", lim.CheckTopic(tt.s), tt.topic},
			{"CheckFilter", lim.CheckFilter(tt.s), tt.filter},
			{"ValidateTopic", lim.ValidateTopic(tt.s), tt.validT},
			{"ValidateFilter", lim.ValidateFilter(tt.s), tt.validF},
		} {
			if !errors.Is(c.got, c.want) {
				t.Errorf("%s(%q) = %v, want %v", c.name, tt.s, c.got, c.want)
			}
		}
		if r := LimitReason(lim.CheckTopic(tt.s)); r != tt.reasonT {
			t.Errorf("LimitReason(CheckTopic(%q)) = %q, want %q", tt.s, r, tt.reasonT)
		}
	}
	// $share/{group}/ counts for the length, not for the levels.
	wide := TopicLimits{MaxLevels: 3, MaxLength: 100}
	if err := wide.CheckFilter("$share/g/a/b/c"); err != nil {
		t.Errorf("shared filter of 3 levels: %v", err)
	}
	if err := wide.CheckFilter("$share/g/a/b/c/d"); !errors.Is(err, ErrTopicLevels) {
		t.Errorf("shared filter of 4 levels: %v", err)
	}
	if err := wide.CheckTopic("$share/g/a/b"); !errors.Is(err, ErrTopicLevels) {
		t.Errorf("a topic name's levels all count: $share/g/a/b has 4: %v", err)
	}
}

func TestTopicLimitsDefaults(t *testing.T) {
	var zero TopicLimits
	if got := zero.Effective(); got != (TopicLimits{DefaultMaxTopicLevels, DefaultMaxTopicLength}) {
		t.Fatalf("zero limits mean %+v", got)
	}
	if got := (TopicLimits{MaxLength: 1 << 20}).Effective().MaxLength; got != MaxTopicLength {
		t.Fatalf("a length limit above MQTT's is MQTT's: got %d", got)
	}
	if err := zero.CheckTopic(strings.Repeat("a/", DefaultMaxTopicLevels-1) + "a"); err != nil {
		t.Fatal(err)
	}
	if err := zero.CheckTopic(strings.Repeat("a/", DefaultMaxTopicLevels) + "a"); !errors.Is(err, ErrTopicLevels) {
		t.Fatal(err)
	}
	if err := zero.CheckTopic(strings.Repeat("a", DefaultMaxTopicLength+1)); !errors.Is(err, ErrTopicLength) {
		t.Fatal(err)
	}
}

// TestRouterSubscribeObeysLimits: the router refuses a filter over its
// limits whoever subscribes (AMQP, the bridge), and its error does not
// quote a 64 KiB filter back whole.
func TestRouterSubscribeObeysLimits(t *testing.T) {
	r := NewRouter(RouterOptions{TopicLimits: TopicLimits{MaxLevels: 4}})
	if got := r.TopicLimits(); got != (TopicLimits{4, DefaultMaxTopicLength}) {
		t.Fatalf("TopicLimits() = %+v", got)
	}
	if _, err := r.Subscribe("a/b/c/d", &sink{}, SubOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err := r.Subscribe("a/b/c/d/e", &sink{}, SubOptions{})
	if !errors.Is(err, ErrInvalidFilter) || !errors.Is(err, ErrTopicLevels) {
		t.Fatalf("5 levels: %v", err)
	}
	huge := strings.Repeat("x", 65000)
	_, err = r.Subscribe(huge, &sink{}, SubOptions{})
	if !errors.Is(err, ErrTopicLength) || len(err.Error()) > 400 {
		t.Fatalf("65,000 bytes: %v", Shorten(fmt.Sprint(err), 400))
	}
	if r.Len() != 1 {
		t.Fatalf("router holds %d subscriptions, want 1", r.Len())
	}
}

func TestShorten(t *testing.T) {
	if got := ShortTopic("a/b"); got != "a/b" {
		t.Errorf("short topic changed: %q", got)
	}
	long := strings.Repeat("é", 100) // 200 bytes; byte 128 starts a rune
	if got, want := ShortTopic(long), strings.Repeat("é", 64)+"…(200 bytes)"; got != want {
		t.Errorf("ShortTopic = %q, want %q", got, want)
	}
	odd := "x" + long // byte 128 is inside a rune: cut before it
	if got, want := ShortTopic(odd), "x"+strings.Repeat("é", 63)+"…(201 bytes)"; got != want {
		t.Errorf("ShortTopic = %q, want %q", got, want)
	}
}

// depth builds a topic and filters of n levels for the matching tests.
func depth(n int) (topic, exact, plus, hash string) {
	topic = strings.TrimSuffix(strings.Repeat("lv/", n), "/")
	plus = strings.TrimSuffix(strings.Repeat("+/", n), "/")
	hash = strings.TrimSuffix(strings.Repeat("lv/", n-1), "/") + "/#"
	return topic, topic, plus, hash
}

// TestMatchingAllocationsFlatInDepth: matching a topic against the router,
// the retained index and Match allocates the same at 10 and at 1,000 levels
// (nothing per level). Allocation counts, not times: the machine is shared.
func TestMatchingAllocationsFlatInDepth(t *testing.T) {
	allocs := func(n int) (router, index, match float64) {
		topic, exact, plus, hash := depth(n)
		r := NewRouter(RouterOptions{TopicLimits: TopicLimits{MaxLevels: 1000, MaxLength: MaxTopicLength}})
		for _, f := range []string{exact, plus, hash} {
			if _, err := r.Subscribe(f, &sink{}, SubOptions{QoS: 1}); err != nil {
				t.Fatal(err)
			}
		}
		m := &Message{Topic: topic}
		ctx := context.Background()
		router = testing.AllocsPerRun(100, func() {
			m.Created = r.opts.Now()
			if res := r.Publish(ctx, m); res.Matched != 3 {
				t.Fatalf("%d levels: matched %d, want 3", n, res.Matched)
			}
		})
		var x TopicIndex[int]
		x.Set(topic, 1)
		index = testing.AllocsPerRun(100, func() {
			found := 0
			for _, f := range []string{exact, plus, hash} {
				x.Match(f, func(string, int) bool { found++; return true })
			}
			if found != 3 {
				t.Fatalf("%d levels: index found %d, want 3", n, found)
			}
		})
		match = testing.AllocsPerRun(100, func() {
			if !Match(exact, topic) || !Match(plus, topic) || !Match(hash, topic) {
				t.Fatalf("%d levels: no match", n)
			}
		})
		return router, index, match
	}
	r10, i10, m10 := allocs(10)
	r1k, i1k, m1k := allocs(1000)
	t.Logf("allocs per match at 10 / 1,000 levels: router %v / %v, index %v / %v, Match %v / %v", r10, r1k, i10, i1k, m10, m1k)
	if r1k > r10 || i1k > i10 || m1k > m10 {
		t.Errorf("matching allocates per level: router %v→%v, index %v→%v, Match %v→%v", r10, r1k, i10, i1k, m10, m1k)
	}
}

// BenchmarkMatchDepth reports the cost of matching one topic of 10, 100 and
// 1,000 levels, with ns/level alongside ns/op: a flat ns/level is linear
// matching (mochi's own index, by comparison, costs levels × length to
// subscribe). Reported, not asserted.
//
//	go test -run '^$' -bench MatchDepth -benchtime 2000x ./core/
func BenchmarkMatchDepth(b *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		topic, exact, plus, hash := depth(n)
		perLevel := func(b *testing.B) {
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/level")
		}
		b.Run(fmt.Sprintf("router/levels=%d", n), func(b *testing.B) {
			r := NewRouter(RouterOptions{TopicLimits: TopicLimits{MaxLevels: 1000, MaxLength: MaxTopicLength}})
			for _, f := range []string{exact, plus, hash} {
				mustSubscribe(b, r, f, &sink{}, SubOptions{QoS: 1})
			}
			m := &Message{Topic: topic}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				r.Publish(ctx, m)
			}
			perLevel(b)
		})
		b.Run(fmt.Sprintf("subscribe/levels=%d", n), func(b *testing.B) {
			r := NewRouter(RouterOptions{TopicLimits: TopicLimits{MaxLevels: 1000, MaxLength: MaxTopicLength}})
			s := &sink{}
			b.ReportAllocs()
			for b.Loop() {
				sub, err := r.Subscribe(plus, s, SubOptions{})
				if err != nil {
					b.Fatal(err)
				}
				r.Unsubscribe(sub)
			}
			perLevel(b)
		})
		b.Run(fmt.Sprintf("index/levels=%d", n), func(b *testing.B) {
			var x TopicIndex[int]
			x.Set(topic, 1)
			b.ReportAllocs()
			for b.Loop() {
				x.Match(plus, func(string, int) bool { return true })
			}
			perLevel(b)
		})
		b.Run(fmt.Sprintf("validate/levels=%d", n), func(b *testing.B) {
			lim := TopicLimits{MaxLevels: 1000, MaxLength: MaxTopicLength}
			b.ReportAllocs()
			for b.Loop() {
				if err := lim.ValidateFilter(plus); err != nil {
					b.Fatal(err)
				}
			}
			perLevel(b)
		})
	}
}
