package queue

import (
	"container/heap"
	"context"
	"fmt"
	"slices"

	"github.com/tolsey/tolsey/core"
	"github.com/tolsey/tolsey/core/queue/match"
)

// ConsumerOptions configure a Consumer.
type ConsumerOptions struct {
	// Browse: the consumer sees the messages without taking them (AMQP
	// distribution-mode copy, a JMS QueueBrowser): Next returns each stored
	// message once, in order, acknowledged or not by others.
	Browse bool
	// BrowseAfter: a browser starts after the message of this ID (an ID a
	// Delivery gave, as when an admin list pages); 0 from the oldest.
	BrowseAfter uint64
	// Notify is called, without locks held and on any goroutine, when
	// messages may be ready for this consumer: it should make the
	// front-end call Next when it has credit. It must not block.
	Notify func()
	// Deleted is called when the queue is deleted under the consumer.
	Deleted func()
	// Name identifies the consumer beyond its attachment: AMQP identifies
	// a link by its name and its container (AMQP 1.0 part 2 §2.6.1), which
	// a client that reconnects gives again. A message the consumer gives
	// back as undeliverable-here is then kept from every consumer of that
	// name, also after this one closed and after a restart (the mark is
	// stored with the message where the Log is a StateLog). "": the mark
	// holds for this consumer while it is attached.
	Name string
	// Filter, when set, is an MQTT topic filter: the consumer takes only
	// the messages whose topic matches it, and leaves the others for the
	// queue's other consumers (a topic subscriber draining an alternate
	// queue; docs/queues.md, "Alternate destinations").
	Filter string
	// Except, beside Filter, are exceptions (core/queue/match, parsed
	// without their '!'): the consumer does not take a message whose topic
	// one of them matches, as the topic subscriber it drains for does not
	// receive it live (an AMQP link's tolsey:except-filter).
	Except []match.Filter
	// Fallback: the consumer takes a message only while no other consumer
	// of the queue that is neither a fallback nor a browser would take it
	// (an AMQP qd.fallback link).
	Fallback bool
	// Select, when set, picks the messages the consumer takes (a JMS
	// selector, core/selector); the others stay for the queue's other
	// consumers, and a browser does not see them. It is called under the
	// queue's lock, for every ready message Next passes over, so it must
	// be cheap and must not call the queue. Cost: a consumer whose
	// selector matches none of the ready messages makes each Next scan the
	// window (Engine Window messages at most) and put them back; and
	// messages no consumer selects stay in the window, so a window full
	// of them holds back the ones behind it until a consumer that wants
	// them attaches (docs/queues.md, "Selectors").
	Select func(*core.Message) bool
}

// selective reports whether the consumer takes only some of the queue's
// messages (Filter, Fallback): such a consumer is outside an exclusive
// queue's order of active and standby consumers, so that one that does
// not want a message never holds it back from the others.
func (o *ConsumerOptions) selective() bool {
	return o.Filter != "" || len(o.Except) > 0 || o.Fallback || o.Select != nil
}

// wants reports whether a consumer with these options would take m,
// Fallback aside.
func (o *ConsumerOptions) wants(m *core.Message) bool {
	return (o.Filter == "" || core.Match(o.Filter, m.Topic)) && !match.AnyMatches(o.Except, m.Topic) &&
		(o.Select == nil || o.Select(m))
}

// takes reports whether c may take e, alternates-wise: its filter matches,
// and, for a fallback consumer, no ordinary consumer would take e. q.mu
// is held.
func (c *Consumer) takesLocked(e *entry) bool {
	if !c.opts.wants(e.rec.Msg) {
		return false
	}
	if !c.opts.Fallback {
		return true
	}
	for _, o := range c.q.cons {
		if o.opts.Browse || o.opts.Fallback {
			continue
		}
		if o.opts.wants(e.rec.Msg) {
			return false
		}
	}
	return true
}

