package amqplean

import (
	"context"
	"encoding/binary"
	"fmt"
)

// AttachSender attaches the connection's one link as a sender to target
// (go-amqp's attach: an empty source, rcv-settle-mode first, unsettled
// sends) and waits for the peer's attach. inFlight is how many sends may
// be unsettled at once (Send waits beyond it). A refusal (the peer's
// attach without a target, then its detach) is the detach's *Error.
func (c *Conn) AttachSender(ctx context.Context, target string, inFlight int) error {
	c.mu.Lock()
	c.inFlight = max(inFlight, 1)
	c.mu.Unlock()
	return c.attach(ctx, false, "", target)
}

// AttachReceiver attaches the connection's one link as a receiver from
// source and waits for the peer's attach; it grants no credit
// (IssueCredit does). onMsg runs on the reader goroutine for every
// message, with a Delivery valid only during the call; it may call Accept
// and IssueCredit, and must not block on the network.
func (c *Conn) AttachReceiver(ctx context.Context, source string, onMsg func(*Delivery)) error {
	c.onMsg = onMsg // before the attach goes out: the reader reads it only after
	return c.attach(ctx, true, source, "")
}

func (c *Conn) attach(ctx context.Context, receiver bool, source, target string) error {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return c.err
	}
	c.role = receiver
	b, at := beginFrame(c.wb, 0)
	b, l := beginList(b, descAttach)
	role := "sender"
	if receiver {
		role = "receiver"
	}
	b = appendString(b, "amqplean-"+role)
	b = appendUint(b, 0) // handle
	b = appendBool(b, receiver)
	b = append(b, codeNull, codeNull) // snd-settle-mode, rcv-settle-mode: the defaults (mixed, first)
	n := uint32(7)
	if source == "" {
		b = append(b, codeDescribed, codeSmallUlng, descSource, codeList0)
	} else {
		var s int
		b, s = beginList(b, descSource)
		b = endList(appendString(b, source), s, 1)
	}
	if target == "" {
		b = append(b, codeDescribed, codeSmallUlng, descTarget, codeList0)
	} else {
		var t int
		b, t = beginList(b, descTarget)
		b = endList(appendString(b, target), t, 1)
	}
	if !receiver {
		b = append(b, codeNull, codeFalse) // unsettled, incomplete-unsettled (go-amqp writes false)
		b = appendUint(b, 0)               // initial-delivery-count
		n = 10
	}
	c.wb = endFrame(endList(b, l, n), at)
	c.queued()
	c.mu.Unlock()
	if err := c.waitFor(ctx, func() bool { return c.attached }); err != nil {
		return fmt.Errorf("attach %s: %w", source+target, err)
	}
	c.mu.Lock()
	refused := c.nullTerminus
	c.mu.Unlock()
	if refused {
		// The detach with the reason follows (§2.6.3).
		err := c.waitFor(ctx, func() bool { return false })
		return fmt.Errorf("attach %s: %w", source+target, err)
	}
	return nil
}

// Send sends one message, durable, unsettled, with body as its one data
// section (go-amqp's NewMessage(body) with Header{Durable: true}), after
// waiting until fewer than inFlight sends are unsettled and the peer has
// given credit and session window. That wait has no bound but the
// connection's end: call Ready first to bound it (and to stamp a message
// once it can go out). body is copied before Send returns. An outcome
// other than accepted ends the connection: Send, Wait and Err return it.
func (c *Conn) Send(body []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.err == nil && !c.sendable(len(body)) {
		c.cond.Wait()
	}
	if c.err != nil {
		return c.err
	}
	c.wb = c.appendTransfer(c.wb, body)
	c.unsettled++
	c.credit--
	c.deliveryCnt++
	c.queued()
	return nil
}

// Ready waits until a Send of a body of size bytes would go out at once
// (fewer than inFlight sends unsettled, credit, session window for its
// frames), at most until ctx ends; it says why not. With one goroutine
// sending on the connection, the Send that follows does not wait.
func (c *Conn) Ready(ctx context.Context, size int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.err == nil && !c.sendable(size) {
		if err := ctx.Err(); err != nil {
			return err
		}
		// ctx's end wakes the waiters; registered once per context, not
		// per wait (a sender waits for the window once a message).
		if ctx.Done() != nil && ctx != c.watched {
			if c.unwatch != nil {
				c.unwatch()
			}
			c.watched, c.unwatch = ctx, context.AfterFunc(ctx, c.wakeWaiters)
		}
		c.cond.Wait()
	}
	return c.err
}

