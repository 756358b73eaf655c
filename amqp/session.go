package amqp

import (
	"errors"
	"sync/atomic"

	"github.com/tolsey/tolsey/amqp/internal/frames"
	"github.com/tolsey/tolsey/core/queue"
)

// session is one AMQP session (part 2 section 2.5): a channel, its
// transfer windows and its links. The reader goroutine owns everything
// about what the peer sends; the writer goroutine owns w, everything about
// what we send.
type session struct {
	c  *conn
	ch uint16 // our channel, the same number as the peer's

	// Owned by the reader goroutine.
	links     map[uint32]endpoint // by handle (ours mirrors the peer's)
	gone      map[uint32]bool     // handles the peer detached, until attached again
	ending    bool                // we sent end with an error and wait for the peer's
	second    map[uint32]*inLink  // received deliveries the peer has yet to settle (rcv-settle-mode second)
	disp      []dispRange         // dispositions batched until the reader would block
	credit    []*inLink           // links whose credit flow is batched likewise
	windowLow bool                // the incoming window fell below half: top it up
	attaching *frames.Attach      // the attach being answered, for keep's noteLink
	dirty     bool                // on conn.dirty

	// Written by the reader only; the writer reads them for the flows it
	// writes (next-incoming-id and incoming-window are ours to announce).
	nextIncomingID atomic.Uint32
	incomingWindow atomic.Uint32

	// Owned by the writer goroutine (set up by the reader before the begin
	// answer is queued, which hands it over).
	w sessionOut
}

// sessionOut is the outgoing half of a session, owned by the writer.
type sessionOut struct {
	nextOutgoingID       uint32
	remoteIncomingWindow uint32
	nextDeliveryID       uint32
	links                []*outLink
	unsettled            map[uint32]pending // our unsettled deliveries by delivery-id
	ended                bool
}

// pending is a delivery we sent and the peer has not settled. The message
// is kept so that a durable subscription gets it back if the link goes.
type pending struct {
	l   *outLink
	q   queued
	qid uint64          // the queue delivery's ID
	qc  *queue.Consumer // the consumer qid settles on (l.qc, or one of l.alts); nil: a topic delivery
}

// dispRange is a batched disposition for deliveries first..last we received.
type dispRange struct {
	first, last uint32
	settled     bool
	state       frames.DeliveryState
}

// endpoint is an attached link: *inLink or *outLink.
type endpoint interface {
	base() *linkBase
	// teardown releases the link's resources (router subscription,
	// partial deliveries) without telling the peer. closed is the
	// detach's closed flag: false keeps a durable subscription.
	teardown(closed bool)
}

// linkBase is what every link has.
type linkBase struct {
	sess       *session
	name       string
	handle     uint32 // the peer's handle and ours
	detachSent bool   // we detached with an error and wait for the peer's detach
	// shownCredit is the link's credit for the admin API (showCredit),
	// stored by the goroutine that owns the credit.
	shownCredit atomic.Uint32
	refused     bool   // refused at attach: never attached (counted in conn.refusing)
	tmpQueue    string // the temporary queue this link's attach created, deleted with it
}

// refusedLink holds the handle of a link refused before anything was made
// for it, until the peer's detach answers ours.
type refusedLink struct{ linkBase }

func (*refusedLink) teardown(bool) {}

func (b *linkBase) base() *linkBase { return b }

func newSession(c *conn, ch uint16, b *frames.Begin) *session {
	s := &session{c: c, ch: ch, links: map[uint32]endpoint{}, gone: map[uint32]bool{}, second: map[uint32]*inLink{}}
	s.nextIncomingID.Store(b.NextOutgoingID)
	s.incomingWindow.Store(sessionWindow)
	s.w = sessionOut{remoteIncomingWindow: b.IncomingWindow, unsettled: map[uint32]pending{}}
	return s
}

// handle dispatches a performative on this session's channel.
func (s *session) handle(p frames.Performative, payload []byte) error {
	if s.ending {
		// After our end, only the peer's end matters [2.5.5].
		if _, ok := p.(*frames.End); ok {
			delete(s.c.sessions, s.ch)
		}
		return nil
	}
	switch p := p.(type) {
	case *frames.Transfer:
		return s.transfer(p, payload)
	case *frames.Flow:
		return s.flow(p)
	case *frames.Disposition:
		return s.disposition(p)
	case *frames.Attach:
		return s.attach(p)
	case *frames.Detach:
		return s.detach(p)
	case *frames.End:
		return s.end(p)
	}
	return connErr(frames.ErrCondNotAllowed, "%s in an AMQP frame", performativeName(p))
}