// Consumer takes messages from a queue: pulled with Next as the front-end
// has credit, then settled with Ack, Release, Modify or Reject. Messages
// not settled when it closes are delivered again. Safe for concurrent use;
// a front-end usually calls it from one goroutine.
type Consumer struct {
	q    *Queue
	opts ConsumerOptions

	// Guarded by q.mu.
	inflight  map[uint64]*entry
	closed    bool
	browsed   uint64   // Browse: the last ID seen
	browseBuf []Record // Browse: read from the log, not returned yet
}

// Delivery is a message handed to a consumer.
type Delivery struct {
	ID  uint64 // the handle to settle it with
	Msg *core.Message
	// DeliveryCount is how many earlier deliveries of it failed (AMQP
	// delivery-count); Redelivered when it was delivered before at all.
	DeliveryCount uint32
	Redelivered   bool
}

// Consume attaches a consumer. On an exclusive queue the first consumer
// attached receives and the others wait as standby, in attach order.
func (q *Queue) Consume(opts ConsumerOptions) (*Consumer, error) {
	if opts.Notify == nil {
		opts.Notify = func() {}
	}
	c := &Consumer{q: q, opts: opts, inflight: map[uint64]*entry{}, browsed: opts.BrowseAfter}
	q.mu.Lock()
	if q.deleted {
		q.mu.Unlock()
		return nil, fmt.Errorf("%w: %q", ErrNotFound, q.name)
	}
	q.cons = append(q.cons, c)
	wake := q.wakeLocked()
	q.mu.Unlock()
	notify(wake)
	q.fill()
	return c, nil
}

// Queue is the queue the consumer takes from.
func (c *Consumer) Queue() *Queue { return c.q }

func (c *Consumer) notify() { c.opts.Notify() }

// Next takes the next message for this consumer, if one is ready and the
// consumer may receive (the active one of an exclusive queue). Expired
// messages are removed on the way.
func (c *Consumer) Next() (Delivery, bool) {
	var one [1]Delivery
	if ds := c.NextN(one[:0], 1); len(ds) == 1 {
		return ds[0], true
	}
	return Delivery{}, false
}

// NextN is Next for a front-end that may send several: it appends up to
// max deliveries to ds, taken under one lock, in the order Next would
// give them. What the front-end then cannot send goes back with Unget.
func (c *Consumer) NextN(ds []Delivery, max int) []Delivery {
	if max <= 0 {
		return ds
	}
	if c.opts.Browse {
		if d, ok := c.browse(); ok {
			ds = append(ds, d)
		}
		return ds
	}
	q := c.q
	now := q.e.opts.Now()
	q.mu.Lock()
	if c.closed || (q.config.Access == Exclusive && !c.opts.selective() && q.activeLocked() != c) {
		q.mu.Unlock()
		return ds
	}
	var skipped []*entry
	var expired []uint64
	taken := 0
	for taken < max && q.ready.Len() > 0 {
		e := heap.Pop(&q.ready).(*entry)
		if !e.expires.IsZero() && !now.Before(e.expires) {
			q.removeLocked(e)
			q.counters.Expired++
			expired = append(expired, e.rec.ID)
			continue
		}
		if e.skips(c) || !c.takesLocked(e) {
			skipped = append(skipped, e)
			continue
		}
		e.owner = c
		c.inflight[e.rec.ID] = e
		q.counters.Out++
		redelivered := e.delivered
		e.delivered = true
		if redelivered {
			q.counters.Redelivered++
		}
		ds = append(ds, Delivery{ID: e.rec.ID, Msg: e.rec.Msg, DeliveryCount: e.count, Redelivered: redelivered})
		taken++
	}
	for _, e := range skipped {
		heap.Push(&q.ready, e)
	}
	refill := q.more && len(q.entries) < q.e.opts.Window/2
	q.mu.Unlock()
	if len(expired) > 0 {
		q.log.Remove(expired...)
	}
	if refill {
		q.fill()
	}
	return ds
}

