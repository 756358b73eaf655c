package amqp

import (
	"context"
	"errors"
	"strconv"
	"strings"

	"github.com/tolsey/tolsey/amqp/internal/encoding"
	"github.com/tolsey/tolsey/amqp/internal/frames"
	"github.com/tolsey/tolsey/core"
	"github.com/tolsey/tolsey/core/queue"
)

// Queues over AMQP (docs/queues.md, "AMQP"). The engine (core/queue) does
// the queueing; this file maps AMQP onto it:
//
//   - a receiving link on a queue is a queue.Consumer. The writer pulls
//     from it (Next) while the link has credit; the peer's outcomes settle
//     the deliveries (Ack, Release, Modify, Reject); the consumer closes
//     on the writer once the link, session or connection is gone, after the
//     dispositions the peer sent before, so that what it accepted is not
//     delivered again.
//   - a sending link to a queue (or an anonymous-relay message whose "to"
//     names one) puts each message straight into it, and the outcome goes
//     out once the queue holds it durably, through the same held-outcome
//     path as a topic publish a queue holds (heldPublish).
//   - a dynamic node with capability temporary-queue is a temporary queue
//     owned by the connection, deleted with it.

const (
	// tmpQueuePrefix starts the name of a temporary queue: a "$" name, so
	// that no wildcard subscription reaches it if it is ever used as a
	// topic, and unlike any name a user declares by accident.
	tmpQueuePrefix = "$tmpq/"
	// queueTopic prefixes the topic of a message put straight into a queue
	// (core.Message.Topic): the MQTT form of a queue's address
	// (docs/architecture.md, "$queue/<name>"). An AMQP receiver sees it as
	// "to" = queue://<name>.
	queueTopic = "$queue/"
)

// distribution-mode values [3.5.3].
const distCopy encoding.Symbol = "copy"

// resolve names the node an address refers to (resolveAddress), and makes
// a bare address without a topic capability a queue when a queue of that
// name exists.
func (s *Server) resolve(addr string, caps []encoding.Symbol) (string, nodeKind) {
	name, kind := resolveAddress(addr, caps)
	if kind == nodeTopic && name == addr && s.opts.Queues != nil && !isTemp(addr) &&
		!hasCap(caps, capTopic) && !hasCap(caps, capTempTopic) {
		if _, ok := s.opts.Queues.Queue(addr); ok {
			return addr, nodeQueue
		}
		if s.opts.BareAddressQueue && !strings.ContainsAny(addr, "+#") {
			return addr, nodeQueue
		}
	}
	return name, kind
}

// resolveRelay is resolve for an anonymous-relay message's "to".
func (s *Server) resolveRelay(to string, jmsDest int8) (string, nodeKind) {
	name, kind := resolveTo(to, jmsDest)
	if kind == nodeTopic && jmsDest < 0 {
		return s.resolve(to, nil)
	}
	return name, kind
}

// queueFor returns the queue an attach names. An unknown one is refused
// with amqp:not-found, or created (durable, defaults) with AutoCreateQueues.
func (s *Server) queueFor(name string) (*queue.Queue, *LinkError) {
	e := s.opts.Queues
	if e == nil {
		return nil, linkErr(frames.ErrCondNotFound, "queue %q does not exist", name)
	}
	if q, ok := e.Queue(name); ok {
		return q, nil
	}
	if !s.opts.AutoCreateQueues {
		return nil, linkErr(frames.ErrCondNotFound, "queue %q does not exist", name)
	}
	// Declare changes an existing queue's configuration: two attaches
	// creating the same queue must not reset each other's (or the first
	// one's) settings, so look again under the lock.
	s.autoMu.Lock()
	defer s.autoMu.Unlock()
	if q, ok := e.Queue(name); ok {
		return q, nil
	}
	// Ensure: another gateway of a cluster may have created it already.
	q, err := e.Ensure(context.Background(), queue.Config{Name: name})
	if err != nil {
		return nil, linkErr(queueCond(err), "%v", err)
	}
	s.log.Info("amqp: queue created by an attach (queues.autoCreate)", "queue", name)
	return q, nil
}

