// Package metrics holds the gateway's Prometheus collectors, shared by every
// front-end, the retained store wiring and the admin API. Each gateway owns
// its own registry (tests run several gateways in one process). A nil
// *Metrics is valid and records nothing, so parts can run without one.
package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Metrics are the collectors of one gateway.
type Metrics struct {
	Registry *prometheus.Registry

	Connections   *prometheus.GaugeVec   // by protocol
	MessagesIn    *prometheus.CounterVec // by protocol
	MessagesOut   *prometheus.CounterVec // by protocol
	Dropped       *prometheus.CounterVec // by protocol and reason
	StoreErrors   *prometheus.CounterVec // by operation
	RetainRefused *prometheus.CounterVec // by reason (quota, unavailable)
	LimitRefusals *prometheus.CounterVec // requests refused for a configured limit, by protocol and limit
	Latency       *prometheus.HistogramVec
	ConnsClosed   *prometheus.CounterVec // connections the gateway ended for cause, by protocol and reason
	AuthFailures  *prometheus.CounterVec // logins and actions refused by auth (docs/security.md), by protocol and reason
	ConnsRefused  *prometheus.CounterVec // new connections refused by the connection limits (core/limits), by protocol and reason
}

// New registers the collectors in a new registry.
func New() *Metrics {
	m := &Metrics{Registry: prometheus.NewRegistry()}
	m.Connections = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "tolsey_connections", Help: "Open client connections.",
	}, []string{"protocol"})
	m.MessagesIn = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tolsey_messages_in_total", Help: "Messages published into the gateway.",
	}, []string{"protocol"})
	m.MessagesOut = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tolsey_messages_out_total", Help: "Messages delivered to clients.",
	}, []string{"protocol"})
	m.Dropped = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tolsey_messages_dropped_total", Help: "Messages not delivered to a subscriber (slow consumer, expired).",
	}, []string{"protocol", "reason"})
	m.StoreErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tolsey_retained_store_errors_total", Help: "Retained store operations that failed.",
	}, []string{"op"})
	m.RetainRefused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tolsey_retained_refused_total", Help: "Retained publishes not stored, by reason.",
	}, []string{"reason"})
	m.LimitRefusals = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tolsey_limit_refusals_total",
		Help: "Client requests refused because a configured limit was reached, by protocol and limit: topic_levels, topic_length (mqtt.maxTopicLevels, mqtt.maxTopicLength), sessions, links (amqp.maxSessions, amqp.maxLinksPerConnection), subscriptions (mqtt.maxSubscriptions).",
	}, []string{"protocol", "limit"})
	m.Latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "tolsey_publish_to_deliver_seconds",
		Help:    "Time from a message entering the gateway to its hand-off to a subscriber's connection.",
		Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1},
	}, []string{"protocol"})
	m.ConnsClosed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tolsey_connections_closed_total",
		Help: "Connections the gateway ended for cause, by protocol and reason: write_timeout (the client stopped reading), packet_too_large, too_many_user_properties, unanswered_refusals.",
	}, []string{"protocol", "reason"})
	m.AuthFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tolsey_auth_failures_total",
		Help: "Logins and actions refused by authentication or the ACL, by protocol and reason: unknown_user, bad_password, unknown_certificate, anonymous, publish_denied, subscribe_denied (MQTT); unknown_user, bad_password, error, anonymous, no_certificate, authzid, mechanism (AMQP SASL).",
	}, []string{"protocol", "reason"})
	m.ConnsRefused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tolsey_connections_refused_total",
		Help: "New connections refused by the connection limits (limits.*), by protocol and reason: max_connections, max_connections_per_address, connect_rate.",
	}, []string{"protocol", "reason"})
	m.Registry.MustRegister(m.Connections, m.MessagesIn, m.MessagesOut, m.Dropped,
		m.StoreErrors, m.RetainRefused, m.LimitRefusals, m.Latency, m.ConnsClosed, m.AuthFailures, m.ConnsRefused,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// GaugeFunc registers a gauge read at scrape time (retained count, bytes).
func (m *Metrics) GaugeFunc(name, help string, f func() float64) {
	if m == nil {
		return
	}
	m.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f))
}

