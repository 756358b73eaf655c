package amqp

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tolsey/tolsey/amqp/internal/encoding"
	"github.com/tolsey/tolsey/amqp/internal/frames"
	"github.com/tolsey/tolsey/core"
	"github.com/tolsey/tolsey/core/auth"
	"github.com/tolsey/tolsey/core/queue"
	"github.com/tolsey/tolsey/core/queue/match"
	"github.com/tolsey/tolsey/core/selector"
	"github.com/tolsey/tolsey/retain"
)

// outLink is a link the client receives on and the gateway sends on: one
// router subscription (it is the core.Subscriber) with a bounded queue.
// Deliver runs on publishers' goroutines: when the queue is full the
// message is dropped and counted, or, on a link that blocks on overflow,
// the publisher waits a bounded time for room first. The writer goroutine sends
// from the queue as the link credit and the session window allow.
type outLink struct {
	linkBase
	c      *conn
	filter string

	// Fixed at attach.
	except    []match.Filter          // the source's except filter (exceptions.go); a group member's are its group's
	sel       *selector.Selector      // the source's JMS selector (selectors.go), or nil; a group member's is its group's
	sndMode   frames.SenderSettleMode // settled: all presettled; unsettled: none; mixed: QoS 0 presettled
	second    bool                    // the peer's rcv-settle-mode is second
	aclFilter string                  // what the ACL decided the attach on; "" when exempt (a temporary address)
	aclWhole  bool                    // the link needs aclFilter allowed whole (a queue, a fallback consumer)
	block     bool                    // a full buffer holds the publisher (Options.BlockOnOverflow)

	// Set at attach, and by a reload's recheck (revoke.go); read by
	// publishers (Deliver) and the writer.
	aclPartial atomic.Bool // the ACL allows the filter only partly: check each message (authz.go)
	revoked    atomic.Bool // a reload denied the filter: deliver nothing, the writer detaches the link

	// Owned by the reader goroutine.
	sub *core.Subscription // a plain link's router subscription; nil for a group member

	// group is the durable or shared subscription the link consumes from,
	// or nil. Set before the link is handed to the writer.
	group *subscription

	// qc is the queue consumer of a link on a queue (queues.go), or nil:
	// such a link has no live queue of its own, the writer pulls from qc.
	// Set before the link is handed to the writer.
	qc     *queue.Consumer
	browse bool        // distribution-mode copy: deliveries settled, nothing taken
	qgone  atomic.Bool // the queue was deleted: the writer detaches the link
	// subQueue names the queue of the durable subscription qc consumes
	// (durable.go), or is "". Set at attach, cleared by the reader.
	subQueue string

	// alts are a plain topic link's consumers of the alternate queues its
	// filter overlaps (queues.go): the writer sends what they hold
	// beside the live messages. Set before the link is handed to the
	// writer.
	alts []*queue.Consumer

	// Shared by Deliver, the retained feeder and the writer.
	mu           sync.Mutex
	live         msgQueue // live messages; at most LinkBuffer
	retained     msgQueue // stored copies for this late subscriber, sent first
	retainedDone bool     // every stored copy is in retained: live may follow
	ready        bool     // on conn.ready
	closed       bool
	cancelFeed   context.CancelFunc
	space        chan struct{} // cap 1: the writer took a retained copy
	room         chan struct{} // cap 1: the writer took a live message while a publisher waited
	waiting      int           // publishers waiting for room (block)
	life         time.Time     // the link's last sign of life: the writer took a message or the consumer settled one (block)
	stalled      bool          // a wait for room timed out: drop without waiting until half drained
	done         chan struct{} // closed with the link

	// Owned by the writer goroutine.
	attached, detached bool
	credit             uint32
	deliveryCount      uint32
	drainPending       bool
	unsettled          int    // our unsettled deliveries on this link
	altTurn            bool   // the next delivery tries the alternates first
	partial            []byte // the rest of a delivery cut short by the session window
	partialSettled     bool
	partialMsg         queued // the message partial belongs to
}

