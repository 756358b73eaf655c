package amqp

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"net"
	"slices"
	"time"

	"github.com/tolsey/tolsey/amqp/internal/buffer"
	"github.com/tolsey/tolsey/amqp/internal/frames"
	"github.com/tolsey/tolsey/core/queue"
)

// writer is a connection's writer goroutine. It owns the socket's write
// side (through a buffered frames.Writer, flushed when it runs out of
// work), heartbeats, and the outgoing half of every session: transfer
// ids, the peer's incoming window, delivery ids, link credit and our
// unsettled deliveries.
type writer struct {
	c         *conn
	sock      *sockWriter
	bw        *bufio.Writer
	fw        *frames.Writer
	maxFrame  uint32        // the largest frame we send: min(ours, the peer's)
	heartbeat time.Duration // half the peer's idle time-out; 0: none asked
	wrote     bool          // a frame went out since the last heartbeat tick
	closed    bool          // close is written: nothing more goes out
	err       error         // the socket failed
	now       time.Time

	enc   encoder
	msg   buffer.Buffer // the encoded message being sent
	tr    frames.Transfer
	trID  uint32
	trFmt uint32 // message-format 0
	tag   [4]byte
	spare []*outLink
	disp  frames.Disposition // the outcome of a held publish being written
	last  uint32             // disp.Last, when disp covers a range
	// answeredSpare is the answered list the writer sent last, emptied,
	// for the holders to fill next (no allocation per pass).
	answeredSpare []heldOutcome
	// While dispositions are applied (peerDispositions): the queue
	// deliveries accepted, of consumer ackQC, not acknowledged yet, and
	// the links that left their unsettled bound.
	ackQC  *queue.Consumer
	ackIDs []uint64
	freed  []*outLink
	// While pump sends from a queue: the deliveries taken from its
	// consumer, qbuf[qnext:] not sent yet.
	qbuf  []queue.Delivery
	qnext int
}

// maxTakeQueued bounds the deliveries pump takes from a queue at once.
const maxTakeQueued = 64

// transferOverhead bounds the frame header plus a transfer performative
// with every field we set (see TestTransferOverhead).
const transferOverhead = 64

func newWriter(c *conn, peer *frames.Open) *writer {
	maxFrame := c.s.opts.MaxFrameSize
	peerMax := uint32(frames.MinMaxFrameSize) // before the peer's open, 512 [2.7.1]
	var hb time.Duration
	if peer != nil {
		peerMax = peer.MaxFrameSize // 0: absent, no limit
		if peerMax != 0 && peerMax < frames.MinMaxFrameSize {
			peerMax = frames.MinMaxFrameSize
		}
		if peer.IdleTimeOut > 0 {
			// Heartbeats at half the peer's time-out, but never a storm.
			hb = max(time.Duration(peer.IdleTimeOut)*time.Millisecond/2, 100*time.Millisecond)
		}
	}
	if peerMax != 0 && peerMax < maxFrame {
		maxFrame = peerMax
	}
	// Small frames batch into one write; a frame larger than the buffer
	// goes straight to the socket. 8 KiB keeps idle connections cheap.
	sock := &sockWriter{c: c, timeout: c.s.opts.WriteTimeout}
	bw := bufio.NewWriterSize(sock, 8<<10)
	return &writer{c: c, sock: sock, bw: bw, fw: frames.NewWriter(bw, maxFrame), maxFrame: maxFrame, heartbeat: hb}
}

// sockWriter is the socket as the writer goroutine writes it. With a
// WriteTimeout, each write (at most a buffer of 8 KiB or one frame) must
// be done within it. Without one, a client that grants credit and stops
// reading its socket held its connection for ever: the write blocked, the
// heartbeats queued behind it, and the client's own heartbeats kept the
// idle time-out from firing.
type sockWriter struct {
	c        *conn
	timeout  time.Duration // 0: no deadline of ours
	timedOut bool          // a write missed our deadline (not a closing connection's)
}

func (s *sockWriter) Write(p []byte) (int, error) {
	n, err := s.write(p)
	s.c.stats.bytesOut.Add(int64(n))
	return n, err
}

