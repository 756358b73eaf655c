// Package amqplean is a lean AMQP 1.0 load client for the queue benchmark
// (test/bench/queueload), as mqttlean is for the MQTT ones: one
// connection, one session (channel 0), one link, either a sender or a
// receiver. go-amqp costs the benchmark more CPU per message than the
// server it measures (a goroutine hop per frame between the caller, the
// link, the session and the connection writer, one write syscall per
// frame, a copy of every payload), and on a 2-core box whatever the
// client burns is taken from the server.
//
// What it puts on the wire is what go-amqp puts there for the same work,
// frame for frame, and byte for byte for transfers and dispositions
// (codec.go; TestSameFramesAsGoAMQP, and TestSameMultiFrameTransfersAsGoAMQP
// for messages larger than a frame): one transfer per message (a header
// {durable, priority 0} and a data section), the sender's settlement left
// to the receiver's disposition, one disposition (accepted, settled) per
// message received, link credit in the flows the caller asks for, and a
// session flow every half window of transfers received, as go-amqp's
// session does. What changes is the client's own cost, and how its bytes
// reach the server: frames are encoded straight into one write buffer, a
// writer goroutine writes everything queued in one write when it is woken
// (go-amqp writes each frame on its own), one reader goroutine reads
// through a 64 KiB buffer and calls the receiver's handler in place, with
// the body a slice of its frame buffer.
//
// It speaks SASL ANONYMOUS and PLAIN, open, begin, attach, flow,
// transfer (multi-frame ones reassembled), disposition (ranges
// first..last), detach, end and close; a refusal in a detach, end or close
// (or an outcome other than accepted) becomes an *Error naming the
// condition. Tests and bench programs only.
package amqplean

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// Options of one connection.
type Options struct {
	// SASL is the mechanism: "ANONYMOUS" (the default) or "PLAIN" with
	// User and Password.
	SASL           string
	User, Password string
	ContainerID    string // empty: a random one
}

const (
	// maxFrame is the max-frame-size we announce and the read buffer's
	// size (go-amqp's default frame size, 64 KiB).
	maxFrame = 64 << 10
	// window is the session's incoming and outgoing window, go-amqp's
	// (defaultWindow): a session flow goes out every window/2 transfers
	// received.
	window = 5000
)

// Conn is one connection with one session and, once attached, one link.
type Conn struct {
	nc   net.Conn
	role bool // true: receiver (once attached)

	// Owned by the reader goroutine.
	r         *bufio.Reader
	hdr       [8]byte // a frame header being read (a local would escape through io.ReadFull)
	frame     []byte  // the frame being read, reused
	payload   []byte  // the last frame's payload, in frame
	partial   []byte  // a multi-frame transfer's payload so far
	partialOn bool    // a multi-frame transfer is being read
	partID    uint32  // the delivery-id of the transfer being read
	onMsg     func(*Delivery)
	d         Delivery // handed to onMsg, reused

	done chan struct{} // closed by fail
	wake chan struct{} // the writer has something to write

	// wmu is held by whoever writes to nc (the writer, Close) from taking
	// the buffer until the write returns, so frames go out in the order
	// they were queued.
	wmu      sync.Mutex
	idle     time.Duration // the peer's idle-time-out (0: none): we write at least every half of it
	peerMax  uint32        // the peer's max-frame-size
	lastSent time.Time     // owned by the writer

	// Guarded by mu: the session's and the link's state, shared by the
	// reader (flows, dispositions, transfers) and the caller's
	// goroutines (Send, Accept, IssueCredit).
	mu   sync.Mutex
	cond *sync.Cond
	wb   []byte // frames queued for the writer
	err  error  // why the connection ended (set once, by fail)

	nextOutgoingID       uint32 // session (§2.5.6): the next transfer frame's transfer-id
	nextDeliveryID       uint32 // session: the next message's delivery-id
	nextIncomingID       uint32
	remoteIncomingWindow uint32
	needFlow             uint32 // transfers received since our last session flow

	attached     bool   // the peer's attach arrived
	nullTerminus bool   // and its source (receiver) or target (sender) was null: a refusal, its detach follows
	deliveryCnt  uint32 // link delivery-count (§2.6.7)
	credit       uint32 // sender: credit the peer gave; receiver: what we gave, less what arrived (wrapping, as go-amqp's)
	unsettled    int    // sender: transfers sent and not settled
	inFlight     int    // sender: the most unsettled transfers (Send waits)
	tag          uint64 // sender: the next delivery tag
	accepted     int64  // sender: settled with accepted

	watched context.Context // sender: the context whose end wakes Ready (its last one)
	unwatch func() bool     // and how to stop that
}

