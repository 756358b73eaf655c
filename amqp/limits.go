package amqp

import (
	"errors"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gatewayd/gateway/core/metrics"
)

// Limits a client can run into, and what the gateway counts about them
// (issue 7: one connection opened 256 sessions × 1,024 receivers on "#",
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
// Counted in gateway_limit_refusals_total{protocol="amqp",limit} (limit
// "sessions" or "links") and gateway_disconnects_total{protocol="amqp",
// reason} (reason "write_timeout" or "unanswered_refusals"). They carry a
// protocol label so that the other front-ends can count into the same
// series.

// Labels of gateway_limit_refusals_total and gateway_disconnects_total.
const (
	limitSessions            = "sessions"
	limitLinks               = "links"
	reasonWriteTimeout       = "write_timeout"
	reasonUnansweredRefusals = "unanswered_refusals"
)

// counters are the collectors this package adds to the gateway's
// registry. Their methods are safe on any goroutine; without a registry
// they count into collectors nobody reads.
type counters struct {
	refusals    *prometheus.CounterVec // by protocol and limit
	disconnects *prometheus.CounterVec // by protocol and reason
}

func newCounters(m *metrics.Metrics, log *slog.Logger) counters {
	c := counters{
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_limit_refusals_total",
			Help: "Client requests refused because a configured limit was reached, by protocol and limit.",
		}, []string{"protocol", "limit"}),
		disconnects: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_disconnects_total",
			Help: "Client connections the gateway ended for cause, by protocol and reason.",
		}, []string{"protocol", "reason"}),
	}
	if m != nil {
		c.refusals = register(m.Registry, c.refusals, log)
		c.disconnects = register(m.Registry, c.disconnects, log)
	}
	// Series that exist from the start read 0, not absent, on dashboards.
	c.refusals.WithLabelValues("amqp", limitSessions)
	c.refusals.WithLabelValues("amqp", limitLinks)
	c.disconnects.WithLabelValues("amqp", reasonWriteTimeout)
	c.disconnects.WithLabelValues("amqp", reasonUnansweredRefusals)
	return c
}

// register adds v to r, or returns the collector already registered under
// its name (a second Server on the same registry, or another front-end
// counting into the same family).
func register(r *prometheus.Registry, v *prometheus.CounterVec, log *slog.Logger) *prometheus.CounterVec {
	err := r.Register(v)
	if err == nil {
		return v
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if old, ok := are.ExistingCollector.(*prometheus.CounterVec); ok {
			return old
		}
	}
	log.Warn("amqp metric not registered", "error", err)
	return v
}

// refused counts a request refused by limit.
func (c counters) refused(limit string) { c.refusals.WithLabelValues("amqp", limit).Inc() }

// disconnected counts a connection ended for reason.
func (c counters) disconnected(reason string) {
	c.disconnects.WithLabelValues("amqp", reason).Inc()
}
