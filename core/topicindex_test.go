package core

import (
	"fmt"
	"slices"
	"sync"
	"testing"
)

// indexMatches returns the topics of x matching filter, sorted.
func indexMatches[V any](x *TopicIndex[V], filter string) []string {
	var got []string
	x.Match(filter, func(topic string, _ V) bool {
		got = append(got, topic)
		return true
	})
	slices.Sort(got)
	return got
}

func TestTopicIndexSetGetReplaceDelete(t *testing.T) {
	var x TopicIndex[int]
	if x.Len() != 0 {
		t.Fatalf("Len of zero index = %d", x.Len())
	}
	if _, ok := x.Get("a"); ok {
		t.Fatal("Get on empty index found a topic")
	}
	if !x.Set("a/b", 1) {
		t.Fatal("Set of a new topic reported not added")
	}
	if x.Set("a/b", 2) {
		t.Fatal("Set of an existing topic reported added")
	}
	if v, ok := x.Get("a/b"); !ok || v != 2 {
		t.Fatalf("Get(a/b) = %d, %v; want 2, true", v, ok)
	}
	if x.Len() != 1 {
		t.Fatalf("Len = %d after replace, want 1", x.Len())
	}
	// A prefix node is not a topic until set.
	if _, ok := x.Get("a"); ok {
		t.Fatal("Get(a) found an intermediate node")
	}
	if _, ok := x.Get("a/b/c"); ok {
		t.Fatal("Get(a/b/c) found a topic below a leaf")
	}
	if _, ok := x.Delete("a"); ok {
		t.Fatal("Delete(a) removed an intermediate node")
	}
	x.Set("a", 3)
	x.Set("a/b/c", 4)
	x.Set("/", 5)
	x.Set("a//b", 6)
	if x.Len() != 5 {
		t.Fatalf("Len = %d, want 5", x.Len())
	}
	for topic, want := range map[string]int{"a": 3, "a/b": 2, "a/b/c": 4, "/": 5, "a//b": 6} {
		if v, ok := x.Get(topic); !ok || v != want {
			t.Errorf("Get(%q) = %d, %v; want %d", topic, v, ok, want)
		}
	}
	if v, ok := x.Delete("a/b"); !ok || v != 2 {
		t.Fatalf("Delete(a/b) = %d, %v", v, ok)
	}
	if _, ok := x.Delete("a/b"); ok {
		t.Fatal("second Delete(a/b) reported held")
	}
	// Deleting a/b must keep a/b/c reachable.
	if v, ok := x.Get("a/b/c"); !ok || v != 4 {
		t.Fatalf("Get(a/b/c) after Delete(a/b) = %d, %v", v, ok)
	}
	if x.Len() != 4 {
		t.Fatalf("Len = %d, want 4", x.Len())
	}
	for _, topic := range []string{"a", "a/b/c", "/", "a//b"} {
		if _, ok := x.Delete(topic); !ok {
			t.Errorf("Delete(%q) not held", topic)
		}
	}
	if x.Len() != 0 {
		t.Fatalf("Len = %d after deleting everything", x.Len())
	}
	if n := x.root.kids.len(); n != 0 {
		t.Fatalf("root keeps %d children after deleting everything", n)
	}
}

// TestTopicIndexPruneWide deletes from levels wide enough that children
// moved from a slice to a map, and checks nothing is left behind.
func TestTopicIndexPruneWide(t *testing.T) {
	var x TopicIndex[int]
	var topics []string
	for i := range 3 * smallFanout {
		for j := range 3 {
			topics = append(topics, fmt.Sprintf("site/%d/dev/%d", i, j))
		}
		topics = append(topics, fmt.Sprintf("site/%d", i))
	}
	for i, topic := range topics {
		x.Set(topic, i)
	}
	if x.Len() != len(topics) {
		t.Fatalf("Len = %d, want %d", x.Len(), len(topics))
	}
	if got := indexMatches(&x, "site/+"); len(got) != 3*smallFanout {
		t.Fatalf("site/+ matched %d, want %d", len(got), 3*smallFanout)
	}
	if got := indexMatches(&x, "site/7/dev/+"); !slices.Equal(got, []string{"site/7/dev/0", "site/7/dev/1", "site/7/dev/2"}) {
		t.Fatalf("site/7/dev/+ = %q", got)
	}
	for i, topic := range slices.Backward(topics) {
		if v, ok := x.Delete(topic); !ok || v != i {
			t.Fatalf("Delete(%q) = %d, %v; want %d", topic, v, ok, i)
		}
	}
	if x.Len() != 0 || x.root.kids.len() != 0 {
		t.Fatalf("after deleting all: Len = %d, root children = %d", x.Len(), x.root.kids.len())
	}
	// The index is reusable after pruning.
	x.Set("site/1", 1)
	if got := indexMatches(&x, "#"); !slices.Equal(got, []string{"site/1"}) {
		t.Fatalf("# after reuse = %q", got)
	}
}

