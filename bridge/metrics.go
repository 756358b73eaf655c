package bridge

import (
	"github.com/prometheus/client_golang/prometheus"
)

// natsMetrics are the tolsey_bridge_* collectors of the NATS bridge. The
// per-rule counters are resolved once, so that counting a message costs an
// atomic add, not a label lookup.
type natsMetrics struct {
	messages *prometheus.CounterVec
	dropped  *prometheus.CounterVec
	in, out  map[*ruleLink]prometheus.Counter
	drops    map[string]prometheus.Counter // by reason; read-only once made
}

// natsDropReasons are the reasons the NATS bridge counts, resolved once:
// a flood of drops (queue_full at QoS 0) costs an atomic add each.
var natsDropReasons = []string{"unmappable", "loop", "remote_error", "buffer_full", "buffer_error", "queue_full", "stopping", "bad_header", "slow_consumer", "denied"}

func (m *natsMetrics) resolveDrops() {
	m.drops = make(map[string]prometheus.Counter, len(natsDropReasons))
	for _, reason := range natsDropReasons {
		m.drops[reason] = m.dropped.WithLabelValues(bridgeName, reason)
	}
}

func newNATSMetrics(reg prometheus.Registerer, b *NATS) *natsMetrics {
	v := newNATSVecs()
	m := &natsMetrics{
		messages: v.messages,
		dropped:  v.dropped,
		in:       map[*ruleLink]prometheus.Counter{},
		out:      map[*ruleLink]prometheus.Counter{},
	}
	for _, r := range b.rules {
		if r.rule.Direction.Inbound() {
			m.in[r] = m.messages.WithLabelValues(bridgeName, r.name, "in")
		}
		if r.rule.Direction.Outbound() {
			m.out[r] = m.messages.WithLabelValues(bridgeName, r.name, "out")
		}
	}
	m.resolveDrops() // present at 0, so that rate() works from the start
	if reg == nil {
		return m
	}
	// Shared with the AMQP bridges: whichever registers first makes them.
	m.messages = registerShared(reg, m.messages).(*prometheus.CounterVec)
	m.dropped = registerShared(reg, m.dropped).(*prometheus.CounterVec)
	for r := range m.in {
		m.in[r] = m.messages.WithLabelValues(bridgeName, r.name, "in")
	}
	for r := range m.out {
		m.out[r] = m.messages.WithLabelValues(bridgeName, r.name, "out")
	}
	m.resolveDrops()
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "tolsey_bridge_connected", Help: "1 while the bridge is connected to its remote, else 0.",
		ConstLabels: prometheus.Labels{"bridge": bridgeName},
	}, func() float64 {
		if b.connected.Load() {
			return 1
		}
		return 0
	}))
	for _, r := range b.rules {
		if !r.rule.Direction.Outbound() || !r.rule.JetStream.Enabled {
			continue
		}
		labels := prometheus.Labels{"bridge": bridgeName, "rule": r.name}
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "tolsey_bridge_buffered_messages", Help: "Messages waiting in a rule's on-disk buffer for the remote's acknowledgement.",
			ConstLabels: labels,
		}, func() float64 { return float64(r.bufferStats().Messages) }))
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "tolsey_bridge_buffered_bytes", Help: "Bytes held in a rule's on-disk buffer.",
			ConstLabels: labels,
		}, func() float64 { return float64(r.bufferStats().Bytes) }))
	}
	return m
}

func (r *ruleLink) bufferStats() BufferStats {
	if r.js == nil {
		return BufferStats{}
	}
	return r.js.stats()
}

func (m *natsMetrics) message(r *ruleLink, direction string) {
	if direction == "in" {
		m.in[r].Inc()
	} else {
		m.out[r].Inc()
	}
}

func (m *natsMetrics) drop(reason string) {
	if c, ok := m.drops[reason]; ok {
		c.Inc()
		return
	}
	m.dropped.WithLabelValues(bridgeName, reason).Inc()
}

// bridgeVecs are the counters every bridge shares, by bridge label.
type bridgeVecs struct {
	messages *prometheus.CounterVec
	dropped  *prometheus.CounterVec
}

func newNATSVecs() bridgeVecs {
	return bridgeVecs{
		messages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tolsey_bridge_messages_total",
			Help: "Messages carried by a bridge, by bridge, rule and direction (out: to the remote, acknowledged by JetStream for JetStream rules; in: published into our topics).",
		}, []string{"bridge", "rule", "direction"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tolsey_bridge_dropped_total",
			Help: "Messages a bridge did not carry, by reason: unmappable (no subject or topic for it), loop (our own message come back), remote_error (NATS or JetStream refused it), rejected/released/modified (the remote AMQP broker's outcome; released and modified are sent again), remote_down (QoS 0 while the remote is down), queue_full (core NATS writer behind), stopping (a QoS 0 message that came as the bridge stopped), buffer_full (rejectNew refused the publish), buffer_error (the buffer failed), bad_header (a header of ours did not decode), slow_consumer (NATS dropped inbound messages we did not read in time).",
		}, []string{"bridge", "reason"}),
	}
}
