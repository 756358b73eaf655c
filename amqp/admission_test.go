package amqp

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"
	dto "github.com/prometheus/client_model/go"

	"github.com/tolsey/tolsey/amqp/internal/frames"
	"github.com/tolsey/tolsey/core/coretest"
	"github.com/tolsey/tolsey/core/limits"
)

// The tests dial from their own loopback addresses (coretest.DialFrom),
// so that one address can be over its limits while another
// is not.

// goamqpFrom connects go-amqp from the address from; opts nil: no SASL
// (the bare AMQP header).
func goamqpFrom(t testing.TB, from, addr string, opts *goamqp.ConnOptions) (*goamqp.Conn, error) {
	t.Helper()
	c, err := goamqp.NewConn(ctx5(t), coretest.DialFrom(t, from, addr), opts)
	if err == nil {
		t.Cleanup(func() { c.Close() })
	}
	return c, err
}

// connRefusals reads tolsey_connections_refused_total{protocol="amqp",reason}.
func (e *env) connRefusals(reason string) float64 {
	var m dto.Metric
	if err := e.metrics.ConnsRefused.WithLabelValues("amqp", reason).Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}

// refusal is the error go-amqp, without SASL, reports for a connection
// from the address from: the open succeeds, and the close that follows
// it fails the next step (here a session).
func refusal(t *testing.T, from, addr string) error {
	t.Helper()
	c, err := goamqpFrom(t, from, addr, nil)
	if err != nil {
		return err
	}
	_, err = c.NewSession(ctx5(t), nil)
	return err
}

// roundTripFrom opens a connection from the address from and sends a
// message to itself through the router: the gateway serves it.
func roundTripFrom(t *testing.T, e *env, from string) {
	t.Helper()
	c, err := goamqpFrom(t, from, e.addr, &goamqp.ConnOptions{SASLType: goamqp.SASLTypeAnonymous()})
	if err != nil {
		t.Fatalf("dial from %s: %v", from, err)
	}
	s, err := c.NewSession(ctx5(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	r := newReceiver(t, s, "limits/rt", nil)
	send(t, newSender(t, s, "limits/rt", nil), goamqp.NewMessage([]byte("x")))
	if got := body(receive(t, r)); got != "x" {
		t.Fatalf("got %q", got)
	}
}

// TestConnectionsPerAddress: over the per-address limit, a client without
// SASL gets open and then close with amqp:resource-limit-exceeded and a
// description, which go-amqp reports as the connection's error; a SASL
// client gets sasl-outcome sys-temp (4). Another address is served, each
// refusal is counted, and a freed slot admits again.
func TestConnectionsPerAddress(t *testing.T) {
	e := startServer(t, func(o *Options) { o.Admission = limits.New(limits.Options{MaxPerAddress: 1}) })
	first, err := goamqpFrom(t, "127.0.0.2", e.addr, &goamqp.ConnOptions{SASLType: goamqp.SASLTypeAnonymous()})
	if err != nil {
		t.Fatal(err)
	}

	err = refusal(t, "127.0.0.2", e.addr)
	var ce *goamqp.ConnError
	if !errors.As(err, &ce) || ce.RemoteErr == nil || ce.RemoteErr.Condition != goamqp.ErrCondResourceLimitExceeded ||
		!strings.Contains(ce.RemoteErr.Description, "too many connections") {
		t.Fatalf("without SASL over the limit: %v, want a close with %s and a description", err, goamqp.ErrCondResourceLimitExceeded)
	}

	// The same on the wire: the open says a close follows.
	raw := &rawConn{t: t, nc: coretest.DialFrom(t, "127.0.0.2", e.addr)}
	raw.r, raw.w = frames.NewReader(raw.nc, 1<<24), frames.NewWriter(raw.nc, 0)
	o := raw.open(nil)
	if len(o.Properties) == 0 || o.Properties[0].Key != "amqp:connection-establishment-failed" {
		t.Fatalf("open properties %+v, want amqp:connection-establishment-failed", o.Properties)
	}
	raw.expectClose(frames.ErrCondResourceLimitExceeded)

	_, err = goamqpFrom(t, "127.0.0.2", e.addr, &goamqp.ConnOptions{SASLType: goamqp.SASLTypePlain("alice", "secret")})
	if err == nil || !strings.Contains(err.Error(), "code 0x4") {
		t.Fatalf("with SASL over the limit: %v, want sasl-outcome code 4 (sys-temp)", err)
	}

	roundTripFrom(t, e, "127.0.0.3")
	if n := e.connRefusals(limits.ReasonAddress); n != 3 {
		t.Fatalf("tolsey_connections_refused_total{reason=%s} = %v, want 3", limits.ReasonAddress, n)
	}

	first.Close()
	eventually(t, "the address's slot to be free", func() bool { return e.srv.opts.Admission.Open() == 1 })
	roundTripFrom(t, e, "127.0.0.2")
}

// TestConnectRate: over its burst, an address is refused with
// amqp:resource-limit-exceeded, counted as connect_rate; another is not.
func TestConnectRate(t *testing.T) {
	e := startServer(t, func(o *Options) { o.Admission = limits.New(limits.Options{Rate: 0.001, Burst: 1}) })
	roundTripFrom(t, e, "127.0.0.4")
	err := refusal(t, "127.0.0.4", e.addr)
	var ce *goamqp.ConnError
	if !errors.As(err, &ce) || ce.RemoteErr == nil || ce.RemoteErr.Condition != goamqp.ErrCondResourceLimitExceeded ||
		!strings.Contains(ce.RemoteErr.Description, "rate") {
		t.Fatalf("over the rate: %v", err)
	}
	roundTripFrom(t, e, "127.0.0.5")
	if n := e.connRefusals(limits.ReasonRate); n != 1 {
		t.Fatalf("refused for the rate: %v, want 1", n)
	}
}

// A refused connection that sends nothing is closed within refuseTimeout,
// not the handshake's 10 s, and holds no slot.
func TestRefusedSilentClosed(t *testing.T) {
	e := startServer(t, func(o *Options) { o.Admission = limits.New(limits.Options{MaxConnections: 1}) })
	roundTripFrom(t, e, "127.0.0.6") // its connection stays open until the test ends
	nc := coretest.DialFrom(t, "127.0.0.7", e.addr)
	_ = nc.SetReadDeadline(time.Now().Add(handshakeTimeout - time.Second))
	var b [8]byte
	if _, err := nc.Read(b[:]); err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a silent refused connection: %v, want it closed by the server", err)
	}
	eventually(t, "no refusal pending", func() bool { return e.srv.refusing.Load() == 0 })
}