// queueCond is the AMQP condition of an engine error.
func queueCond(err error) encoding.Symbol {
	switch {
	case errors.Is(err, queue.ErrFull), errors.Is(err, queue.ErrTooMany):
		return frames.ErrCondResourceLimitExceeded
	case errors.Is(err, queue.ErrNotFound):
		return frames.ErrCondNotFound
	case errors.Is(err, queue.ErrInvalid):
		return frames.ErrCondInvalidField
	}
	return frames.ErrCondInternalError // the store failed
}

// queueOutcome is the outcome of a message put straight into a queue.
func queueOutcome(err error) frames.DeliveryState {
	if err == nil {
		return stateAccepted
	}
	return &frames.Rejected{Error: wireError(queueCond(err), err.Error())}
}

// wantsTempQueue reports whether a dynamic node asks for a temporary queue
// (Qpid JMS createTemporaryQueue), which needs the engine.
func (s *Server) wantsTempQueue(caps []encoding.Symbol) bool {
	return s.opts.Queues != nil && hasCap(caps, capTempQueue)
}

// owner is the connection's identity as the owner of its temporary queues.
func (c *conn) owner() string { return "amqp/" + strconv.FormatUint(c.id, 10) }

// newTempQueue creates a temporary queue owned by the connection.
func (c *conn) newTempQueue() (string, *LinkError) {
	c.tmpSeq++
	name := tmpQueuePrefix + c.s.opts.Node + "/" + strconv.FormatUint(c.id, 10) + "/" + strconv.FormatUint(c.tmpSeq, 10)
	_, err := c.s.opts.Queues.Declare(context.Background(), queue.Config{Name: name, Temporary: true, Owner: c.owner()})
	if err != nil {
		return "", linkErr(queueCond(err), "temporary queue: %v", err)
	}
	c.ownsQueues = true
	return name, nil
}

// dropTempQueue deletes the temporary queue b's attach created: a dynamic
// node lives as long as the link that made it (lifetime-policy
// delete-on-close, the default [3.5.10]), or its connection. A link that
// is only suspended (detach closed=false, session end) keeps it until the
// connection ends.
func (c *conn) dropTempQueue(b *linkBase) {
	if b.tmpQueue == "" {
		return
	}
	_ = c.s.opts.Queues.Delete(context.Background(), b.tmpQueue) // deleted already: fine
	b.tmpQueue = ""
}

// isTempQueue reports whether a queue name is a temporary queue's.
func isTempQueue(name string) bool { return strings.HasPrefix(name, tmpQueuePrefix) }

// jmsQueueKind is x-opt-jms-dest for a queue: 0, or 2 for a temporary one.
func jmsQueueKind(name string) int8 {
	if isTempQueue(name) {
		return jmsTempQueue
	}
	return jmsQueue
}

// attachQueueOut makes l a consumer of q: a browser when the source asks
// for distribution-mode copy (JMS QueueBrowser). opts carries a fallback
// link's Filter and Fallback; f the source's filters, of which the JMS
// selector applies (queue.ConsumerOptions.Select).
func (s *session) attachQueueOut(l *outLink, reply *frames.Attach, sc *frames.Source, f *sourceFilters, q *queue.Queue, opts queue.ConsumerOptions) error {
	l.browse = sc.DistributionMode == distCopy && !opts.Fallback
	opts.Browse, opts.Notify, opts.Deleted = l.browse, l.wake, l.queueDeleted
	opts.Select = selectFunc(f.sel)
	// A link is its name and its container (AMQP 1.0 part 2 §2.6.1): its
	// undeliverable-here marks hold for it when it attaches again, also
	// after a restart (docs/queues.md, "What a restart keeps").
	opts.Name = s.c.containerID + "\x00" + l.name
	qc, err := q.Consume(opts)
	if err != nil {
		return s.refuse(l, reply, linkErr(queueCond(err), "%v", err))
	}
	// Of the filters, the selector applies; no-local and except filters
	// are about topics: left out of the answer, so the client knows.
	sc.Filter = f.queueKept()
	return s.consumeQueue(l, reply, sc, qc)
}

// consumeQueue hands l, the consumer qc of a queue, to the writer and
// answers its attach with sc.
func (s *session) consumeQueue(l *outLink, reply *frames.Attach, sc *frames.Source, qc *queue.Consumer) error {
	c := s.c
	l.retainedDone = true // a queue has no retained copies
	l.qc = qc
	c.addConsumer(qc)
	reply.Source = sc
	s.keep(l)
	return c.send(outItem{sess: s, body: reply, do: func(w *writer) { w.attachOut(l) }})
}

