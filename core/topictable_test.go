package core

import (
	"fmt"
	"testing"
	"time"
)

func TestTopicTableCountsAndRates(t *testing.T) {
	tt := NewTopicTable(100)
	t0 := time.Unix(1_000_000, 0)
	for range 30 {
		tt.Observe("a/b", t0.Unix())
	}
	tt.Observe("a/c", t0.Unix()+5)
	tt.Observe("x", t0.Unix()+5)

	got := tt.Topics("a/#", t0.Add(10*time.Second), 10*time.Second)
	if len(got) != 2 || got[0].Topic != "a/b" || got[1].Topic != "a/c" {
		t.Fatalf("a/#: %+v", got)
	}
	if got[0].Messages != 30 || got[0].PerSecond != 3 || !got[0].LastSeen.Equal(t0) || !got[1].LastSeen.Equal(t0.Add(5*time.Second)) {
		t.Errorf("a/b: %+v, a/c: %+v", got[0], got[1])
	}
	// The reference moved to the last call: ten more over the next 5 s.
	for range 10 {
		tt.Observe("a/b", t0.Unix()+12)
	}
	got = tt.Topics("a/b", t0.Add(15*time.Second), 10*time.Second)
	if len(got) != 1 || got[0].Messages != 40 || got[0].PerSecond != 2 {
		t.Errorf("a/b after: %+v", got)
	}
	if got := tt.Topics("#", t0.Add(15*time.Second), 10*time.Second); len(got) != 3 {
		t.Errorf("#: %+v", got)
	}
}

// The table stays within its bound, and a new topic takes the place of
// one not published on since the clock hand passed, not of a busy one.
func TestTopicTableEvictsIdleTopics(t *testing.T) {
	tt := NewTopicTable(topicShards * 4) // four a shard
	for i := range 10_000 {
		tt.Observe("busy", 1)
		tt.Observe(fmt.Sprintf("once/%d", i), 1)
	}
	all := tt.Topics("#", time.Unix(2, 0), time.Second)
	if len(all) > topicShards*4 {
		t.Fatalf("%d topics held, bound %d", len(all), topicShards*4)
	}
	found := false
	for _, s := range all {
		if s.Topic == "busy" {
			found = s.Messages == 10_000
		}
	}
	if !found {
		t.Errorf("the busy topic was evicted or miscounted: %+v", all)
	}
}

func TestTopicTableObserveAllocatesNothing(t *testing.T) {
	tt := NewTopicTable(1000)
	tt.Observe("sensors/1/temp", 1)
	if n := testing.AllocsPerRun(1000, func() { tt.Observe("sensors/1/temp", 2) }); n != 0 {
		t.Errorf("Observe of a known topic: %v allocations", n)
	}
	var nilTable *TopicTable
	nilTable.Observe("x", 1) // counts nothing, does not panic
}

func BenchmarkTopicTableObserve(b *testing.B) {
	tt := NewTopicTable(10_000)
	topics := make([]string, 1000)
	for i := range topics {
		topics[i] = fmt.Sprintf("sensors/%d/temp", i)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			tt.Observe(topics[i%len(topics)], 1)
			i++
		}
	})
}