var (
	_ endpoint        = (*outLink)(nil)
	_ core.Subscriber = (*outLink)(nil)
)

// queued is one message waiting for credit.
type queued struct {
	m        *core.Message
	retained bool            // a stored copy for a late subscriber: x-opt-retain = true
	enc      *sharedEncoding // m's encoding shared with the publish's other links, or nil (fanout.go)
}

// msgQueue is a FIFO of messages.
type msgQueue struct {
	items []queued
	head  int
}

func (q *msgQueue) len() int { return len(q.items) - q.head }

func (q *msgQueue) push(x queued) {
	if q.head > 0 && len(q.items) == cap(q.items) {
		n := copy(q.items, q.items[q.head:])
		clear(q.items[n:])
		q.items, q.head = q.items[:n], 0
	}
	q.items = append(q.items, x)
}

func (q *msgQueue) pop() (queued, bool) {
	if q.head == len(q.items) {
		return queued{}, false
	}
	x := q.items[q.head]
	q.items[q.head] = queued{}
	q.head++
	if q.head == len(q.items) {
		q.items, q.head = q.items[:0], 0
	}
	return x, true
}

func (q *msgQueue) reset() { *q = msgQueue{} }

// take empties the queue and returns what it held, in order.
func (q *msgQueue) take() []queued {
	out := append([]queued(nil), q.items[q.head:]...)
	q.reset()
	return out
}

// pushFront puts xs, in order, ahead of what the queue holds.
func (q *msgQueue) pushFront(xs []queued) {
	q.items = append(append(make([]queued, 0, len(xs)+q.len()), xs...), q.items[q.head:]...)
	q.head = 0
}

// dropBack removes the newest message.
func (q *msgQueue) dropBack() {
	if q.len() > 0 {
		q.items[len(q.items)-1] = queued{}
		q.items = q.items[:len(q.items)-1]
	}
}

// JMS no-local filter (Qpid JMS): the subscriber does not want messages
// its own connection published. With the gateway's except filter
// (exceptions.go) and JMS selectors (selectors.go) it is one of the
// filters applied; others are left out of our attach, so the client knows
// (AMQP 1.0 part 3 §3.5.3).
const (
	noLocalFilterName encoding.Symbol = "apache.org:no-local-filter:list"
	noLocalFilterCode uint64          = 0x0000468C00000003
)

