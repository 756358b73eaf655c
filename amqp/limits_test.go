package amqp

import (
	"testing"

	goamqp "github.com/Azure/go-amqp"
	dto "github.com/prometheus/client_model/go"

	"github.com/tolsey/tolsey/amqp/internal/buffer"
	"github.com/tolsey/tolsey/amqp/internal/frames"
)

// refusals reads tolsey_limit_refusals_total{protocol="amqp",limit}.
func (e *env) refusals(limit string) float64 {
	var m dto.Metric
	if err := e.metrics.LimitRefusals.WithLabelValues("amqp", limit).Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}

func attachReceiver(name string, handle uint32, source string) *frames.Attach {
	return &frames.Attach{Name: name, Handle: handle, Role: frames.RoleReceiver,
		Source: &frames.Source{Address: source}, Target: &frames.Target{}}
}

// TestDefaultLinkLimit: with the defaults, one connection holds at most
// 1,000 links (before the limit, 256 sessions × 1,024 receivers on "#" were all
// accepted, and each message then cost 262,144 deliveries). The 1,001st
// attach is refused the AMQP way and makes no subscription.
func TestDefaultLinkLimit(t *testing.T) {
	e := startServer(t)
	c := rawDial(t, e.addr)
	c.open(nil)
	b := c.begin(0)
	if b.HandleMax == nil || *b.HandleMax != 2*defaultMaxLinks-1 {
		t.Fatalf("begin handle-max %v, want %d", b.HandleMax, 2*defaultMaxLinks-1)
	}
	// Pipelined, as a hostile client would: 1,000 receivers on "#" in one
	// session, then one more there and one in a second session.
	var out buffer.Buffer
	app := func(ch uint16, p frames.Performative) {
		if err := frames.AppendFrame(&out, frames.TypeAMQP, ch, p, nil); err != nil {
			t.Fatal(err)
		}
	}
	for h := range uint32(defaultMaxLinks) {
		app(0, attachReceiver("r", h, "#"))
	}
	app(0, attachReceiver("one-more", defaultMaxLinks, "#"))
	app(1, &frames.Begin{IncomingWindow: 1000, OutgoingWindow: 1000})
	app(1, attachReceiver("elsewhere", 0, "#"))
	c.writeRaw(out.Written())
	for h := range uint32(defaultMaxLinks) {
		if a := expectFrame[*frames.Attach](c); a.Handle != h || a.Source == nil {
			t.Fatalf("attach %d answered %+v, want accepted", h, a)
		}
	}
	refused := func(name string, h uint32) {
		t.Helper()
		a := expectFrame[*frames.Attach](c)
		if a.Name != name || a.Source != nil {
			t.Fatalf("attach %q answered with source %+v, want a refusal (null source)", a.Name, a.Source)
		}
		d := expectFrame[*frames.Detach](c)
		if d.Handle != h || !d.Closed || d.Error == nil || d.Error.Condition != frames.ErrCondResourceLimitExceeded {
			t.Fatalf("detach %+v, want closed with amqp:resource-limit-exceeded", d)
		}
	}
	refused("one-more", defaultMaxLinks)
	expectFrame[*frames.Begin](c)
	refused("elsewhere", 0)
	if n := e.router.Len(); n != defaultMaxLinks {
		t.Fatalf("%d router subscriptions, want %d", n, defaultMaxLinks)
	}
	if n := e.refusals(limitLinks); n != 2 {
		t.Fatalf("refusals{limit=links} = %v, want 2", n)
	}
	// The client answers the detach; a detach of one of its links makes
	// room for another.
	c.send(0, &frames.Detach{Handle: defaultMaxLinks, Closed: true}, nil)
	c.send(1, &frames.Detach{Handle: 0, Closed: true}, nil)
	c.send(0, &frames.Detach{Handle: 7, Closed: true}, nil)
	expectFrame[*frames.Detach](c)
	c.send(1, attachReceiver("again", 0, "#"), nil)
	if a := expectFrame[*frames.Attach](c); a.Source == nil {
		t.Fatalf("attach after a detach answered %+v, want accepted", a)
	}
}

// TestDefaultSessionLimit: the open announces channel-max 255 (256
// sessions), and a begin above it closes the connection with
// framing-error, as AMQP 1.0 §2.7.1 requires.
func TestDefaultSessionLimit(t *testing.T) {
	e := startServer(t)
	c := rawDial(t, e.addr)
	o := c.open(nil)
	if o.ChannelMax == nil || *o.ChannelMax != defaultMaxSessions-1 {
		t.Fatalf("open channel-max %v, want %d", o.ChannelMax, defaultMaxSessions-1)
	}
	c.begin(defaultMaxSessions - 1)
	c.send(defaultMaxSessions, &frames.Begin{IncomingWindow: 1, OutgoingWindow: 1}, nil)
	c.expectClose(frames.ErrCondFramingError)
	if n := e.refusals(limitSessions); n != 1 {
		t.Fatalf("refusals{limit=sessions} = %v, want 1", n)
	}
}

