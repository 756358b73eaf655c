package bridge

import "strings"

// mapCache remembers what a rule's Mapping made of the names it saw last
// (topics out, subjects in), so that a device publishing on the same topic
// again and again costs the bridge a map lookup, not a validation and a
// new string per message: the mapping was the largest part of the bridge's
// own per-message cost after nats.go's (docs/benchmarks.md, "Bridge, the
// per-message path"). A Mapping is a pure function of its rule and the
// name, so a cached result is the result; only successes are kept, so an
// unmappable name is still counted and logged each time.
//
// Owned by one goroutine (the NATS writer, or one subscription's handler):
// no lock.
type mapCache[K comparable] struct {
	m map[K]string
}

// Bounds: past maxMapCache entries the cache starts again empty (a gateway
// with more live topics than that pays the mapping for some, as without
// the cache), and names longer than maxCachedName are not kept, so the
// cache holds at most a few MiB whatever the topics.
const (
	maxMapCache   = 4096
	maxCachedName = 256
)

// get returns what key mapped to, if it is cached.
func (c *mapCache[K]) get(key K) (string, bool) {
	v, ok := c.m[key]
	return v, ok
}

// put remembers that key mapped to v; name is the topic or subject key
// stands for (its length decides whether it is kept).
func (c *mapCache[K]) put(key K, name, v string) {
	if len(name) > maxCachedName {
		return
	}
	if c.m == nil || len(c.m) >= maxMapCache {
		c.m = make(map[K]string)
	}
	c.m[key] = v
}

// outKey is a topic sent by one rule: the writer serves every rule.
type outKey struct {
	r     *ruleLink
	topic string
}

// subjectOut is r's subject for topic, through the writer's cache.
func (b *NATS) subjectOut(r *ruleLink, topic string) (string, error) {
	k := outKey{r, topic}
	if s, ok := b.subjects.get(k); ok {
		return s, nil
	}
	s, err := r.mapng.Out(topic)
	if err == nil && len(topic) <= maxCachedName {
		// Copies: the topic, and a subject made of it, may point into the
		// message's whole packet (mochi decodes strings without copying),
		// which the cache would keep alive.
		b.subjects.put(outKey{r, strings.Clone(topic)}, topic, strings.Clone(s))
	}
	return s, err
}

// topicIn is r's topic for subject, through the calling handler's cache
// (nil: none).
func (r *ruleLink) topicIn(c *mapCache[string], subject string) (string, error) {
	if c == nil {
		return r.mapng.In(subject)
	}
	if t, ok := c.get(subject); ok {
		return t, nil
	}
	t, err := r.mapng.In(subject)
	if err == nil && len(subject) <= maxCachedName {
		c.put(strings.Clone(subject), subject, strings.Clone(t)) // copies, as in subjectOut
	}
	return t, err
}
