package amqp

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"

	"github.com/tolsey/tolsey/amqp/internal/encoding"
	"github.com/tolsey/tolsey/amqp/internal/frames"
	"github.com/tolsey/tolsey/core"
)

// Local transactions (AMQP 1.0 part 4; docs/jms.md, "Transactions"), as
// Qpid JMS uses them for a transacted session:
//
//   - a sending link whose target is a coordinator (capability
//     amqp:local-transactions) carries the control messages: declare,
//     answered with declared{txn-id}, and discharge{txn-id, fail},
//     answered with accepted once the transaction is committed (fail
//     false) or rolled back (fail true), or rejected with
//     amqp:transaction:unknown-id or amqp:transaction:rollback.
//   - a transfer whose state is transactional-state{txn-id} is checked as
//     any publish is (decode, address, ACL), then held in the
//     transaction, not published, and answered with
//     transactional-state{txn-id, accepted} [4.4.2]. At commit the held
//     messages are published (topics) or put (queues), in order.
//   - a disposition of a delivery we sent whose state is
//     transactional-state{txn-id, outcome} [4.4.3] leaves a queue delivery
//     unsettled in the engine (still in flight, nobody else gets it) and
//     records the outcome; commit applies it (Ack for accepted), rollback
//     gives the message back as a failed delivery (Modify: delivery-count
//     incremented, redelivered). A topic delivery is settled at once, as
//     outside a transaction; rollback gives the message back to its
//     subscription (durable or shared) or link.
//
// The reader goroutine owns the held sends; the writer goroutine, which
// applies the client's dispositions, records the outcomes. A discharge
// reaches the writer as a work item queued after every disposition the
// client sent before it, so that the commit sees them all; the writer
// then hands the transaction to a goroutine of its own, which publishes
// and waits for the stores without holding up this connection's writes.

// coordinatorTarget is the answer to a coordinator attach: local
// transactions are the only kind the gateway coordinates.
var coordinatorTarget = &frames.Target{Coordinator: true, Capabilities: []encoding.Symbol{frames.TxnCapLocal}}

// txnTable is a connection's transactions.
type txnTable struct {
	// Owned by the reader goroutine.
	seq      uint64 // the last txn-id given
	declared int    // transactions declared and not yet discharged

	mu   sync.Mutex
	open map[string]*txn // by txn-id, until the writer takes one for its discharge

	// Discharges under way, added by the writer; the connection's end
	// waits for them after the writer has exited.
	discharges sync.WaitGroup
}

// txn is one transaction.
type txn struct {
	id       []byte
	accepted frames.DeliveryState // transactional-state{id, accepted}: one pointer, so that dispositions batch

	// Owned by the reader goroutine until the discharge is queued for
	// the writer, then by whoever discharges it.
	sends      []txnSend
	failed     string                     // why a send of the transaction was refused: commit rolls back
	discharged bool                       // a discharge was received: the txn-id is no longer usable
	answer     func(frames.DeliveryState) // answers the discharge, once, on any goroutine; nil until it is sent to the writer
	dlink      *inLink                    // the coordinator link the discharge came on

	// Written by the writer under txnTable.mu.
	acks        []txnAck
	tooManyAcks bool // an acknowledgement beyond MaxTxnMessages was refused: commit rolls back
}

// txnSend is a message sent in a transaction: to a topic, or straight to
// a queue.
type txnSend struct {
	m     *core.Message
	queue string
}

// txnAck is the outcome of a delivery we sent, given in a transaction.
type txnAck struct {
	p       pending // p.qc nil: a topic delivery, settled already
	outcome frames.DeliveryState
}

// lookup returns the open transaction id names, or nil.
func (tt *txnTable) lookup(id []byte) *txn {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	return tt.open[string(id)]
}

// txnID is the id of the transaction a transfer's state names, or nil.
func txnID(st frames.DeliveryState) []byte {
	if ts, ok := st.(*frames.TransactionalState); ok {
		return ts.TxnID
	}
	return nil
}

// control takes a message on a coordinator link: declare or discharge.
func (l *inLink) control(payload []byte) {
	var am frames.Message
	if err := am.Decode(payload); err != nil {
		l.outcome(&frames.Rejected{Error: wireError(frames.ErrCondDecodeError, "malformed control message: "+err.Error())})
		return
	}
	d, ok := am.Value.(encoding.Described)
	fields, _ := d.Value.([]any)
	switch {
	case ok && isDescriptor(d.Descriptor, frames.CodeDeclare, "amqp:declare:list"):
		if len(fields) > 0 && fields[0] != nil {
			l.outcome(&frames.Rejected{Error: wireError(frames.ErrCondNotImplemented, "global transactions are not supported: declare without global-id")})
			return
		}
		l.declare()
	case ok && isDescriptor(d.Descriptor, frames.CodeDischarge, "amqp:discharge:list"):
		var id []byte
		if len(fields) > 0 {
			id, _ = fields[0].([]byte)
		}
		var fail bool
		if len(fields) > 1 {
			fail, _ = fields[1].(bool)
		}
		if id == nil {
			l.outcome(&frames.Rejected{Error: wireError(frames.ErrCondDecodeError, "discharge without a binary txn-id")})
			return
		}
		l.discharge(id, fail)
	default:
		l.outcome(&frames.Rejected{Error: wireError(frames.ErrCondDecodeError, "a coordinator takes declare and discharge messages (amqp-value)")})
	}
}

