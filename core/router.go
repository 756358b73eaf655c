package core

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Subscriber receives messages from the Router. Front-ends implement it once
// per consumer (an AMQP receiver link, a queue) or once for all their
// sessions (the MQTT front-end, which fans out through mochi itself).
// Implementations must be comparable, in practice pointers: the router tells
// subscribers apart with ==.
type Subscriber interface {
	// Deliver hands m to the subscriber. It runs on the publisher's
	// goroutine, so it must not block on the network: buffer, or refuse.
	// A full buffer may hold the publisher a bounded time first, as TCP
	// would (the NATS and AMQP bridges' writerStall, a few ms, once per
	// stall that ran out: docs/bridge.md); never for as long as a remote
	// takes.
	// An error is the subscriber's refusal (a full queue, a closed link);
	// the router reports it to the publisher. m is shared: do not modify it.
	Deliver(m *Message, d Delivery) error
}

// Interest is implemented by a Subscriber whose one subscription stands
// for consumers the router does not see one by one (the MQTT front-end's
// "#", behind which mochi fans out to its sessions; the queue engine's
// "#", behind which only the matching queues take a message). The router
// asks it only when it must know whether a message reaches a live
// consumer at all (a Fallback subscription matched), on the publisher's
// goroutine: it must not block, and should cost one index lookup.
//
// A subscription that skips the message's origin (SkipOrigin) is asked
// too: a front-end skips its own protocol because it fans such messages
// out itself, so they may still reach its consumers. One that skips and
// does not implement Interest (the bridge, which never echoes) counts as
// not reached.
type Interest interface {
	// Reaches reports whether m reaches at least one consumer behind the
	// subscriber. m is shared: do not modify it.
	Reaches(m *Message) bool
}

// Delivery says why a message reaches a subscriber.
type Delivery struct {
	Sub *Subscription // the subscription that matched (the highest QoS one)
	QoS byte          // min(published QoS, subscribed QoS)
	// Acks is non-nil when the publisher waits for an acknowledgement
	// (PublishAsync; Publish of a QoS 1/2 message). A subscriber whose part
	// of the promise takes longer than Deliver may (a queue's or a bridge
	// buffer's durable write, a group commit) calls Acks.Hold in Deliver,
	// returns nil, and calls Acks.Done once later with its answer: the
	// publisher is acknowledged when every holder is done. With Acks nil
	// the publisher waits for nothing: do the work or refuse in Deliver.
	Acks *Acks
	// Share is set by PublishShare for a subscriber that selects shared
	// group members itself (a FilterSource: the MQTT front-end): only a
	// member of that group ($share/g/f) may take m (shared.go).
	Share string
}

// Acks gathers the late answers to one publish (Delivery.Acks). Safe for
// concurrent use.
type Acks struct {
	pending atomic.Int32 // holds not done, plus one while the router delivers
	mu      sync.Mutex
	res     PublishResult
	errs    []error
	done    func(PublishResult) // PublishAsync's
	wake    chan struct{}       // Publish's: the last holder's signal (cap 1)
	r       *Router             // its delivered count forgets a held delivery refused
}

// acksPool serves Publish, which waits for its Acks to be done and can
// reuse them: a QoS 1 publish nobody holds allocates nothing.
var acksPool = sync.Pool{New: func() any { return &Acks{wake: make(chan struct{}, 1)} }}

// Hold says the subscriber answers later, with Done. Call it in Deliver,
// before returning nil; a Deliver that returns an error must not hold.
func (a *Acks) Hold() { a.pending.Add(1) }

// Done gives a held answer: nil, or the subscriber's refusal (reported to
// the publisher as if Deliver had returned it). Call it exactly once per
// Hold, from any goroutine; the last one acknowledges the publisher, on
// its goroutine, so it must not hold locks the publisher's answer takes.
func (a *Acks) Done(err error) {
	if err != nil {
		a.mu.Lock()
		a.res.Failed++
		a.errs = append(a.errs, err)
		a.mu.Unlock()
		a.r.delivered.Add(^uint64(0))
	}
	a.release()
}