// sendable says whether a body of size bytes may be sent now; mu held.
func (c *Conn) sendable(size int) bool {
	// Every frame of a transfer takes one of the session's window.
	frames := uint32((msgLen(size) + c.chunk() - 1) / c.chunk())
	return c.unsettled < c.inFlight && c.credit > 0 && c.remoteIncomingWindow >= frames
}

// appendTransfer appends the transfer of one message: go-amqp's layout,
// list32 performatives and sections (codec.go), split into frames of the
// peer's max-frame-size as go-amqp splits them (66 bytes left for the
// performative). Each frame takes a transfer-id (next-outgoing-id), the
// message one delivery-id (§2.6.12: deliveries are numbered one by one,
// whatever number of frames each takes). Called with mu held.
func (c *Conn) appendTransfer(b []byte, body []byte) []byte {
	msgLen, chunk := msgLen(len(body)), c.chunk()
	first := true
	sent := 0
	var tag [8]byte
	binary.BigEndian.PutUint64(tag[:], c.tag)
	c.tag++
	for sent < msgLen {
		n := min(chunk, msgLen-sent)
		more := sent+n < msgLen
		var at, l int
		b, at = beginFrame(b, 0)
		b, l = beginList(b, descTransfer)
		b = appendUint(b, 0) // handle
		count := uint32(1)
		if first {
			b = appendUint(b, c.nextDeliveryID) // delivery-id
			b = appendBinary(b, tag[:])         // delivery-tag
			b = appendUint(b, 0)                // message-format
			count = 4
		} else if more {
			// The first frame's fields only (§2.7.5), as go-amqp leaves
			// them out of the frames after it.
			b = append(b, codeNull, codeNull, codeNull)
		}
		if more {
			b = append(b, codeNull, codeTrue) // settled (omitted), more
			count = 6
		}
		b = endList(b, l, count)
		b = appendMessage(b, body, sent, n)
		b = endFrame(b, at)
		c.nextOutgoingID++
		c.remoteIncomingWindow--
		sent += n
		first = false
	}
	c.nextDeliveryID++
	return b
}

// msgLen is the size of the encoded message with a body of size bytes
// (appendMessage).
func msgLen(size int) int {
	if size < 256 {
		return 12 + 3 + 3 + 2 + size
	}
	return 12 + 3 + 3 + 5 + size
}

// chunk is how much of a message goes in one transfer frame: go-amqp
// leaves 66 bytes of the peer's max-frame-size for the frame header and
// the performative (maxTransferFrameHeader).
func (c *Conn) chunk() int { return int(c.peerMax) - 66 }

// appendMessage appends bytes [from, from+n) of the encoded message
// header{durable: true, priority: 0}, data(body), without encoding it
// anywhere else. (go-amqp writes the priority unless it is 4, and a
// MessageHeader{Durable: true} has priority 0: the gateway then delivers
// it with priority 0 as well.)
func appendMessage(b, body []byte, from, n int) []byte {
	var pre [12 + 3 + 3 + 5]byte
	h := append(pre[:0], codeDescribed, codeSmallUlng, descHeader, codeList32, 0, 0, 0, 7, 0, 0, 0, 2, codeTrue, codeUbyte, 0)
	h = append(h, codeDescribed, codeSmallUlng, descData)
	if len(body) < 256 {
		h = append(h, codeVbin8, byte(len(body)))
	} else {
		h = binary.BigEndian.AppendUint32(append(h, codeVbin32), uint32(len(body)))
	}
	if from < len(h) {
		k := min(len(h)-from, n)
		b = append(b, h[from:from+k]...)
		from, n = from+k, n-k
	}
	if n > 0 {
		b = append(b, body[from-len(h):from-len(h)+n]...)
	}
	return b
}

