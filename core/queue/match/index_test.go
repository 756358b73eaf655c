package match

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/tolsey/tolsey/core"
)

// naiveMatch is the reference matcher the index is checked against, written
// from docs/queues.md's table and nothing else: split both on `/` and
// compare level by level. filter is a valid filter without its `!`.
func naiveMatch(filter, topic string) bool {
	f, t := strings.Split(filter, "/"), strings.Split(topic, "/")
	if strings.HasPrefix(topic, "$") {
		// A leading wildcard does not match a `$` topic [MQTT-4.7.2-1].
		if f[0] == "+" || f[0] == "*" || f[0] == "#" || (f[0] == ">" && len(f) == 1) {
			return false
		}
	}
	return naiveLevels(f, t)
}

func naiveLevels(f, t []string) bool {
	if len(f) == 0 {
		return len(t) == 0
	}
	head, last := f[0], len(f) == 1
	if last && head == "#" {
		return true // the parent level (t empty) or any number below
	}
	if last && head == ">" {
		return len(t) >= 1
	}
	if len(t) == 0 {
		return false
	}
	switch {
	case head == "+" || head == "*":
	case len(head) > 1 && strings.HasSuffix(head, "*"):
		if !strings.HasPrefix(t[0], strings.TrimSuffix(head, "*")) {
			return false
		}
	case head != t[0]:
		return false
	}
	return naiveLevels(f[1:], t[1:])
}

