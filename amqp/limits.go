package amqp

import (
	"errors"
	"net"
	"time"

	"github.com/tolsey/tolsey/amqp/internal/encoding"
	"github.com/tolsey/tolsey/amqp/internal/frames"
	"github.com/tolsey/tolsey/core/limits"
	"github.com/tolsey/tolsey/core/metrics"
)

// Limits a client can run into, and what the gateway counts about them
// (an abuse probe: one connection opened 256 sessions × 1,024 receivers on "#",
// and then every published message cost 262,144 deliveries).
//
//   - Sessions per connection (Options.MaxSessions) are announced as the
//     open's channel-max; a begin on a higher channel closes the
//     connection with amqp:connection:framing-error, as AMQP 1.0 §2.7.1
//     requires of "a channel number outside the supported range".
//   - Links per connection (Options.MaxLinksPerConnection) count every link
//     of every session, senders and receivers alike: a receiving link is a
//     router subscription (fan-out cost), a sending one only memory, and
//     both are bounded by the same number so that one limit answers "what
//     can one connection hold". An attach beyond the count is refused
//     (§2.6.3: an attach without our terminus, then a detach with
//     amqp:resource-limit-exceeded). The begin's handle-max leaves a single
//     session room for the whole budget plus the refusals below
//     (conn.handleMax); a handle above it closes the connection with
//     framing-error (§2.7.2).
//   - A refused link keeps its handle until the client answers our detach.
//     A client that lets more than MaxLinksPerConnection refusals pile up
//     unanswered is closed with amqp:resource-limit-exceeded, so refusals
//     cannot become the unbounded state the limit is there to prevent.
//   - Writes (Options.WriteTimeout): writer.go.
//
// Counted in tolsey_limit_refusals_total{protocol="amqp",limit} (limit
// "sessions" or "links") and tolsey_connections_closed_total{protocol=
// "amqp",reason} (reason "write_timeout" or "unanswered_refusals"), the
// series every front-end counts its limits and disconnections into
// (core/metrics).

// Labels of tolsey_limit_refusals_total and tolsey_connections_closed_total.
const (
	limitSessions            = "sessions"
	limitLinks               = "links"
	reasonWriteTimeout       = "write_timeout"
	reasonUnansweredRefusals = "unanswered_refusals"
)

// counters counts into the gateway's metrics; safe on any goroutine, and
// with no metrics it counts nothing.
type counters struct{ m *metrics.Metrics }

func newCounters(m *metrics.Metrics) counters {
	if m != nil {
		// Series that exist from the start read 0, not absent, on dashboards.
		m.LimitRefusals.WithLabelValues("amqp", limitSessions)
		m.LimitRefusals.WithLabelValues("amqp", limitLinks)
		m.ConnsClosed.WithLabelValues("amqp", reasonWriteTimeout)
		m.ConnsClosed.WithLabelValues("amqp", reasonUnansweredRefusals)
		for _, r := range limits.Reasons {
			m.ConnsRefused.WithLabelValues("amqp", r)
		}
	}
	return counters{m}
}

// refused counts a request refused by limit.
func (c counters) refused(limit string) { c.m.LimitRefused("amqp", limit) }

// disconnected counts a connection ended for reason.
func (c counters) disconnected(reason string) { c.m.Closed("amqp", reason) }

// Connection limits (Options.Admission: limits.maxConnections,
// limits.maxConnectionsPerAddress, limits.connectRate; docs/security.md,
// "Limits"), shared with the MQTT front-end. The decision is taken at
// accept, before the TLS handshake and before SASL, so a refused
// connection costs no password hash; the refusal is given in the words
// the client's first step allows (serveRefused). Counted in
// tolsey_connections_refused_total{protocol="amqp",reason}.
const (
	// maxPendingRefusals bounds the refused connections being answered;
	// beyond it a refused connection is closed at accept, unanswered, so
	// a flood of them holds a bounded number of goroutines.
	maxPendingRefusals = 256
	// refuseTimeout bounds a refused connection's whole exchange.
	refuseTimeout = 2 * time.Second
)

// admit asks the connection limits about nc, just accepted, counting and
// logging (at most once per address per interval) a refusal. ok is false
// when nc is to be closed at once.
func (s *Server) admit(nc net.Conn) (v limits.Verdict, ok bool) {
	v = s.opts.Admission.Admit(nc.RemoteAddr())
	if v.Reason == "" {
		return v, true
	}
	s.opts.Metrics.ConnRefused("amqp", v.Reason)
	if v.Log {
		s.log.Info("amqp connection refused", "remote", nc.RemoteAddr().String(), "reason", v.Reason)
	}
	if s.refusing.Add(1) > maxPendingRefusals {
		s.refusing.Add(-1)
		return v, false
	}
	return v, true
}

// dropped closes a connection accepted while shutting down, which serve
// will not run for, and gives back what admit took for it.
func (c *conn) dropped() {
	c.ticket.Release()
	if c.refused != "" {
		c.s.refusing.Add(-1)
	}
	c.nc.Close()
}

// serveRefused answers a connection the limits refused, on its reader
// goroutine, and closes it:
//   - after a SASL header (go-amqp, Qpid JMS, Proton with credentials):
//     the mechanisms, then, for the client's sasl-init, sasl-outcome code
//     sys-temp (4, "authentication failed due to a transient system
//     error", part 5 §5.3.3.6): SASL's one way to refuse for a passing
//     reason. Its outcome carries no text on failure, so the client shows
//     a SASL failure with code 4; the log and the metric say why. The
//     credentials are never checked: a refused flood buys no bcrypt.
//   - after a bare AMQP header (rhea without a user): the header, our open
//     and then a close with amqp:resource-limit-exceeded and a
//     description saying which limit, as part 2 §2.4.1 requires of a
//     peer that refuses a connection (an open first, then the close).
func (c *conn) serveRefused() {
	defer c.s.refusing.Add(-1)
	defer c.s.forget(c)
	defer c.nc.Close()
	_ = c.nc.SetDeadline(time.Now().Add(min(handshakeTimeout, refuseTimeout)))
	h, err := c.r.ReadProtocolHeader()
	if err != nil {
		var he *frames.ProtocolHeaderError
		if errors.As(err, &he) {
			c.refuseHeader(he.Got)
		}
		return
	}
	w := frames.NewWriter(c.nc, 0)
	if h.ProtocolID == frames.ProtocolSASL {
		if c.writeHeader(frames.HeaderSASL) != nil ||
			w.WriteFrame(0, &frames.SASLMechanisms{SASLServerMechanisms: c.mechanisms()}, nil) != nil {
			return
		}
		if _, err := c.readSASL(); err == nil {
			_ = w.WriteFrame(0, &frames.SASLOutcome{Code: frames.SASLCodeSysTemp}, nil)
		}
		c.linger()
		return
	}
	if c.writeHeader(frames.HeaderAMQP) != nil {
		return
	}
	if _, err := c.readOpen(); err == nil || isConnError(err) {
		// connection-establishment-failed: the hint Qpid JMS and Artemis
		// use for an open that a close follows at once, so the client
		// reports the close's error rather than a connection lost.
		ours := &frames.Open{ContainerID: "gateway:" + c.s.opts.Node, MaxFrameSize: c.s.opts.MaxFrameSize,
			Properties: encoding.Fields{{Key: "amqp:connection-establishment-failed", Value: true}}}
		if w.WriteFrame(0, ours, nil) == nil {
			_ = w.WriteFrame(0, &frames.Close{Error: wireError(frames.ErrCondResourceLimitExceeded, limits.Describe(c.refused))}, nil)
		}
	}
	c.linger()
}
