// SPDX-License-Identifier: MIT
// SPDX-FileCopyrightText: 2023 mochi-mqtt, mochi-co

package mqtt

import (
	"sync"
	"sync/atomic"

	"github.com/mochi-mqtt/server/v2/packets"
)

// Acknowledgements a hook answers later (gateway patch 12).
//
// Upstream writes the PUBACK/PUBREC of an inbound QoS 1/2 PUBLISH on the
// client's reader as soon as OnPublish returns, so a hook whose answer
// depends on slow work (a durable write with a group commit) has to block
// the reader, and a client with many PUBLISHes in flight gets one answer
// per round of that work. With DeferAck the reader goes on reading; the
// ack is written when the hook calls PendingAck.Done, with the code it
// gives. Acks leave in the order their PUBLISHes arrived [MQTT-4.6.0-2]:
// once one is deferred, every later ack of that connection queues behind
// it (an early answer to a later PUBLISH waits for the earlier ones),
// until the queue has drained and what it handed to the writer is written.
//
// Deferred acks keep the receive quota (the server's Receive Maximum, as
// announced in the CONNACK) taken until they are written: a QoS 1 PUBLISH
// gives its place back when its PUBACK goes, a QoS 2 one, as before, at
// its PUBCOMP. When the quota is used up while deferred acks wait, the
// reader stops reading until one goes (Read, waitForAckRoom): the client
// is held back by TCP instead of being disconnected for exceeding Receive
// Maximum (an MQTT 3.1.1 client knows no such limit) or buffered without
// limit.

// PendingAck is the acknowledgement (PUBACK or PUBREC) of one inbound QoS
// 1/2 PUBLISH that a hook answers later; see DeferAck.
type PendingAck struct {
	cl *Client
	// Guarded by cl.State.acks.mu.
	ack      packets.Packet // built by processPublish once OnPublish returns
	filled   bool           // ack is built
	settle   bool           // the ack gives back the receive quota processPublish took (not a refusal's)
	answered bool           // Done was called as often as DeferAck
	code     packets.Code   // Done's code: the first that was not success
	holds    int            // Done calls still due (gateway patch 18)
}

// ackQueue is a client's acknowledgements in the order their PUBLISHes
// arrived, while any is deferred (gateway patch 12).
type ackQueue struct {
	// Owned by the reader goroutine: the ack DeferAck made during the
	// OnPublish now running.
	deferring *PendingAck

	mu sync.Mutex
	q  []*PendingAck // guarded by mu; the head is the oldest
	// n mirrors len(q), and queued counts acks handed to the outbound
	// queue and not yet written: while both are 0 the reader writes an ack
	// itself, as upstream does, without mu. Only the reader adds to q, so
	// a reader that sees both at 0 cannot be overtaken.
	n      atomic.Int32
	queued atomic.Int32
	room   chan struct{} // made with the first deferred ack; one token per ack sent or reader to wake
}

// busy reports whether an ack written now could overtake an earlier one.
func (a *ackQueue) busy() bool { return a.n.Load() > 0 || a.queued.Load() > 0 }

// wake lets a reader waiting in waitForAckRoom look again.
func (a *ackQueue) wake() {
	a.mu.Lock()
	room := a.room
	a.mu.Unlock()
	if room != nil {
		select {
		case room <- struct{}{}:
		default:
		}
	}
}

// DeferAck leaves the PUBACK/PUBREC of pk, the inbound QoS 1/2 PUBLISH an
// OnPublish hook is handling, for the hook to answer with Done (gateway
// patch 12). Call it only from OnPublish, on the client's reader, at most
// once per packet, and then return a nil error: the PUBLISH is processed
// as usual (retained, delivered to subscribers now, QoS 2 state kept for
// duplicate detection), except that its ack waits. It returns nil for a
// QoS 0 PUBLISH and for the inline client, which get no ack.
//
// Several hooks may each defer the same ack (gateway patch 18): a second
// DeferAck during the same OnPublish returns the same PendingAck, which
// is then answered once every caller has called Done; the first code that
// is not success wins. A caller whose Done came already is waited for
// again: the ack is not built before OnPublish returns, so nothing has
// been written.
func (cl *Client) DeferAck(pk packets.Packet) *PendingAck {
	if pk.FixedHeader.Qos == 0 || cl.Net.Inline {
		return nil
	}
	a := &cl.State.acks
	if p := a.deferring; p != nil {
		a.mu.Lock()
		p.holds++
		p.answered = false
		a.mu.Unlock()
		return p
	}
	p := &PendingAck{cl: cl, holds: 1, code: packets.CodeSuccess}
	a.mu.Lock()
	if a.room == nil {
		a.room = make(chan struct{}, 1)
	}
	a.q = append(a.q, p)
	a.n.Store(int32(len(a.q)))
	a.mu.Unlock()
	a.deferring = p
	return p
}

// Done answers a deferred ack: with packets.CodeSuccess the ack mochi
// would have written, otherwise with code on it (MQTT 5; an MQTT 3.1.1 ack
// has no reason code). A PUBREC >= 0x80 ends the QoS 2 flow [MQTT-4.3.3]:
// its state is released, and OnQosDropped is called. Done may be called
// from any goroutine, once per DeferAck that returned p; it does not wait for the write (the client's
// writer does it). After the client has gone it writes nothing.
func (p *PendingAck) Done(code packets.Code) {
	a := &p.cl.State.acks
	a.mu.Lock()
	if !p.answered {
		if p.code == packets.CodeSuccess {
			p.code = code
		}
		if p.holds--; p.holds <= 0 {
			p.answered = true
			p.cl.flushAcksLocked()
		}
	}
	a.mu.Unlock()
}