func (s *sockWriter) write(p []byte) (int, error) {
	if s.timeout == 0 {
		return s.c.nc.Write(p)
	}
	if s.c.armWrite(s.timeout) {
		return s.c.nc.Write(p) // closing: the close bound applies
	}
	n, err := s.c.nc.Write(p)
	var ne net.Error
	if err != nil && errors.As(err, &ne) && ne.Timeout() && !s.c.closing() {
		s.timedOut = true
	}
	return n, err
}

func (w *writer) run() {
	c := w.c
	defer close(c.wdone)
	var tick <-chan time.Time
	if w.heartbeat > 0 {
		t := time.NewTicker(w.heartbeat)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case it := <-c.out:
			w.now = time.Now()
			w.item(it)
		case <-c.wake:
		case <-tick:
			if !w.wrote {
				w.write(0, nil, nil) // an empty frame [2.4.5]
			}
			w.wrote = false
		case <-c.stop:
			w.drainQueue()
			w.flush()
			return
		}
		w.now = time.Now()
		w.drainQueue()
		w.writeAnswered()
		w.pumpReady()
		w.flush()
		if w.err != nil {
			if w.sock.timedOut {
				// Nothing more can reach this client, not even a close
				// frame: drop the socket.
				c.log.Info("amqp connection closed: the client did not read what the gateway sent", "write_timeout", w.sock.timeout)
				c.s.counters.disconnected(reasonWriteTimeout)
			} else {
				c.log.Debug("amqp write failed", "error", w.err)
			}
			c.nc.Close() // the reader notices and finishes
			return
		}
	}
}

// drainQueue handles what is queued without blocking.
func (w *writer) drainQueue() {
	for {
		select {
		case it := <-w.c.out:
			w.item(it)
		default:
			return
		}
	}
}

func (w *writer) item(it outItem) {
	if w.closed || w.err != nil {
		return
	}
	if it.do != nil {
		it.do(w)
	}
	if it.body == nil {
		return
	}
	var ch uint16
	if s := it.sess; s != nil {
		ch = s.ch
		if f, ok := it.body.(*frames.Flow); ok {
			f.NextOutgoingID = s.w.nextOutgoingID
			f.OutgoingWindow = outgoingWindow
		}
	}
	w.write(ch, it.body, nil)
	if it.close {
		w.flush()
		w.closed = true
	}
}

func (w *writer) write(ch uint16, body frames.Performative, payload []byte) {
	if w.err != nil || w.closed {
		return
	}
	if err := w.fw.WriteFrame(ch, body, payload); err != nil {
		w.err = err
		return
	}
	w.wrote = true
}

func (w *writer) flush() {
	if w.err == nil && w.bw.Buffered() > 0 {
		w.err = w.bw.Flush()
	}
}

// writeAnswered sends the outcomes of held publishes (heldPublish),
// except for sessions that ended meanwhile: their deliveries are gone.
// A run of consecutive delivery ids of one session, all accepted, goes
// out as one disposition of the range first..last [2.7.6]: a queue's
// group commit answers its appends together, in order, so a sender with
// many unsettled messages gets one frame per commit instead of one per
// message (and the client reads one).
func (w *writer) writeAnswered() {
	c := w.c
	c.answeredMu.Lock()
	list := c.answered
	c.answered = w.answeredSpare
	c.answeredMu.Unlock()
	for i := 0; i < len(list); {
		a := list[i]
		j := i + 1
		if a.state == stateAccepted {
			// A run ends before the delivery-id wraps: first..last stays
			// ascending for a client that walks it numerically.
			for j < len(list) && list[j].s == a.s && list[j].state == a.state && list[j-1].id != math.MaxUint32 && list[j].id == list[j-1].id+1 {
				j++
			}
		}
		if !a.s.w.ended {
			w.disp = frames.Disposition{Role: frames.RoleReceiver, First: a.id, Settled: true, State: a.state}
			if j-i > 1 {
				w.last = list[j-1].id
				w.disp.Last = &w.last
			}
			w.write(a.s.ch, &w.disp, nil)
		}
		i = j
	}
	clear(list) // the sessions and states are not kept alive by the spare
	w.answeredSpare = list[:0]
}

// pumpReady sends from every link that got new messages.
func (w *writer) pumpReady() {
	c := w.c
	c.readyMu.Lock()
	list := c.ready
	c.ready = w.spare
	c.readyMu.Unlock()
	for i, l := range list {
		l.mu.Lock()
		l.ready = false
		l.mu.Unlock()
		w.pump(l)
		list[i] = nil
	}
	w.spare = list[:0]
}