// wake tells the writer that l may have something to send: the engine's
// Notify. It never blocks.
func (l *outLink) wake() {
	l.mu.Lock()
	w := !l.ready && !l.closed
	l.ready = l.ready || w
	l.mu.Unlock()
	if w {
		l.c.markReady(l)
	}
}

// queueDeleted is the engine's Deleted: the writer detaches l with
// amqp:resource-deleted.
func (l *outLink) queueDeleted() {
	l.qgone.Store(true)
	l.wake()
}

// nextQueued appends up to n deliveries from l's consumer to ds. Called
// by the writer.
func (l *outLink) nextQueued(ds []queue.Delivery, n int) []queue.Delivery {
	l.mu.Lock()
	closed := l.closed
	l.mu.Unlock()
	if closed {
		return ds // detached by the peer: the writer hears of it next
	}
	return l.qc.NextN(ds, n)
}

// queueSettled says whether l's deliveries go out settled: a browser's
// (nothing is taken), and those of a receiver that asked snd-settle-mode
// settled (acknowledged as they are sent: at most once).
func (l *outLink) queueSettled() bool {
	return l.browse || l.sndMode == frames.SenderSettleModeSettled
}

// accepts reports whether the peer's state of a queue delivery accepts
// it (settleQueued's Ack).
func accepts(st frames.DeliveryState) bool {
	switch st.(type) {
	case nil, *frames.Accepted:
		return true
	}
	return false
}

// settleQueued applies the peer's outcome of a queue delivery [3.4].
func settleQueued(qc *queue.Consumer, id uint64, st frames.DeliveryState) {
	switch st := st.(type) {
	case nil, *frames.Accepted:
		qc.Ack(id) // a settlement without a state accepts [2.6.12]: at-most-once receivers
	case *frames.Released:
		qc.Release(id)
	case *frames.Modified:
		qc.Modify(id, st.DeliveryFailed, st.UndeliverableHere)
	case *frames.Rejected:
		qc.Reject(id)
	default:
		// Not an outcome (received, a transactional state): the delivery
		// is settled without one, so it goes back, uncounted.
		qc.Release(id)
	}
}

// detachDeleted detaches l because its queue was deleted. The writer sends
// the detach (the reader, blocked on the socket, cannot); the reader takes
// the peer's detach as for any link, and its answer is not sent (detachItem).
func (w *writer) detachDeleted(l *outLink) {
	l.mu.Lock()
	closed := l.closed
	l.mu.Unlock()
	if closed {
		return // the reader detached it first: its detach is on its way
	}
	if !w.detachOut(l) {
		return
	}
	w.c.log.Info("amqp link detached: its queue was deleted", "link", l.name, "queue", l.qc.Queue().Name())
	w.write(l.sess.ch, &frames.Detach{Handle: l.handle, Closed: true,
		Error: wireError(frames.ErrCondResourceDeleted, "queue "+strconv.Quote(l.qc.Queue().Name())+" was deleted")}, nil)
}

// addConsumer registers a consumer of the connection, closed when the
// connection ends if the writer has not closed it with its link.
func (c *conn) addConsumer(qc *queue.Consumer) {
	c.consumersMu.Lock()
	c.consumers[qc] = struct{}{}
	c.consumersMu.Unlock()
}

// closeConsumer closes a consumer of the connection: what it was
// delivered and not settled is delivered again.
func (c *conn) closeConsumer(qc *queue.Consumer) {
	c.consumersMu.Lock()
	delete(c.consumers, qc)
	c.consumersMu.Unlock()
	qc.Close()
}

// closeQueues ends the connection's part in the queues: its consumers
// close (once the writer, which applied the peer's last dispositions, has
// exited) and its temporary queues are deleted.
func (c *conn) closeQueues() {
	c.consumersMu.Lock()
	cs := c.consumers
	c.consumers = map[*queue.Consumer]struct{}{}
	c.consumersMu.Unlock()
	// Shutdown (forced, not a revocation) is the gateway's doing: no
	// failed delivery is counted for what the consumers held.
	shutdown := c.forced.Load() && c.revokedBy.Load() == nil
	for qc := range cs {
		if shutdown {
			qc.CloseUncounted()
		} else {
			qc.Close()
		}
	}
	if c.ownsQueues {
		c.s.opts.Queues.DeleteOwned(context.Background(), c.owner())
	}
}