// naiveKeys is what the index must answer: the keys with a matching
// subscription and no matching exception, sorted.
func naiveKeys(model map[int]map[string]bool, topic string) []int {
	var out []int
	for k, filters := range model {
		in, excepted := false, false
		for f := range filters {
			if body, exc := strings.CutPrefix(f, "!"); exc {
				excepted = excepted || naiveMatch(body, topic)
			} else {
				in = in || naiveMatch(f, topic)
			}
		}
		if in && !excepted {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

func matchKeys(x *Index[int], topic string) []int {
	got := x.AppendMatches(nil, topic)
	slices.Sort(got)
	return got
}

func TestIndexGrammar(t *testing.T) {
	// Each case alone, then all of them in one index (one key per case).
	var all Index[int]
	for i, c := range grammarCases {
		var x Index[int]
		for _, ix := range []*Index[int]{&x, &all} {
			if err := ix.Add(i, c.filter); err != nil {
				t.Fatalf("Add(%q): %v", c.filter, err)
			}
		}
		for _, topic := range c.in {
			if got := matchKeys(&x, topic); !slices.Equal(got, []int{i}) {
				t.Errorf("%q should match %q: got %v", c.filter, topic, got)
			}
		}
		for _, topic := range c.out {
			if got := matchKeys(&x, topic); len(got) != 0 {
				t.Errorf("%q should not match %q: got %v", c.filter, topic, got)
			}
		}
	}
	for _, c := range grammarCases {
		for _, topic := range slices.Concat(c.in, c.out) {
			var want []int
			for i, d := range grammarCases {
				if naiveMatch(d.filter, topic) {
					want = append(want, i)
				}
			}
			if got := matchKeys(&all, topic); !slices.Equal(got, want) {
				t.Errorf("all cases, topic %q: got keys %v, want %v", topic, got, want)
			}
		}
	}
}

// TestIndexExceptions is the case and the rules around it.
func TestIndexExceptions(t *testing.T) {
	check := func(t *testing.T, x *Index[string], topic string, want ...string) {
		t.Helper()
		got := x.AppendMatches(nil, topic)
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("Match(%q) = %v, want %v", topic, got, want)
		}
	}
	mustAdd := func(t *testing.T, x *Index[string], key string, filters ...string) {
		t.Helper()
		for _, f := range filters {
			if err := x.Add(key, f); err != nil {
				t.Fatalf("Add(%q, %q): %v", key, f, err)
			}
		}
	}

	for _, order := range [][]string{
		{"animals/f*", "!animals/fox"}, // exception added after the subscription
		{"!animals/fox", "animals/f*"}, // and before
	} {
		t.Run(strings.Join(order, ","), func(t *testing.T) {
			var x Index[string]
			mustAdd(t, &x, "q", order...)
			check(t, &x, "animals/frog", "q")
			check(t, &x, "animals/f", "q")
			check(t, &x, "animals/fox")
			check(t, &x, "animals/foxes", "q") // the exception is a literal
			check(t, &x, "animals/cat")

			// Removing the exception lets the subscription match again.
			if !x.Remove("q", "!animals/fox") {
				t.Fatal("Remove of the exception: not found")
			}
			check(t, &x, "animals/fox", "q")
		})
	}

	t.Run("wildcard exception", func(t *testing.T) {
		var x Index[string]
		mustAdd(t, &x, "q", "site/#", "!site/+/debug/>", "!site/lab*")
		check(t, &x, "site/1/temp", "q")
		check(t, &x, "site/1/debug", "q") // `>` needs a level below
		check(t, &x, "site/1/debug/x")
		check(t, &x, "site/lab")
		check(t, &x, "site/labs")
		check(t, &x, "site/labs/temp", "q") // the exception has two levels
		check(t, &x, "site", "q")
	})

	t.Run("an exception is the key's own", func(t *testing.T) {
		var x Index[string]
		mustAdd(t, &x, "q1", "animals/#", "!animals/fox")
		mustAdd(t, &x, "q2", "animals/fox")
		mustAdd(t, &x, "q3", "!animals/+") // an exception alone keeps nothing in
		check(t, &x, "animals/fox", "q2")
		check(t, &x, "animals/cat", "q1")
	})

	t.Run("each key once", func(t *testing.T) {
		var x Index[string]
		mustAdd(t, &x, "q", "a/#", "a/+", "a/*", "a/b", "a/b*", "a/>", "#", ">")
		mustAdd(t, &x, "r", "a/b")
		calls := map[string]int{}
		x.Match("a/b", func(k string) { calls[k]++ })
		if calls["q"] != 1 || calls["r"] != 1 || len(calls) != 2 {
			t.Errorf("Match(a/b) called %v, want q and r once each", calls)
		}
	})

	t.Run("duplicate add", func(t *testing.T) {
		var x Index[string]
		mustAdd(t, &x, "q", "a/+", "a/+", "!a/b", "!a/b")
		check(t, &x, "a/c", "q")
		check(t, &x, "a/b")
		x.Remove("q", "!a/b")
		check(t, &x, "a/b", "q") // one Remove undoes both Adds
		x.Remove("q", "a/+")
		check(t, &x, "a/c")
		if x.Len() != 0 {
			t.Errorf("Len = %d after the last filter went, want 0", x.Len())
		}
	})

	t.Run("+ and * are distinct filters", func(t *testing.T) {
		var x Index[string]
		mustAdd(t, &x, "q", "a/+", "a/*")
		x.Remove("q", "a/*")
		check(t, &x, "a/b", "q")
	})

	t.Run("remove", func(t *testing.T) {
		var x Index[string]
		mustAdd(t, &x, "q", "a/b", "!a/c")
		mustAdd(t, &x, "r", "a/+")
		if x.Remove("q", "a/x") || x.Remove("nobody", "a/b") || x.Remove("q", "!a/b") {
			t.Error("Remove of a filter the key does not hold reported true")
		}
		x.RemoveKey("q")
		x.RemoveKey("q") // twice is harmless
		check(t, &x, "a/b", "r")
		check(t, &x, "a/c", "r") // q's exception went with it
		if x.Len() != 1 {
			t.Errorf("Len = %d, want 1", x.Len())
		}
		x.RemoveKey("r")
		if !x.root.empty() {
			t.Errorf("root not empty after every key went: %+v", x.root)
		}
	})

	t.Run("invalid filter", func(t *testing.T) {
		var x Index[string]
		err := x.Add("q", "a/#/b")
		var fe *FilterError
		if !errors.As(err, &fe) || !errors.Is(err, core.ErrFilterHash) {
			t.Errorf("Add(a/#/b) = %v, want a *FilterError wrapping core.ErrFilterHash", err)
		}
		if x.Len() != 0 {
			t.Error("a refused filter created the key")
		}
	})

	t.Run("fn may change the index", func(t *testing.T) {
		var x Index[string]
		mustAdd(t, &x, "q", "a/+")
		x.Match("a/b", func(k string) { x.RemoveKey(k) }) // would deadlock under the lock
		check(t, &x, "a/b")
	})
}

// Random operations over a small alphabet, so that filters and topics
// collide often, checked after each against naiveKeys.
var (
	propTopicLevels  = []string{"a", "b", "ab", "ba", "", "$s", "*", ">", "a*", "!a"}
	propFilterLevels = []string{"a", "b", "ab", "", "$s", "+", "*", "a*", "b*", "$*", ">", "a*b", ">x", "!a"}
)

func propTopic(rng *rand.Rand) string {
	levels := make([]string, 1+rng.IntN(4))
	for i := range levels {
		levels[i] = propTopicLevels[rng.IntN(len(propTopicLevels))]
	}
	return strings.Join(levels, "/")
}

func propFilter(rng *rand.Rand) string {
	levels := make([]string, 1+rng.IntN(4))
	for i := range levels {
		levels[i] = propFilterLevels[rng.IntN(len(propFilterLevels))]
		if i == len(levels)-1 && rng.IntN(6) == 0 {
			levels[i] = "#"
		}
	}
	f := strings.Join(levels, "/")
	if f == "" {
		f = "/" // "" is no filter; keep an empty level in
	}
	if rng.IntN(4) == 0 {
		f = "!" + f
	}
	return f
}

func TestIndexAgreesWithReference(t *testing.T) {
	rounds := 5000
	if testing.Short() {
		rounds = 500
	}
	rng := rand.New(rand.NewPCG(10, 0x5eed))
	var x Index[int]
	model := map[int]map[string]bool{}
	for round := range rounds {
		key := rng.IntN(6)
		switch op := rng.IntN(100); {
		case op < 50:
			f := propFilter(rng)
			if err := x.Add(key, f); err != nil {
				t.Fatalf("round %d: Add(%d, %q): %v", round, key, f, err)
			}
			if model[key] == nil {
				model[key] = map[string]bool{}
			}
			model[key][f] = true
		case op < 97:
			// Mostly a filter the key holds; sometimes one it does not.
			var f string
			if held := slices.Sorted(func(yield func(string) bool) {
				for f := range model[key] {
					if !yield(f) {
						return
					}
				}
			}); len(held) > 0 && rng.IntN(5) > 0 {
				f = held[rng.IntN(len(held))]
			} else {
				f = propFilter(rng)
			}
			if got, want := x.Remove(key, f), model[key][f]; got != want {
				t.Fatalf("round %d: Remove(%d, %q) = %v, want %v", round, key, f, got, want)
			}
			delete(model[key], f)
			if len(model[key]) == 0 {
				delete(model, key)
			}
		default:
			x.RemoveKey(key)
			delete(model, key)
		}
		if x.Len() != len(model) {
			t.Fatalf("round %d: Len = %d, want %d", round, x.Len(), len(model))
		}
		for range 4 {
			topic := propTopic(rng)
			want := naiveKeys(model, topic)
			if got := matchKeys(&x, topic); !slices.Equal(got, want) {
				t.Fatalf("round %d: topic %q: index %v, reference %v\nfilters: %v", round, topic, got, want, model)
			}
			var viaFn []int
			x.Match(topic, func(k int) { viaFn = append(viaFn, k) })
			slices.Sort(viaFn)
			if !slices.Equal(viaFn, want) {
				t.Fatalf("round %d: topic %q: Match called %v, reference %v", round, topic, viaFn, want)
			}
		}
	}
	// Emptied, the trie holds no node: removal prunes what it leaves.
	for k := range 6 {
		x.RemoveKey(k)
	}
	if !x.root.empty() || x.Len() != 0 {
		t.Errorf("after removing every key: Len %d, root %+v", x.Len(), x.root)
	}
}

// TestIndexConcurrent: matches run while filters come and go (run with
// -race). A key holding a fixed filter is matched throughout.
func TestIndexConcurrent(t *testing.T) {
	var x Index[int]
	if err := x.Add(-1, "site/+/temp"); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Go(func() {
			for i := range 500 {
				k := w*1000 + i%50
				f := fmt.Sprintf("site/%d/t*", i%7)
				if err := x.Add(k, f); err != nil {
					t.Error(err)
					return
				}
				if err := x.Add(k, "!"+f[:len(f)-1]+"emp"); err != nil {
					t.Error(err)
					return
				}
				if i%3 == 0 {
					x.RemoveKey(k)
				} else {
					x.Remove(k, f)
				}
			}
		})
	}
	for range 2 {
		wg.Go(func() {
			var dst []int
			for i := range 2000 {
				dst = x.AppendMatches(dst[:0], fmt.Sprintf("site/%d/temp", i%7))
				if !slices.Contains(dst, -1) {
					t.Errorf("site/%d/temp: key -1 missing from %v", i%7, dst)
					return
				}
			}
		})
	}
	wg.Wait()
}

// TestMatchDoesNotAllocate: the publish path pays no allocation per match.
func TestMatchDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under -race (sync.Pool drops items); run without -race")
	}
	x := benchIndex(t, 100)
	fn := func(int) {}
	dst := make([]int, 0, 16)
	for _, topic := range []string{"site/42/room1/temp", "site/42/dev9", "site/42/dev3", "nowhere"} {
		if n := testing.AllocsPerRun(200, func() { x.Match(topic, fn) }); n != 0 {
			t.Errorf("Match(%q): %.1f allocations, want 0", topic, n)
		}
		if n := testing.AllocsPerRun(200, func() { dst = x.AppendMatches(dst[:0], topic) }); n != 0 {
			t.Errorf("AppendMatches(%q): %.1f allocations, want 0", topic, n)
		}
	}
}
