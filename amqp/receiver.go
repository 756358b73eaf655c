package amqp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/tolsey/tolsey/amqp/internal/buffer"
	"github.com/tolsey/tolsey/amqp/internal/frames"
	"github.com/tolsey/tolsey/core"
	"github.com/tolsey/tolsey/core/auth"
	"github.com/tolsey/tolsey/retain"
)

// inLink is a link the client sends on and the gateway receives on. It is
// owned by the connection's reader goroutine: messages are published on
// it, and answered with their outcome once the router is done.
type inLink struct {
	linkBase

	anonymous bool   // null target: each message is routed by its "to" (ANONYMOUS-RELAY)
	topic     string // the target topic otherwise
	queue     string // or the target queue: messages are put straight into it
	second    bool   // rcv-settle-mode second: the peer settles after our outcome
	maxSize   uint64 // max-message-size we announced; 0 = none
	coord     bool   // the target is a transaction coordinator: control messages (txn.go)

	deliveryCount uint32 // the sender's delivery-count as we know it
	creditEnd     uint32 // the delivery-count at which our credit runs out
	creditQueued  bool   // on session.credit
	unsettled     int    // deliveries in session.second

	// The delivery being received over several transfers (more=true).
	cur        bool
	curID      uint32
	curSettled bool
	curTooBig  bool
	curTxn     []byte // the transaction the delivery is sent in (txn.go), or nil
	buf        frames.PayloadBuffer

	rd     buffer.Buffer // decodes each message (deliver): one reader for all
	qtopic string        // queueTopic+queue, the topic of what goes into queue
}

var _ endpoint = (*inLink)(nil)

// Shared outcome states: equal pointers let dispositions batch as ranges.
var stateAccepted frames.DeliveryState = &frames.Accepted{}

// maxUnsettledSecond bounds the deliveries a link may leave unsettled in
// rcv-settle-mode second before we stop granting it credit.
const maxUnsettledSecond = 2 * creditBatch

func (s *session) attachIn(a *frames.Attach) error {
	l := &inLink{linkBase: linkBase{sess: s, name: a.Name, handle: a.Handle}, maxSize: s.c.s.opts.MaxMessageSize}
	l.buf.Max = l.maxSize
	if a.InitialDeliveryCount != nil {
		l.deliveryCount = *a.InitialDeliveryCount
	}
	l.second = a.RcvSettleMode != nil && *a.RcvSettleMode == frames.ReceiverSettleModeSecond
	reply := &frames.Attach{
		Name:           a.Name,
		Handle:         a.Handle,
		Role:           frames.RoleReceiver,
		SndSettleMode:  a.SndSettleMode, // echoed: go-amqp refuses a link whose modes are not
		RcvSettleMode:  a.RcvSettleMode,
		Source:         a.Source,
		MaxMessageSize: l.maxSize,
	}
	t := a.Target
	switch {
	case t != nil && t.Coordinator:
		l.coord = true // txn.go
		reply.Target = coordinatorTarget
	case t != nil && t.Dynamic && s.c.s.wantsTempQueue(t.Capabilities):
		name, le := s.c.newTempQueue()
		if le != nil {
			return s.refuse(l, reply, le)
		}
		l.queue, l.tmpQueue = name, name
		reply.Target = &frames.Target{Address: prefixQueue + name, Dynamic: true, Capabilities: t.Capabilities, ExpiryPolicy: t.ExpiryPolicy}
	case t != nil && t.Dynamic:
		addr := s.c.newTemp(t.Capabilities)
		l.topic = addr
		reply.Target = &frames.Target{Address: addr, Dynamic: true, Capabilities: t.Capabilities, ExpiryPolicy: t.ExpiryPolicy}
	case t == nil || t.Address == "":
		l.anonymous = true
		reply.Target = &frames.Target{}
		if t != nil {
			tc := *t
			reply.Target = &tc
		}
	default:
		name, kind := s.c.s.resolve(t.Address, t.Capabilities)
		if kind == nodeQueue {
			if _, le := s.c.s.queueFor(name); le != nil {
				return s.refuse(l, reply, le)
			}
			l.queue = name
		} else {
			if err := s.c.s.checkTopic(name); err != nil {
				return s.refuse(l, reply, linkErr(frames.ErrCondInvalidField, "target %q is not a topic name: %v", core.ShortTopic(t.Address), err))
			}
			l.topic = name
		}
		// The target is one topic (or queue): denied whole, refuse it now
		// rather than reject every message (authz.go).
		if !s.c.mayPublish(l.topic, l.queue) {
			return s.refuse(l, reply, s.c.unauthorized(auth.Publish, "not authorised to publish to %q", core.ShortTopic(t.Address)))
		}
		tc := *t
		reply.Target = &tc
	}
	// The credit is shown with the link (keep lists it): a client that
	// has the answer and the flow after it finds both.
	l.creditEnd = l.deliveryCount + creditBatch
	l.showCredit(creditBatch)
	s.keep(l)
	if err := s.c.send(outItem{sess: s, body: reply}); err != nil {
		return err
	}
	return s.c.send(outItem{sess: s, body: l.flowFrame()})
}