func isDescriptor(d any, code uint64, name encoding.Symbol) bool {
	switch d := d.(type) {
	case uint64:
		return d == code
	case encoding.Symbol:
		return d == name
	}
	return false
}

// declare starts a transaction. A connection holds at most MaxSessions
// undischarged ones: a JMS transacted session has one at a time.
func (l *inLink) declare() {
	c := l.sess.c
	tt := &c.txns
	if limit := c.s.opts.MaxSessions; tt.declared >= limit {
		l.outcome(&frames.Rejected{Error: wireError(frames.ErrCondResourceLimitExceeded,
			fmt.Sprintf("the connection has %d open transactions, as many as it may have sessions (amqp.maxSessions)", limit))})
		return
	}
	tt.seq++
	id := binary.BigEndian.AppendUint64(nil, tt.seq)
	t := &txn{id: id, accepted: &frames.TransactionalState{TxnID: id, Outcome: stateAccepted}}
	tt.mu.Lock()
	if tt.open == nil {
		tt.open = map[string]*txn{}
	}
	tt.open[string(id)] = t
	tt.mu.Unlock()
	tt.declared++
	l.outcome(&frames.Declared{TxnID: id})
}

// discharge ends a transaction: its outcome goes out when the writer has
// applied every earlier disposition and the commit (or rollback) is done.
func (l *inLink) discharge(id []byte, fail bool) {
	c := l.sess.c
	t := c.txns.lookup(id)
	if t == nil || t.discharged {
		l.outcome(&frames.Rejected{Error: wireError(frames.ErrCondTxnUnknownID, "no open transaction with this txn-id")})
		return
	}
	t.discharged = true
	t.dlink = l
	c.txns.declared--
	// If the writer is gone, the connection's end rolls t back and
	// answers (endTxns).
	start := func() { _ = c.send(outItem{sess: l.sess, do: func(w *writer) { w.c.startDischarge(t, fail) }}) }
	if l.second {
		// Our outcome goes in s.second, the reader's: wait for it, as
		// putQueue does, or for the writer's end.
		ch := make(chan frames.DeliveryState, 1)
		t.answer = func(st frames.DeliveryState) { ch <- st }
		start()
		select {
		case st := <-ch:
			l.outcome(st)
		case <-c.wdone:
		}
		return
	}
	l.hold(func(h *heldPublish) {
		t.answer = h.answer
		start()
	})
}

// startDischarge takes t out of the table, after the dispositions the
// client sent before the discharge, and discharges it on a goroutine of
// its own. Called by the writer.
func (c *conn) startDischarge(t *txn, fail bool) {
	tt := &c.txns
	tt.mu.Lock()
	delete(tt.open, string(t.id))
	tt.mu.Unlock()
	tt.discharges.Add(1)
	ok := c.s.spawn(func() {
		defer tt.discharges.Done()
		t.answer(c.finishTxn(t, fail))
	})
	if !ok {
		tt.discharges.Done()
		c.rollback(t)
		t.answer(&frames.Rejected{Error: wireError(frames.ErrCondTxnRollback, "rolled back: the gateway is shutting down")})
	}
}

// finishTxn commits t (or rolls it back when fail, or when a send of it
// was refused) and returns the discharge's outcome.
func (c *conn) finishTxn(t *txn, fail bool) frames.DeliveryState {
	if fail {
		c.rollback(t)
		return stateAccepted
	}
	if t.failed != "" {
		c.rollback(t)
		return &frames.Rejected{Error: wireError(frames.ErrCondTxnRollback, "rolled back: "+t.failed)}
	}
	if t.tooManyAcks {
		c.rollback(t)
		return &frames.Rejected{Error: wireError(frames.ErrCondTxnRollback, fmt.Sprintf(
			"rolled back: more than %d acknowledgements in the transaction (amqp.maxTransactionMessages)", c.s.opts.MaxTxnMessages))}
	}
	// Publish in order; commit is answered once every message is stored
	// (a queue's Put, a holder's acknowledgement).
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		refused  int
		firstErr string
	)
	for _, s := range t.sends {
		wg.Add(1)
		done := func(st frames.DeliveryState) {
			if rj, ok := st.(*frames.Rejected); ok {
				mu.Lock()
				refused++
				if firstErr == "" && rj.Error != nil {
					firstErr = rj.Error.Description
				}
				mu.Unlock()
			}
			wg.Done()
		}
		if s.queue != "" {
			c.s.opts.Queues.Put(s.queue, s.m, func(err error) { done(queueOutcome(err)) })
			continue
		}
		m := s.m
		c.s.opts.Router.PublishAsync(context.Background(), m, func(res core.PublishResult) { done(t.dlink.result(m, res)) })
	}
	wg.Wait()
	if refused > 0 {
		// Not atomic: the others were published. The acknowledgements are
		// rolled back, so a consumer that produced these messages from
		// the ones it acknowledged gets those again: at least once.
		c.rollbackAcks(t)
		return &frames.Rejected{Error: wireError(frames.ErrCondTxnRollback, fmt.Sprintf(
			"%d of the transaction's %d messages were refused (%s): the others were published; acknowledgements rolled back",
			refused, len(t.sends), firstErr))}
	}
	for _, a := range t.acks {
		if a.p.qc != nil {
			settleQueued(a.p.qc, a.p.qid, a.outcome)
		}
	}
	return stateAccepted
}

