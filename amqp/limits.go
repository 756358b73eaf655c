package amqp

import (
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
	}
	return counters{m}
}

// refused counts a request refused by limit.
func (c counters) refused(limit string) { c.m.LimitRefused("amqp", limit) }

// disconnected counts a connection ended for reason.
func (c counters) disconnected(reason string) { c.m.Closed("amqp", reason) }