// flowFrame is this link's flow: the credit we grant, with our session
// incoming half (the writer adds the outgoing half).
func (l *inLink) flowFrame() *frames.Flow {
	f := l.sess.flowFrame()
	f.Handle = ptr(l.handle)
	f.DeliveryCount = ptr(l.deliveryCount)
	f.LinkCredit = ptr(l.creditEnd - l.deliveryCount)
	return f
}

func (l *inLink) credit() uint32 {
	c := l.creditEnd - l.deliveryCount
	if int32(c) < 0 {
		return 0
	}
	return c
}

// maybeCredit tops the credit up when half of it is used, unless too many
// deliveries wait for the peer's settlement.
func (l *inLink) maybeCredit() {
	if l.detachSent || l.credit() > creditBatch/2 || l.unsettled >= maxUnsettledSecond {
		l.showCredit(l.credit())
		return
	}
	l.creditEnd = l.deliveryCount + creditBatch
	l.showCredit(creditBatch)
	if !l.creditQueued {
		l.creditQueued = true
		l.sess.credit = append(l.sess.credit, l)
		l.sess.c.markDirty(l.sess)
	}
}

// peerFlow takes the sender's view of the link: its delivery-count (a
// sender may advance it when it has nothing to send) and echo requests.
func (l *inLink) peerFlow(f *frames.Flow) {
	if f.DeliveryCount != nil {
		l.deliveryCount = *f.DeliveryCount
	}
	if f.Echo && !l.creditQueued {
		l.creditQueued = true
		l.sess.credit = append(l.sess.credit, l)
		l.sess.c.markDirty(l.sess)
	}
	l.maybeCredit()
}

func (l *inLink) teardown(bool) {
	l.cur = false
	l.buf = frames.PayloadBuffer{}
}

// transfer takes one transfer frame (part 2 section 2.6.12, 2.7.5).
func (l *inLink) transfer(t *frames.Transfer, payload []byte) error {
	if !l.cur {
		if t.DeliveryID == nil {
			return linkErr(frames.ErrCondNotAllowed, "first transfer of a delivery without delivery-id")
		}
		if l.credit() == 0 {
			return linkErr(frames.ErrCondTransferLimitExceeded, "transfer without link credit")
		}
		l.deliveryCount++
		l.cur, l.curID, l.curSettled, l.curTooBig = true, *t.DeliveryID, t.Settled, false
		l.curTxn = nil
		if !l.coord {
			// Copied: the state aliases this frame, and a delivery of
			// several frames outlives it.
			l.curTxn = bytes.Clone(txnID(t.State))
		}
		if !t.More && !t.Aborted {
			// A whole message in one frame: decode it where it lies.
			l.cur = false
			if l.maxSize != 0 && uint64(len(payload)) > l.maxSize {
				l.tooBig(len(payload))
			} else {
				l.deliver(payload)
			}
			l.maybeCredit()
			return nil
		}
	} else {
		if t.DeliveryID != nil && *t.DeliveryID != l.curID {
			return linkErr(frames.ErrCondNotAllowed, "transfer for delivery %d while delivery %d is incomplete", *t.DeliveryID, l.curID)
		}
		l.curSettled = l.curSettled || t.Settled
		if id := txnID(t.State); id != nil && !l.coord {
			l.curTxn = bytes.Clone(id)
		}
	}
	if t.Aborted {
		// Discarded, and implicitly settled [2.6.14]: no outcome.
		l.cur = false
		l.resetBuf()
		l.maybeCredit()
		return nil
	}
	if !l.curTooBig {
		if err := l.buf.Append(payload); errors.Is(err, frames.ErrMessageTooLarge) {
			l.curTooBig = true
			l.buf.Reset() // the rest of this delivery is read and dropped
		}
	}
	if t.More {
		return nil
	}
	l.cur = false
	if l.curTooBig {
		l.tooBig(-1)
	} else {
		l.deliver(l.buf.Bytes())
	}
	l.resetBuf()
	l.maybeCredit()
	return nil
}