// attachOut starts sending on l (its attach answer is written next).
func (w *writer) attachOut(l *outLink) {
	l.attached = true
	l.sess.w.links = append(l.sess.w.links, l)
}

// detachOut stops sending on l; its detach is written next, unless it
// reports false: l was detached already.
func (w *writer) detachOut(l *outLink) bool {
	if l.detached {
		return false
	}
	l.detached = true
	s := l.sess
	for i, x := range s.w.links {
		if x == l {
			s.w.links = append(s.w.links[:i], s.w.links[i+1:]...)
			break
		}
	}
	var back []queued
	if l.partial != nil {
		// A delivery cut short: abort it rather than leave it dangling [2.6.14].
		w.tr = frames.Transfer{Handle: l.handle, Settled: true, Aborted: true}
		w.write(s.ch, &w.tr, nil)
		if l.partialSettled { // an unsettled one is among l's unsettled
			back = append(back, l.partialMsg)
		}
		l.partial = nil
	}
	l.partialMsg = queued{}
	back = append(takeUnsettled(s, l), back...)
	if l.group != nil {
		l.group.requeue(back)
	}
	// After every disposition the peer sent before its detach: what it
	// settled stays settled, the rest is delivered again.
	w.c.closeLinkConsumers(l)
	return true
}

// takeUnsettled removes l's unsettled deliveries from s, returning their
// messages in delivery order (for a durable subscription to send again).
func takeUnsettled(s *session, l *outLink) []queued {
	if l.unsettled == 0 {
		return nil
	}
	ids := make([]uint32, 0, l.unsettled)
	for id, p := range s.w.unsettled {
		if p.l == l {
			ids = append(ids, id)
		}
	}
	slices.SortFunc(ids, func(a, b uint32) int { return int(int32(a - b)) }) // serial number order
	out := make([]queued, 0, len(ids))
	for _, id := range ids {
		out = append(out, s.w.unsettled[id].q)
		delete(s.w.unsettled, id)
	}
	l.unsettled = 0
	return out
}

// endSession stops sending on every link of s (its end is written next).
func (w *writer) endSession(s *session) {
	s.requeueAll()
	s.w.ended = true
}

// requeueAll stops sending on every link of s and gives what they had not
// delivered back to their durable subscriptions. Called by the writer, or
// by the reader once the writer has exited.
func (s *session) requeueAll() {
	for _, l := range s.w.links {
		l.detached = true
		back := takeUnsettled(s, l)
		if l.partial != nil && l.partialSettled {
			back = append(back, l.partialMsg)
		}
		l.partial, l.partialMsg = nil, queued{}
		if l.group != nil {
			l.group.requeue(back)
		}
		s.c.closeLinkConsumers(l)
	}
	s.w.links = nil
	clear(s.w.unsettled)
}

// peerFlow applies a flow from the peer: its session window, and the
// credit of the link we send on (out, when the flow names one).
func (w *writer) peerFlow(s *session, f *frames.Flow, out *outLink) {
	if s.w.ended {
		return
	}
	var nextIn uint32 // the peer's next-incoming-id; absent: our initial id, 0
	if f.NextIncomingID != nil {
		nextIn = *f.NextIncomingID
	}
	s.w.remoteIncomingWindow = remoteWindow(nextIn, f.IncomingWindow, s.w.nextOutgoingID)
	switch {
	case out != nil && out.attached && !out.detached:
		if f.LinkCredit != nil {
			var dc uint32 // the receiver's delivery-count; absent: our initial, 0
			if f.DeliveryCount != nil {
				dc = *f.DeliveryCount
			}
			// link-credit(snd) = delivery-count(rcv) + link-credit(rcv) - delivery-count(snd) [2.6.7]
			out.credit = dc + *f.LinkCredit - out.deliveryCount
			if int32(out.credit) < 0 {
				out.credit = 0
			}
			out.showCredit(out.credit)
		}
		if f.Drain {
			out.drainPending = true
		}
		if f.Echo {
			w.linkFlow(out, false)
		}
	case f.Handle == nil && f.Echo:
		w.sessionFlow(s)
	}
	// The window may have opened: every link of the session may send.
	for _, l := range s.w.links {
		w.pump(l)
	}
}

