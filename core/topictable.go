package core

import (
	"hash/maphash"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// TopicTable counts the messages published on the topics seen most
// recently, for an operator's view of what flows where (the admin API's
// GET /api/v1/topics). It is bounded: a new topic takes the place of one
// not published on since the clock hand last passed it (the CLOCK
// approximation of least-recently-used), so a gateway with millions of
// topics keeps only the active ones.
//
// Observe is on the publish path of every message: a topic already in the
// table costs a hash, a read lock on one of topicShards shards, a map
// lookup and an atomic add, and allocates nothing. A new topic takes its
// shard's write lock and reuses the entry it evicts (the map may
// allocate while it grows to its bound).
type TopicTable struct {
	seed     maphash.Seed
	perShard int
	shards   [topicShards]topicShard
}

// topicShards spreads publishers of different topics over locks.
const topicShards = 64

type topicShard struct {
	mu   sync.RWMutex
	m    map[string]*topicEntry
	ring []*topicEntry // the clock: every entry, in the order slots filled
	hand int           // the next slot the clock looks at

	_ [64]byte // one shard's lock per cache line
}

type topicEntry struct {
	// Under the shard's write lock.
	topic string
	first int64 // unix seconds it entered the table

	// Added to by Observe under the shard's read lock.
	count atomic.Uint64
	last  atomic.Int64 // unix seconds of the last message
	ref   atomic.Bool  // observed since the clock hand last passed

	// The rate's reference, read and moved by Topics under the write lock.
	refCount uint64
	refAt    time.Time
}

// NewTopicTable returns a table that holds at most about size topics
// (rounded up to a multiple of its shards).
func NewTopicTable(size int) *TopicTable {
	t := &TopicTable{seed: maphash.MakeSeed(), perShard: max(1, (size+topicShards-1)/topicShards)}
	for i := range t.shards {
		t.shards[i].m = map[string]*topicEntry{}
	}
	return t
}

// Observe counts one message published on topic at unix (seconds). A nil
// table counts nothing.
func (t *TopicTable) Observe(topic string, unix int64) {
	if t == nil {
		return
	}
	sh := &t.shards[maphash.String(t.seed, topic)%topicShards]
	sh.mu.RLock()
	if e := sh.m[topic]; e != nil {
		e.count.Add(1)
		// Loads first: a busy topic's entry is then written once a second,
		// not by every publisher.
		if e.last.Load() != unix {
			e.last.Store(unix)
		}
		if !e.ref.Load() {
			e.ref.Store(true)
		}
		sh.mu.RUnlock()
		return
	}
	sh.mu.RUnlock()
	t.insert(sh, topic, unix)
}

func (t *TopicTable) insert(sh *topicShard, topic string, unix int64) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, found := sh.m[topic]
	switch {
	case found: // another publisher put it in meanwhile
	case len(sh.ring) < t.perShard:
		e = &topicEntry{}
		sh.ring = append(sh.ring, e)
	default:
		// The clock: pass over entries observed since the hand last
		// did (clearing their mark), take the first that was not. At
		// most one turn: by then every mark is clear.
		for {
			e = sh.ring[sh.hand]
			sh.hand = (sh.hand + 1) % len(sh.ring)
			if !e.ref.Swap(false) {
				break
			}
		}
		delete(sh.m, e.topic)
		*e = topicEntry{}
	}
	if !found {
		// The message's own topic string: immutable, it holds nothing
		// else of the message alive.
		e.topic, e.first = topic, unix
		e.last.Store(unix)
		sh.m[topic] = e
	}
	e.count.Add(1)
	// A new topic enters unmarked: one seen once is the first to go, and
	// a burst of new topics cannot push out one published on steadily.
	e.ref.Store(found)
}

// TopicStat is one topic of the table.
type TopicStat struct {
	Topic    string
	Messages uint64    // since it entered the table
	First    time.Time // it entered the table (to the second)
	LastSeen time.Time // the last message (to the second)
	// PerSecond is its messages per second since the reference taken
	// by an earlier Topics call at least window before (or since it
	// entered the table).
	PerSecond float64
}

// Topics is the table's topics that match filter (an MQTT filter), sorted.
// Each call moves a topic's rate reference forward once it is window old,
// so that callers polling more often than window get rates over the last
// window to 2×window.
func (t *TopicTable) Topics(filter string, now time.Time, window time.Duration) []TopicStat {
	var out []TopicStat
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		for topic, e := range sh.m {
			if !Match(filter, topic) {
				continue
			}
			st := TopicStat{Topic: topic, Messages: e.count.Load(),
				First: time.Unix(e.first, 0), LastSeen: time.Unix(e.last.Load(), 0)}
			ref, at := e.refCount, e.refAt
			if at.IsZero() {
				ref, at = 0, st.First
			}
			if dt := now.Sub(at).Seconds(); dt >= 1 {
				st.PerSecond = float64(st.Messages-ref) / dt
			}
			if now.Sub(e.refAt) >= window {
				e.refCount, e.refAt = st.Messages, now
			}
			out = append(out, st)
		}
		sh.mu.Unlock()
	}
	slices.SortFunc(out, func(a, b TopicStat) int { return strings.Compare(a.Topic, b.Topic) })
	return out
}
