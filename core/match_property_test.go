package core

import (
	"context"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// propLevels is a small alphabet so that random topics and filters collide
// often, with empty and '$' levels to exercise their rules.
var propLevels = []string{"a", "b", "", "$SYS", "$x", "ab"}

func randTopic(rng *rand.Rand) string {
	n := 1 + rng.IntN(4)
	levels := make([]string, n)
	for i := range levels {
		levels[i] = propLevels[rng.IntN(len(propLevels))]
	}
	if s := strings.Join(levels, "/"); s != "" {
		return s
	}
	return "a"
}

func randFilter(rng *rand.Rand) string {
	n := 1 + rng.IntN(4)
	levels := make([]string, n)
	for i := range levels {
		switch k := rng.IntN(10); {
		case k < 3:
			levels[i] = "+"
		case k == 3 && i == n-1:
			levels[i] = "#"
		default:
			levels[i] = propLevels[rng.IntN(len(propLevels))]
		}
	}
	if s := strings.Join(levels, "/"); s != "" {
		return s
	}
	return "+"
}

// TestMatchersAgree checks TopicIndex.Match and the Router's subscription
// trie against the reference Match by brute force over all pairs.
func TestMatchersAgree(t *testing.T) {
	rounds := 40
	if testing.Short() {
		rounds = 5
	}
	for round := range rounds {
		rng := rand.New(rand.NewPCG(uint64(round), 0x5eed))
		var topics, filters []string
		for range 150 {
			if tp := randTopic(rng); !slices.Contains(topics, tp) {
				topics = append(topics, tp)
			}
		}
		for range 120 {
			f := randFilter(rng)
			if err := ValidateFilter(f); err != nil {
				t.Fatalf("generated invalid filter %q: %v", f, err)
			}
			if !slices.Contains(filters, f) {
				filters = append(filters, f)
			}
		}

		// TopicIndex: which topics does each filter match?
		var x TopicIndex[int]
		for i, tp := range topics {
			if err := ValidateTopic(tp); err != nil {
				t.Fatalf("generated invalid topic %q: %v", tp, err)
			}
			x.Set(tp, i)
		}
		for _, f := range filters {
			var want []string
			for _, tp := range topics {
				if Match(f, tp) {
					want = append(want, tp)
				}
			}
			slices.Sort(want)
			got := indexMatches(&x, f)
			if !slices.Equal(got, want) {
				t.Fatalf("round %d: index Match(%q) = %q, want %q", round, f, got, want)
			}
			x.Match(f, func(tp string, v int) bool {
				if topics[v] != tp {
					t.Fatalf("index yielded %q with the value of %q", tp, topics[v])
				}
				return true
			})
		}

		// Router: which subscribers does each topic reach? One subscriber
		// per filter, plus one subscriber holding every filter (it must get
		// each matching message once).
		r := NewRouter(RouterOptions{})
		subs := make([]*recorder, len(filters))
		all := &recorder{}
		for i, f := range filters {
			subs[i] = &recorder{name: f}
			mustSubscribe(t, r, f, subs[i], SubOptions{QoS: 1})
			mustSubscribe(t, r, f, all, SubOptions{QoS: byte(i % 3)})
		}
		for _, tp := range topics {
			res := r.Publish(context.Background(), &Message{Topic: tp, QoS: 2})
			want, maxQoS := 0, byte(0)
			for i, f := range filters {
				m := Match(f, tp)
				if m {
					want++
					maxQoS = max(maxQoS, byte(i%3))
				}
				if got := subs[i].count(); got != map[bool]int{true: 1, false: 0}[m] {
					t.Fatalf("round %d: router topic %q, filter %q: %d deliveries, Match says %v", round, tp, f, got, m)
				}
				subs[i].reset()
			}
			wantAll := min(want, 1)
			if all.count() != wantAll {
				t.Fatalf("round %d: topic %q: subscriber of all filters got %d, want %d", round, tp, all.count(), wantAll)
			}
			if wantAll == 1 && all.last().QoS != maxQoS {
				t.Fatalf("round %d: topic %q: delivered at QoS %d, want max %d", round, tp, all.last().QoS, maxQoS)
			}
			all.reset()
			if res.Matched != want+wantAll {
				t.Fatalf("round %d: topic %q: Matched = %d, want %d", round, tp, res.Matched, want+wantAll)
			}
		}

		// Emptying both structures prunes them to the root.
		for _, tp := range topics {
			x.Delete(tp)
		}
		if x.Len() != 0 || x.root.kids.len() != 0 {
			t.Fatalf("index not pruned: Len %d, root children %d", x.Len(), x.root.kids.len())
		}
	}
}