// remoteWindow is the peer's remaining incoming window [2.5.6]:
// next-incoming-id(peer) + incoming-window(peer) - next-outgoing-id(ours),
// in serial-number arithmetic on the transfers still on their way to it.
// A window of 2^31 or more is usual (Proton, Qpid JMS announce up to
// 2^32-1): it must not read as negative. A peer whose next-incoming-id is
// ahead of what we sent has nothing of ours in flight.
func remoteWindow(nextIn, window, nextOut uint32) uint32 {
	inFlight := nextOut - nextIn
	switch {
	case int32(inFlight) < 0:
		return window
	case inFlight >= window:
		return 0
	}
	return window - inFlight
}

// peerDisp is a disposition the peer sent about deliveries we sent, on
// its way from the reader to the writer.
type peerDisp struct {
	s *session
	d *frames.Disposition
}

// sendDispositions hands the peer's dispositions read so far to the
// writer as one item: one channel operation, and one wake of the writer,
// for a burst of them (a receiver that accepts each message sends one
// disposition each), and the writer acknowledges the queue deliveries
// they accept together (queue.Consumer.AckAll). On the reader.
func (c *conn) sendDispositions() error {
	list := c.peerDisps
	if len(list) == 0 {
		return nil
	}
	c.dispMu.Lock()
	c.peerDisps, c.dispSpare = c.dispSpare, nil
	c.dispMu.Unlock()
	return c.sendItem(outItem{do: func(w *writer) { w.peerDispositions(list) }})
}

// peerDispositions applies the peer's dispositions in the order it sent
// them, then gives the list back to the reader.
func (w *writer) peerDispositions(list []peerDisp) {
	for _, pd := range list {
		w.applyDisposition(pd.s, pd.d)
	}
	w.endDispositions()
	clear(list)
	c := w.c
	c.dispMu.Lock()
	c.dispSpare = list[:0]
	c.dispMu.Unlock()
}

// ackQueued notes the acceptance of queue delivery id of qc; the
// acceptances of one consumer in a row are acknowledged together
// (flushAcks).
func (w *writer) ackQueued(qc *queue.Consumer, id uint64) {
	if qc != w.ackQC {
		w.flushAcks()
		w.ackQC = qc
	}
	w.ackIDs = append(w.ackIDs, id)
}

// flushAcks acknowledges the acceptances noted by ackQueued.
func (w *writer) flushAcks() {
	if len(w.ackIDs) > 0 {
		w.ackQC.AckAll(w.ackIDs)
	}
	w.ackQC, w.ackIDs = nil, w.ackIDs[:0]
}

// endDispositions finishes applying dispositions: the acceptances noted
// are acknowledged, then the links that had reached their unsettled
// bound send again.
func (w *writer) endDispositions() {
	w.flushAcks()
	freed := w.freed
	for i, l := range freed {
		w.pump(l)
		freed[i] = nil
	}
	w.freed = freed[:0]
}

// applyDisposition applies one disposition of the peer; the acceptances
// of queue deliveries and the links to pump wait for endDispositions.
func (w *writer) applyDisposition(s *session, d *frames.Disposition) {
	if s.w.ended {
		return
	}
	last := d.First
	if d.Last != nil {
		last = *d.Last
	}
	var settleBack bool
	var alive *outLink // the last blocking topic link settled on: told once per run
	ts, inTxn := d.State.(*frames.TransactionalState)
	eachID(d.First, last, s.w.unsettled, func(id uint32, p pending) {
		l := p.l
		if !d.Settled && !l.second && (!inTxn || ts.Outcome == nil) {
			// A state without settlement (received): the peer settles
			// later. An outcome in a transaction is final [4.4.3]: the
			// discharge applies it.
			return
		}
		settleBack = settleBack || !d.Settled
		delete(s.w.unsettled, id)
		if l.unsettled == w.c.s.opts.LinkBuffer {
			w.freed = append(w.freed, l)
		}
		l.unsettled--
		if inTxn {
			w.c.txnAck(ts, p) // txn.go
			return
		}
		if p.qc != nil {
			if accepts(d.State) {
				w.ackQueued(p.qc, p.qid)
				return
			}
			settleQueued(p.qc, p.qid, d.State)
			return
		}
		w.countOutcome(d.State)
		if l.block && l != alive {
			alive = l
			l.alive() // a publisher waiting for room on it waits on (offer)
		}
	})
	if settleBack {
		// rcv-settle-mode second: the peer told its outcome; now we
		// settle, and it settles after us [2.6.12].
		w.write(s.ch, &frames.Disposition{Role: frames.RoleSender, First: d.First, Last: d.Last, Settled: true, State: d.State}, nil)
	}
}

