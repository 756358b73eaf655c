package core

import (
	"fmt"
	"hash/maphash"
	"testing"
	"time"
	"unsafe"
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

// A second reader right after another moved the reference (another
// console, the next page of a listing) still gets a rate: it read 0 for
// every topic while the new reference was under a second old.
func TestTopicTableRateRightAfterAMove(t *testing.T) {
	tt := NewTopicTable(100)
	t0 := time.Unix(1_000_000, 0)
	for i := range 100 {
		tt.Observe("busy", t0.Unix()+int64(i/10)) // 10 a second for 10 s
	}
	if got := tt.Topics("#", t0.Add(10*time.Second), 10*time.Second); got[0].PerSecond != 10 {
		t.Fatalf("first reader: %+v", got)
	}
	got := tt.Topics("#", t0.Add(10*time.Second+300*time.Millisecond), 10*time.Second)
	if got[0].PerSecond < 9 || got[0].PerSecond > 10 {
		t.Fatalf("a reader 0.3 s after the move: %v msg/s, want about 10", got[0].PerSecond)
	}
}

// The table keeps its own copy of a topic: the message's topic string may
// point into its whole packet, payload included, which the table would
// otherwise keep alive.
func TestTopicTableCopiesTheTopic(t *testing.T) {
	tt := NewTopicTable(100)
	packet := []byte("t/1" + string(make([]byte, 1<<20)))
	topic := unsafe.String(&packet[0], 3) // as mochi decodes it: no copy
	tt.Observe(topic, 1)
	for k := range tt.shards[maphash.String(tt.seed, topic)%topicShards].m {
		if unsafe.StringData(k) == &packet[0] {
			t.Fatal("the table keeps the packet's own bytes as its key")
		}
	}
}