// fail ends the session with an error; the connection goes on.
func (s *session) fail(e *SessionError) error {
	s.c.log.Info("amqp session ended", "channel", s.ch, "condition", string(e.Cond), "description", e.Desc)
	s.teardown()
	s.ending = true
	return s.c.send(outItem{sess: s, body: &frames.End{Error: wireError(e.Cond, e.Desc)}, do: func(w *writer) { w.endSession(s) }})
}

// end answers the peer's end.
func (s *session) end(e *frames.End) error {
	if e.Error != nil {
		s.c.log.Info("amqp session ended by client with an error", "channel", s.ch, "condition", string(e.Error.Condition), "description", e.Error.Description)
	}
	s.teardown()
	s.ending = true
	delete(s.c.sessions, s.ch)
	return s.c.send(outItem{sess: s, body: &frames.End{}, do: func(w *writer) { w.endSession(s) }})
}

// keep puts ep on its handle, counted against the connection's limits,
// and (attached) in the admin API's list: before its attach answer is
// queued, so that a client that has the answer finds it listed.
func (s *session) keep(ep endpoint) {
	s.links[ep.base().handle] = ep
	if a := s.attaching; a != nil && !ep.base().refused {
		s.c.noteLink(ep, a)
	}
	if l, ok := ep.(*outLink); ok && !ep.base().refused {
		s.c.watchACL(l)
	}
	if ep.base().refused {
		s.c.refusing++
	} else {
		s.c.links++
	}
}

// forget takes the link on handle h off the session and the counts.
func (s *session) forget(h uint32) {
	ep := s.links[h]
	if ep == nil {
		return
	}
	delete(s.links, h)
	s.c.dropLink(ep)
	if ep.base().refused {
		s.c.refusing--
	} else {
		s.c.links--
	}
}

// teardown releases every link's resources.
func (s *session) teardown() {
	for h, ep := range s.links {
		ep.teardown(false)
		s.forget(h)
	}
	clear(s.gone)
	clear(s.second)
	s.disp = s.disp[:0]
	s.credit = s.credit[:0]
}

func (s *session) attach(a *frames.Attach) error {
	c := s.c
	if hm := c.handleMax(); a.Handle > hm {
		// "A peer that receives a handle outside the supported range MUST
		// close the connection with the framing-error error-code" [2.7.2].
		c.s.counters.refused(limitLinks)
		return connErr(frames.ErrCondFramingError, "attach with handle %d, above the handle-max %d the gateway announced", a.Handle, hm)
	}
	if _, ok := s.links[a.Handle]; ok {
		return sessionErr(frames.ErrCondHandleInUse, "attach with handle %d, which is already attached", a.Handle)
	}
	delete(s.gone, a.Handle)
	if limit := c.s.opts.MaxLinksPerConnection; c.links >= limit {
		// Checked before anything is made for the link: no subscription,
		// no retained feeder, no queue.
		c.s.counters.refused(limitLinks)
		return s.refuse(&refusedLink{linkBase{sess: s, name: a.Name, handle: a.Handle}}, refusalReply(a),
			linkErr(frames.ErrCondResourceLimitExceeded, "the connection has %d links, the most the gateway allows (amqp.maxLinksPerConnection)", limit))
	}
	s.attaching = a
	defer func() { s.attaching = nil }()
	if a.Role == frames.RoleSender {
		return s.attachIn(a) // the client sends, we receive
	}
	return s.attachOut(a)
}

// refusalReply is the attach that answers a refused one: our role, the
// peer's terminus echoed and ours null [2.6.3].
func refusalReply(a *frames.Attach) *frames.Attach {
	reply := &frames.Attach{Name: a.Name, Handle: a.Handle, SndSettleMode: a.SndSettleMode, RcvSettleMode: a.RcvSettleMode}
	if a.Role == frames.RoleSender {
		reply.Role, reply.Source = frames.RoleReceiver, a.Source
	} else {
		reply.Role, reply.Target, reply.InitialDeliveryCount = frames.RoleSender, a.Target, ptr(uint32(0))
	}
	return reply
}

