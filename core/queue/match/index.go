package match

import (
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Index holds the subscriptions and exceptions of many endpoints (K: a queue,
// or any endpoint key) in one trie, and says which endpoints a topic goes
// to: those with a subscription that matches it and no exception that does.
// Exceptions win whatever the order they were added in (docs/architecture.md,
// decision 5), so an endpoint's matches depend only on its set of filters.
//
// A match walks only the trie nodes the topic can reach, so its cost grows
// with the nodes and entries matched, never with the number of endpoints:
// with 10,000 endpoints, a topic that concerns one touches that one's nodes.
//
// It is safe for concurrent use. It takes a sync.RWMutex, read-locked by
// Match: publishers (many, on every message) match in parallel, and
// subscription changes (few: admin API, configuration, temporary queues)
// take the write lock for the few map and slice edits of one filter.
// Copy-on-write would free readers of the lock's shared counter but make
// every write copy each node on the filter's path, children maps included;
// one node holds every site's child in `site/N/...`, so adding endpoint N
// would cost O(N) and building 10,000 of them O(N²).
//
// The zero Index is empty and ready to use; it must not be copied.
type Index[K comparable] struct {
	mu sync.RWMutex
	// Guarded by mu.
	root  node
	slots map[K]uint32  // each key's slot in keys
	keys  []keyState[K] // by slot; nodes name keys by slot
	free  []uint32      // slots of removed keys, for reuse

	scratch sync.Pool // *scratch[K]: Match's working slices, so it does not allocate
}

// keyState is one key's filters, each with the node it ends at (so Remove
// needs no walk). A slot in use has at least one filter.
type keyState[K comparable] struct {
	key     K
	filters map[string]*node // filter as given (`!` included) → its last node
}

// node is one level of the trie. Children are kept by kind so that a match
// looks up the topic's level once per kind instead of testing every child.
type node struct {
	parent *node
	kind   Kind   // how parent holds this node
	text   string // its key in parent.lit or parent.pre

	lit        map[string]*node // Literal children, by level
	pre        map[string]*node // Prefix children, by the text before `*`
	preLens    []prefixLen      // the distinct len(text) of pre, ascending
	plus, star *node            // `+` and `*`: the same match, kept apart so each filter has its own node
	hash, tail *node            // `#` and `>`: always leaves

	subs []uint32 // slots whose subscription ends here, each once
	excs []uint32 // slots whose exception ends here, each once
}

// Len is the number of keys with at least one filter.
func (x *Index[K]) Len() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return len(x.slots)
}

// Add records filter (a subscription, or an exception when it starts with
// `!`) for key. Adding a filter the key already holds does nothing. The
// error is a *FilterError when the filter breaks the grammar (Parse).
func (x *Index[K]) Add(key K, filter string) error {
	f, err := Parse(filter)
	if err != nil {
		return err
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	slot, ok := x.slots[key]
	if ok {
		if _, dup := x.keys[slot].filters[filter]; dup {
			return nil
		}
	} else {
		slot = x.newSlot(key)
	}
	n := &x.root
	for _, l := range f.Levels {
		n = n.child(l)
	}
	if f.Exception {
		n.excs = append(n.excs, slot)
	} else {
		n.subs = append(n.subs, slot)
	}
	x.keys[slot].filters[filter] = n
	return nil
}

// Remove takes filter, exactly as it was added, away from key; it reports
// whether the key held it. Removing an exception lets the key's
// subscriptions match what it kept out.
func (x *Index[K]) Remove(key K, filter string) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	slot, ok := x.slots[key]
	if !ok {
		return false
	}
	ks := &x.keys[slot]
	n, ok := ks.filters[filter]
	if !ok {
		return false
	}
	delete(ks.filters, filter)
	x.unlink(n, slot, filter)
	if len(ks.filters) == 0 {
		x.freeSlot(key, slot)
	}
	return true
}

// RemoveKey takes every filter of key away (the endpoint was deleted).
func (x *Index[K]) RemoveKey(key K) {
	x.mu.Lock()
	defer x.mu.Unlock()
	slot, ok := x.slots[key]
	if !ok {
		return
	}
	for filter, n := range x.keys[slot].filters {
		x.unlink(n, slot, filter)
	}
	x.freeSlot(key, slot)
}

// Match calls fn once for each key the topic goes to, in no particular
// order. fn runs after the index is unlocked, so it may call Add or Remove.
// Match does not allocate once its pooled slices have grown to the usual
// number of matches. The topic is taken as given (the caller has validated
// it): its levels are compared as text.
func (x *Index[K]) Match(topic string, fn func(K)) {
	sc := x.getScratch()
	sc.out = x.appendMatches(sc.out[:0], topic, sc)
	for _, k := range sc.out {
		fn(k)
	}
	clear(sc.out) // drop the keys before pooling: they may pin endpoints
	sc.out = sc.out[:0]
	x.putScratch(sc)
}

// AppendMatches appends to dst the keys the topic goes to, each once, in no
// particular order, and returns the extended slice. With a dst of enough
// capacity it does not allocate.
func (x *Index[K]) AppendMatches(dst []K, topic string) []K {
	sc := x.getScratch()
	dst = x.appendMatches(dst, topic, sc)
	x.putScratch(sc)
	return dst
}

// scratch holds one Match's working slices. subs and excs collect the slots
// of every matching subscription and exception; a slot appears once per
// matching filter, so the result is made by sorting and merging them.
type scratch[K comparable] struct {
	subs, excs []uint32
	out        []K
}

// maxPooledScratch bounds the slices kept for reuse: a match that reached
// every endpoint of a large index leaves its slices to the GC rather than
// keeping them for every later match.
const maxPooledScratch = 4096

func (x *Index[K]) getScratch() *scratch[K] {
	if sc, ok := x.scratch.Get().(*scratch[K]); ok {
		return sc
	}
	return new(scratch[K])
}

func (x *Index[K]) putScratch(sc *scratch[K]) {
	if cap(sc.subs) > maxPooledScratch || cap(sc.excs) > maxPooledScratch || cap(sc.out) > maxPooledScratch {
		return
	}
	x.scratch.Put(sc)
}

func (x *Index[K]) appendMatches(dst []K, topic string, sc *scratch[K]) []K {
	sc.subs, sc.excs = sc.subs[:0], sc.excs[:0]
	x.mu.RLock()
	defer x.mu.RUnlock()
	sc.walk(&x.root, topic, true)
	subs, excs := sc.subs, sc.excs
	switch {
	case len(subs) == 0:
		return dst
	case len(subs) == 1 && len(excs) == 0:
		return append(dst, x.keys[subs[0]].key)
	}
	// Sorting costs O(m log m) in the m entries matched, and needs neither
	// a set nor memory sized by the number of keys.
	slices.Sort(subs)
	subs = slices.Compact(subs)
	slices.Sort(excs)
	j := 0
	for _, s := range subs {
		for j < len(excs) && excs[j] < s {
			j++
		}
		if j < len(excs) && excs[j] == s {
			continue // an exception of the same key matched: it wins
		}
		dst = append(dst, x.keys[s].key)
	}
	return dst
}

// walk collects the entries of the nodes below n that match topic; first
// says n is the root, where the `$` rule applies.
func (sc *scratch[K]) walk(n *node, topic string, first bool) {
	level, rest, more := cutLevel(topic)
	// A filter starting with a wildcard does not match a topic starting
	// with `$` [MQTT-4.7.2-1]; `*`, `>` and `#` included.
	dollar := first && len(level) > 0 && level[0] == '$'
	if !dollar {
		if n.hash != nil {
			sc.take(n.hash) // `#`: this level and any below
		}
		if n.tail != nil {
			sc.take(n.tail) // `>`: one level or more, and this is one
		}
		if n.plus != nil {
			sc.descend(n.plus, rest, more)
		}
		if n.star != nil {
			sc.descend(n.star, rest, more)
		}
	}
	if c := n.lit[level]; c != nil {
		sc.descend(c, rest, more)
	}
	// One lookup per distinct prefix length that fits in the level, not
	// one test per prefix child.
	for _, p := range n.preLens {
		if p.len > len(level) {
			break
		}
		if c := n.pre[level[:p.len]]; c != nil {
			sc.descend(c, rest, more)
		}
	}
}

// descend continues the match in c, a child whose level matched.
func (sc *scratch[K]) descend(c *node, rest string, more bool) {
	if more {
		sc.walk(c, rest, false)
		return
	}
	sc.take(c)
	if c.hash != nil {
		sc.take(c.hash) // "a/#" matches "a" [MQTT-4.7.1-2]
	}
}

func (sc *scratch[K]) take(n *node) {
	sc.subs = append(sc.subs, n.subs...)
	sc.excs = append(sc.excs, n.excs...)
}

func (x *Index[K]) newSlot(key K) uint32 {
	if x.slots == nil {
		x.slots = make(map[K]uint32)
	}
	var slot uint32
	if k := len(x.free); k > 0 {
		slot, x.free = x.free[k-1], x.free[:k-1]
	} else {
		slot = uint32(len(x.keys))
		x.keys = append(x.keys, keyState[K]{})
	}
	x.keys[slot] = keyState[K]{key: key, filters: make(map[string]*node, 4)}
	x.slots[key] = slot
	return slot
}

func (x *Index[K]) freeSlot(key K, slot uint32) {
	delete(x.slots, key)
	x.keys[slot] = keyState[K]{} // drop the key: it may pin an endpoint
	x.free = append(x.free, slot)
}

// unlink takes slot's entry for filter off n, then prunes the nodes left
// empty on the way up.
func (x *Index[K]) unlink(n *node, slot uint32, filter string) {
	// Only a valid filter was stored, and in it only a leading `!` is
	// an exception mark.
	if strings.HasPrefix(filter, "!") {
		n.excs = without(n.excs, slot)
	} else {
		n.subs = without(n.subs, slot)
	}
	for n != &x.root && n.empty() {
		p := n.parent
		p.detach(n)
		n = p
	}
}

// without removes slot from s, which holds it at most once. The order of a
// node's entries does not matter (matches are sorted), so the last one
// fills the gap.
func without(s []uint32, slot uint32) []uint32 {
	i := slices.Index(s, slot)
	if i < 0 {
		return s
	}
	last := len(s) - 1
	s[i] = s[last]
	if last == 0 {
		return nil // release the array of a node emptied
	}
	return s[:last]
}

// child returns n's child for l, creating it.
func (n *node) child(l Level) *node {
	switch l.Kind {
	case Literal:
		c, _ := n.keyed(&n.lit, l)
		return c
	case Prefix:
		c, created := n.keyed(&n.pre, l)
		if created {
			n.countPrefix(len(l.Text), 1)
		}
		return c
	}
	slot := n.single(l.Kind)
	if *slot == nil {
		*slot = &node{parent: n, kind: l.Kind}
	}
	return *slot
}

// keyed returns the child for l in m (n.lit or n.pre), creating it.
func (n *node) keyed(m *map[string]*node, l Level) (c *node, created bool) {
	if c := (*m)[l.Text]; c != nil {
		return c, false
	}
	if *m == nil {
		*m = make(map[string]*node)
	}
	c = &node{parent: n, kind: l.Kind, text: l.Text}
	(*m)[l.Text] = c
	return c, true
}

// single is the field holding n's one child of kind k: `+`, `*`, `#` or `>`.
func (n *node) single(k Kind) **node {
	switch k {
	case Plus:
		return &n.plus
	case Star:
		return &n.star
	case Hash:
		return &n.hash
	case Tail:
		return &n.tail
	}
	panic("match: no single child of kind " + strconv.Itoa(int(k)))
}

// detach removes the empty child c from n.
func (n *node) detach(c *node) {
	switch c.kind {
	case Literal:
		delete(n.lit, c.text)
		if len(n.lit) == 0 {
			n.lit = nil
		}
	case Prefix:
		delete(n.pre, c.text)
		if len(n.pre) == 0 {
			n.pre = nil
		}
		n.countPrefix(len(c.text), -1)
	default:
		*n.single(c.kind) = nil
	}
}

// prefixLen is one length of n.pre's prefixes, and how many have it.
type prefixLen struct{ len, count int }

// countPrefix adds delta to the number of prefix children of length k,
// keeping preLens sorted and without zero counts.
func (n *node) countPrefix(k, delta int) {
	i, found := slices.BinarySearchFunc(n.preLens, k, func(p prefixLen, k int) int { return p.len - k })
	switch {
	case !found:
		n.preLens = slices.Insert(n.preLens, i, prefixLen{len: k, count: delta})
	case n.preLens[i].count+delta == 0:
		n.preLens = slices.Delete(n.preLens, i, i+1)
		if len(n.preLens) == 0 {
			n.preLens = nil
		}
	default:
		n.preLens[i].count += delta
	}
}

func (n *node) empty() bool {
	return len(n.subs) == 0 && len(n.excs) == 0 && len(n.lit) == 0 && len(n.pre) == 0 &&
		n.plus == nil && n.star == nil && n.hash == nil && n.tail == nil
}