func (s *session) attachOut(a *frames.Attach) error {
	c := s.c
	l := &outLink{
		linkBase: linkBase{sess: s, name: a.Name, handle: a.Handle},
		c:        c,
		sndMode:  frames.SenderSettleModeMixed,
		second:   a.RcvSettleMode != nil && *a.RcvSettleMode == frames.ReceiverSettleModeSecond,
		space:    make(chan struct{}, 1),
		done:     make(chan struct{}),
		block:    linkBlocks(a.Properties, c.s.opts.BlockOnOverflow),
	}
	if l.block {
		l.room = make(chan struct{}, 1)
	}
	if a.SndSettleMode != nil {
		l.sndMode = *a.SndSettleMode
	}
	reply := &frames.Attach{
		Name:                 a.Name,
		Handle:               a.Handle,
		Role:                 frames.RoleSender,
		SndSettleMode:        a.SndSettleMode, // echoed: go-amqp refuses a link whose modes are not
		RcvSettleMode:        a.RcvSettleMode,
		Target:               a.Target,
		InitialDeliveryCount: ptr(uint32(0)),
	}
	src := a.Source
	if src == nil {
		// Qpid JMS looks a durable subscription up (to unsubscribe it)
		// with a null source and the subscription's name.
		l.retainedDone = true
		sub, err := c.s.lookupSubscription(c.containerID, l)
		if err != nil {
			if found, err := s.lookupDurable(l, reply); found || err != nil {
				return err
			}
			return s.refuse(l, reply, asLinkError(err))
		}
		sc := sub.source
		reply.Source = &sc
		s.keep(l)
		return c.send(outItem{sess: s, body: reply, do: func(w *writer) { w.attachOut(l) }})
	}
	sc := *src
	filters, err := c.s.parseFilters(src.Filter)
	if err != nil {
		return s.refuse(l, reply, linkErr(frames.ErrCondInvalidField, "source filter: %v", err))
	}
	l.sel = filters.sel
	switch {
	case src.Dynamic && c.s.wantsTempQueue(src.Capabilities):
		name, le := c.newTempQueue()
		if le != nil {
			return s.refuse(l, reply, le)
		}
		q, le := c.s.queueFor(name)
		if le != nil {
			return s.refuse(l, reply, le)
		}
		sc.Address = prefixQueue + name
		l.tmpQueue = name
		return s.attachQueueOut(l, reply, &sc, &filters, q, queue.ConsumerOptions{})
	case src.Dynamic:
		sc.Address = c.newTemp(src.Capabilities)
		l.filter = sc.Address
	case hasCap(src.Capabilities, capFallback):
		q, name, le := c.s.fallbackFor(src.Address, src.Capabilities)
		if le != nil {
			return s.refuse(l, reply, le)
		}
		// The queue's messages skip Deliver: the filter must be allowed
		// whole.
		l.aclFilter, l.aclWhole = name, true
		if c.subscribeDecision(name) != auth.Allow {
			return s.refuse(l, reply, c.unauthorized(auth.Subscribe, "not authorised to subscribe to all of %q", core.ShortTopic(name)))
		}
		return s.attachQueueOut(l, reply, &sc, &filters, q, queue.ConsumerOptions{Filter: name, Fallback: true})
	default:
		name, kind := c.s.resolve(src.Address, src.Capabilities)
		if kind == nodeQueue {
			q, le := c.s.queueFor(name)
			if le != nil {
				return s.refuse(l, reply, le)
			}
			if !c.mayConsume(name) {
				return s.refuse(l, reply, c.unauthorized(auth.Subscribe, "not authorised to consume from queue %q", core.ShortTopic(name)))
			}
			if !c.ownsTemp(tmpQueuePrefix, name) {
				l.aclFilter, l.aclWhole = queueTopic+name, true
			}
			return s.attachQueueOut(l, reply, &sc, &filters, q, queue.ConsumerOptions{})
		}
		if err := c.s.checkFilter(name); err != nil {
			return s.refuse(l, reply, linkErr(frames.ErrCondInvalidField, "source %q is not a topic filter: %v", core.ShortTopic(src.Address), err))
		}
		if !c.ownsTemp(tmpPrefix, name) {
			l.aclFilter = name
			switch c.subscribeDecision(name) {
			case auth.Deny:
				return s.refuse(l, reply, c.unauthorized(auth.Subscribe, "not authorised to subscribe to %q", core.ShortTopic(src.Address)))
			case auth.AllowPartly:
				l.aclPartial.Store(true)
			}
		}
		l.filter = name
	}
	noLocal := filters.noLocal
	sc.Filter, l.except = filters.kept, filters.except
	// Stored retained copies go to a late subscriber first; not for a
	// dynamic node (nothing is retained there) nor a shared subscription
	// (docs/architecture.md, decision 1).
	l.retainedDone = src.Dynamic || !retain.Replayable(l.filter)
	key, durable, shared, ok := subscriptionKey(c.containerID, a.Name, src)
	if ok && durable && !src.Dynamic && c.s.durableInQueue(l.filter) {
		return s.attachDurable(l, reply, &sc, &filters, key, shared)
	}
	if ok && !src.Dynamic {
		_, created, err := c.s.openSubscription(l, key, noLocal, durable, shared, c.containerID, sc)
		if err != nil {
			return s.refuse(l, reply, asLinkError(err))
		}
		// A resumed subscription does not replay retained messages (as an
		// MQTT session that keeps its subscription).
		l.mu.Lock()
		l.retainedDone = l.retainedDone || shared || !created
		l.mu.Unlock()
	} else {
		sub, err := c.s.opts.Router.Subscribe(l.filter, l, core.SubOptions{QoS: 2, NoLocal: noLocal, Client: c.containerID})
		if err != nil {
			return s.refuse(l, reply, linkErr(frames.ErrCondInvalidField, "%v", err))
		}
		l.sub = sub
		// After the subscription: a message parked from now on was
		// published before it, and nothing is parked once it is in place.
		// Not for a partial link: parked messages skip Deliver's check,
		// and wait for a consumer allowed to read them all.
		if !l.aclPartial.Load() {
			l.consumeAlternates()
		}
	}
	since := time.Now()
	reply.Source = &sc
	s.keep(l)
	if err := c.send(outItem{sess: s, body: reply, do: func(w *writer) { w.attachOut(l) }}); err != nil {
		return err
	}
	if !l.retainedDone {
		ctx, cancel := context.WithCancel(context.Background())
		l.mu.Lock()
		l.cancelFeed = cancel
		l.mu.Unlock()
		if !c.s.spawn(func() { l.feedRetained(ctx, since) }) {
			cancel()
			l.finishRetained()
		}
	}
	return nil
}