// Delivery is a message a receiver got. Its slices are valid only during
// the handler's call: they point into the reader's buffers.
type Delivery struct {
	ID      uint32
	Settled bool   // the sender settled it: no disposition is due
	Durable bool   // the message's header says durable
	Data    []byte // the body's first data section
	Message []byte // the whole encoded message (every section)
}

// Dial connects to addr, logs in (SASL), opens the connection and begins
// one session, all bounded by ctx.
func Dial(ctx context.Context, addr string, o Options) (*Conn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	c := &Conn{
		nc:    nc,
		r:     bufio.NewReaderSize(nc, maxFrame),
		frame: make([]byte, 0, maxFrame),
		done:  make(chan struct{}),
		wake:  make(chan struct{}, 1),
	}
	c.cond = sync.NewCond(&c.mu)
	if dl, ok := ctx.Deadline(); ok {
		_ = nc.SetDeadline(dl)
	}
	if err := c.handshake(addr, o); err != nil {
		nc.Close()
		return nil, err
	}
	_ = nc.SetDeadline(time.Time{})
	go c.readLoop()
	go c.writeLoop()
	return c, nil
}

// handshake runs SASL (§5.3), open and begin, before the reader and the
// writer start.
func (c *Conn) handshake(addr string, o Options) error {
	if _, err := c.nc.Write([]byte{'A', 'M', 'Q', 'P', 3, 1, 0, 0}); err != nil {
		return err
	}
	if err := c.readHeader(3); err != nil {
		return err
	}
	desc, f, err := c.readFrame()
	if err != nil {
		return err
	}
	if desc != descMechanisms {
		return fmt.Errorf("amqplean: want sasl-mechanisms, got descriptor %#x", desc)
	}
	mech := o.SASL
	if mech == "" {
		mech = "ANONYMOUS"
	}
	code, v, err := f.next()
	if err != nil {
		return err
	}
	if !offers(code, v, mech) {
		return fmt.Errorf("amqplean: the server does not offer SASL %s", mech)
	}
	var resp []byte
	if mech == "PLAIN" {
		resp = append(append(append([]byte{0}, o.User...), 0), o.Password...)
	}
	b, at := beginFrame(nil, 1)
	b, l := beginList(b, descSASLInit)
	b = appendSymbol(b, mech)
	b = appendBinary(b, resp)
	host, _, _ := net.SplitHostPort(addr)
	b = appendString(b, host)
	b = endFrame(endList(b, l, 3), at)
	if _, err := c.nc.Write(b); err != nil {
		return err
	}
	if desc, f, err = c.readFrame(); err != nil {
		return err
	}
	if desc != descSASLOutcome {
		return fmt.Errorf("amqplean: want sasl-outcome, got descriptor %#x", desc)
	}
	if code, v, err = f.next(); err != nil {
		return err
	}
	if n, ok := uintOf(code, v); !ok || n != 0 {
		return fmt.Errorf("amqplean: SASL %s refused (outcome code %d)", mech, n)
	}

	id := o.ContainerID
	if id == "" {
		var r [8]byte
		_, _ = rand.Read(r[:])
		id = "amqplean-" + hex.EncodeToString(r[:])
	}
	b = append(b[:0], 'A', 'M', 'Q', 'P', 0, 1, 0, 0)
	b, at = beginFrame(b, 0)
	b, l = beginList(b, descOpen)
	b = appendString(b, id)
	b = appendString(b, host)
	b = appendUint(b, maxFrame)
	b = endFrame(endList(b, l, 3), at)
	b, at = beginFrame(b, 0)
	b, l = beginList(b, descBegin)
	b = append(b, codeNull)   // remote-channel
	b = appendUint(b, 0)      // next-outgoing-id
	b = appendUint(b, window) // incoming-window
	b = appendUint(b, window) // outgoing-window
	b = endFrame(endList(b, l, 4), at)
	if _, err := c.nc.Write(b); err != nil {
		return err
	}
	if err := c.readHeader(0); err != nil {
		return err
	}
	if desc, f, err = c.readFrame(); err != nil {
		return err
	}
	if err := c.endedBy(desc, f); err != nil {
		return err
	}
	if desc != descOpen {
		return fmt.Errorf("amqplean: want open, got descriptor %#x", desc)
	}
	c.peerMax = 512 // the minimum (§2.7.1) when it says nothing
	for i := 0; i < 5; i++ {
		code, v, err := f.next()
		if err != nil {
			return err
		}
		n, ok := uintOf(code, v)
		switch {
		case i == 2 && ok:
			c.peerMax = max(n, 512)
		case i == 4 && ok:
			c.idle = time.Duration(n) * time.Millisecond
		}
	}
	if desc, f, err = c.readFrame(); err != nil {
		return err
	}
	if err := c.endedBy(desc, f); err != nil {
		return err
	}
	if desc != descBegin {
		return fmt.Errorf("amqplean: want begin, got descriptor %#x", desc)
	}
	for i := 0; i < 3; i++ { // remote-channel, next-outgoing-id, incoming-window
		code, v, err := f.next()
		if err != nil {
			return err
		}
		n, _ := uintOf(code, v)
		switch i {
		case 1:
			c.nextIncomingID = n
		case 2:
			c.remoteIncomingWindow = n
		}
	}
	return nil
}

