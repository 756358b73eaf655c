package amqp

import (
	"bytes"
	"context"
	"io"
	"net"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"

	"github.com/tolsey/tolsey/amqp/internal/buffer"
	"github.com/tolsey/tolsey/amqp/internal/encoding"
	"github.com/tolsey/tolsey/amqp/internal/frames"
	"github.com/tolsey/tolsey/core"
)

// rawConn is a hand-driven AMQP client over a real socket, for what no
// well-behaved client would send.
type rawConn struct {
	t  testing.TB
	nc net.Conn
	r  *frames.Reader
	w  *frames.Writer
}

func rawDial(t testing.TB, addr string) *rawConn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &rawConn{t: t, nc: nc, r: frames.NewReader(nc, 1<<24), w: frames.NewWriter(nc, 0)}
}

func (c *rawConn) writeRaw(b []byte) {
	c.t.Helper()
	if _, err := c.nc.Write(b); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

func (c *rawConn) header(h frames.ProtocolHeader) {
	c.t.Helper()
	b := h.Bytes()
	c.writeRaw(b[:])
}

func (c *rawConn) readHeader() frames.ProtocolHeader {
	c.t.Helper()
	c.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	h, err := c.r.ReadProtocolHeader()
	if err != nil {
		c.t.Fatalf("read header: %v", err)
	}
	return h
}

func (c *rawConn) send(ch uint16, p frames.Performative, payload []byte) {
	c.t.Helper()
	if err := c.w.WriteFrame(ch, p, payload); err != nil {
		c.t.Fatalf("write %T: %v", p, err)
	}
}

// next reads the next performative, skipping heartbeats.
func (c *rawConn) next() (uint16, frames.Performative, []byte) {
	c.t.Helper()
	for {
		c.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		f, err := c.r.ReadFrame()
		if err != nil {
			c.t.Fatalf("read frame: %v", err)
		}
		p, payload, err := frames.DecodeBody(f.Body)
		if err != nil {
			c.t.Fatalf("decode: %v", err)
		}
		if p != nil {
			return f.Header.Channel, p, bytes.Clone(payload)
		}
	}
}

func expectFrame[T frames.Performative](c *rawConn) T {
	c.t.Helper()
	_, p, _ := c.next()
	v, ok := p.(T)
	if !ok {
		var want T
		c.t.Fatalf("got %T %+v, want %T", p, p, want)
	}
	return v
}

// open does the bare AMQP header (no SASL) and the open exchange.
func (c *rawConn) open(o *frames.Open) *frames.Open {
	c.t.Helper()
	c.header(frames.HeaderAMQP)
	if h := c.readHeader(); h != frames.HeaderAMQP {
		c.t.Fatalf("header %+v", h)
	}
	if o == nil {
		o = &frames.Open{ContainerID: "raw"}
	}
	c.send(0, o, nil)
	return expectFrame[*frames.Open](c)
}

func (c *rawConn) begin(ch uint16) *frames.Begin {
	c.t.Helper()
	c.send(ch, &frames.Begin{NextOutgoingID: 0, IncomingWindow: 1000, OutgoingWindow: 1000}, nil)
	return expectFrame[*frames.Begin](c)
}

// expectClose reads until a close, checks its condition and that the
// server then closes the socket.
func (c *rawConn) expectClose(cond encoding.Symbol) *frames.Error {
	c.t.Helper()
	for {
		_, p, _ := c.next()
		cl, ok := p.(*frames.Close)
		if !ok {
			continue
		}
		if cl.Error == nil || cl.Error.Condition != cond {
			c.t.Fatalf("close error %+v, want %s", cl.Error, cond)
		}
		c.expectEOF()
		return cl.Error
	}
}

func (c *rawConn) expectEOF() {
	c.t.Helper()
	c.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.Copy(io.Discard, c.nc); err != nil {
		c.t.Fatalf("socket not closed by the server: %v", err)
	}
}

func attachSender(name string, handle uint32, target string) *frames.Attach {
	return &frames.Attach{Name: name, Handle: handle, Role: frames.RoleSender,
		Source: &frames.Source{}, Target: &frames.Target{Address: target}, InitialDeliveryCount: ptr(uint32(0))}
}

func encodeMessage(t testing.TB, m *frames.Message) []byte {
	var b buffer.Buffer
	if err := m.MarshalAMQP(&b); err != nil {
		t.Fatal(err)
	}
	return b.Written()
}

func TestBadInput(t *testing.T) {
	e := startServer(t)
	// A bystander connection that must not notice anything.
	bs := e.session(t)
	bystander := newReceiver(t, bs, "bystander", nil)
	bsnd := newSender(t, bs, "bystander", nil)

	cases := []struct {
		name string
		run  func(t *testing.T, c *rawConn)
	}{
		{"wrong protocol header", func(t *testing.T, c *rawConn) {
			c.writeRaw([]byte("HTTP/1.1 GET /\r\n"))
			if h := c.readHeader(); h != frames.HeaderSASL {
				t.Fatalf("answered %+v, want the SASL header", h)
			}
			c.expectEOF()
		}},
		{"AMQP 0-9-1 header", func(t *testing.T, c *rawConn) {
			c.writeRaw([]byte{'A', 'M', 'Q', 'P', 0, 0, 9, 1})
			if h := c.readHeader(); h != frames.HeaderAMQP {
				t.Fatalf("answered %+v, want AMQP 1.0", h)
			}
			c.expectEOF()
		}},
		{"garbage after open", func(t *testing.T, c *rawConn) {
			c.open(nil)
			c.writeRaw([]byte{0, 0, 0, 12, 2, 0, 0, 0, 0xde, 0xad, 0xbe, 0xef})
			c.expectClose(frames.ErrCondDecodeError)
		}},
		{"garbage frame header", func(t *testing.T, c *rawConn) {
			c.open(nil)
			c.writeRaw([]byte{0, 0, 0, 3, 0xff, 0xff, 0xff, 0xff})
			c.expectClose(frames.ErrCondFramingError)
		}},
		{"oversize frame", func(t *testing.T, c *rawConn) {
			c.open(nil)
			c.writeRaw([]byte{0x10, 0, 0, 0, 2, 0, 0, 0}) // 256 MiB announced
			c.expectClose(frames.ErrCondFramingError)
		}},
		{"frame one byte over max-frame-size", func(t *testing.T, c *rawConn) {
			c.open(nil)
			c.writeRaw([]byte{0, 1, 0, 1, 2, 0, 0, 0}) // 65537 bytes announced, 65536 allowed
			c.expectClose(frames.ErrCondFramingError)
		}},
		{"attach before begin", func(t *testing.T, c *rawConn) {
			c.open(nil)
			c.send(0, attachSender("x", 0, "t"), nil)
			c.expectClose(frames.ErrCondNotAllowed)
		}},
		{"frame on an unknown channel", func(t *testing.T, c *rawConn) {
			c.open(nil)
			c.begin(0)
			c.send(7, &frames.Flow{IncomingWindow: 1, NextOutgoingID: 0, OutgoingWindow: 1}, nil)
			c.expectClose(frames.ErrCondNotAllowed)
		}},
		{"open twice", func(t *testing.T, c *rawConn) {
			c.open(nil)
			c.send(0, &frames.Open{ContainerID: "again"}, nil)
			c.expectClose(frames.ErrCondNotAllowed)
		}},
		{"begin before open", func(t *testing.T, c *rawConn) {
			c.header(frames.HeaderAMQP)
			c.readHeader()
			c.send(0, &frames.Begin{IncomingWindow: 1, OutgoingWindow: 1}, nil)
			expectFrame[*frames.Open](c) // a close must follow an open
			c.expectClose(frames.ErrCondNotAllowed)
		}},
		{"SASL frame after open", func(t *testing.T, c *rawConn) {
			c.open(nil)
			c.send(0, &frames.SASLInit{Mechanism: "PLAIN"}, nil)
			c.expectClose(frames.ErrCondFramingError)
		}},
		{"transfer on an unknown handle ends the session", func(t *testing.T, c *rawConn) {
			c.open(nil)
			c.begin(0)
			c.send(0, &frames.Transfer{Handle: 9, DeliveryID: ptr(uint32(0)), DeliveryTag: []byte{1}, MessageFormat: ptr(uint32(0))}, nil)
			end := expectFrame[*frames.End](c)
			if end.Error == nil || end.Error.Condition != frames.ErrCondUnattachedHandle {
				t.Fatalf("end %+v, want amqp:session:unattached-handle", end.Error)
			}
			// The connection goes on: end the session and begin another.
			c.send(0, &frames.End{}, nil)
			c.begin(0)
			c.send(0, &frames.Close{}, nil)
			if cl := expectFrame[*frames.Close](c); cl.Error != nil {
				t.Fatalf("close %+v", cl.Error)
			}
			c.expectEOF()
		}},
		{"a flow that crossed a detach is ignored", func(t *testing.T, c *rawConn) {
			c.open(nil)
			c.begin(0)
			c.send(0, attachSender("a", 3, "t"), nil)
			expectFrame[*frames.Attach](c)
			expectFrame[*frames.Flow](c)
			c.send(0, &frames.Detach{Handle: 3, Closed: true}, nil)
			c.send(0, &frames.Flow{NextIncomingID: ptr(uint32(0)), IncomingWindow: 10, OutgoingWindow: 10, Handle: ptr(uint32(3)),
				DeliveryCount: ptr(uint32(0)), LinkCredit: ptr(uint32(1)), Echo: true}, nil)
			expectFrame[*frames.Detach](c)
			c.send(0, &frames.Flow{NextIncomingID: ptr(uint32(0)), IncomingWindow: 10, OutgoingWindow: 10, Echo: true}, nil)
			if f := expectFrame[*frames.Flow](c); f.Handle != nil {
				t.Fatalf("flow %+v, want the session echo", f)
			}
		}},
		{"handle in use ends the session", func(t *testing.T, c *rawConn) {
			c.open(nil)
			c.begin(0)
			c.send(0, attachSender("a", 1, "t"), nil)
			expectFrame[*frames.Attach](c)
			expectFrame[*frames.Flow](c)
			c.send(0, attachSender("b", 1, "t"), nil)
			end := expectFrame[*frames.End](c)
			if end.Error == nil || end.Error.Condition != frames.ErrCondHandleInUse {
				t.Fatalf("end %+v", end.Error)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.run(t, rawDial(t, e.addr))
			send(t, bsnd, goamqp.NewMessage([]byte(tc.name)))
			if got := body(receive(t, bystander)); got != tc.name {
				t.Fatalf("bystander got %q", got)
			}
		})
	}
}

// rawSender opens a connection, a session and a sending link on topic.
func rawSender(t *testing.T, e *env, topic string, mods ...func(*frames.Attach)) (*rawConn, *frames.Attach) {
	c := rawDial(t, e.addr)
	c.open(nil)
	c.begin(0)
	a := attachSender("s", 0, topic)
	for _, m := range mods {
		m(a)
	}
	c.send(0, a, nil)
	reply := expectFrame[*frames.Attach](c)
	if fl := expectFrame[*frames.Flow](c); fl.LinkCredit == nil || *fl.LinkCredit == 0 {
		t.Fatalf("no credit: %+v", fl)
	}
	return c, reply
}

func transfer(id uint32, more bool) *frames.Transfer {
	t := &frames.Transfer{Handle: 0, More: more}
	if id != ^uint32(0) {
		t.DeliveryID, t.DeliveryTag, t.MessageFormat = ptr(id), []byte{byte(id)}, ptr(uint32(0))
	}
	return t
}

func expectOutcome(t *testing.T, c *rawConn, id uint32) frames.DeliveryState {
	t.Helper()
	d := expectFrame[*frames.Disposition](c)
	if d.First != id || (d.Last != nil && *d.Last != id) || !d.Settled || d.Role != frames.RoleReceiver {
		t.Fatalf("disposition %+v, want delivery %d settled", d, id)
	}
	return d.State
}

func TestMaxMessageSize(t *testing.T) {
	e := startServer(t, func(o *Options) { o.MaxMessageSize = 1000 })
	s := e.session(t)
	r := newReceiver(t, s, "size", nil)
	c, reply := rawSender(t, e, "size")
	if reply.MaxMessageSize != 1000 {
		t.Fatalf("attach max-message-size %d, want 1000 announced", reply.MaxMessageSize)
	}
	big := encodeMessage(t, &frames.Message{Data: [][]byte{bytes.Repeat([]byte{'x'}, 1500)}})
	// One frame over the limit.
	c.send(0, transfer(0, false), big)
	if st, ok := expectOutcome(t, c, 0).(*frames.Rejected); !ok || st.Error.Condition != frames.ErrCondMessageSizeExceeded {
		t.Fatalf("outcome %+v, want rejected amqp:link:message-size-exceeded", st)
	}
	// Over the limit across several frames.
	c.send(0, transfer(1, true), big[:600])
	c.send(0, transfer(^uint32(0), true), big[600:1200])
	c.send(0, transfer(^uint32(0), false), big[1200:])
	if st, ok := expectOutcome(t, c, 1).(*frames.Rejected); !ok || st.Error.Condition != frames.ErrCondMessageSizeExceeded {
		t.Fatalf("outcome %+v, want rejected amqp:link:message-size-exceeded", st)
	}
	// The link goes on; a multi-frame message under the limit is accepted.
	ok := encodeMessage(t, &frames.Message{Data: [][]byte{bytes.Repeat([]byte{'y'}, 900)}})
	c.send(0, transfer(2, true), ok[:500])
	c.send(0, transfer(^uint32(0), false), ok[500:])
	if st, isAcc := expectOutcome(t, c, 2).(*frames.Accepted); !isAcc {
		t.Fatalf("outcome %+v, want accepted", st)
	}
	if got := receive(t, r).GetData(); len(got) != 900 {
		t.Fatalf("received %d bytes", len(got))
	}
}

func TestAbortedTransfer(t *testing.T) {
	e := startServer(t)
	s := e.session(t)
	r := newReceiver(t, s, "abort", nil)
	c, _ := rawSender(t, e, "abort")
	m1 := encodeMessage(t, &frames.Message{Data: [][]byte{[]byte("aborted")}})
	m2 := encodeMessage(t, &frames.Message{Data: [][]byte{[]byte("kept")}})
	c.send(0, transfer(0, true), m1[:4])
	a := transfer(^uint32(0), false)
	a.Aborted = true
	c.send(0, a, nil)
	c.send(0, transfer(1, false), m2)
	expectOutcome(t, c, 1) // nothing for the aborted delivery
	if got := body(receive(t, r)); got != "kept" {
		t.Fatalf("got %q", got)
	}
}

// TestDispositionBatching: pipelined unsettled transfers are answered with
// ranges, not one disposition each.
func TestDispositionBatching(t *testing.T) {
	e := startServer(t)
	c, _ := rawSender(t, e, "batch")
	m := encodeMessage(t, &frames.Message{Data: [][]byte{[]byte("x")}})
	var b buffer.Buffer
	for i := range 100 {
		if err := frames.AppendFrame(&b, frames.TypeAMQP, 0, transfer(uint32(i), false), m); err != nil {
			t.Fatal(err)
		}
	}
	c.writeRaw(b.Written())
	next := uint32(0)
	n := 0
	for next < 100 {
		d := expectFrame[*frames.Disposition](c)
		last := d.First
		if d.Last != nil {
			last = *d.Last
		}
		if d.First != next || !d.Settled {
			t.Fatalf("disposition %+v, want from %d", d, next)
		}
		next = last + 1
		n++
	}
	if n > 10 {
		t.Fatalf("100 pipelined transfers answered in %d dispositions", n)
	}
}

func TestRawDrainAndEcho(t *testing.T) {
	e := startServer(t)
	c := rawDial(t, e.addr)
	c.open(nil)
	c.begin(0)
	c.send(0, &frames.Attach{Name: "r", Handle: 0, Role: frames.RoleReceiver, Source: &frames.Source{Address: "drain/raw"}, Target: &frames.Target{}}, nil)
	a := expectFrame[*frames.Attach](c)
	if a.Source == nil || a.InitialDeliveryCount == nil || *a.InitialDeliveryCount != 0 {
		t.Fatalf("attach %+v", a)
	}
	// Credit 5 with drain and nothing to send: the gateway uses it up.
	c.send(0, &frames.Flow{NextIncomingID: ptr(uint32(0)), IncomingWindow: 100, OutgoingWindow: 100,
		Handle: ptr(uint32(0)), DeliveryCount: ptr(uint32(0)), LinkCredit: ptr(uint32(5)), Drain: true}, nil)
	f := expectFrame[*frames.Flow](c)
	if !f.Drain || *f.DeliveryCount != 5 || *f.LinkCredit != 0 {
		t.Fatalf("drain answer %+v dc=%d credit=%d, want drain, delivery-count 5, credit 0", f, *f.DeliveryCount, *f.LinkCredit)
	}
	// Echo.
	c.send(0, &frames.Flow{NextIncomingID: ptr(uint32(0)), IncomingWindow: 100, OutgoingWindow: 100,
		Handle: ptr(uint32(0)), DeliveryCount: ptr(uint32(5)), LinkCredit: ptr(uint32(2)), Echo: true}, nil)
	f = expectFrame[*frames.Flow](c)
	if f.Drain || *f.DeliveryCount != 5 || *f.LinkCredit != 2 {
		t.Fatalf("echo %+v", f)
	}
	// Session echo.
	c.send(0, &frames.Flow{NextIncomingID: ptr(uint32(0)), IncomingWindow: 100, OutgoingWindow: 100, Echo: true}, nil)
	if f = expectFrame[*frames.Flow](c); f.Handle != nil || f.NextIncomingID == nil {
		t.Fatalf("session echo %+v", f)
	}
	// A message arrives within the credit.
	sess := e.session(t)
	send(t, newSender(t, sess, "drain/raw", nil), goamqp.NewMessage([]byte("x")))
	tr := expectFrame[*frames.Transfer](c)
	if tr.DeliveryID == nil || tr.Handle != 0 {
		t.Fatalf("transfer %+v", tr)
	}
}

func TestIdleTimeout(t *testing.T) {
	e := startServer(t, func(o *Options) { o.IdleTimeout = 300 * time.Millisecond })
	c := rawDial(t, e.addr)
	o := c.open(nil)
	if o.IdleTimeOut != 300 {
		t.Fatalf("open idle-time-out %d, want 300", o.IdleTimeOut)
	}
	start := time.Now()
	c.expectClose(frames.ErrCondResourceLimitExceeded)
	if d := time.Since(start); d < 250*time.Millisecond {
		t.Fatalf("closed after %v", d)
	}
}

// TestHeartbeats: the gateway sends empty frames at half the client's
// idle time-out when it has nothing else to say.
func TestHeartbeats(t *testing.T) {
	e := startServer(t)
	c := rawDial(t, e.addr)
	c.open(&frames.Open{ContainerID: "hb", IdleTimeOut: 400})
	n := 0
	deadline := time.Now().Add(2 * time.Second)
	for n < 3 {
		c.nc.SetReadDeadline(deadline)
		f, err := c.r.ReadFrame()
		if err != nil {
			t.Fatalf("after %d heartbeats: %v", n, err)
		}
		if len(f.Body) == 0 {
			n++
		}
	}
}

// TestPipelinedStart: Proton and go-amqp send the SASL header, sasl-init
// and the AMQP header (and open) before reading anything.
func TestPipelinedStart(t *testing.T) {
	e := startServer(t)
	c := rawDial(t, e.addr)
	var b buffer.Buffer
	h := frames.HeaderSASL.Bytes()
	b.Append(h[:])
	frames.AppendFrame(&b, frames.TypeSASL, 0, &frames.SASLInit{Mechanism: "PLAIN", InitialResponse: []byte("\x00alice\x00secret")}, nil)
	h = frames.HeaderAMQP.Bytes()
	b.Append(h[:])
	frames.AppendFrame(&b, frames.TypeAMQP, 0, &frames.Open{ContainerID: "pipelined"}, nil)
	c.writeRaw(b.Written())
	if h := c.readHeader(); h != frames.HeaderSASL {
		t.Fatalf("header %+v", h)
	}
	mechs := expectFrame[*frames.SASLMechanisms](c)
	if len(mechs.SASLServerMechanisms) != 2 {
		t.Fatalf("mechanisms %v", mechs.SASLServerMechanisms)
	}
	if o := expectFrame[*frames.SASLOutcome](c); o.Code != frames.SASLCodeOK {
		t.Fatalf("outcome %d", o.Code)
	}
	if h := c.readHeader(); h != frames.HeaderAMQP {
		t.Fatalf("header %+v", h)
	}
	o := expectFrame[*frames.Open](c)
	if o.MaxFrameSize != 65536 || !hasCap(o.OfferedCapabilities, "ANONYMOUS-RELAY") {
		t.Fatalf("open %+v", o)
	}
}

func TestSASLPlainChallenge(t *testing.T) {
	e := startServer(t)
	for _, tc := range []struct {
		resp string
		code frames.SASLCode
	}{{"\x00alice\x00secret", frames.SASLCodeOK}, {"\x00alice\x00nope", frames.SASLCodeAuth}, {"garbage", frames.SASLCodeAuth}} {
		c := rawDial(t, e.addr)
		c.header(frames.HeaderSASL)
		c.readHeader()
		expectFrame[*frames.SASLMechanisms](c)
		c.send(0, &frames.SASLInit{Mechanism: "PLAIN"}, nil)
		expectFrame[*frames.SASLChallenge](c)
		c.send(0, &frames.SASLResponse{Response: []byte(tc.resp)}, nil)
		if o := expectFrame[*frames.SASLOutcome](c); o.Code != tc.code {
			t.Fatalf("%q: outcome %d, want %d", tc.resp, o.Code, tc.code)
		}
		if tc.code != frames.SASLCodeOK {
			c.expectEOF()
		}
	}
}

// TestWideIncomingWindow: a session incoming-window of 2^31 or more (Proton
// announces 2^31-1, other clients 2^32-1) is a wide-open window, not a
// negative one that stops every delivery. The flow's next-incoming-id may
// also run ahead of what the gateway sent (the Proton capture replay does).
func TestWideIncomingWindow(t *testing.T) {
	for _, tc := range []struct {
		name   string
		window uint32
		nextIn uint32
	}{
		{"2^32-1", 0xFFFFFFFF, 0},
		{"2^31 after next-incoming-id ahead", 0x7FFFFFFF, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := startServer(t)
			c := rawDial(t, e.addr)
			c.open(nil)
			c.send(0, &frames.Begin{IncomingWindow: tc.window, OutgoingWindow: 1000}, nil)
			expectFrame[*frames.Begin](c)
			c.send(0, attachReceiver("r", 0, "wide/t"), nil)
			expectFrame[*frames.Attach](c)
			c.send(0, &frames.Flow{NextIncomingID: ptr(tc.nextIn), IncomingWindow: tc.window, OutgoingWindow: 1000, Handle: ptr(uint32(0)),
				DeliveryCount: ptr(uint32(0)), LinkCredit: ptr(uint32(10))}, nil)
			// The attach answer comes after the subscription is in place.
			if res := e.router.Publish(context.Background(), &core.Message{Topic: "wide/t", Payload: []byte("x"), Created: time.Now()}); res.Matched != 1 {
				t.Fatalf("publish %+v", res)
			}
			if tr := expectFrame[*frames.Transfer](c); tr.Handle != 0 {
				t.Fatalf("transfer %+v", tr)
			}
		})
	}
}

func TestRemoteWindow(t *testing.T) {
	for _, tc := range []struct{ nextIn, window, nextOut, want uint32 }{
		{0, 10, 0, 10},
		{0, 10, 4, 6},
		{0, 10, 10, 0},
		{0, 10, 12, 0},
		{0, 0xFFFFFFFF, 0, 0xFFFFFFFF},
		{1, 0x7FFFFFFF, 0, 0x7FFFFFFF},
		{0xFFFFFFFE, 5, 1, 2}, // wrapped: 3 in flight
	} {
		if got := remoteWindow(tc.nextIn, tc.window, tc.nextOut); got != tc.want {
			t.Errorf("remoteWindow(%d, %d, %d) = %d, want %d", tc.nextIn, tc.window, tc.nextOut, got, tc.want)
		}
	}
}

// TestCoordinatorRefused: a sender attaching to a transaction coordinator
// (Qpid JMS creating a transacted session) is refused alone, with
// amqp:not-implemented: the attach answer has no target, then a detach;
// the connection goes on and a plain sender on it works. (Before, the
// coordinator target failed to decode and the whole connection was
// closed with amqp:decode-error.)
func TestCoordinatorRefused(t *testing.T) {
	e := startServer(t)
	c := rawDial(t, e.addr)
	c.open(nil)
	c.begin(0)
	a := attachSender("txn", 0, "")
	a.Target = &frames.Target{Coordinator: true, Capabilities: []encoding.Symbol{"amqp:local-transactions"}}
	c.send(0, a, nil)
	if reply := expectFrame[*frames.Attach](c); reply.Target != nil {
		t.Fatalf("refusing attach carries a target: %+v", reply.Target)
	}
	d := expectFrame[*frames.Detach](c)
	if !d.Closed || d.Error == nil || d.Error.Condition != frames.ErrCondNotImplemented {
		t.Fatalf("detach %+v, want closed with amqp:not-implemented", d)
	}
	c.send(0, &frames.Detach{Handle: 0, Closed: true}, nil)
	c.send(0, attachSender("plain", 1, "after/txn"), nil)
	if reply := expectFrame[*frames.Attach](c); reply.Target == nil || reply.Target.Address != "after/txn" {
		t.Fatalf("plain sender after the refusal: %+v", reply)
	}
}
