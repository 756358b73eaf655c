package amqp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tolsey/tolsey/amqp/internal/buffer"
	"github.com/tolsey/tolsey/amqp/internal/encoding"
	"github.com/tolsey/tolsey/amqp/internal/frames"
	"github.com/tolsey/tolsey/core/auth"
	"github.com/tolsey/tolsey/core/limits"
	"github.com/tolsey/tolsey/core/queue"
)

// conn is one client connection. Its reader goroutine (serve) owns the
// protocol state machines and everything the client sends; its writer
// goroutine (writer.run) owns the socket's write side and the state of
// outgoing deliveries. The reader hands the writer work through out.
type conn struct {
	s     *Server
	nc    net.Conn
	id    uint64
	since time.Time // accepted
	log   *slog.Logger

	// Owned by the reader goroutine.
	r           *frames.Reader
	body        buffer.Buffer // decodes each frame's body (loop)
	ident       auth.Identity // who SASL authenticated; the zero Identity when anonymous
	containerID string
	sessions    map[uint16]*session // by channel (ours mirrors the peer's)
	dirty       []*session          // sessions with batched dispositions or flows to send
	temps       []string            // temporary addresses created on this connection
	ownsQueues  bool                // temporary queues were created on this connection
	tmpSeq      uint64
	idle        time.Duration // our idle time-out: the read deadline
	links       int           // attached links of every session (Options.MaxLinksPerConnection)
	refusing    int           // links refused at attach whose detach the peer has yet to answer
	// peerDisps are the peer's dispositions of deliveries we sent, read
	// since they last went to the writer (sendDispositions): a burst of
	// them is one item on out, not one each.
	peerDisps []peerDisp

	// Between the reader and the writer.
	out   chan outItem  // the write queue; only the reader sends on it
	wake  chan struct{} // cap 1: an outgoing link has new messages
	stop  chan struct{} // closed by the reader: the writer writes what is queued and exits
	wdone chan struct{} // closed when the writer has exited

	// Links with new messages, appended by Deliver and the retained
	// feeders, drained by the writer.
	readyMu sync.Mutex
	ready   []*outLink

	forced atomic.Bool // Shutdown asked this connection to close

	// For the admin API (conns_stats.go): counters the reader and the
	// writer add to, the links the reader attached.
	stats   connStats
	linkReg linkRegistry

	// Set at accept, before serve: the connection limits' verdict.
	ticket  limits.Ticket // released when serve returns
	refused string        // why the limits refused it; "" admitted

	// revokedBy is the error a reload closes the connection with
	// (revoke.go), set before forced; nil: Shutdown's connection-forced.
	revokedBy atomic.Pointer[ConnError]

	// opened is set by the reader once ident and containerID are final
	// (after the peer's open), before any link exists: from then on a
	// reload's recheck may read them. authSt is the users file ident was
	// last found the same in (revoke.go).
	opened atomic.Bool
	authSt atomic.Pointer[auth.Store]

	// Receiving links whose ACL decision a reload must revisit
	// (revoke.go): added by the reader at attach, removed at teardown.
	aclMu    sync.Mutex
	aclLinks map[*outLink]struct{}

	// Publishes whose outcome a subscriber holds (core.Delivery.Acks):
	// heldSlots bounds them (the reader waits for a slot, which stops it
	// reading: backpressure), and their outcomes, given on the holder's
	// goroutine, wait in answered for the writer. The holder never blocks
	// on this connection's socket.
	heldSlots  chan struct{}
	answeredMu sync.Mutex
	answered   []heldOutcome

	// dispSpare is the list of the peer's dispositions the writer applied
	// last, emptied, for the reader to fill next (peerDisps).
	dispMu    sync.Mutex
	dispSpare []peerDisp

	// Queue consumers of this connection's links, added by the reader at
	// attach, removed by whoever closes them (the writer, with their link
	// or session); those left are closed when the connection ends.
	consumersMu sync.Mutex
	consumers   map[*queue.Consumer]struct{}

	txns txnTable // local transactions (txn.go); its fields say who owns them

	// The socket's write deadline, set by the writer before each write
	// (Options.WriteTimeout) and by whoever closes the connection, which
	// bounds the writes that remain: wdMu orders the two so that a write
	// cannot push a closing connection's deadline back.
	wdMu    sync.Mutex
	closeBy time.Time // zero until the connection is closing
}