func TestTopicIndexDeleteIf(t *testing.T) {
	var x TopicIndex[int]
	x.Set("a", 1)
	x.Set("a/b", 2)
	if x.DeleteIf("a/b", func(v int) bool { return v == 1 }) {
		t.Fatal("DeleteIf removed although remove returned false")
	}
	if _, ok := x.Get("a/b"); !ok {
		t.Fatal("a/b gone after refused DeleteIf")
	}
	if x.DeleteIf("nope", func(int) bool { t.Fatal("remove called for a missing topic"); return true }) {
		t.Fatal("DeleteIf of a missing topic reported true")
	}
	if x.DeleteIf("a/b/c", func(int) bool { t.Fatal("remove called for a missing topic"); return true }) {
		t.Fatal("DeleteIf of a missing topic reported true")
	}
	var seen int
	if !x.DeleteIf("a/b", func(v int) bool { seen = v; return true }) {
		t.Fatal("DeleteIf did not remove")
	}
	if seen != 2 {
		t.Fatalf("remove saw %d, want the current value 2", seen)
	}
	if x.Len() != 1 {
		t.Fatalf("Len = %d, want 1", x.Len())
	}
	x.DeleteIf("a", func(int) bool { return true })
	if x.Len() != 0 || x.root.kids.len() != 0 {
		t.Fatalf("after DeleteIf of all: Len = %d, root children = %d", x.Len(), x.root.kids.len())
	}
}

func TestTopicIndexMatchCases(t *testing.T) {
	for _, tt := range matchCases {
		var x TopicIndex[struct{}]
		x.Set(tt.topic, struct{}{})
		got := len(indexMatches(&x, tt.filter)) == 1
		if got != tt.want {
			t.Errorf("index: filter %q, topic %q: matched %v, want %v", tt.filter, tt.topic, got, tt.want)
		}
	}
	// All topics of the table in one index.
	var x TopicIndex[struct{}]
	for _, tt := range matchCases {
		x.Set(tt.topic, struct{}{})
	}
	for _, tt := range matchCases {
		got := indexMatches(&x, tt.filter)
		var want []string
		for _, c := range matchCases {
			if !slices.Contains(want, c.topic) && Match(tt.filter, c.topic) {
				want = append(want, c.topic)
			}
		}
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("index: filter %q = %q, want %q", tt.filter, got, want)
		}
	}
}

func TestTopicIndexMatchStops(t *testing.T) {
	var x TopicIndex[int]
	for i := range 100 {
		x.Set(fmt.Sprintf("a/%d", i), i)
		x.Set(fmt.Sprintf("a/%d/b", i), i)
	}
	for _, filter := range []string{"#", "a/#", "a/+", "+/+/b"} {
		calls := 0
		x.Match(filter, func(string, int) bool {
			calls++
			return calls < 3
		})
		if calls != 3 {
			t.Errorf("Match(%q) called fn %d times after it returned false, want 3", filter, calls)
		}
	}
}

// TestTopicIndexDollarBelowRoot: a '$' level is only protected at the root.
func TestTopicIndexDollarBelowRoot(t *testing.T) {
	var x TopicIndex[int]
	for _, topic := range []string{"$SYS", "$SYS/a", "a/$SYS", "$", "a"} {
		x.Set(topic, 0)
	}
	tests := map[string][]string{
		"#":      {"a", "a/$SYS"},
		"+":      {"a"},
		"+/+":    {"a/$SYS"},
		"$SYS/#": {"$SYS", "$SYS/a"},
		"$SYS/+": {"$SYS/a"},
		"$":      {"$"},
		"+/#":    {"a", "a/$SYS"},
	}
	for filter, want := range tests {
		if got := indexMatches(&x, filter); !slices.Equal(got, want) {
			t.Errorf("Match(%q) = %q, want %q", filter, got, want)
		}
	}
}

func TestTopicIndexConcurrent(t *testing.T) {
	var x TopicIndex[int]
	const workers, rounds = 4, 500
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for i := range rounds {
				topic := fmt.Sprintf("w%d/%d/x", w, i%37)
				x.Set(topic, i)
				x.Get(topic)
				if i%3 == 0 {
					x.Delete(topic)
				}
				if i%5 == 0 {
					x.DeleteIf(topic, func(v int) bool { return v%2 == 0 })
				}
			}
		}()
		go func() {
			defer wg.Done()
			for range rounds {
				x.Match(fmt.Sprintf("w%d/+/x", w), func(topic string, v int) bool {
					if !Match("+/+/x", topic) {
						t.Errorf("Match yielded %q", topic)
					}
					return true
				})
				x.Match("#", func(string, int) bool { return true })
				x.Len()
			}
		}()
	}
	wg.Wait()
	n := 0
	x.Match("#", func(string, int) bool { n++; return true })
	if n != x.Len() {
		t.Fatalf("# matched %d topics, Len = %d", n, x.Len())
	}
	for _, topic := range indexMatches(&x, "#") {
		x.Delete(topic)
	}
	if x.Len() != 0 || x.root.kids.len() != 0 {
		t.Fatalf("after deleting all: Len = %d, root children = %d", x.Len(), x.root.kids.len())
	}
}