// putQueue puts m straight into the queue named name and answers the
// delivery once the queue holds it durably (or refused it).
func (l *inLink) putQueue(name string, m *core.Message) {
	eng := l.sess.c.s.opts.Queues
	if name != l.queue {
		m.Topic = queueTopic + name // an anonymous relay's "to"
	} else {
		if l.qtopic == "" {
			l.qtopic = queueTopic + name
		}
		m.Topic = l.qtopic // one string for all the link's messages
	}
	m.Retain = false // a queue keeps every message; retaining is a topic's
	if l.second {
		// Our outcome goes in s.second, the reader's: wait for it.
		ch := make(chan error, 1)
		eng.Put(name, m, func(err error) { ch <- err })
		l.outcome(queueOutcome(<-ch))
		return
	}
	l.hold(func(h *heldPublish) {
		eng.Put(name, m, func(err error) { h.answer(queueOutcome(err)) })
	})
}

// Alternate destinations (docs/queues.md, "Alternate destinations"): what
// is published under a configured prefix and reaches no live consumer is
// parked in the prefix's alternate queue by the engine. Two kinds of
// receiver take it back out:
//
//   - a plain topic link (not dynamic, not a JMS durable or shared
//     subscription) consumes, beside its router subscription, from every
//     alternate queue its filter overlaps, taking only the messages whose
//     topic its filter matches (queue.ConsumerOptions.Filter); the writer
//     gives live and parked messages turns. Parked deliveries are
//     at-least-once like a queue's (unsettled unless the link is
//     snd-settle-mode settled).
//   - a link whose source carries the capability qd.fallback is a
//     fallback consumer: no router subscription (so it is no live
//     consumer, and what nobody else receives is parked), only a consumer
//     of the alternate queue covering its address, which takes a message
//     only while no ordinary consumer of that queue would (Fallback). An
//     address no alternate covers is refused with amqp:not-found: such a
//     link would never receive anything.

// fallbackFor resolves a qd.fallback link's address: a topic (or filter)
// that an alternate destination covers.
func (s *Server) fallbackFor(addr string, caps []encoding.Symbol) (*queue.Queue, string, *LinkError) {
	name, kind := s.resolve(addr, caps)
	if kind != nodeTopic || isTemp(name) || s.opts.Queues == nil {
		return nil, "", linkErr(frames.ErrCondNotFound, "qd.fallback: no alternate destination covers %q", core.ShortTopic(addr))
	}
	if err := s.checkFilter(name); err != nil {
		return nil, "", linkErr(frames.ErrCondInvalidField, "source %q is not a topic filter: %v", core.ShortTopic(addr), err)
	}
	q, ok := s.opts.Queues.AlternateFor(name)
	if !ok {
		return nil, "", linkErr(frames.ErrCondNotFound, "qd.fallback: no alternate destination covers %q", core.ShortTopic(addr))
	}
	return q, name, nil
}

// consumeAlternates attaches l, a plain topic link, to the alternate
// queues its filter overlaps. Called by the reader before l is handed to
// the writer.
func (l *outLink) consumeAlternates() {
	e := l.c.s.opts.Queues
	if e == nil {
		return
	}
	for _, q := range e.AlternatesMatching(l.filter) {
		qc, err := q.Consume(queue.ConsumerOptions{Filter: l.filter, Except: l.except, Select: selectFunc(l.sel), Notify: l.wake})
		if err != nil {
			continue // deleted meanwhile: nothing to drain
		}
		l.c.addConsumer(qc)
		l.alts = append(l.alts, qc)
	}
}

// sendAlternate sends the next parked message for l from its alternates,
// if one has any. Called by the writer.
func (w *writer) sendAlternate(l *outLink) bool {
	l.mu.Lock()
	closed := l.closed
	l.mu.Unlock()
	if closed {
		return false
	}
	for _, qc := range l.alts {
		if d, ok := qc.Next(); ok {
			w.sendDelivery(l, queued{m: d.Msg}, &d, qc)
			return true
		}
	}
	return false
}

// closeLinkConsumers closes l's queue consumers, its queue's and its
// alternates': what they were delivered and was not settled is
// delivered again.
func (c *conn) closeLinkConsumers(l *outLink) {
	if l.qc != nil {
		c.closeConsumer(l.qc)
	}
	for _, qc := range l.alts {
		c.closeConsumer(qc)
	}
}