// refuse answers an attach the spec's way (part 2 section 2.6.3): an attach
// without our terminus, then a detach with the error. The handle stays
// taken until the peer answers the detach; a peer that leaves more than
// MaxLinksPerConnection such handles unanswered is disconnected (limits.go).
func (s *session) refuse(ep endpoint, reply *frames.Attach, e *LinkError) error {
	b := ep.base()
	if s.c.refusing >= s.c.s.opts.MaxLinksPerConnection {
		s.c.s.counters.disconnected(reasonUnansweredRefusals)
		return connErr(frames.ErrCondResourceLimitExceeded, "%d refused links not detached by the client", s.c.refusing)
	}
	b.detachSent = true
	b.refused = true
	s.keep(ep)
	s.c.log.Debug("amqp link refused", "link", b.name, "condition", string(e.Cond), "description", e.Desc)
	if err := s.c.send(outItem{sess: s, body: reply}); err != nil {
		return err
	}
	return s.c.send(outItem{sess: s, body: &frames.Detach{Handle: b.handle, Closed: true, Error: wireError(e.Cond, e.Desc)}})
}

// linkFail detaches an attached link with an error.
func (s *session) linkFail(ep endpoint, e *LinkError) error {
	b := ep.base()
	if b.detachSent {
		return nil
	}
	s.c.log.Info("amqp link detached", "link", b.name, "condition", string(e.Cond), "description", e.Desc)
	b.detachSent = true
	ep.teardown(false)
	s.c.dropTempQueue(b)
	return s.c.send(detachItem(s, ep, &frames.Detach{Handle: b.handle, Closed: true, Error: wireError(e.Cond, e.Desc)}))
}

// detachItem is the work of sending detach d for ep. For a link we send
// on, the writer sends it only if it has not detached the link itself
// (its queue was deleted: writer.detachDeleted), so that the peer never
// gets two detaches for one link: the peer's detach, answer or not, then
// needs no answer.
func detachItem(s *session, ep endpoint, d *frames.Detach) outItem {
	l, ok := ep.(*outLink)
	if !ok {
		return outItem{sess: s, body: d}
	}
	return outItem{sess: s, do: func(w *writer) {
		if w.detachOut(l) {
			w.write(s.ch, d, nil)
		}
	}}
}

func (s *session) detach(d *frames.Detach) error {
	ep := s.links[d.Handle]
	if ep == nil {
		if s.gone[d.Handle] {
			return nil
		}
		return sessionErr(frames.ErrCondUnattachedHandle, "detach of handle %d, which is not attached", d.Handle)
	}
	s.forget(d.Handle)
	s.gone[d.Handle] = true
	if ep.base().detachSent {
		return nil // the answer to our detach
	}
	if d.Error != nil {
		s.c.log.Info("amqp link detached by client with an error", "link", ep.base().name, "condition", string(d.Error.Condition), "description", d.Error.Description)
	}
	ep.teardown(d.Closed)
	if d.Closed {
		s.c.dropTempQueue(ep.base())
		if l, ok := ep.(*outLink); ok && l.subQueue != "" {
			// The unsubscribe closes l's consumer here, on the reader:
			// after the writer has applied the peer's dispositions read
			// before the detach, or what they accepted goes back to the
			// queue, for another link of the subscription to get again.
			if err := s.c.syncWriter(); err != nil {
				return err
			}
			s.c.unsubscribe(l) // JMS unsubscribe: a durable subscription ends
		}
	}
	return s.c.send(detachItem(s, ep, &frames.Detach{Handle: d.Handle, Closed: d.Closed}))
}

func (s *session) transfer(t *frames.Transfer, payload []byte) error {
	w := s.incomingWindow.Load()
	if w == 0 {
		return sessionErr(frames.ErrCondWindowViolation, "transfer beyond the incoming-window")
	}
	s.incomingWindow.Store(w - 1)
	s.nextIncomingID.Add(1)
	if w-1 < sessionWindow/2 && !s.windowLow {
		s.windowLow = true
		s.c.markDirty(s)
	}
	ep := s.links[t.Handle]
	if ep == nil {
		if s.gone[t.Handle] {
			return nil
		}
		return sessionErr(frames.ErrCondUnattachedHandle, "transfer on handle %d, which is not attached", t.Handle)
	}
	l, ok := ep.(*inLink)
	if !ok {
		return s.linkFail(ep, linkErr(frames.ErrCondNotAllowed, "transfer on a link where the gateway is the sender"))
	}
	if l.detachSent {
		return nil // in flight when we detached
	}
	if err := l.transfer(t, payload); err != nil {
		var le *LinkError
		if errors.As(err, &le) {
			return s.linkFail(l, le)
		}
		return err
	}
	return nil
}