// countOutcome counts a delivery the client did not accept: for a topic
// there is nobody to give it back to.
func (w *writer) countOutcome(st frames.DeliveryState) {
	switch st.(type) {
	case *frames.Rejected:
		w.c.s.opts.Metrics.Drop("amqp", "rejected")
	case *frames.Released:
		w.c.s.opts.Metrics.Drop("amqp", "released")
	case *frames.Modified:
		w.c.s.opts.Metrics.Drop("amqp", "modified")
	}
}

// pump sends from l's queue as credit, the session window and the
// unsettled bound allow, then answers a drain.
func (w *writer) pump(l *outLink) {
	if !l.attached || l.detached || w.closed || w.err != nil {
		return
	}
	if l.qgone.Load() {
		w.detachDeleted(l)
		return
	}
	if l.revoked.Load() {
		w.detachRevoked(l)
		return
	}
	s := l.sess
	maxUnsettled := w.c.s.opts.LinkBuffer
	empty := false    // a queue link's consumer had nothing for it
	altEmpty := false // neither had a topic link's live queue nor its alternates
	for s.w.remoteIncomingWindow > 0 {
		if l.partial != nil {
			w.transfers(l, 0, false, l.partial, l.partialSettled, true)
			continue
		}
		if l.credit == 0 || l.unsettled >= maxUnsettled {
			break
		}
		if l.qc != nil {
			if w.qnext == len(w.qbuf) {
				// As many as credit, the unsettled bound and the session
				// window let go out, under one lock of the queue.
				n := min(l.credit, uint32(maxUnsettled-l.unsettled), s.w.remoteIncomingWindow, maxTakeQueued)
				w.qbuf, w.qnext = l.nextQueued(w.qbuf[:0], int(n)), 0
				if len(w.qbuf) == 0 {
					empty = true
					break
				}
			}
			d := w.qbuf[w.qnext]
			w.qnext++
			if l.skipUnreadable(l.qc, d) {
				continue
			}
			w.sendDelivery(l, queued{m: d.Msg}, &d, l.qc)
			continue
		}
		if len(l.alts) > 0 {
			// Parked and live messages take turns, so that neither
			// starves the other (docs/queues.md, "Alternate destinations").
			l.altTurn = !l.altTurn
			if l.altTurn && w.sendAlternate(l) {
				continue
			}
		}
		q, ok := l.pop()
		if !ok {
			if len(l.alts) > 0 && w.sendAlternate(l) {
				continue
			}
			altEmpty = true
			break
		}
		if q.m.Expired(w.now) {
			w.c.s.opts.Metrics.Drop("amqp", "expired")
			continue
		}
		w.sendDelivery(l, q, nil, nil)
	}
	if l.qc != nil && w.qnext < len(w.qbuf) {
		// Taken, not sent (the window closed mid-message): back as they
		// were, for the next pump.
		l.qc.Unget(w.qbuf[w.qnext:])
	}
	clear(w.qbuf) // the messages are not kept alive by the writer
	w.qbuf, w.qnext = w.qbuf[:0], 0
	if l.qc == nil {
		empty = l.queuedLen() == 0 && (len(l.alts) == 0 || altEmpty)
	}
	if l.drainPending && l.partial == nil && (l.credit == 0 || empty) {
		// Drain: use up the credit we cannot fill [2.6.7].
		l.deliveryCount += l.credit
		l.credit = 0
		l.showCredit(0)
		l.drainPending = false
		w.linkFlow(l, true)
	}
}