// outItem is one unit of work for the writer: run do (which may touch
// writer-owned state), then write body on the session's channel.
type outItem struct {
	sess  *session // nil: channel 0 (open, close)
	body  frames.Performative
	do    func(w *writer)
	close bool // body is the close frame: nothing is written after it
}

const writeQueue = 64

var errWriterGone = errors.New("amqp: connection writer stopped")

func newConn(s *Server, nc net.Conn) *conn {
	id := s.connSeq.Add(1)
	c := &conn{
		s:        s,
		nc:       nc,
		id:       id,
		since:    time.Now(),
		log:      s.log.With("conn", id, "remote", nc.RemoteAddr().String()),
		sessions: map[uint16]*session{},
		out:      make(chan outItem, writeQueue),
		wake:     make(chan struct{}, 1),
		stop:     make(chan struct{}),
		wdone:    make(chan struct{}),

		heldSlots: make(chan struct{}, maxHeldOutcomes),
		consumers: map[*queue.Consumer]struct{}{},
	}
	c.r = c.newFrameReader()
	return c
}

// forceClose makes the connection close with amqp:connection:forced
// (Shutdown). It wakes the reader and bounds the writer.
func (c *conn) forceClose() {
	c.forced.Store(true)
	_ = c.nc.SetReadDeadline(time.Now())
	c.closeWrites()
}

// closeWrites bounds what is left to write: a closing connection's peer
// that stops reading cannot hold us longer than closeTimeout.
func (c *conn) closeWrites() {
	c.wdMu.Lock()
	defer c.wdMu.Unlock()
	c.closeBy = time.Now().Add(closeTimeout)
	_ = c.nc.SetWriteDeadline(c.closeBy)
}

// closing reports whether closeWrites has bounded the writes.
func (c *conn) closing() bool {
	c.wdMu.Lock()
	defer c.wdMu.Unlock()
	return !c.closeBy.IsZero()
}

// armWrite sets the deadline of the next socket write (the writer calls it
// before each). It reports whether the connection is closing, when the
// close bound stays in force instead.
func (c *conn) armWrite(timeout time.Duration) (closing bool) {
	c.wdMu.Lock()
	defer c.wdMu.Unlock()
	if !c.closeBy.IsZero() {
		return true
	}
	_ = c.nc.SetWriteDeadline(time.Now().Add(timeout))
	return false
}