func (s *session) flow(f *frames.Flow) error {
	var out *outLink
	if f.Handle != nil {
		ep := s.links[*f.Handle]
		if ep == nil && !s.gone[*f.Handle] {
			return sessionErr(frames.ErrCondUnattachedHandle, "flow for handle %d, which is not attached", *f.Handle)
		}
		// go-amqp may send a flow after its own detach: the link half of
		// a flow for a handle the peer detached is ignored, not an error.
		switch l := ep.(type) {
		case *inLink:
			l.peerFlow(f)
		case *outLink:
			out = l
		}
	}
	// The session half of every flow, and the credit of a link we send
	// on, belong to the writer.
	return s.c.send(outItem{sess: s, do: func(w *writer) { w.peerFlow(s, f, out) }})
}

func (s *session) disposition(d *frames.Disposition) error {
	if d.Role == frames.RoleReceiver {
		// About deliveries we sent: the writer owns those. They go to it
		// together, before the next item or the next blocking read
		// (conn.sendDispositions).
		// The writer reads the state (a txn-id: txnAck; all of it when
		// it settles back, rcv-settle-mode second) after the reader has
		// read on into the buffer the state aliases: it gets a copy.
		st, err := frames.OwnState(d.State)
		if err != nil {
			return connErr(frames.ErrCondDecodeError, "disposition state: %v", err)
		}
		d.State = st
		s.c.peerDisps = append(s.c.peerDisps, peerDisp{s: s, d: d})
		return nil
	}
	// About deliveries we received and answered without settling
	// (rcv-settle-mode second): the peer settles, we forget them.
	if !d.Settled {
		return nil
	}
	last := d.First
	if d.Last != nil {
		last = *d.Last
	}
	eachID(d.First, last, s.second, func(id uint32, l *inLink) {
		delete(s.second, id)
		l.unsettled--
		l.maybeCredit()
	})
	return nil
}

// eachID calls fn for every key of m in first..last, costing
// O(min(range, len(m))): a peer naming a range of 2^32 ids costs nothing.
func eachID[T any](first, last uint32, m map[uint32]T, fn func(uint32, T)) {
	n := uint64(last-first) + 1
	if n > uint64(len(m)) {
		for id, v := range m {
			if id-first <= last-first {
				fn(id, v)
			}
		}
		return
	}
	for i := uint64(0); i < n; i++ {
		id := first + uint32(i)
		if v, ok := m[id]; ok {
			fn(id, v)
		}
	}
}

// settle batches the disposition of a delivery we received.
func (s *session) settle(id uint32, state frames.DeliveryState, settled bool) {
	if n := len(s.disp); n > 0 {
		d := &s.disp[n-1]
		if d.settled == settled && d.state == state && d.last+1 == id {
			d.last = id
			return
		}
	}
	s.disp = append(s.disp, dispRange{first: id, last: id, settled: settled, state: state})
	s.c.markDirty(s)
}

// flushPending sends the batched dispositions and flows.
func (s *session) flushPending() error {
	if s.ending {
		return nil
	}
	for i := range s.disp {
		d := &s.disp[i]
		df := &frames.Disposition{Role: frames.RoleReceiver, First: d.first, Settled: d.settled, State: d.state}
		if d.last != d.first {
			df.Last = ptr(d.last)
		}
		d.state = nil
		if err := s.c.send(outItem{sess: s, body: df}); err != nil {
			return err
		}
	}
	s.disp = s.disp[:0]
	if s.windowLow {
		s.incomingWindow.Store(sessionWindow)
	}
	sent := false
	for i, l := range s.credit {
		s.credit[i] = nil
		l.creditQueued = false
		if l.detachSent || s.links[l.handle] != l {
			continue
		}
		if err := s.c.send(outItem{sess: s, body: l.flowFrame()}); err != nil {
			return err
		}
		sent = true
	}
	s.credit = s.credit[:0]
	if s.windowLow && !sent {
		if err := s.c.send(outItem{sess: s, body: s.flowFrame()}); err != nil {
			return err
		}
	}
	s.windowLow = false
	return nil
}

// flowFrame is a session flow with our incoming half filled in; the writer
// fills in the outgoing half when it writes it.
func (s *session) flowFrame() *frames.Flow {
	return &frames.Flow{
		NextIncomingID: ptr(s.nextIncomingID.Load()),
		IncomingWindow: s.incomingWindow.Load(),
	}
}