// offers says whether a sasl-server-mechanisms field (a symbol or an
// array of symbols) holds mech.
func offers(code byte, v []byte, mech string) bool {
	switch code {
	case codeSym8, codeSym32:
		return string(v) == mech
	case codeArray8, codeArray32:
		// count, then one constructor for every element, then the elements
		// with their sizes (§1.6.25).
		w := 1
		if code == codeArray32 {
			w = 4
		}
		if len(v) < w+1 {
			return false
		}
		n := int(v[0])
		if w == 4 {
			n = int(binary.BigEndian.Uint32(v))
		}
		ec, b := v[w], v[w+1:]
		for range n {
			var size int
			switch ec {
			case codeSym8:
				if len(b) < 1 {
					return false
				}
				size, b = int(b[0]), b[1:]
			case codeSym32:
				if len(b) < 4 {
					return false
				}
				size, b = int(binary.BigEndian.Uint32(b)), b[4:]
			default:
				return false
			}
			if size > len(b) {
				return false
			}
			if string(b[:size]) == mech {
				return true
			}
			b = b[size:]
		}
	}
	return false
}

func (c *Conn) readHeader(id byte) error {
	var h [8]byte
	if _, err := io.ReadFull(c.r, h[:]); err != nil {
		return fmt.Errorf("amqplean: protocol header: %w", err)
	}
	if string(h[:4]) != "AMQP" || h[4] != id || h[5] != 1 {
		return fmt.Errorf("amqplean: the server answered protocol header %q", h[:])
	}
	return nil
}

// readFrame reads the next frame that is not empty (a heartbeat) into
// c.frame and reads its performative; the payload after it (a
// transfer's) is in c.payload until the next read.
func (c *Conn) readFrame() (uint64, fields, error) {
	for {
		h := c.hdr[:]
		if _, err := io.ReadFull(c.r, h); err != nil {
			return 0, fields{}, err
		}
		size := binary.BigEndian.Uint32(h)
		doff := int(h[4]) * 4
		// The size is bounded by the max-frame-size we announced before
		// anything is read into the buffer (a peer announcing 4 GiB gets
		// an error, not an allocation).
		if size > maxFrame || size < 8 || doff < 8 || uint32(doff) > size {
			return 0, fields{}, fmt.Errorf("amqplean: frame of %d bytes, data offset %d", size, doff)
		}
		c.frame = c.frame[:size-8]
		if _, err := io.ReadFull(c.r, c.frame); err != nil {
			return 0, fields{}, err
		}
		body := c.frame[doff-8:]
		if len(body) == 0 {
			continue
		}
		desc, f, payload, err := performative(body)
		if err != nil {
			return 0, fields{}, err
		}
		c.payload = payload
		return desc, f, nil
	}
}