// serve is the reader goroutine.
func (c *conn) serve() {
	defer c.ticket.Release()
	if c.refused != "" {
		c.serveRefused()
		return
	}
	c.s.opts.Metrics.Conn("amqp", 1)
	defer c.s.opts.Metrics.Conn("amqp", -1)
	defer c.s.forget(c)
	defer c.nc.Close()

	_ = c.nc.SetDeadline(time.Now().Add(handshakeTimeout))
	if c.forced.Load() {
		return
	}
	if err := c.handshake(); err != nil {
		c.log.Debug("amqp handshake failed", "error", err)
		c.linger()
		return
	}
	open, err := c.readOpen()
	if err != nil && !isConnError(err) {
		c.log.Debug("amqp connection ended before open", "error", err)
		c.linger()
		return
	}
	_ = c.nc.SetDeadline(time.Time{})
	if c.forced.Load() { // Shutdown came during the handshake: SetDeadline just undid forceClose
		_ = c.nc.SetReadDeadline(time.Now())
		c.closeWrites()
	}
	w := newWriter(c, open)
	if !c.s.spawn(w.run) {
		c.linger()
		return
	}
	c.idle = c.s.opts.IdleTimeout
	ours := &frames.Open{
		ContainerID:         "gateway:" + c.s.opts.Node,
		MaxFrameSize:        c.s.opts.MaxFrameSize,
		ChannelMax:          ptr(uint16(c.s.opts.MaxSessions - 1)),
		IdleTimeOut:         uint32(c.idle / time.Millisecond),
		OfferedCapabilities: []encoding.Symbol{capAnonymousRelay, capShSubs, capSoleConnection},
		// node: a bridge from another gateway learns which node it reached
		// (bridge.AMQPNodeProperty), for loop prevention.
		Properties: encoding.Fields{{Key: "product", Value: "tolsey"}, {Key: "tolsey:node", Value: c.s.opts.Node}},
	}
	refused := false
	if err == nil {
		c.containerID = open.ContainerID
		if refused = c.claimContainer(open); refused {
			ours.Properties = append(ours.Properties, encoding.Field{Key: propOpenFailed, Value: true})
		}
		c.opened.Store(true)
		if st := c.s.opts.Auth.Load(); st != c.authSt.Load() {
			c.s.recheckConn(c, st) // a reload came during the login: its recheck skipped us
		}
		c.log = c.log.With("container", c.containerID)
		c.log.Debug("amqp connection open", "user", c.ident.User)
		if err = c.send(outItem{body: ours}); err == nil {
			if refused {
				err = errContainerInUse // container.go: the close follows the open at once
			} else {
				err = c.loop()
				// The outcomes read before the end are applied before
				// the consumers close (finish).
				_ = c.sendDispositions()
			}
		}
	} else {
		_ = c.send(outItem{body: ours}) // close must follow an open [2.4.1]
	}
	c.finish(err)
}

// readOpen reads the peer's open, skipping heartbeats.
func (c *conn) readOpen() (*frames.Open, error) {
	for {
		f, err := c.r.ReadFrame()
		if err != nil {
			return nil, c.readError(err)
		}
		if f.Header.Type != frames.TypeAMQP {
			return nil, connErr(frames.ErrCondFramingError, "SASL frame where open was expected")
		}
		p, _, err := frames.DecodeBody(f.Body)
		if err != nil {
			return nil, connErr(frames.ErrCondDecodeError, "open: %v", err)
		}
		if p == nil {
			continue
		}
		o, ok := p.(*frames.Open)
		if !ok {
			return nil, connErr(frames.ErrCondNotAllowed, "%s before open", performativeName(p))
		}
		return o, nil
	}
}

// loop reads and handles frames until the connection ends.
func (c *conn) loop() error {
	for {
		if !c.r.FrameBuffered() {
			// About to block on the socket: send what the burst of
			// frames just handled produced, in as few frames as possible.
			if err := c.sendDispositions(); err != nil {
				return err
			}
			if err := c.flushPending(); err != nil {
				return err
			}
			if c.idle > 0 {
				_ = c.nc.SetReadDeadline(time.Now().Add(c.idle))
			}
			if c.forced.Load() {
				return c.forcedErr()
			}
		}
		f, err := c.r.ReadFrame()
		if err != nil {
			return c.readError(err)
		}
		if f.Header.Type != frames.TypeAMQP {
			return connErr(frames.ErrCondFramingError, "SASL frame after open")
		}
		p, payload, err := frames.DecodeBodyWith(f.Body, &c.body)
		if err != nil {
			return connErr(frames.ErrCondDecodeError, "%v", err)
		}
		if p == nil {
			continue // heartbeat
		}
		if err := c.handle(f.Header.Channel, p, payload); err != nil {
			var se *SessionError
			if !errors.As(err, &se) {
				return err
			}
			if err := c.sessions[f.Header.Channel].fail(se); err != nil {
				return err
			}
		}
	}
}

// readError classifies a read failure.
func (c *conn) readError(err error) error {
	if c.forced.Load() {
		return c.forcedErr()
	}
	var ne net.Error
	switch {
	case errors.Is(err, frames.ErrFrameTooLarge):
		return connErr(frames.ErrCondFramingError, "%v", err)
	case errors.As(err, &ne) && ne.Timeout():
		return connErr(frames.ErrCondResourceLimitExceeded, "idle time-out: no frame for %s", c.idle)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.As(err, new(*net.OpError)), errors.Is(err, net.ErrClosed):
		return err // the socket is gone: nothing to close
	}
	return connErr(frames.ErrCondFramingError, "%v", err) // a malformed frame header
}