// Deliver implements core.Subscriber. It does not block on the network:
// it queues, or drops when the link's buffer is full; a link that blocks
// on overflow (Options.BlockOnOverflow) waits for room first, bounded by
// OverflowWait and at most once until the link drains (offer).
func (l *outLink) Deliver(m *core.Message, _ core.Delivery) error {
	if match.AnyMatches(l.except, m.Topic) || !l.sel.MatchMessage(m) || !l.mayRead(m.Topic) {
		return nil
	}
	if ok, closed := l.offer(queued{m: m, enc: l.c.s.fan.share(m)}, true); !ok && !closed {
		l.c.s.opts.Metrics.Drop("amqp", "slow_consumer")
	}
	return nil
}

// offer queues q unless the link is closed or its queue is full. With
// mayWait, a link that blocks on overflow first waits (on the publisher's
// goroutine) for the writer to make room, as long as the link shows life
// at least every OverflowWait: the writer takes a message, or the consumer
// settles one it was sent (alive: a consumer working through its prefetch
// grants no credit meanwhile, and Qpid JMS, with a prefetch of 1000, can
// go longer than OverflowWait between grants). A wait in vain stalls the
// link: it then drops without waiting until the writer has drained half
// of it. A shared or durable subscription offers to its
// members without waiting: it tries the next one instead.
func (l *outLink) offer(q queued, mayWait bool) (ok, closed bool) {
	var timer *time.Timer
	l.mu.Lock()
	for {
		if l.closed {
			l.mu.Unlock()
			return false, true
		}
		if l.live.len() < l.c.s.opts.LinkBuffer {
			break
		}
		if !mayWait || !l.block || l.stalled {
			l.mu.Unlock()
			return false, false
		}
		if timer == nil {
			timer = time.NewTimer(l.c.s.opts.OverflowWait)
			defer timer.Stop()
		}
		l.waiting++
		l.mu.Unlock()
		timedOut := false
		select {
		case <-l.room:
			timer.Reset(l.c.s.opts.OverflowWait) // a sign of life: the wait starts again
		case <-l.done:
		case <-timer.C:
			timedOut = true
		}
		l.mu.Lock()
		l.waiting--
		if timedOut {
			// One token wakes one waiter: with several publishers waiting,
			// the others learn of a sign of life from l.life, and wait on
			// for what is left of OverflowWait since it.
			if d := time.Since(l.life); d < l.c.s.opts.OverflowWait {
				timer.Reset(l.c.s.opts.OverflowWait - d)
				continue
			}
			l.stalled = true
			l.mu.Unlock()
			return false, false
		}
	}
	l.live.push(q)
	wake := !l.ready
	l.ready = true
	l.mu.Unlock()
	if wake {
		l.c.markReady(l)
	}
	return true, false
}

// alive wakes a publisher waiting for room on l (offer), whose wait
// starts again: l's consumer settled a delivery, so it is slow, not
// stuck. Called by the writer.
func (l *outLink) alive() {
	l.mu.Lock()
	l.life = time.Now()
	if l.waiting > 0 {
		select {
		case l.room <- struct{}{}:
		default:
		}
	}
	l.mu.Unlock()
}