// Wait waits until every send is settled (or the connection ends, or
// ctx), and says why not.
func (c *Conn) Wait(ctx context.Context) error {
	return c.waitFor(ctx, func() bool { return c.unsettled == 0 })
}

// Accepted is how many sends were settled with accepted.
func (c *Conn) Accepted() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.accepted
}

// Accept queues a disposition (receiver, first = id, settled, accepted)
// for one delivery: what go-amqp's AcceptMessage sends.
func (c *Conn) Accept(id uint32) {
	c.mu.Lock()
	b, at := beginFrame(c.wb, 0)
	b, l := beginList(b, descDisposition)
	b = appendBool(b, true) // role: receiver
	b = appendUint(b, id)
	b = append(b, codeNull, codeTrue)                                    // last, settled
	b = append(b, codeDescribed, codeSmallUlng, descAccepted, codeList0) // state
	c.wb = endFrame(endList(b, l, 5), at)
	c.queued()
	c.mu.Unlock()
}

// IssueCredit grants n more credit in a flow carrying the link's
// delivery-count and the credit left plus n (go-amqp's IssueCredit with
// Credit -1: its credit wraps below zero when a server over-delivers, and
// so does this, so that the flows carry the same numbers).
func (c *Conn) IssueCredit(n uint32) {
	c.mu.Lock()
	c.credit += n
	b, at := beginFrame(c.wb, 0)
	b, l := beginList(b, descFlow)
	b = appendUint(b, c.nextIncomingID)
	b = appendUint(b, window)
	b = appendUint(b, c.nextOutgoingID)
	b = appendUint(b, window)
	b = appendUint(b, 0) // handle
	b = appendUint(b, c.deliveryCnt)
	b = appendUint(b, c.credit)
	c.wb = endFrame(endList(b, l, 7), at)
	c.queued()
	c.mu.Unlock()
}

// sessionFlow queues a flow without a handle; mu held.
func (c *Conn) sessionFlow() {
	b, at := beginFrame(c.wb, 0)
	b, l := beginList(b, descFlow)
	b = appendUint(b, c.nextIncomingID)
	b = appendUint(b, window)
	b = appendUint(b, c.nextOutgoingID)
	b = appendUint(b, window)
	c.wb = endFrame(endList(b, l, 4), at)
	c.queued()
}

// handle acts on one frame the peer sent after begin; on the reader
// goroutine. An error ends the connection.
func (c *Conn) handle(desc uint64, f fields) error {
	switch desc {
	case descTransfer:
		return c.transfer(f)
	case descDisposition:
		return c.disposition(f)
	case descFlow:
		return c.flow(f)
	case descAttach:
		return c.onAttach(f)
	case descDetach, descEnd, descClose:
		return c.endedBy(desc, f)
	}
	return nil // open, begin again: not expected, nothing to do
}