// handle dispatches one performative.
func (c *conn) handle(ch uint16, p frames.Performative, payload []byte) error {
	switch p := p.(type) {
	case *frames.Open:
		return connErr(frames.ErrCondNotAllowed, "open received twice")
	case *frames.Close:
		if p.Error != nil {
			return &ConnError{Cond: p.Error.Condition, Desc: p.Error.Description, Remote: true}
		}
		return errPeerClosed
	case *frames.Begin:
		return c.begin(ch, p)
	}
	s := c.sessions[ch]
	if s == nil {
		return connErr(frames.ErrCondNotAllowed, "%s on channel %d, which has no session", performativeName(p), ch)
	}
	return s.handle(p, payload)
}

// begin answers a begin: our channel mirrors the peer's.
func (c *conn) begin(ch uint16, b *frames.Begin) error {
	if b.RemoteChannel != nil {
		return connErr(frames.ErrCondNotAllowed, "begin with remote-channel %d: the gateway never begins sessions", *b.RemoteChannel)
	}
	if maxCh := c.s.opts.MaxSessions - 1; int(ch) > maxCh {
		// "A peer that receives a channel number outside the supported
		// range MUST close the connection with the framing-error
		// error-code" [2.7.1]: channel-max is how amqp.maxSessions is told.
		c.s.counters.refused(limitSessions)
		return connErr(frames.ErrCondFramingError, "begin on channel %d, above the channel-max %d the gateway announced (amqp.maxSessions %d)", ch, maxCh, c.s.opts.MaxSessions)
	}
	if c.sessions[ch] != nil {
		return connErr(frames.ErrCondNotAllowed, "begin on channel %d, which already has a session", ch)
	}
	s := newSession(c, ch, b)
	c.sessions[ch] = s
	return c.send(outItem{sess: s, body: &frames.Begin{
		RemoteChannel:  ptr(ch),
		NextOutgoingID: 0,
		IncomingWindow: sessionWindow,
		OutgoingWindow: outgoingWindow,
		HandleMax:      ptr(c.handleMax()),
	}})
}

// handleMax is the handle-max announced in every begin. Clients allocate
// handles densely from 0 and go-amqp ignores our handle-max, so it must
// leave room for every link the connection may hold plus as many refused
// ones awaiting the client's detach (limits.go): then a client that goes
// over the link count gets the clean refusal (resource-limit-exceeded on
// that link) rather than having its connection closed for a handle out of
// range (framing-error, §2.7.2).
func (c *conn) handleMax() uint32 {
	return uint32(min(2*uint64(c.s.opts.MaxLinksPerConnection)-1, 1<<32-1))
}

// send queues work for the writer, waiting while the queue is full: a
// peer that does not read its socket stops us reading ours.
func (c *conn) send(it outItem) error {
	if len(c.peerDisps) > 0 {
		// Dispositions read before it are applied before it (a detach
		// after the peer's last outcomes: those stay settled).
		if err := c.sendDispositions(); err != nil {
			return err
		}
	}
	return c.sendItem(it)
}

// syncWriter waits until the writer has done what the reader handed it
// so far, the peer's dispositions read so far included. On the reader.
func (c *conn) syncWriter() error {
	done := make(chan struct{})
	if err := c.send(outItem{do: func(*writer) { close(done) }}); err != nil {
		return err
	}
	select {
	case <-done:
		return nil
	case <-c.wdone:
		return errWriterGone
	}
}

func (c *conn) sendItem(it outItem) error {
	select {
	case c.out <- it:
		return nil
	case <-c.wdone:
		return errWriterGone
	}
}

// markDirty notes a session with batched frames to send before the next
// blocking read.
func (c *conn) markDirty(s *session) {
	if !s.dirty {
		s.dirty = true
		c.dirty = append(c.dirty, s)
	}
}