// takeDeferred returns, and forgets, the ack DeferAck made during the
// OnPublish that just returned; on the reader. The inline client has many
// "readers" (every goroutine that injects a packet: AMQP links, bridges,
// the cluster) and never defers, so the field is written only when set:
// clearing a nil one from each of them would race.
func (a *ackQueue) takeDeferred() *PendingAck {
	p := a.deferring
	if p != nil {
		a.deferring = nil
	}
	return p
}

// drop takes p, which OnPublish deferred and then refused, out of the
// queue: no ack of mochi's is due for it.
func (a *ackQueue) drop(p *PendingAck) {
	a.mu.Lock()
	for i, x := range a.q {
		if x == p {
			a.q = append(a.q[:i], a.q[i+1:]...)
			break
		}
	}
	a.n.Store(int32(len(a.q)))
	p.cl.flushAcksLocked() // p may have held back answered ones
	a.mu.Unlock()
}

// writeAck writes ack, the PUBACK/PUBREC of an inbound PUBLISH, in its
// place: now on the reader when no earlier ack waits, else behind them.
// p, when not nil, is the deferred ack the ack belongs to. settle says
// that the ack ends what processPublish began after taking the receive
// quota (finishAck), as opposed to a refusal written before. On the reader.
func (cl *Client) writeAck(p *PendingAck, ack packets.Packet, settle bool) error {
	a := &cl.State.acks
	if p == nil && !a.busy() {
		return cl.writeReaderAck(ack) // gateway patch 26
	}
	a.mu.Lock()
	if p == nil {
		p = &PendingAck{cl: cl, answered: true, code: packets.CodeSuccess}
		a.q = append(a.q, p)
		a.n.Store(int32(len(a.q)))
	}
	p.ack, p.filled, p.settle = ack, true, settle
	cl.flushAcksLocked()
	a.mu.Unlock()
	return nil
}

// WriteAck writes a PUBACK/PUBREC a hook answers an inbound PUBLISH with
// itself (a refusal from OnPublish), behind the acks still waiting
// (gateway patch 12). On the client's reader.
func (cl *Client) WriteAck(ack packets.Packet) error { return cl.writeAck(nil, ack, false) }

// flushAcksLocked hands the acks at the head of the queue that are built
// and answered to the client's writer, in order; cl.State.acks.mu is held.
func (cl *Client) flushAcksLocked() {
	a := &cl.State.acks
	sent := 0
	for len(a.q) > 0 && a.q[0].filled && a.q[0].answered {
		p := a.q[0]
		a.q[0] = nil
		a.q = a.q[1:]
		cl.finishAck(p)
		sent++
	}
	if sent == 0 {
		return
	}
	if len(a.q) == 0 {
		a.q = nil // let a queue grown by a burst go
	}
	a.n.Store(int32(len(a.q)))
	select {
	case a.room <- struct{}{}:
	default:
	}
}

// finishAck settles p's part of the session state as processPublish does
// for an ack it writes at once, then queues the ack for the writer (a
// Done caller must not wait on the client's socket). The outbound queue's
// limit is not applied: acks are bounded by the receive quota, and one
// dropped would leave the client waiting for it.
func (cl *Client) finishAck(p *PendingAck) {
	ack := p.ack
	if p.code != packets.CodeSuccess {
		ack.ReasonCode = p.code.Code
		ack.Properties.ReasonString = p.code.Reason
	}
	switch {
	case !p.settle:
	case ack.FixedHeader.Type == packets.Puback:
		cl.State.Inflight.IncreaseReceiveQuota()
	case ack.ReasonCode >= packets.ErrUnspecifiedError.Code: // a PUBREC ending the flow [MQTT-4.3.3]
		if cl.State.Inflight.Delete(ack.PacketID) {
			atomic.AddInt64(&cl.ops.info.Inflight, -1)
		}
		cl.State.Inflight.IncreaseReceiveQuota()
		cl.ops.hooks.OnQosDropped(cl, ack)
	}
	if cl.Closed() {
		return
	}
	cl.State.acks.queued.Add(1)
	q := &cl.State.outbound
	q.mu.Lock()
	q.push(&ack)
	atomic.AddInt32(&cl.State.outboundQty, 1)
	start := !q.writing
	q.writing = true
	q.mu.Unlock()
	if start {
		go cl.writeLoop()
	}
}

// ackWritten is called by the writer for each packet it takes from the
// outbound queue, written or dropped: a PUBACK/PUBREC there is one
// finishAck queued (nothing else queues them).
func (cl *Client) ackWritten(pk *packets.Packet) {
	if t := pk.FixedHeader.Type; t == packets.Puback || t == packets.Pubrec {
		cl.State.acks.queued.Add(-1)
	}
}

// ackRoomFull reports whether the reader must wait before reading on: the
// receive quota is used up while deferred acks, which give it back, wait.
func (cl *Client) ackRoomFull() bool {
	return cl.State.acks.n.Load() > 0 && atomic.LoadInt32(&cl.State.Inflight.receiveQuota) <= 0
}

// waitForAckRoom blocks the reader until a deferred ack goes, the
// connection starts to end (a takeover or a failed write: the reader must
// go on to find a DISCONNECT) or the client is stopped. No timeout: the
// hook answers every deferred ack, and a client stopped meanwhile ends the
// wait.
//
//go:noinline
func (cl *Client) waitForAckRoom() {
	a := &cl.State.acks
	for cl.ackRoomFull() && !cl.State.draining.Load() {
		select {
		case <-a.room:
		case <-cl.Done():
			return
		}
	}
}