// TestLinkLimit: amqp.maxLinksPerConnection counts senders and receivers
// over every session of a connection; each connection has its own budget.
// go-amqp clients see the refusal as a link error with the condition.
func TestLinkLimit(t *testing.T) {
	e := startServer(t, func(o *Options) { o.MaxLinksPerConnection = 5 })
	conn := e.dial(t, nil)
	s1, err := conn.NewSession(ctx5(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	s2, err := conn.NewSession(ctx5(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	r1 := newReceiver(t, s1, "lim/#", nil)
	newReceiver(t, s1, "lim/#", nil)
	newReceiver(t, s2, "lim/#", nil)
	snd := newSender(t, s2, "lim/a", nil)
	newSender(t, s2, "", nil)
	if _, err := s1.NewReceiver(ctx5(t), "lim/#", nil); amqpCond(err) != "amqp:resource-limit-exceeded" {
		t.Fatalf("6th link (receiver): %v, want amqp:resource-limit-exceeded", err)
	}
	if _, err := s2.NewSender(ctx5(t), "lim/b", nil); amqpCond(err) != "amqp:resource-limit-exceeded" {
		t.Fatalf("6th link (sender): %v, want amqp:resource-limit-exceeded", err)
	}
	if n := e.router.Len(); n != 3 {
		t.Fatalf("%d router subscriptions, want 3 (a refused receiver subscribes to nothing)", n)
	}
	// The connection goes on.
	send(t, snd, goamqp.NewMessage([]byte("x")))
	if got := body(receive(t, r1)); got != "x" {
		t.Fatalf("got %q", got)
	}
	// Closing a link frees its place.
	if err := r1.Close(ctx5(t)); err != nil {
		t.Fatal(err)
	}
	newReceiver(t, s1, "lim/#", nil)
	// Another connection has a budget of its own.
	s3 := e.session(t)
	for range 5 {
		newReceiver(t, s3, "lim/#", nil)
	}
	if n := e.refusals(limitLinks); n != 2 {
		t.Fatalf("refusals{limit=links} = %v, want 2", n)
	}
}

// TestSessionLimit: amqp.maxSessions is announced as channel-max, which
// go-amqp honours; a raw client that ignores it is closed.
func TestSessionLimit(t *testing.T) {
	e := startServer(t, func(o *Options) { o.MaxSessions = 2 })
	conn := e.dial(t, nil)
	for i := range 2 {
		if _, err := conn.NewSession(ctx5(t), nil); err != nil {
			t.Fatalf("session %d: %v", i, err)
		}
	}
	if _, err := conn.NewSession(ctx5(t), nil); err == nil {
		t.Fatal("third session accepted, want go-amqp to refuse it from channel-max")
	}
	c := rawDial(t, e.addr)
	if o := c.open(nil); o.ChannelMax == nil || *o.ChannelMax != 1 {
		t.Fatalf("open channel-max %v, want 1", o.ChannelMax)
	}
	c.begin(0)
	c.begin(1)
	c.send(2, &frames.Begin{IncomingWindow: 1, OutgoingWindow: 1}, nil)
	c.expectClose(frames.ErrCondFramingError)
}

// TestHandleAboveHandleMax: an attach with a handle above the handle-max
// the gateway announced closes the connection with framing-error [2.7.2].
func TestHandleAboveHandleMax(t *testing.T) {
	e := startServer(t, func(o *Options) { o.MaxLinksPerConnection = 3 })
	c := rawDial(t, e.addr)
	c.open(nil)
	if b := c.begin(0); b.HandleMax == nil || *b.HandleMax != 5 {
		t.Fatalf("begin handle-max %v, want 5", b.HandleMax)
	}
	c.send(0, attachReceiver("r", 6, "h/#"), nil)
	c.expectClose(frames.ErrCondFramingError)
}

// TestUnansweredRefusals: a refused link keeps its handle until the client
// answers our detach; a client that never answers cannot pile refusals up
// past the link limit (they would be the unbounded state the limit
// prevents): it is closed with resource-limit-exceeded.
func TestUnansweredRefusals(t *testing.T) {
	e := startServer(t, func(o *Options) { o.MaxLinksPerConnection = 2 })
	c := rawDial(t, e.addr)
	c.open(nil)
	c.begin(0)
	c.begin(1)
	c.begin(2)
	for h := range uint32(2) {
		c.send(0, attachReceiver("ok", h, "u/#"), nil)
		if a := expectFrame[*frames.Attach](c); a.Source == nil {
			t.Fatalf("attach %d refused", h)
		}
	}
	// Two refusals (one for the limit, one for a queue that does not
	// exist), never answered.
	c.send(1, attachReceiver("over", 0, "u/#"), nil)
	c.send(1, attachReceiver("queue", 1, "queue://nope"), nil)
	for range 2 {
		expectFrame[*frames.Attach](c)
		if d := expectFrame[*frames.Detach](c); d.Error == nil {
			t.Fatalf("detach %+v, want an error", d)
		}
	}
	c.send(2, attachReceiver("more", 0, "u/#"), nil)
	c.expectClose(frames.ErrCondResourceLimitExceeded)
	if n := e.disconnects(reasonUnansweredRefusals); n != 1 {
		t.Fatalf("disconnects{reason=unanswered_refusals} = %v, want 1", n)
	}
}