// sendDelivery sends q on l; d is the queue delivery it is, from qc, or nil.
func (w *writer) sendDelivery(l *outLink, q queued, d *queue.Delivery, qc *queue.Consumer) {
	s := l.sess
	m := q.m
	srv := w.c.s
	replyKind := int8(-1)
	if m.ResponseTopic != "" {
		replyKind = srv.jmsKindFor(m.ResponseTopic)
	}
	var h deliveryHeader
	settled := false
	if d != nil {
		settled = l.queueSettled()
		// first-acquirer: no earlier acquirer may have seen it [3.2.1];
		// a browser acquires nothing.
		h = deliveryHeader{count: d.DeliveryCount, firstAcquirer: !d.Redelivered && !l.browse}
	} else {
		settled = l.presettle(m)
	}
	var payload []byte
	var err error
	encode := func() error {
		if encodeHook != nil {
			encodeHook()
		}
		return w.enc.encode(&w.msg, m, q.retained, srv.jmsKindFor(m.Topic), replyKind, h, w.now)
	}
	if q.enc != nil && d == nil {
		payload, err = w.sharedBytes(q.enc, encode)
	} else {
		w.msg.Reset()
		err = encode()
		payload = w.msg.Written()
	}
	if err != nil {
		w.c.log.Warn("amqp message not encodable", "topic", m.Topic, "error", err)
		srv.opts.Metrics.Drop("amqp", "encode")
		if d != nil && !l.browse {
			qc.Reject(d.ID) // it never will be: to the dead-letter queue
		}
		return
	}
	id := s.w.nextDeliveryID
	s.w.nextDeliveryID++
	l.credit--
	l.deliveryCount++
	l.showCredit(l.credit)
	w.c.stats.msgsOut.Add(1)
	switch {
	case !settled:
		p := pending{l: l, q: q}
		if d != nil {
			p.qid, p.qc = d.ID, qc
		}
		s.w.unsettled[id] = p
		l.unsettled++
	case d != nil && !l.browse:
		qc.Ack(d.ID) // snd-settle-mode settled: at most once
	}
	if q.retained {
		srv.out.Out(time.Time{})
	} else {
		srv.out.Out(m.Created)
	}
	l.partialMsg = q
	w.transfers(l, id, true, payload, settled, false)
	if l.partial == nil {
		l.partialMsg = queued{}
	}
	if cap(w.msg.Written()) > 1<<20 {
		w.msg = buffer.Buffer{} // give back the memory of an unusually large message
	}
}

// transfers writes a delivery's payload in frames of at most maxFrame.
// When the peer's session window runs out mid-message, the rest waits in
// l.partial (copied unless it already is l.partial: owned).
func (w *writer) transfers(l *outLink, id uint32, first bool, payload []byte, settled, owned bool) {
	s := l.sess
	room := int(w.maxFrame) - transferOverhead
	for {
		n := min(len(payload), room)
		more := n < len(payload)
		w.tr = frames.Transfer{Handle: l.handle, Settled: settled, More: more}
		if first {
			w.trID = id
			binary.BigEndian.PutUint32(w.tag[:], id)
			w.tr.DeliveryID, w.tr.DeliveryTag, w.tr.MessageFormat = &w.trID, w.tag[:], &w.trFmt
			first = false
		}
		w.write(s.ch, &w.tr, payload[:n])
		s.w.nextOutgoingID++
		if s.w.remoteIncomingWindow > 0 {
			s.w.remoteIncomingWindow--
		}
		payload = payload[n:]
		if !more {
			l.partial, l.partialMsg = nil, queued{}
			return
		}
		if s.w.remoteIncomingWindow == 0 || w.err != nil {
			if !owned {
				payload = bytes.Clone(payload)
			}
			l.partial, l.partialSettled = payload, settled
			return
		}
	}
}

// linkFlow tells the peer the state of a link we send on.
func (w *writer) linkFlow(l *outLink, drain bool) {
	s := l.sess
	avail := uint32(l.queuedLen())
	f := frames.Flow{
		NextIncomingID: ptr(s.nextIncomingID.Load()),
		IncomingWindow: s.incomingWindow.Load(),
		NextOutgoingID: s.w.nextOutgoingID,
		OutgoingWindow: outgoingWindow,
		Handle:         &l.handle,
		DeliveryCount:  &l.deliveryCount,
		LinkCredit:     &l.credit,
		Available:      &avail,
		Drain:          drain,
	}
	w.write(s.ch, &f, nil)
}

// sessionFlow answers a session flow that asked for an echo.
func (w *writer) sessionFlow(s *session) {
	f := s.flowFrame()
	f.NextOutgoingID = s.w.nextOutgoingID
	f.OutgoingWindow = outgoingWindow
	w.write(s.ch, f, nil)
}