func (a *Acks) release() {
	switch n := a.pending.Add(-1); {
	case n > 0:
		return
	case n < 0:
		panic("core: Acks.Done called more often than Hold")
	}
	if a.done == nil { // Publish waits
		a.wake <- struct{}{}
		return
	}
	a.mu.Lock()
	res := a.res
	if len(a.errs) > 0 {
		res.Err = errors.Join(a.errs...)
	}
	a.mu.Unlock()
	a.done(res)
}

// SubOptions are the per-subscription settings.
type SubOptions struct {
	QoS byte
	// SkipOrigin suppresses delivery of messages that entered this gateway
	// through this protocol: the MQTT front-end's own MQTT→MQTT fan-out is
	// done by mochi, and the bridge must never echo a message back to NATS.
	// A message that entered another gateway of a cluster (Origin.Node is
	// not the router's node) was fanned out by nobody here, so it is not
	// skipped (docs/cluster.md).
	SkipOrigin Protocol
	// LocalOnly suppresses delivery of messages that entered another
	// gateway (Origin.Node is not the router's node): that gateway sent
	// them to the cluster and to its own bridges already, so a bridge or
	// the cluster sending them again would deliver them twice
	// (docs/cluster.md, "Exactly once").
	LocalOnly bool
	// Group makes this a shared subscription: each message matching the
	// filter goes to one member of the group (round robin).
	Group string
	// NoLocal suppresses messages whose Origin.Client equals Client.
	NoLocal bool
	Client  string
	// Fallback makes the subscription receive a message only when the
	// message reaches no live consumer through any other subscription:
	// none that is not itself a Fallback one and, for a subscriber that
	// implements Interest, none that answers true (docs/queues.md,
	// "Alternate destinations"). The queue engine's alternate
	// destinations subscribe so.
	Fallback bool
}

// Subscription is one filter held by one subscriber.
type Subscription struct {
	Filter     string
	Subscriber Subscriber
	Options    SubOptions
	node       *snode
	group      *subGroup
}

// Retainer stores retained messages. retain.Store satisfies it; core does not
// import the retain package (dependencies point inward).
type Retainer interface {
	Retain(ctx context.Context, m *Message) error
}

// PublishResult is what a publish did, so that each front-end can answer its
// publisher truthfully (PUBACK reason codes, AMQP outcomes, bridge acks).
type PublishResult struct {
	Matched   int   // subscribers the message was handed to
	Failed    int   // subscribers that refused it
	Err       error // the refusals, joined; nil when Failed == 0
	Retained  bool  // the retained store took it (set or delete)
	RetainErr error // the retained store refused or failed
}

// RouterOptions configure a Router. The zero value is usable.
type RouterOptions struct {
	// Retainer, when set, stores every message published with Retain.
	Retainer Retainer
	// Node is this gateway's node.id, stamped on messages without one.
	Node string
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// TopicLimits bound every filter Subscribe takes, and are what the
	// front-ends check topic names against at their door (TopicLimits()).
	// The zero value means the defaults.
	TopicLimits TopicLimits
	// Topics, when set, counts every message published, by topic (the
	// admin API's GET /api/v1/topics).
	Topics *TopicTable
}

// Router fans messages out to subscribers of every front-end. It is safe for
// concurrent use; Publish takes only a read lock on the subscription index.
type Router struct {
	opts RouterOptions
	mu   sync.RWMutex
	root snode
	subs int
	// skips counts the subscriptions with SkipOrigin set, by protocol;
	// guarded by mu. view is the lock-free copy Wants reads.
	skips map[Protocol]int
	view  atomic.Pointer[wantsView]

	published atomic.Uint64
	delivered atomic.Uint64
	// watch is the interest watcher (interest.go), nil without a cluster.
	watch atomic.Pointer[func(string)]
	// shares is the cluster's view of shared groups (shared.go), nil
	// without a cluster.
	shares atomic.Pointer[sharesBox]
	// remote: retained messages received from other gateways
	// (remoteretained.go).
	remote remoteRetained
}

type snode struct {
	name   string
	parent *snode
	kids   children[snode]
	subs   []*Subscription // plain subscriptions whose filter ends here
	groups []*subGroup     // shared subscriptions whose filter ends here
}

type subGroup struct {
	name    string
	members []*Subscription
	next    atomic.Uint32
}

