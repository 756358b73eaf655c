package core

import (
	"sync"
)

// smallFanout is how many children a trie node keeps in a slice before it
// moves them to a map. Most levels of IoT topic trees have one or a few
// children; a map per node would cost ~250 bytes each, a slice 8.
const smallFanout = 16

// children is the child set of a trie node: a slice while small, a map when
// large, so that memory stays compact at 1M topics and lookups stay O(1) on
// wide levels.
type children[N any] struct {
	list []*N
	m    map[string]*N
}

func (c *children[N]) get(name string, nameOf func(*N) string) *N {
	if c.m != nil {
		return c.m[name]
	}
	for _, n := range c.list {
		if nameOf(n) == name {
			return n
		}
	}
	return nil
}

func (c *children[N]) add(name string, n *N, nameOf func(*N) string) {
	if c.m != nil {
		c.m[name] = n
		return
	}
	if len(c.list) < smallFanout {
		c.list = append(c.list, n)
		return
	}
	c.m = make(map[string]*N, 2*smallFanout)
	for _, k := range c.list {
		c.m[nameOf(k)] = k
	}
	c.list = nil
	c.m[name] = n
}

func (c *children[N]) remove(name string, nameOf func(*N) string) {
	if c.m != nil {
		delete(c.m, name)
		return
	}
	for i, n := range c.list {
		if nameOf(n) == name {
			last := len(c.list) - 1
			c.list[i] = c.list[last]
			c.list[last] = nil
			c.list = c.list[:last]
			if len(c.list) == 0 {
				c.list = nil
			}
			return
		}
	}
}

func (c *children[N]) len() int {
	if c.m != nil {
		return len(c.m)
	}
	return len(c.list)
}

func (c *children[N]) each(fn func(*N) bool) bool {
	if c.m != nil {
		for _, n := range c.m {
			if !fn(n) {
				return false
			}
		}
		return true
	}
	for _, n := range c.list {
		if !fn(n) {
			return false
		}
	}
	return true
}

// TopicIndex is a set of topic names, each with a value, that answers "which
// topics match this filter" in time proportional to the matches and the
// filter's depth, not to the number of topics held. The retained stores use
// it. It is safe for concurrent use.
type TopicIndex[V any] struct {
	mu    sync.RWMutex
	root  tnode[V]
	count int
}

type tnode[V any] struct {
	name   string // this level; a substring of the first topic that created it
	parent *tnode[V]
	kids   children[tnode[V]]
	topic  string // the whole topic name when a topic ends here
	has    bool
	val    V
}

func tname[V any](n *tnode[V]) string { return n.name }

// Len is the number of topics held.
func (x *TopicIndex[V]) Len() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.count
}

// Set stores v for topic and reports whether the topic was new. The index
// keeps topic (and substrings of it as level names): pass a string that does
// not share memory with a large buffer.
func (x *TopicIndex[V]) Set(topic string, v V) (added bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	n := &x.root
	rest := topic
	for {
		level, r, more := cutLevel(rest)
		c := n.kids.get(level, tname[V])
		if c == nil {
			c = &tnode[V]{name: level, parent: n}
			n.kids.add(level, c, tname[V])
		}
		n = c
		if !more {
			break
		}
		rest = r
	}
	added = !n.has
	n.has, n.topic, n.val = true, topic, v
	if added {
		x.count++
	}
	return added
}

// Get returns the value held for topic.
func (x *TopicIndex[V]) Get(topic string) (v V, ok bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	n := x.find(topic)
	if n == nil || !n.has {
		return v, false
	}
	return n.val, true
}

func (x *TopicIndex[V]) find(topic string) *tnode[V] {
	n := &x.root
	for rest := topic; n != nil; {
		level, r, more := cutLevel(rest)
		n = n.kids.get(level, tname[V])
		if !more {
			return n
		}
		rest = r
	}
	return nil
}

// Delete removes topic and reports whether it was held. Nodes left empty are
// pruned so that churn does not grow memory.
func (x *TopicIndex[V]) Delete(topic string) (v V, ok bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.deleteLocked(topic)
}

// DeleteIf removes topic only if remove returns true for its current value.
func (x *TopicIndex[V]) DeleteIf(topic string, remove func(V) bool) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	n := x.find(topic)
	if n == nil || !n.has || !remove(n.val) {
		return false
	}
	x.deleteLocked(topic)
	return true
}

func (x *TopicIndex[V]) deleteLocked(topic string) (v V, ok bool) {
	n := x.find(topic)
	if n == nil || !n.has {
		return v, false
	}
	v = n.val
	var zero V
	n.has, n.topic, n.val = false, "", zero
	x.count--
	for n != &x.root && !n.has && n.kids.len() == 0 {
		p := n.parent
		p.kids.remove(n.name, tname[V])
		n.parent = nil
		n = p
	}
	return v, true
}

// Match calls fn for every topic matching filter (which must be a valid,
// non-shared filter) until fn returns false. fn runs under the index's read
// lock: it must not call back into the index.
func (x *TopicIndex[V]) Match(filter string, fn func(topic string, v V) bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	matchTopics(&x.root, filter, true, fn)
}

func matchTopics[V any](n *tnode[V], filter string, root bool, fn func(string, V) bool) bool {
	level, rest, more := cutLevel(filter)
	switch level {
	case "#":
		// "a/#" matches "a" itself [MQTT-4.7.1-2]; the root is no topic.
		if !root && n.has && !fn(n.topic, n.val) {
			return false
		}
		return n.kids.each(func(c *tnode[V]) bool {
			if root && len(c.name) > 0 && c.name[0] == '$' {
				return true // [MQTT-4.7.2-1]
			}
			return walkAll(c, fn)
		})
	case "+":
		return n.kids.each(func(c *tnode[V]) bool {
			if root && len(c.name) > 0 && c.name[0] == '$' {
				return true // [MQTT-4.7.2-1]
			}
			return matchNext(c, rest, more, fn)
		})
	default:
		c := n.kids.get(level, tname[V])
		if c == nil {
			return true
		}
		return matchNext(c, rest, more, fn)
	}
}

func matchNext[V any](c *tnode[V], rest string, more bool, fn func(string, V) bool) bool {
	if !more {
		if c.has {
			return fn(c.topic, c.val)
		}
		return true
	}
	return matchTopics(c, rest, false, fn)
}

func walkAll[V any](n *tnode[V], fn func(string, V) bool) bool {
	if n.has && !fn(n.topic, n.val) {
		return false
	}
	return n.kids.each(func(c *tnode[V]) bool { return walkAll(c, fn) })
}
