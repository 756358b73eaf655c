package match

import (
	"fmt"
	"testing"
)

// benchIndex holds n keys (queues), one per site, each with three
// subscriptions and one exception in the shapes users write:
//
//	site/N/+/temp   site/N/dev*   site/N/alarm/#   !site/N/dev9
func benchIndex(tb testing.TB, n int) *Index[int] {
	x := new(Index[int])
	for k := range n {
		for _, f := range []string{"site/%d/+/temp", "site/%d/dev*", "site/%d/alarm/#", "!site/%d/dev9"} {
			if err := x.Add(k, fmt.Sprintf(f, k)); err != nil {
				tb.Fatal(err)
			}
		}
	}
	return x
}

// BenchmarkMatch: the same topics against 1,000 and 10,000 keys. The cost
// per topic should not change with the number of keys: a topic reaches the
// nodes of its own site only.
func BenchmarkMatch(b *testing.B) {
	for _, n := range []int{1_000, 10_000} {
		x := benchIndex(b, n)
		for _, c := range []struct {
			name, topic string
			want        int
		}{
			{"one/plus", "site/42/room1/temp", 1},
			{"one/prefix", "site/42/dev3", 1},
			{"one/hash", "site/42/alarm/smoke/1", 1},
			{"none/excepted", "site/42/dev9", 0}, // dev* matches, !dev9 wins
			{"none/site", "site/42/room1/humidity", 0},
			{"none/root", "plant/42/room1/temp", 0},
		} {
			if got := len(x.AppendMatches(nil, c.topic)); got != c.want {
				b.Fatalf("%s: %d matches, want %d", c.topic, got, c.want)
			}
			fn := func(int) {}
			b.Run(fmt.Sprintf("keys=%d/%s", n, c.name), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					x.Match(c.topic, fn)
				}
			})
		}
	}
}

// BenchmarkMatchFanout: every key subscribes to the topic (and a tenth of
// them except it), so the cost is the matches': it grows with them.
func BenchmarkMatchFanout(b *testing.B) {
	for _, n := range []int{100, 1_000} {
		x := new(Index[int])
		for k := range n {
			if err := x.Add(k, "fleet/+/status"); err != nil {
				b.Fatal(err)
			}
			if k%10 == 0 {
				if err := x.Add(k, "!fleet/truck*/+"); err != nil {
					b.Fatal(err)
				}
			}
		}
		dst := make([]int, 0, n)
		b.Run(fmt.Sprintf("matches=%d", n-n/10), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				dst = x.AppendMatches(dst[:0], "fleet/truck7/status")
			}
			if len(dst) != n-n/10 {
				b.Fatalf("%d matches, want %d", len(dst), n-n/10)
			}
		})
	}
}