// Unget gives back deliveries NextN took that the front-end did not
// send (its peer's window closed first): they are ready again as they
// were, neither counted as delivered nor marked redelivered, ahead of
// the newer ones of their priority.
func (c *Consumer) Unget(ds []Delivery) {
	if len(ds) == 0 || c.opts.Browse {
		return // a browser took nothing
	}
	q := c.q
	q.mu.Lock()
	for _, d := range ds {
		e := c.settleLocked(d.ID)
		if e == nil || q.deleted {
			continue
		}
		e.delivered = d.Redelivered
		q.counters.Out--
		if d.Redelivered {
			q.counters.Redelivered--
		}
		heap.Push(&q.ready, e)
	}
	wake := q.wakeLocked()
	q.mu.Unlock()
	notify(wake)
}

// browse returns the next stored message after the last one seen, from
// the log itself (Log.Browse, which hands nothing out), so that a browser
// sees the whole queue, not the window, and takes nothing from consumers.
func (c *Consumer) browse() (Delivery, bool) {
	q := c.q
	now := q.e.opts.Now()
	for {
		q.mu.Lock()
		if c.closed {
			q.mu.Unlock()
			return Delivery{}, false
		}
		for len(c.browseBuf) > 0 {
			r := c.browseBuf[0]
			c.browseBuf = c.browseBuf[1:]
			c.browsed = r.ID
			if !r.Msg.Expired(now) && (c.opts.Select == nil || c.opts.Select(r.Msg)) {
				q.mu.Unlock()
				return Delivery{ID: r.ID, Msg: r.Msg}, true
			}
		}
		after := c.browsed
		q.mu.Unlock()
		recs, err := q.log.Browse(context.Background(), after, 16)
		if err != nil || len(recs) == 0 {
			return Delivery{}, false
		}
		q.mu.Lock()
		c.browseBuf = recs
		q.mu.Unlock()
	}
}

// settle takes delivery id out of flight, or nil when it is not this
// consumer's (settled already, or its queue was deleted).
func (c *Consumer) settleLocked(id uint64) *entry {
	e := c.inflight[id]
	if e == nil {
		return nil
	}
	delete(c.inflight, id)
	e.owner = nil
	return e
}

// Ack removes a delivered message: it was consumed.
func (c *Consumer) Ack(id uint64) {
	q := c.q
	q.mu.Lock()
	e := c.settleLocked(id)
	if e == nil {
		q.mu.Unlock()
		return
	}
	q.removeLocked(e)
	q.counters.Acked++
	// fill's own test, here under the lock already taken: most Acks have
	// nothing to load (the window was filled straight from Put).
	refill := q.more && !q.loading
	q.mu.Unlock()
	q.log.Remove(id)
	if refill {
		q.fill()
	}
}

// AckAll is Ack of each of ids, under one lock and with one removal from
// the Log: a front-end that is told of several acceptances at once (an
// AMQP disposition range, a burst of dispositions read together) pays
// for the queue's lock and the Log's queue once, not per message. IDs
// that are not this consumer's are skipped, as Ack skips them. AckAll
// may overwrite ids (it packs the IDs it removes); it does not keep it.
func (c *Consumer) AckAll(ids []uint64) {
	if len(ids) == 1 {
		c.Ack(ids[0])
		return
	}
	q := c.q
	q.mu.Lock()
	n := 0
	for _, id := range ids {
		e := c.settleLocked(id)
		if e == nil {
			continue
		}
		q.removeLocked(e)
		q.counters.Acked++
		ids[n] = id
		n++
	}
	refill := n > 0 && q.more && !q.loading
	q.mu.Unlock()
	if n == 0 {
		return
	}
	q.log.Remove(ids[:n]...)
	if refill {
		q.fill()
	}
}

// Release makes a delivered message available again without counting a
// failed delivery (AMQP released).
func (c *Consumer) Release(id uint64) { c.requeue(id, false, false) }

// Modify makes a delivered message available again; failed counts a
// failed delivery (AMQP modified delivery-failed), undeliverableHere keeps
// it from this consumer. A message whose failures reach the queue's
// maxDeliveries is dead-lettered.
func (c *Consumer) Modify(id uint64, failed, undeliverableHere bool) {
	c.requeue(id, failed, undeliverableHere)
}

