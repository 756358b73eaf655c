// Package catalog is the in-process side of every retained store: the
// core.TopicIndex of retained topics, the byte count behind Stats, the quota
// reservations behind Limits.MaxMessages and a heap of expiry times that lets
// a sweep find expired topics in O(expired) instead of walking every topic.
// It owns no storage and starts no goroutines; the backends drive it.
package catalog

import (
	"container/heap"
	"sync"
	"sync/atomic"

	"github.com/tolsey/tolsey/core"
	"github.com/tolsey/tolsey/core/codec"
)

// Catalog indexes retained topics with a value V per topic (the whole message
// for the memory store, a codec.Meta for the others).
//
// Topic strings handed to Put are kept as they are: callers pass compact
// strings (never substrings of a larger buffer such as a network read or a
// Redis reply), or the index would pin that buffer for as long as it holds the
// topic.
type Catalog[V any] struct {
	meta func(V) codec.Meta
	idx  core.TopicIndex[V]

	mu       sync.Mutex     // serializes mutations so bytes and exp follow idx
	exp      expiryHeap     // guarded by mu
	reserved map[string]int // guarded by mu: new topics admitted, not yet Put
	bytes    atomic.Int64
}

// New returns an empty catalog; meta tells the expiry and size of a value.
func New[V any](meta func(V) codec.Meta) *Catalog[V] {
	return &Catalog[V]{meta: meta}
}

// Len is the number of topics held (including expired ones not yet swept).
func (c *Catalog[V]) Len() int { return c.idx.Len() }

// Bytes is the summed size of the messages held.
func (c *Catalog[V]) Bytes() int64 { return c.bytes.Load() }

// Get returns the value of topic.
func (c *Catalog[V]) Get(topic string) (V, bool) { return c.idx.Get(topic) }

// Match calls fn for each topic matching filter, under the index's read
// lock: fn must not call back into the catalog.
func (c *Catalog[V]) Match(filter string, fn func(topic string, v V) bool) {
	c.idx.Match(filter, fn)
}

// EachTopic calls fn, outside the index's lock (fn may call back into
// the store), for each topic matching filter whose value live accepts,
// until fn returns false: a store's retain.TopicLister.
func (c *Catalog[V]) EachTopic(filter string, live func(V) bool, fn func(topic string) bool) {
	var topics []string
	c.idx.Match(filter, func(topic string, v V) bool {
		if live(v) {
			topics = append(topics, topic)
		}
		return true
	})
	for _, t := range topics {
		if !fn(t) {
			return
		}
	}
}

// Reserve admits topic against a limit of max topics (0: unlimited).
// Replacing a topic already held is always admitted [Limits]. A new topic
// takes a reservation, so that concurrent Sets cannot overshoot the limit
// while their writes are in flight; concurrent Sets of the same new topic
// share one. release returns it once the topic has been Put (or the write
// failed).
func (c *Catalog[V]) Reserve(topic string, max int) (release func(), ok bool) {
	if max <= 0 {
		return func() {}, true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, held := c.idx.Get(topic); held {
		return func() {}, true
	}
	if c.reserved[topic] == 0 && c.idx.Len()+len(c.reserved) >= max {
		return nil, false
	}
	if c.reserved == nil {
		c.reserved = make(map[string]int)
	}
	c.reserved[topic]++
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.reserved[topic]--; c.reserved[topic] == 0 {
				delete(c.reserved, topic)
			}
		})
	}, true
}

// Put stores v for topic and reports whether the topic was new.
func (c *Catalog[V]) Put(topic string, v V) (added bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.meta(v)
	old, had := c.idx.Get(topic)
	c.idx.Set(topic, v)
	delta := int64(m.Size)
	if had {
		delta -= int64(c.meta(old).Size)
	}
	c.bytes.Add(delta)
	if m.Expiry != 0 {
		heap.Push(&c.exp, expiryEntry{at: m.Expiry, topic: topic})
		c.compactLocked()
	}
	return !had
}

// Remove deletes topic and returns its value.
func (c *Catalog[V]) Remove(topic string) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.idx.Delete(topic)
	if ok {
		c.bytes.Add(-int64(c.meta(v).Size))
	}
	return v, ok
}

// RemoveExpired deletes topic if its value has expired at now (unix ns).
func (c *Catalog[V]) RemoveExpired(topic string, now int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.removeExpiredLocked(topic, now)
}

func (c *Catalog[V]) removeExpiredLocked(topic string, now int64) bool {
	var size int32
	ok := c.idx.DeleteIf(topic, func(v V) bool {
		m := c.meta(v)
		size = m.Size
		return m.Expired(now)
	})
	if ok {
		c.bytes.Add(-int64(size))
	}
	return ok
}

// NextExpiry is the earliest expiry time (unix ns) in the heap, 0 if none.
// It may belong to a topic since replaced; it is a hint for when to sweep.
func (c *Catalog[V]) NextExpiry() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.exp) == 0 {
		return 0
	}
	return c.exp[0].at
}

// Expire removes up to limit topics whose value has expired at now and
// returns them, so that a backend can delete them from its storage too.
// Its cost grows with the entries due, not with the topics held.
func (c *Catalog[V]) Expire(now int64, limit int) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for len(c.exp) > 0 && c.exp[0].at <= now && len(out) < limit {
		e := heap.Pop(&c.exp).(expiryEntry)
		if c.removeExpiredLocked(e.topic, now) {
			out = append(out, e.topic)
		}
	}
	return out
}

// compactLocked drops heap entries of topics replaced or deleted since they
// were pushed, once they outnumber live ones: a topic republished every
// second with a long expiry must not grow the heap without bound.
func (c *Catalog[V]) compactLocked() {
	if len(c.exp) < 2*c.idx.Len()+1024 {
		return
	}
	type key struct {
		topic string
		at    int64
	}
	seen := make(map[key]bool, c.idx.Len())
	kept := c.exp[:0]
	for _, e := range c.exp {
		v, ok := c.idx.Get(e.topic)
		k := key{e.topic, e.at}
		if !ok || c.meta(v).Expiry != e.at || seen[k] {
			continue
		}
		seen[k] = true
		kept = append(kept, e)
	}
	clear(c.exp[len(kept):])
	c.exp = kept
	heap.Init(&c.exp)
}

type expiryEntry struct {
	at    int64
	topic string
}

type expiryHeap []expiryEntry

func (h expiryHeap) Len() int           { return len(h) }
func (h expiryHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h expiryHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *expiryHeap) Push(x any)        { *h = append(*h, x.(expiryEntry)) }
func (h *expiryHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = expiryEntry{}
	*h = old[:len(old)-1]
	return e
}