// resetBuf empties the reassembly buffer, giving back the memory of an
// unusually large message.
func (l *inLink) resetBuf() {
	if cap(l.buf.Bytes()) > 1<<20 {
		l.buf = frames.PayloadBuffer{Max: l.maxSize}
		return
	}
	l.buf.Reset()
}

func (l *inLink) tooBig(n int) {
	desc := fmt.Sprintf("message larger than max-message-size %d", l.maxSize)
	if n >= 0 {
		desc = fmt.Sprintf("message of %d bytes is larger than max-message-size %d", n, l.maxSize)
	}
	l.outcome(&frames.Rejected{Error: wireError(frames.ErrCondMessageSizeExceeded, desc)})
}

// deliver decodes, maps and publishes one whole message, then settles it
// with the outcome (docs/architecture.md, decision 4).
func (l *inLink) deliver(payload []byte) {
	if l.coord {
		l.control(payload)
		return
	}
	c := l.sess.c
	if len(c.peerDisps) > 0 {
		// The peer's dispositions read before this message are applied
		// before it is published: the publish may wait on this goroutine
		// (a full link that blocks on overflow, offer) for room that only
		// they make, on a link of this connection or of one whose reader
		// waits on ours.
		if err := c.sendDispositions(); err != nil {
			return // the writer is gone: so is the connection
		}
	}
	c.stats.msgsIn.Add(1)
	opts := &c.s.opts
	now := time.Now()
	var am frames.Message
	l.rd.ResetBytes(payload)
	err := am.UnmarshalAMQP(&l.rd)
	l.rd.ResetBytes(nil) // the read buffer is the reader's again
	if err != nil {
		l.outcome(&frames.Rejected{Error: wireError(frames.ErrCondDecodeError, "malformed message: "+err.Error())})
		return
	}
	in, err := toCore(&am, payload, now)
	if err != nil {
		l.outcome(&frames.Rejected{Error: wireError(frames.ErrCondDecodeError, err.Error())})
		return
	}
	m := in.msg
	m.Topic = l.topic
	qname := l.queue
	if l.anonymous {
		if in.to == "" {
			l.outcome(&frames.Rejected{Error: wireError(frames.ErrCondInvalidField, `anonymous relay: the message has no "to" address`)})
			return
		}
		name, kind := c.s.resolveRelay(in.to, in.jmsDest)
		switch {
		case kind == nodeQueue && opts.Queues == nil:
			l.outcome(&frames.Rejected{Error: wireError(frames.ErrCondNotFound, fmt.Sprintf("queue %q does not exist", name))})
			return
		case kind == nodeQueue:
			qname = name // Put refuses an unknown one: amqp:not-found
		default:
			if err := c.s.checkTopic(name); err != nil {
				l.outcome(&frames.Rejected{Error: wireError(frames.ErrCondInvalidField, fmt.Sprintf("%q is not a topic name: %v", core.ShortTopic(in.to), err))})
				return
			}
			m.Topic = name
		}
	}
	// Checked again per message: the rules in force may have changed
	// since the attach, and the relay's "to" varies.
	if !c.mayPublish(m.Topic, qname) {
		opts.Metrics.AuthFailure("amqp", deniedReason(auth.Publish))
		l.outcome(rejectUnauthorized)
		return
	}
	m.Origin = core.Origin{Protocol: core.ProtocolAMQP, Node: opts.Node, Client: c.containerID}
	if l.curTxn != nil {
		l.enlist(m, qname) // published at commit (txn.go)
		return
	}
	opts.Metrics.In("amqp")
	if qname != "" {
		l.putQueue(qname, m)
		return
	}
	if l.second {
		// Our outcome goes in s.second, the reader's: answer before
		// reading on. (Qpid JMS, Proton, rhea and go-amqp settle first.)
		res := opts.Router.Publish(context.Background(), m) // the store write is bounded by retain.WriteTimeout
		l.outcome(l.result(m, res))
		return
	}
	if l.curSettled && m.QoS == 0 {
		// Presettled at most once: no outcome goes back and no subscriber
		// holds a QoS 0 message, so the held-outcome machinery (a slot,
		// the held record, the router's acknowledgement set: three
		// allocations per message) has nothing to wait for. result still
		// counts what the retained store refused.
		l.result(m, opts.Router.Publish(context.Background(), m))
		return
	}
	// A subscriber may hold the outcome while it writes durably (a bridge
	// buffer, a queue): the reader goes on meanwhile.
	l.hold(func(h *heldPublish) {
		opts.Router.PublishAsync(context.Background(), m, func(res core.PublishResult) { h.answer(l.result(m, res)) })
	})
}