func (c *conn) flushPending() error {
	for i, s := range c.dirty {
		s.dirty = false
		c.dirty[i] = nil
		if err := s.flushPending(); err != nil {
			c.dirty = c.dirty[:0]
			return err
		}
	}
	c.dirty = c.dirty[:0]
	return nil
}

// markReady puts l on the writer's list of links with new messages.
// Called by Deliver and the retained feeders, on any goroutine.
func (c *conn) markReady(l *outLink) {
	c.readyMu.Lock()
	c.ready = append(c.ready, l)
	c.readyMu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// newTemp creates a temporary address for a dynamic node, alive until the
// connection ends.
func (c *conn) newTemp(caps []encoding.Symbol) string {
	c.tmpSeq++
	addr := tmpPrefix + c.s.opts.Node + "/" + strconv.FormatUint(c.id, 10) + "/" + strconv.FormatUint(c.tmpSeq, 10)
	c.temps = append(c.temps, addr)
	c.s.addTemp(addr, tempKind(caps))
	return addr
}

// finish ends the connection after the reader loop: links leave the
// router, the close frame goes out (when there is a peer to tell), the
// writer drains and stops, and the socket lingers until the peer closes.
func (c *conn) finish(err error) {
	for _, s := range c.sessions {
		s.teardown()
	}
	c.s.removeTemp(c.temps)
	var ce *ConnError
	switch {
	case errors.Is(err, errContainerInUse):
		_ = c.send(outItem{body: &frames.Close{Error: containerInUse()}, close: true})
		c.log.Info("amqp connection refused: its container-id is in use (sole-connection-for-container)")
	case errors.Is(err, errPeerClosed):
		_ = c.send(outItem{body: &frames.Close{}, close: true})
		c.log.Debug("amqp connection closed by client")
	case errors.As(err, &ce) && ce.Remote:
		_ = c.send(outItem{body: &frames.Close{}, close: true})
		c.log.Info("amqp connection closed by client with an error", "condition", string(ce.Cond), "description", ce.Desc)
	case errors.As(err, &ce):
		_ = c.send(outItem{body: &frames.Close{Error: wireError(ce.Cond, ce.Desc)}, close: true})
		lvl := slog.LevelInfo
		if ce.Cond == frames.ErrCondConnectionForced {
			lvl = slog.LevelDebug
		}
		c.log.Log(context.Background(), lvl, "amqp connection closed", "condition", string(ce.Cond), "description", ce.Desc)
	default:
		c.log.Debug("amqp connection lost", "error", err)
	}
	close(c.stop)
	c.closeWrites() // a peer that stopped reading cannot hold us
	<-c.wdone
	// The writer is gone: what it had not delivered on durable
	// subscriptions goes back to them.
	for _, s := range c.sessions {
		s.requeueAll()
	}
	c.endTxns() // before the consumers close: their acknowledged messages go back as failed deliveries
	c.closeQueues()
	c.linger()
}

// linger half-closes the socket and reads until the peer closes its side
// (or closeTimeout passes). Closing with unread bytes would make the
// kernel reset the connection, and the peer could lose our close frame.
func (c *conn) linger() {
	// *net.TCPConn sends FIN; *tls.Conn sends close_notify (amqps).
	if cw, ok := c.nc.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	_ = c.nc.SetReadDeadline(time.Now().Add(closeTimeout))
	_, _ = io.Copy(io.Discard, c.nc)
}

func isConnError(err error) bool {
	var ce *ConnError
	return errors.As(err, &ce)
}

func performativeName(p frames.Performative) string {
	switch p.(type) {
	case *frames.Open:
		return "open"
	case *frames.Begin:
		return "begin"
	case *frames.Attach:
		return "attach"
	case *frames.Flow:
		return "flow"
	case *frames.Transfer:
		return "transfer"
	case *frames.Disposition:
		return "disposition"
	case *frames.Detach:
		return "detach"
	case *frames.End:
		return "end"
	case *frames.Close:
		return "close"
	}
	return fmt.Sprintf("%T", p)
}

func ptr[T any](v T) *T { return &v }