// linkOverflowProp is the attach property by which a client chooses, for
// one receiving link, what a full buffer does: "drop" or "block"
// (Options.BlockOnOverflow). Anything else leaves the server's choice.
const linkOverflowProp encoding.Symbol = "tolsey:link-overflow"

func linkBlocks(props encoding.Fields, def bool) bool {
	v, _ := props.Get(linkOverflowProp)
	var s string
	switch v := v.(type) {
	case string:
		s = v
	case encoding.Symbol:
		s = string(v)
	}
	switch s {
	case "block":
		return true
	case "drop":
		return false
	}
	return def
}

// feedRetained queues the stored copies due to this late subscriber
// (retain.Replay, the rule the MQTT front-end applies too) ahead of live
// messages; the writer marks them x-opt-retain. It waits while LinkBuffer
// copies are queued, so a million retained messages never sit in memory
// at once.
func (l *outLink) feedRetained(ctx context.Context, since time.Time) {
	defer l.finishRetained()
	opts := &l.c.s.opts
	rule := retain.Replay{Store: opts.Store, Node: opts.Node, Metrics: opts.Metrics, Log: l.c.log, Live: opts.Router}
	rule.Run(ctx, l.filter, since, l.pushRetained)
}

func (l *outLink) pushRetained(m *core.Message) bool {
	if match.AnyMatches(l.except, m.Topic) || !l.sel.MatchMessage(m) || !l.mayRead(m.Topic) {
		return true
	}
	for {
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			return false
		}
		if l.retained.len() < l.c.s.opts.LinkBuffer {
			l.retained.push(queued{m: m, retained: true})
			wake := !l.ready
			l.ready = true
			l.mu.Unlock()
			if wake {
				l.c.markReady(l)
			}
			return true
		}
		l.mu.Unlock()
		select {
		case <-l.space:
		case <-l.done:
			return false
		}
	}
}

func (l *outLink) finishRetained() {
	l.mu.Lock()
	l.retainedDone = true
	wake := !l.ready && !l.closed
	l.ready = l.ready || wake
	l.mu.Unlock()
	if wake {
		l.c.markReady(l)
	}
}

// pop takes the next message to send: stored copies first, then (once
// every stored copy is queued) live ones. Called by the writer.
func (l *outLink) pop() (queued, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if q, ok := l.retained.pop(); ok {
		select {
		case l.space <- struct{}{}:
		default:
		}
		return q, true
	}
	if !l.retainedDone {
		return queued{}, false
	}
	q, ok := l.live.pop()
	if l.block {
		if l.waiting > 0 {
			l.life = time.Now()
			select {
			case l.room <- struct{}{}:
			default:
			}
		}
		if l.stalled && l.live.len() <= l.c.s.opts.LinkBuffer/2 {
			l.stalled = false
		}
	}
	return q, ok
}

// queuedLen is the number of messages waiting (flow "available").
func (l *outLink) queuedLen() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.retained.len() + l.live.len()
}

// teardown takes the link out of the router (or out of its subscription,
// which takes back the messages not sent yet) and empties its queue.
// closed is the detach's closed flag. Called by the reader.
func (l *outLink) teardown(closed bool) {
	l.c.unwatchACL(l)
	if l.sub != nil {
		l.c.s.opts.Router.Unsubscribe(l.sub)
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	l.closed = true
	l.retained.reset()
	unsent := l.live.take()
	cancel := l.cancelFeed
	l.mu.Unlock()
	close(l.done)
	if cancel != nil {
		cancel()
	}
	if l.group != nil {
		l.group.unbind(l, unsent, closed)
	}
}

// presettle says whether a delivery of m goes out settled.
func (l *outLink) presettle(m *core.Message) bool {
	switch l.sndMode {
	case frames.SenderSettleModeSettled:
		return true
	case frames.SenderSettleModeUnsettled:
		return false
	}
	return m.QoS == 0 // mixed: at most once for QoS 0, acknowledged otherwise
}