func (c *Conn) flow(f fields) error {
	var v [7]struct {
		n  uint32
		ok bool
	}
	for i := range v {
		code, b, err := f.next()
		if err != nil {
			return err
		}
		v[i].n, v[i].ok = uintOf(code, b)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	// §2.5.6: remote-incoming-window = next-incoming-id(flow) +
	// incoming-window(flow) - next-outgoing-id(ours); without a
	// next-incoming-id, our initial outgoing id (0) in its place.
	c.remoteIncomingWindow = v[0].n + v[1].n - c.nextOutgoingID
	if v[4].ok && !c.role {
		// §2.6.7: link-credit(snd) = delivery-count(flow) + link-credit(flow) - delivery-count(snd).
		c.credit = v[5].n + v[6].n - c.deliveryCnt
	}
	c.cond.Broadcast()
	return nil
}

func (c *Conn) disposition(f fields) error {
	var role, settled bool
	var first, last uint32
	hasLast := false
	var stateCode byte
	var state []byte
	for i := 0; i < 5; i++ {
		code, v, err := f.next()
		if err != nil {
			return err
		}
		switch i {
		case 0:
			role = boolOf(code, v)
		case 1:
			first, _ = uintOf(code, v)
		case 2:
			last, hasLast = uintOf(code, v)
		case 3:
			settled = boolOf(code, v)
		case 4:
			stateCode, state = code, v
		}
	}
	if !role || c.role || !settled {
		return nil // not an outcome of our sends (we ask for rcv-settle-mode first: every outcome is settled)
	}
	if !hasLast {
		last = first
	}
	n := int(last - first + 1)
	if stateCode != codeDescribed {
		return fmt.Errorf("amqplean: disposition %d..%d without an outcome", first, last)
	}
	d, lc, lv, err := described(state)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.unsettled -= n
	if d == descAccepted {
		c.accepted += int64(n)
	}
	c.cond.Broadcast()
	c.mu.Unlock()
	if d == descAccepted {
		return nil
	}
	name := map[uint64]string{descReceived: "received", descRejected: "rejected", descReleased: "released", descModified: "modified"}[d]
	if name == "" {
		name = fmt.Sprintf("outcome %#x", d)
	}
	e := &Error{Frame: "disposition " + name, Condition: name}
	if d == descRejected { // rejected carries an error (§3.4.3)
		sf, err := listOf(lc, lv)
		if err != nil {
			return err
		}
		code, v, err := sf.next()
		if err != nil {
			return err
		}
		if re, err := errorOf(e.Frame, code, v); err == nil && re != nil {
			e = re
		}
	}
	return e
}

func (c *Conn) onAttach(f fields) error {
	var nullSource, nullTarget bool
	var idc uint32
	for i := 0; i < 10; i++ {
		code, v, err := f.next()
		if err != nil {
			return err
		}
		switch i {
		case 5:
			nullSource = code == codeNull
		case 6:
			nullTarget = code == codeNull
		case 9:
			idc, _ = uintOf(code, v)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.attached = true
	if c.role {
		c.nullTerminus = nullSource
		c.deliveryCnt = idc // the sender's initial-delivery-count
	} else {
		c.nullTerminus = nullTarget
	}
	c.cond.Broadcast()
	return nil
}

func (c *Conn) transfer(f fields) error {
	var id uint32
	var hasID, settled, more, aborted bool
	for i := 0; i < 10; i++ {
		code, v, err := f.next()
		if err != nil {
			return err
		}
		switch i {
		case 1:
			id, hasID = uintOf(code, v)
		case 4:
			settled = boolOf(code, v)
		case 5:
			more = boolOf(code, v)
		case 9:
			aborted = boolOf(code, v)
		}
	}
	payload := c.payload
	c.mu.Lock()
	c.nextIncomingID++
	c.needFlow++
	if c.needFlow >= window/2 {
		c.needFlow = 0
		c.sessionFlow()
	}
	first := !c.partialOn
	if first {
		c.deliveryCnt++
		c.credit--
	}
	c.mu.Unlock()
	if first && hasID {
		c.partID = id
	}
	if aborted {
		c.partial, c.partialOn = c.partial[:0], false
		return nil
	}
	if more {
		c.partial, c.partialOn = append(c.partial, payload...), true
		return nil
	}
	if c.partialOn {
		payload = append(c.partial, payload...)
		c.partial, c.partialOn = payload[:0], false
	}
	if c.onMsg == nil {
		return nil
	}
	c.d = Delivery{ID: c.partID, Settled: settled, Message: payload}
	if err := c.sections(&c.d); err != nil {
		return err
	}
	c.onMsg(&c.d)
	return nil
}

// sections finds the header's durable flag and the first data section
// in d.Message.
func (c *Conn) sections(d *Delivery) error {
	b := d.Message
	for len(b) > 0 {
		code, v, rest, err := value(b)
		if err != nil {
			return fmt.Errorf("amqplean: message section: %w", err)
		}
		b = rest
		if code != codeDescribed {
			return fmt.Errorf("amqplean: message section of type %#x", code)
		}
		desc, ic, iv, err := described(v)
		if err != nil {
			return err
		}
		switch desc {
		case descHeader:
			hf, err := listOf(ic, iv)
			if err != nil {
				return err
			}
			code, v, err := hf.next()
			if err != nil {
				return err
			}
			d.Durable = boolOf(code, v)
		case descData:
			if d.Data == nil && (ic == codeVbin8 || ic == codeVbin32) {
				d.Data = iv
			}
		}
	}
	return nil
}