// Reject dead-letters a delivered message (AMQP rejected): into the
// queue's dead-letter queue, or dropped and counted without one.
func (c *Consumer) Reject(id uint64) {
	q := c.q
	q.mu.Lock()
	if e := c.settleLocked(id); e != nil {
		q.deadLetterLocked(e)
	}
	q.mu.Unlock()
	q.fill()
}

func (c *Consumer) requeue(id uint64, failed, undeliverableHere bool) {
	q := c.q
	q.mu.Lock()
	e := c.settleLocked(id)
	if e == nil {
		q.mu.Unlock()
		return
	}
	marked := false
	if undeliverableHere {
		switch n := c.opts.Name; {
		case n != "" && slices.Contains(e.skipNames, n):
			// marked before
		case n != "" && len(e.skipNames) < maxSkipNames:
			e.skipNames = append(e.skipNames, n)
			marked = true
		default:
			// Unnamed, or past the named marks' cap: marked for this
			// consumer's life only, rather than not at all (which sent it
			// straight back to the consumer that refused it).
			e.skip = append(e.skip, c)
		}
	}
	wake := q.backLocked(e, failed, marked)
	q.mu.Unlock()
	notify(wake)
	q.fill() // a dead-lettered message made room in the window
}

// backLocked puts e back among the ready ones (or dead-letters it at
// maxDeliveries) and says whom to wake. A failed delivery or a new
// undeliverable-here mark (marked) is stored with the record when the
// Log keeps delivery states, as Artemis stores a delivery count when a
// message goes back (not at each delivery: a message in flight at a
// crash comes back with the count of its last return).
func (q *Queue) backLocked(e *entry, failed, marked bool) []*Consumer {
	if failed {
		e.count++
		if max := q.config.MaxDeliveries; max > 0 && int(e.count) >= max {
			q.deadLetterLocked(e)
			return nil
		}
	}
	if q.deleted {
		return nil
	}
	if sl := q.states; sl != nil && (failed || marked) {
		// Queued to the Log's writer, which never blocks: fine under q.mu.
		sl.SetState(e.rec.ID, DeliveryState{Count: e.count, Skip: e.skipNames})
	}
	heap.Push(&q.ready, e)
	return q.wakeLocked()
}

// Close detaches the consumer. What it was delivered and did not settle
// is delivered again, counted as a failed delivery (the consumer may have
// seen it); on an exclusive queue the next standby consumer takes over.
func (c *Consumer) Close() { c.close(true) }

// CloseUncounted is Close for a consumer the gateway itself detaches
// (shutting down): what it held goes back without a failed delivery
// counted. Counts are stored and survive a restart, so counting each
// restart would dead-letter (maxDeliveries) messages no client failed
// on after a few rolling restarts; a broker's own cancel is not a
// failure (Artemis counts the same way).
func (c *Consumer) CloseUncounted() { c.close(false) }

func (c *Consumer) close(failed bool) {
	q := c.q
	q.mu.Lock()
	if c.closed {
		q.mu.Unlock()
		return
	}
	c.closed = true
	q.cons = slices.DeleteFunc(q.cons, func(x *Consumer) bool { return x == c })
	ids := make([]uint64, 0, len(c.inflight))
	for id := range c.inflight {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	// Settle all first: a dead-lettering backLocked lets go of q.mu, and a
	// concurrent settle must find nothing of this consumer's left.
	back := make([]*entry, len(ids))
	for i, id := range ids {
		back[i] = c.settleLocked(id)
	}
	for _, e := range back {
		q.backLocked(e, failed, false)
	}
	for _, e := range q.entries { // it no longer needs skipping
		e.skip = slices.DeleteFunc(e.skip, func(x *Consumer) bool { return x == c })
	}
	wake := q.wakeLocked()
	q.mu.Unlock()
	notify(wake)
	q.fill() // dead-lettered messages made room in the window
}

// Pending is the number of messages delivered to this consumer and not
// settled.
func (c *Consumer) Pending() int {
	c.q.mu.Lock()
	defer c.q.mu.Unlock()
	return len(c.inflight)
}