// endedBy is the error a detach, end or close carries (an *Error naming
// its condition, or one saying the peer ended without an error), nil for
// any other frame.
func (c *Conn) endedBy(desc uint64, f fields) error {
	var idx int
	switch desc {
	case descDetach:
		idx = 2
	case descEnd, descClose:
		idx = 0
	default:
		return nil
	}
	name := performativeNames[desc]
	for range idx {
		if _, _, err := f.next(); err != nil {
			return err
		}
	}
	code, v, err := f.next()
	if err != nil {
		return err
	}
	e, err := errorOf(name, code, v)
	if err != nil {
		return err
	}
	if e == nil {
		return fmt.Errorf("amqplean: the peer sent %s", name)
	}
	return e
}

// fail ends the connection with err (the first error wins) and wakes
// every waiter.
func (c *Conn) fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return
	}
	c.err = err
	close(c.done)
	c.cond.Broadcast()
}

// Err is why the connection ended, nil while it runs.
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Done is closed when the connection has ended (Err says why).
func (c *Conn) Done() <-chan struct{} { return c.done }

// queued tells the writer there is something to write; called with mu
// held or not.
func (c *Conn) queued() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// writeLoop writes whatever was queued, all of it in one write, each time
// it is woken: frames queued while a write runs go out together in the
// next. It writes an empty frame when nothing went out for half the
// peer's idle-time-out.
func (c *Conn) writeLoop() {
	var out []byte
	var tick <-chan time.Time
	if c.idle > 0 {
		t := time.NewTicker(c.idle / 4)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-c.wake:
		case <-tick:
			if time.Since(c.lastSent) < c.idle/2 {
				continue
			}
			c.mu.Lock()
			c.wb = append(c.wb, 0, 0, 0, 8, 2, 0, 0, 0)
			c.mu.Unlock()
		case <-c.done:
			return
		}
		c.wmu.Lock()
		c.mu.Lock()
		out, c.wb = c.wb, out[:0]
		c.mu.Unlock()
		if len(out) > 0 {
			_, err := c.nc.Write(out)
			c.lastSent = time.Now()
			if err != nil {
				c.wmu.Unlock()
				c.fail(err)
				return
			}
		}
		c.wmu.Unlock()
	}
}

// closeWrite bounds Close's write of the close frame, and ends a write
// the writer is stuck in (a peer that reads no more) so that Close does
// not wait behind it for ever.
const closeWrite = 2 * time.Second

// Close sends close and closes the socket (without waiting for the peer's
// close), and ends the reader and the writer.
func (c *Conn) Close() error {
	_ = c.nc.SetWriteDeadline(time.Now().Add(closeWrite))
	c.wmu.Lock()
	c.mu.Lock()
	var err error
	if c.err == nil {
		b, at := beginFrame(c.wb, 0)
		b, l := beginList(b, descClose)
		c.wb = endFrame(endList(b, l, 0), at)
		_, err = c.nc.Write(c.wb)
		c.wb = c.wb[:0]
	}
	if c.unwatch != nil {
		c.unwatch()
	}
	c.mu.Unlock()
	c.wmu.Unlock()
	c.fail(errors.New("amqplean: closed"))
	return errors.Join(err, c.nc.Close())
}

// readLoop is the reader goroutine: it reads every frame the peer sends
// and acts on it until the connection ends.
func (c *Conn) readLoop() {
	for {
		desc, f, err := c.readFrame()
		if err == nil {
			err = c.handle(desc, f)
		}
		if err != nil {
			c.fail(err)
			c.nc.Close()
			return
		}
	}
}

// wakeWaiters wakes every waiter (a context ended).
func (c *Conn) wakeWaiters() {
	c.mu.Lock()
	c.cond.Broadcast()
	c.mu.Unlock()
}

// waitFor waits until ok (called with mu held) is true or the connection
// ends, at most until ctx ends.
func (c *Conn) waitFor(ctx context.Context, ok func() bool) error {
	stop := context.AfterFunc(ctx, c.wakeWaiters)
	defer stop()
	c.mu.Lock()
	defer c.mu.Unlock()
	for !ok() {
		if c.err != nil {
			return c.err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		c.cond.Wait()
	}
	return nil
}