func sname(n *snode) string { return n.name }

// NewRouter returns an empty router.
func NewRouter(opts RouterOptions) *Router {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	opts.TopicLimits = opts.TopicLimits.Effective()
	return &Router{opts: opts}
}

// TopicLimits are the gateway-wide bounds on topic names and filters, with
// the defaults filled in. Front-ends check at their door, before a name or
// filter costs anything (mochi indexes a filter in time levels × length).
func (r *Router) TopicLimits() TopicLimits { return r.opts.TopicLimits }

// ErrInvalidFilter wraps a filter grammar error from Subscribe.
var ErrInvalidFilter = errors.New("invalid filter")

// Subscribe registers filter (MQTT grammar; "$share/g/f" is taken as group g)
// for s. The same subscriber may hold several filters; it still gets each
// message once. A filter over the topic limits is refused with an error that
// wraps ErrInvalidFilter and ErrTopicLevels or ErrTopicLength.
func (r *Router) Subscribe(filter string, s Subscriber, opts SubOptions) (*Subscription, error) {
	if err := r.opts.TopicLimits.CheckFilter(filter); err != nil {
		// Shortened: the filter may be 64 KiB.
		return nil, fmt.Errorf("%w %q: %w", ErrInvalidFilter, ShortTopic(filter), err)
	}
	if err := ValidateFilter(filter); err != nil {
		return nil, fmt.Errorf("%w %q: %w", ErrInvalidFilter, filter, err)
	}
	// Publish merges a subscriber's overlapping subscriptions with ==, which
	// panics on uncomparable dynamic types (a func adapter): refuse them here.
	if s == nil || !reflect.TypeOf(s).Comparable() {
		return nil, fmt.Errorf("core: subscriber %T must be non-nil and comparable (use a pointer)", s)
	}
	if g, f, ok := SplitShared(filter); ok {
		opts.Group, filter = g, f
	}
	sub := &Subscription{Filter: filter, Subscriber: s, Options: opts}
	if !opts.LocalOnly {
		// Before it takes effect: another gateway learns it first.
		if _, fs := s.(FilterSource); !fs {
			if opts.Group != "" {
				r.FilterAdded(ShareFilter(opts.Group, filter))
			} else {
				r.FilterAdded(filter)
			}
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	n := &r.root
	rest := filter
	for {
		level, rst, more := cutLevel(rest)
		c := n.kids.get(level, sname)
		if c == nil {
			c = &snode{name: level, parent: n}
			n.kids.add(level, c, sname)
		}
		n = c
		if !more {
			break
		}
		rest = rst
	}
	sub.node = n
	if opts.Group == "" {
		n.subs = append(n.subs, sub)
	} else {
		var g *subGroup
		for _, x := range n.groups {
			if x.name == opts.Group {
				g = x
				break
			}
		}
		if g == nil {
			g = &subGroup{name: opts.Group}
			n.groups = append(n.groups, g)
		}
		// Copy on write: Publish reads members under the read lock only.
		g.members = append(g.members[:len(g.members):len(g.members)], sub)
		sub.group = g
	}
	r.subs++
	r.countLocked(opts.SkipOrigin, 1)
	return sub, nil
}

// Unsubscribe removes sub. Removing a subscription twice is harmless.
func (r *Router) Unsubscribe(sub *Subscription) {
	if sub == nil {
		return
	}
	defer r.filterRemoved(sub.Options) // after the lock is released
	r.mu.Lock()
	defer r.mu.Unlock()
	n := sub.node
	if n == nil {
		return
	}
	sub.node = nil
	if g := sub.group; g != nil {
		g.members = removeSub(g.members, sub)
		if len(g.members) == 0 {
			for i, x := range n.groups {
				if x == g {
					n.groups = append(n.groups[:i:i], n.groups[i+1:]...)
					break
				}
			}
		}
	} else {
		n.subs = removeSub(n.subs, sub)
	}
	r.subs--
	r.countLocked(sub.Options.SkipOrigin, -1)
	for n != &r.root && len(n.subs) == 0 && len(n.groups) == 0 && n.kids.len() == 0 {
		p := n.parent
		p.kids.remove(n.name, sname)
		n = p
	}
}

// removeSub returns s without x, never modifying s's backing array, because
// Publish may be iterating it under the read lock.
func removeSub(s []*Subscription, x *Subscription) []*Subscription {
	for i, y := range s {
		if y == x {
			out := make([]*Subscription, 0, len(s)-1)
			out = append(out, s[:i]...)
			return append(out, s[i+1:]...)
		}
	}
	return s
}

// wantsView is an immutable summary of the subscriptions for Wants: how
// many there are, and how many of them skip each origin protocol.
type wantsView struct {
	subs  int
	skips []protocolCount
}

type protocolCount struct {
	p Protocol
	n int
}

// nobodyFor reports whether every subscription skips messages from origin,
// so that none can want one, whatever its topic.
func (v *wantsView) nobodyFor(origin Protocol) bool {
	if v == nil || v.subs == 0 {
		return true
	}
	if origin == "" {
		return false
	}
	for _, c := range v.skips {
		if c.p == origin {
			return c.n == v.subs
		}
	}
	return false
}

// countLocked adjusts the SkipOrigin count of p by delta (a subscription
// came or went) and publishes a new view. r.mu is held for writing.
func (r *Router) countLocked(p Protocol, delta int) {
	if p != "" {
		if r.skips == nil {
			r.skips = map[Protocol]int{}
		}
		if r.skips[p] += delta; r.skips[p] == 0 {
			delete(r.skips, p)
		}
	}
	v := &wantsView{subs: r.subs, skips: make([]protocolCount, 0, len(r.skips))}
	for p, n := range r.skips {
		v.skips = append(v.skips, protocolCount{p, n})
	}
	r.view.Store(v)
}

// Len is the number of subscriptions held.
func (r *Router) Len() int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.subs
}

// Counts returns how many messages were published and deliveries made.
func (r *Router) Counts() (published, delivered uint64) {
	return r.published.Load(), r.delivered.Load()
}

var matchPool = sync.Pool{New: func() any { s := make([]*Subscription, 0, 16); return &s }}

// Publish stores m if retained, then hands it to every matching subscriber
// exactly once. The caller must not modify m afterwards. A retained store
// failure does not stop live delivery: the result reports both. For a QoS
// 1/2 message, Publish returns once every subscriber that held the
// acknowledgement (Delivery.Acks) has answered: a caller that can answer
// its publisher later uses PublishAsync instead, and is not blocked.
func (r *Router) Publish(ctx context.Context, m *Message) PublishResult {
	if m.QoS == 0 {
		return r.publish(ctx, m, nil)
	}
	a := acksPool.Get().(*Acks)
	return r.waitAcks(a, r.publish(ctx, m, r.prepAcks(a)))
}

// prepAcks readies a pooled Acks for one publish.
func (r *Router) prepAcks(a *Acks) *Acks {
	a.r = r
	a.pending.Store(1)
	return a
}

// waitAcks waits for every holder of a (prepAcks) to be done, adds their
// answers to res and pools a.
func (r *Router) waitAcks(a *Acks, res PublishResult) PublishResult {
	if a.pending.Add(-1) != 0 {
		<-a.wake // the last holder is done
	}
	if a.res.Failed > 0 { // every holder is done: nobody else touches a
		res.Failed += a.res.Failed
		res.Err = errors.Join(append([]error{res.Err}, a.errs...)...)
	}
	a.res, a.r = PublishResult{}, nil
	clear(a.errs)
	a.errs = a.errs[:0]
	acksPool.Put(a)
	return res
}

// PublishAsync is Publish for a publisher that waits for an
// acknowledgement, whatever m's QoS: done gets the whole result once every
// subscriber that held it (Delivery.Acks) has answered. done is called
// exactly once: before PublishAsync returns when nobody held, otherwise on
// the goroutine of the last subscriber to answer. A front-end that answers
// its publishers in order (MQTT PUBACKs [MQTT-4.6.0-2]) orders them itself.
func (r *Router) PublishAsync(ctx context.Context, m *Message, done func(PublishResult)) {
	a := &Acks{done: done, r: r}
	a.pending.Store(1)
	res := r.publish(ctx, m, a)
	a.mu.Lock()
	// Refusals from Deliver join the held ones.
	a.res.Matched, a.res.Retained, a.res.RetainErr = res.Matched, res.Retained, res.RetainErr
	a.res.Failed += res.Failed
	if res.Err != nil {
		a.errs = append(a.errs, res.Err)
	}
	a.mu.Unlock()
	a.release()
}

func (r *Router) publish(ctx context.Context, m *Message, acks *Acks) PublishResult {
	return r.publishTo(ctx, m, acks, "")
}

// publishTo is publish; a target ($share/g/f, PublishShare) restricts it
// to that shared group.
func (r *Router) publishTo(ctx context.Context, m *Message, acks *Acks, target string) PublishResult {
	res := r.prepare(ctx, m, target)
	r.matching(m.Topic, true, func(matches []*Subscription) {
		r.fanOut(m, acks, target, matches, &res)
	})
	return res
}

// prepare is what a publish does before its fan-out: m's defaults, the
// counts, and the retained store.
func (r *Router) prepare(ctx context.Context, m *Message, target string) PublishResult {
	var res PublishResult
	if m.Created.IsZero() {
		m.Created = r.opts.Now()
	}
	if m.Origin.Node == "" {
		m.Origin.Node = r.opts.Node
	}
	r.published.Add(1)
	if target == "" {
		// A share copy (PublishShare) is a message already counted where
		// it was published, or here as the cluster's stream brought it.
		r.opts.Topics.Observe(m.Topic, m.Created.Unix())
	}
	// A message from another gateway of the cluster was stored by that
	// gateway in the store they share; storing it again here could put an
	// older copy over a newer one (docs/cluster.md, "Retained").
	if m.Retain && r.opts.Retainer != nil && m.Origin.Node == r.opts.Node && target == "" {
		if err := r.opts.Retainer.Retain(ctx, m); err != nil {
			res.RetainErr = err
		} else {
			res.Retained = true
		}
	} else if m.Retain && m.Origin.Node != r.opts.Node && target == "" {
		r.noteRemoteRetained(m) // before the fan-out (remoteretained.go)
	}
	return res
}

// fanOut hands m to the subscribers of matches (a matching walk's, with
// shared groups picked), adding to res what happened; refusals are kept
// in res.Err.
func (r *Router) fanOut(m *Message, acks *Acks, target string, matches []*Subscription, res *PublishResult) {
	var errs []error
	// Fallback subscriptions are rare: a publish that matches none pays
	// one pass over its matches for them.
	matches = fallbacks(matches, m, r.opts.Node)
	// Drop suppressed subscriptions before merging overlaps, so that a
	// subscriber whose highest-QoS match is suppressed still gets the
	// message through another of its matching subscriptions.
	if target != "" {
		// Chosen for this gateway by the cluster: whatever its
		// origin, the group takes it here (shared.go).
		matches = shareCandidates(matches)
	} else {
		matches = eligible(matches, m, r.opts.Node)
	}
	for _, sub := range dedupe(matches) {
		share := ""
		if sub.group != nil {
			if r.skipsGroupSub(m, sub, target) {
				continue // another gateway's member, or another group (shared.go)
			}
		} else if target != "" {
			if _, fs := sub.Subscriber.(FilterSource); !fs {
				continue
			}
			share = target
		}
		qos := m.QoS
		if sub.Options.QoS < qos {
			qos = sub.Options.QoS
		}
		res.Matched++
		if err := sub.Subscriber.Deliver(m, Delivery{Sub: sub, QoS: qos, Acks: acks, Share: share}); err != nil {
			res.Failed++
			errs = append(errs, err)
		}
	}
	r.delivered.Add(uint64(res.Matched - res.Failed))
	if len(errs) > 0 {
		res.Err = errors.Join(errs...)
	}
}

// ObserveTopic counts a message published on topic at unix (seconds) in
// RouterOptions.Topics, for a front-end that does not publish it through
// the router (the MQTT front-end's MQTT-only messages, which mochi fans
// out): every message is counted once, here or by Publish.
func (r *Router) ObserveTopic(topic string, unix int64) { r.opts.Topics.Observe(topic, unix) }

// Topics is RouterOptions.Topics (nil when not set).
func (r *Router) Topics() *TopicTable { return r.opts.Topics }

// Wants reports whether a message on topic from origin would reach any
// subscriber (ignoring NoLocal, which needs the publisher's id). A front-end
// that fans out its own protocol itself (the MQTT front-end, through mochi)
// calls it first, so that a message nobody else wants costs one lookup and no
// allocation. It allocates nothing, and takes no shared group's turn: every
// member of a matching group counts. When every subscription skips origin
// (an MQTT-only gateway: the MQTT front-end's own "#" skips MQTT), it
// answers without the lock or the topic walk.
func (r *Router) Wants(topic string, origin Protocol) bool {
	if r.view.Load().nobodyFor(origin) {
		return false
	}
	wanted := false
	r.matching(topic, false, func(matches []*Subscription) {
		for _, sub := range matches {
			if !sub.Options.skips(Origin{Protocol: origin, Node: r.opts.Node}, r.opts.Node) {
				wanted = true
				return
			}
		}
	})
	return wanted
}

// PublishWanted is Wants, then Publish of the message mk makes when the
// answer is yes, with one walk of the subscriptions instead of two: for a
// front-end that fans out its own protocol itself (the MQTT front-end's
// QoS 0 publishes), so that a message nobody else wants costs that walk
// and no allocation, and one somebody wants costs no second walk. ok
// reports whether it was wanted; mk is called only then, at most once,
// and must make a message on topic that the caller will not modify.
//
// The walk is Wants' (every member of a shared group, no turn taken).
// Without a shared group among the matches it is also what Publish's
// walk finds, and the message is fanned out to them. With one, or for a
// retained or QoS 1/2 message from mk (its retained write comes before
// the fan-out; a QoS 1/2 waits for the acknowledgements), the message is
// published as Publish does, after a second walk: the same answer and the
// same deliveries as Wants then Publish.
func (r *Router) PublishWanted(ctx context.Context, topic string, origin Protocol, mk func() *Message) (res PublishResult, ok bool) {
	if r.view.Load().nobodyFor(origin) {
		return res, false
	}
	var later *Message
	r.matching(topic, false, func(matches []*Subscription) {
		groups := false
		for _, sub := range matches {
			if !sub.Options.skips(Origin{Protocol: origin, Node: r.opts.Node}, r.opts.Node) {
				ok = true
			}
			groups = groups || sub.group != nil
		}
		if !ok {
			return
		}
		m := mk()
		if groups || m.Retain || m.QoS > 0 || m.Topic != topic {
			later = m
			return
		}
		res = r.prepare(ctx, m, "")
		r.fanOut(m, nil, "", matches, &res)
	})
	if later != nil {
		res = r.Publish(ctx, later)
	}
	return res, ok
}

// matching calls fn with the subscriptions matching topic, in a pooled slice
// fn must not keep. With pick, each matching shared group contributes the
// member whose turn it is (and the turn advances); without, all its members.
func (r *Router) matching(topic string, pick bool, fn func([]*Subscription)) {
	mp := matchPool.Get().(*[]*Subscription)
	r.mu.RLock()
	matches := r.collect(&r.root, topic, true, pick, (*mp)[:0])
	r.mu.RUnlock()
	fn(matches)
	clear(matches) // fn may have shrunk its view; drop every pointer before pooling
	*mp = matches[:0]
	matchPool.Put(mp)
}

// skips reports whether a subscription with these options refuses every
// message from origin, on the gateway whose node.id is node.
func (o *SubOptions) skips(origin Origin, node string) bool {
	if origin.Node != node {
		return o.LocalOnly
	}
	return o.SkipOrigin != "" && o.SkipOrigin == origin.Protocol
}

// collect appends the subscriptions matching topic below n.
func (r *Router) collect(n *snode, topic string, root, pick bool, out []*Subscription) []*Subscription {
	level, rest, more := cutLevel(topic)
	dollar := root && len(level) > 0 && level[0] == '$' // [MQTT-4.7.2-1]
	if !dollar {
		if h := n.kids.get("#", sname); h != nil {
			out = appendSubs(h, pick, out)
		}
	}
	if c := n.kids.get(level, sname); c != nil {
		out = r.descend(c, rest, more, pick, out)
	}
	if !dollar {
		if p := n.kids.get("+", sname); p != nil {
			out = r.descend(p, rest, more, pick, out)
		}
	}
	return out
}

func (r *Router) descend(c *snode, rest string, more, pick bool, out []*Subscription) []*Subscription {
	if more {
		return r.collect(c, rest, false, pick, out)
	}
	out = appendSubs(c, pick, out)
	// "a/#" also matches "a" [MQTT-4.7.1-2].
	if h := c.kids.get("#", sname); h != nil {
		out = appendSubs(h, pick, out)
	}
	return out
}

func appendSubs(n *snode, pick bool, out []*Subscription) []*Subscription {
	out = append(out, n.subs...)
	for _, g := range n.groups {
		if !pick {
			out = append(out, g.members...)
		} else if k := len(g.members); k > 0 {
			out = append(out, g.members[int(g.next.Add(1)-1)%k])
		}
	}
	return out
}

// fallbacks removes, in place, the Fallback subscriptions from s when m
// reaches a live consumer through another one of s (SubOptions.Fallback).
func fallbacks(s []*Subscription, m *Message, node string) []*Subscription {
	if !slices.ContainsFunc(s, func(x *Subscription) bool { return x.Options.Fallback }) {
		return s
	}
	if !reachesLive(s, m, node) {
		return s
	}
	return slices.DeleteFunc(s, func(x *Subscription) bool { return x.Options.Fallback })
}

// reachesLive reports whether m reaches a live consumer through the
// subscriptions of s that are not Fallback ones (Interest).
func reachesLive(s []*Subscription, m *Message, node string) bool {
	for _, x := range s {
		o := &x.Options
		if o.Fallback || (o.NoLocal && o.Client != "" && o.Client == m.Origin.Client) {
			continue
		}
		in, asks := x.Subscriber.(Interest)
		switch {
		case asks && in.Reaches(m):
			return true
		case !asks && !o.skips(m.Origin, node):
			return true
		}
	}
	return false
}

// eligible removes, in place, the subscriptions that must not receive m:
// those skipping its origin and NoLocal ones of its publisher.
func eligible(s []*Subscription, m *Message, node string) []*Subscription {
	out := s[:0]
	for _, x := range s {
		o := &x.Options
		if o.skips(m.Origin, node) {
			continue
		}
		if o.NoLocal && o.Client != "" && o.Client == m.Origin.Client {
			continue
		}
		out = append(out, x)
	}
	return out
}

// seenPool recycles dedupe's maps so that a publish with many matches does
// not allocate one per call.
var seenPool = sync.Pool{New: func() any { return make(map[Subscriber]int, 64) }}

const maxPooledSeen = 1024

// dedupe keeps one subscription per subscriber: the one with the highest QoS
// (MQTT 5 §3.3.4: overlapping subscriptions deliver once, at the max QoS).
// Shared-group picks are independent of the subscriber's own plain filters,
// as MQTT specifies, so only plain subscriptions are merged.
func dedupe(s []*Subscription) []*Subscription {
	if len(s) < 2 {
		return s
	}
	if len(s) <= 16 {
		out := s[:0]
	next:
		for _, x := range s {
			for i, y := range out {
				if y.Subscriber == x.Subscriber && y.group == nil && x.group == nil {
					if x.Options.QoS > y.Options.QoS {
						out[i] = x
					}
					continue next
				}
			}
			out = append(out, x)
		}
		return out
	}
	seen := seenPool.Get().(map[Subscriber]int)
	defer func() {
		// A map grown by a huge fan-out is left to the GC: clear costs
		// its capacity, not its length, on every later reuse.
		if len(seen) <= maxPooledSeen {
			clear(seen)
			seenPool.Put(seen)
		}
	}()
	out := s[:0]
	for _, x := range s {
		if x.group == nil {
			if i, ok := seen[x.Subscriber]; ok {
				if x.Options.QoS > out[i].Options.QoS {
					out[i] = x
				}
				continue
			}
			seen[x.Subscriber] = len(out)
		}
		out = append(out, x)
	}
	return out
}