// hold starts a publish whose outcome may come later, on another
// goroutine (start calls h.answer then): the reader goes on meanwhile, up
// to maxHeldOutcomes per connection, and the outcome goes to the writer
// when it comes. An outcome given before start returns is answered here.
func (l *inLink) hold(start func(h *heldPublish)) {
	c := l.sess.c
	select {
	case c.heldSlots <- struct{}{}:
	case <-c.wdone:
		return // the connection is going: nobody to answer
	}
	h := &heldPublish{l: l, id: l.curID, settled: l.curSettled}
	start(h)
	if h.st.CompareAndSwap(heldWaiting, heldLater) {
		return // the holder answers: h.answer
	}
	// Answered before start returned, on this goroutine.
	<-c.heldSlots
	l.outcome(h.state)
}

// maxHeldOutcomes bounds the publishes of one connection whose outcome a
// subscriber holds: as many as two links' worth of credit.
const maxHeldOutcomes = 2 * creditBatch

// heldPublish is one publish whose outcome may come later (hold).
type heldPublish struct {
	l       *inLink
	id      uint32
	settled bool                 // the sender settled it: no outcome is sent
	state   frames.DeliveryState // set by answer before st leaves heldWaiting
	st      atomic.Uint32
}

const (
	heldWaiting uint32 = iota // start has not returned, nor answer run
	heldInline                // answer ran inside start: the reader answers
	heldLater                 // start returned first: answer answers
)

// answer gives the outcome, on any goroutine.
func (h *heldPublish) answer(state frames.DeliveryState) {
	h.state = state
	if h.st.CompareAndSwap(heldWaiting, heldInline) {
		return
	}
	// On the holder's goroutine: hand the outcome to the writer without
	// blocking on this connection.
	c := h.l.sess.c
	<-c.heldSlots
	if h.settled {
		return
	}
	c.answeredMu.Lock()
	c.answered = append(c.answered, heldOutcome{s: h.l.sess, id: h.id, state: state})
	c.answeredMu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// heldOutcome is the outcome of a held publish, for the writer to send.
type heldOutcome struct {
	s     *session
	id    uint32
	state frames.DeliveryState
}

// result turns what the router did into the outcome the publisher sees;
// a refused retained write is counted and classed by retain.Refused.
func (l *inLink) result(m *core.Message, res core.PublishResult) frames.DeliveryState {
	if res.Err != nil {
		// A subscriber that must not lose messages (a queue) refused it.
		return &frames.Rejected{Error: wireError(frames.ErrCondResourceLimitExceeded, res.Err.Error())}
	}
	switch retain.Refused(res.RetainErr, l.sess.c.s.opts.Metrics, l.sess.c.log, "topic", m.Topic) {
	case retain.OverQuota:
		return &frames.Rejected{Error: wireError(frames.ErrCondResourceLimitExceeded,
			"delivered to current subscribers but not retained: retained store quota exceeded")}
	case retain.StoreFailed:
		return &frames.Rejected{Error: wireError(frames.ErrCondInternalError,
			"delivered to current subscribers but not retained: "+res.RetainErr.Error())}
	}
	// No subscriber is fine: a topic publish with nobody listening is
	// accepted, never released (docs/architecture.md, decision 4).
	return stateAccepted
}

// outcome answers the current delivery, unless the sender settled it.
func (l *inLink) outcome(state frames.DeliveryState) {
	if l.curSettled {
		return
	}
	s := l.sess
	if l.curTxn != nil {
		state = s.c.txnOutcome(l.curTxn, state)
	}
	if l.second {
		// Our outcome now, our settlement after the peer's [2.6.12].
		s.second[l.curID] = l
		l.unsettled++
		s.settle(l.curID, state, false)
		return
	}
	s.settle(l.curID, state, true)
}