// CounterFunc registers a counter read at scrape time (counters kept by mochi).
func (m *Metrics) CounterFunc(name, help string, labels prometheus.Labels, f func() float64) {
	if m == nil {
		return
	}
	m.Registry.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels}, f))
}

// In counts a message published through protocol.
func (m *Metrics) In(protocol string) {
	if m != nil {
		m.MessagesIn.WithLabelValues(protocol).Inc()
	}
}

// Out counts a delivery through protocol and observes its latency.
func (m *Metrics) Out(protocol string, created time.Time) {
	if m == nil {
		return
	}
	m.MessagesOut.WithLabelValues(protocol).Inc()
	if !created.IsZero() {
		m.Latency.WithLabelValues(protocol).Observe(time.Since(created).Seconds())
	}
}

// Outlet is Out for one protocol with its counter and latency histogram
// resolved once, for a per-message path: counting costs no label lookup.
// A nil *Outlet records nothing.
type Outlet struct {
	count   prometheus.Counter
	latency prometheus.Observer
}

// Outlet resolves Out's collectors for protocol; nil for a nil *Metrics.
func (m *Metrics) Outlet(protocol string) *Outlet {
	if m == nil {
		return nil
	}
	return &Outlet{count: m.MessagesOut.WithLabelValues(protocol), latency: m.Latency.WithLabelValues(protocol)}
}

// Out counts a delivery and observes its latency, as Metrics.Out does.
func (o *Outlet) Out(created time.Time) {
	if o == nil {
		return
	}
	o.count.Inc()
	if !created.IsZero() {
		o.latency.Observe(time.Since(created).Seconds())
	}
}

// Drop counts a message a subscriber did not get.
func (m *Metrics) Drop(protocol, reason string) {
	if m != nil {
		m.Dropped.WithLabelValues(protocol, reason).Inc()
	}
}

// StoreError counts a failed retained store operation.
func (m *Metrics) StoreError(op string) {
	if m != nil {
		m.StoreErrors.WithLabelValues(op).Inc()
	}
}

// Refused counts a retained publish that was not stored.
func (m *Metrics) Refused(reason string) {
	if m != nil {
		m.RetainRefused.WithLabelValues(reason).Inc()
	}
}

// Closed counts a connection the gateway ended because of its client.
func (m *Metrics) Closed(protocol, reason string) {
	if m != nil {
		m.ConnsClosed.WithLabelValues(protocol, reason).Inc()
	}
}

// TopicRefused counts a topic name or filter refused through protocol for
// breaking limit ("levels" or "length", core.LimitReason), as limit
// topic_levels or topic_length of tolsey_limit_refusals_total.
func (m *Metrics) TopicRefused(protocol, limit string) {
	m.LimitRefused(protocol, "topic_"+limit)
}

// LimitRefused counts a request refused because limit was reached.
func (m *Metrics) LimitRefused(protocol, limit string) {
	if m != nil {
		m.LimitRefusals.WithLabelValues(protocol, limit).Inc()
	}
}

// AuthFailure counts a login or an action refused by auth, for reason.
func (m *Metrics) AuthFailure(protocol, reason string) {
	if m != nil {
		m.AuthFailures.WithLabelValues(protocol, reason).Inc()
	}
}

// ConnRefused counts a new connection refused by the connection limits.
func (m *Metrics) ConnRefused(protocol, reason string) {
	if m != nil {
		m.ConnsRefused.WithLabelValues(protocol, reason).Inc()
	}
}

// Conn adjusts the open connection gauge of protocol by delta.
func (m *Metrics) Conn(protocol string, delta float64) {
	if m != nil {
		m.Connections.WithLabelValues(protocol).Add(delta)
	}
}

// InVec is MessagesIn, or nil for a nil *Metrics.
func (m *Metrics) InVec() *prometheus.CounterVec {
	if m == nil {
		return nil
	}
	return m.MessagesIn
}

// Counter resolves one counter of vec for a hot path, so that counting costs
// no label lookup; with a nil vec it returns a counter nobody reads.
func (m *Metrics) Counter(vec *prometheus.CounterVec, labels ...string) prometheus.Counter {
	if vec == nil {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: "unregistered"})
	}
	return vec.WithLabelValues(labels...)
}