// rollback discards t's sends and gives back its acknowledged messages.
func (c *conn) rollback(t *txn) {
	t.sends = nil
	c.rollbackAcks(t)
}

func (c *conn) rollbackAcks(t *txn) {
	for _, a := range t.acks {
		switch l := a.p.l; {
		case a.p.qc != nil:
			a.p.qc.Modify(a.p.qid, true, false) // redelivered, delivery-count incremented
		case l.group != nil:
			l.group.requeue([]queued{a.p.q}) // to the subscription: a member, or its backlog
		default:
			l.offer(a.p.q, false) // behind what the link holds; dropped if it is closed or full
		}
	}
	t.acks = nil
}

// txnAck records the outcome of delivery p given in a transaction.
// Called by the writer. An unknown transaction cannot settle it: a queue
// message goes back to the queue, as for any state that is no outcome (a
// topic message is settled, as outside a transaction).
func (c *conn) txnAck(ts *frames.TransactionalState, p pending) {
	tt := &c.txns
	tt.mu.Lock()
	t := tt.open[string(ts.TxnID)]
	kept := t != nil && len(t.acks) < c.s.opts.MaxTxnMessages
	if kept {
		t.acks = append(t.acks, txnAck{p: p, outcome: ts.Outcome})
	} else if t != nil {
		// Bounded as its sends are: the transaction cannot commit any
		// more, and holds nothing more.
		t.tooManyAcks = true
	}
	tt.mu.Unlock()
	if !kept && p.qc != nil {
		c.log.Debug("amqp: disposition in an unknown or overfull transaction: the delivery is released")
		p.qc.Release(p.qid)
	}
}

// enlist holds m, sent in the transaction the current transfer names,
// until the transaction is discharged. qname is the queue it goes to, or
// "" for m.Topic.
func (l *inLink) enlist(m *core.Message, qname string) {
	c := l.sess.c
	opts := &c.s.opts
	t := c.txns.lookup(l.curTxn)
	switch {
	case t == nil || t.discharged:
		l.outcome(&frames.Rejected{Error: wireError(frames.ErrCondTxnUnknownID, "no open transaction with this txn-id")})
		return
	case len(t.sends) >= opts.MaxTxnMessages:
		l.outcome(&frames.Rejected{Error: wireError(frames.ErrCondResourceLimitExceeded,
			fmt.Sprintf("the transaction holds %d messages, the most amqp.maxTransactionMessages allows", len(t.sends)))})
		return
	}
	if qname != "" {
		// Refused now rather than at commit, where it would leave the
		// transaction half applied.
		if _, ok := opts.Queues.Queue(qname); !ok {
			l.outcome(&frames.Rejected{Error: wireError(frames.ErrCondNotFound, fmt.Sprintf("queue %q does not exist", qname))})
			return
		}
		m.Topic = queueTopic + qname
		m.Retain = false // as putQueue
	}
	opts.Metrics.In("amqp")
	t.sends = append(t.sends, txnSend{m: m, queue: qname})
	l.outcome(t.accepted)
}

// txnOutcome is the state that answers a transfer sent in transaction id
// [4.4.2]: st within a transactional-state. A send the gateway refuses
// makes the transaction roll back at discharge, so that a commit never
// applies part of what the client sent.
func (c *conn) txnOutcome(id []byte, st frames.DeliveryState) frames.DeliveryState {
	t := c.txns.lookup(id)
	if t != nil && st == t.accepted {
		return st
	}
	if t != nil && !t.discharged && t.failed == "" {
		t.failed = "a message sent in the transaction was refused"
		if rj, ok := st.(*frames.Rejected); ok && rj.Error != nil {
			t.failed += ": " + rj.Error.Description
		}
	}
	return &frames.TransactionalState{TxnID: id, Outcome: st} // id is the delivery's own copy (inLink.curTxn)
}

// endTxns rolls back what the connection leaves open: called by the
// reader once the writer has exited (so no disposition is still on its
// way), before the connection's queue consumers close.
func (c *conn) endTxns() {
	tt := &c.txns
	tt.discharges.Wait() // commits asked for are completed
	tt.mu.Lock()
	open := tt.open
	tt.open = nil
	tt.mu.Unlock()
	for _, t := range open {
		c.log.Info("amqp transaction rolled back: the connection ended before it was discharged", "messages", len(t.sends), "acknowledgements", len(t.acks))
		c.rollback(t)
		if t.answer != nil {
			t.answer(&frames.Rejected{Error: wireError(frames.ErrCondTxnRollback, "rolled back: the connection ended")})
		}
	}
}
