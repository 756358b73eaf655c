package bridge

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// amqpMetrics are one AMQP bridge's tolsey_bridge_* series. The vectors
// are shared with the NATS bridge and the other AMQP bridges (the bridge
// label tells them apart): the first to register makes them.
type amqpMetrics struct {
	name     string
	messages *prometheus.CounterVec
	dropped  *prometheus.CounterVec
	in, out  map[*amqpRule]prometheus.Counter
}

func newAMQPMetrics(reg prometheus.Registerer, b *AMQP) *amqpMetrics {
	nm := newNATSVecs()
	m := &amqpMetrics{name: b.opts.Bridge.Name, messages: nm.messages, dropped: nm.dropped,
		in: map[*amqpRule]prometheus.Counter{}, out: map[*amqpRule]prometheus.Counter{}}
	if reg != nil {
		m.messages = registerShared(reg, m.messages).(*prometheus.CounterVec)
		m.dropped = registerShared(reg, m.dropped).(*prometheus.CounterVec)
	}
	for _, r := range b.rules {
		dir := string(r.rule.Direction)
		c := m.messages.WithLabelValues(m.name, r.name, dir)
		if dir == "in" {
			m.in[r] = c
		} else {
			m.out[r] = c
		}
	}
	for _, reason := range []string{"unmappable", "loop", "rejected", "buffer_full", "denied"} {
		m.dropped.WithLabelValues(m.name, reason)
	}
	if reg == nil {
		return m
	}
	labels := prometheus.Labels{"bridge": m.name}
	registerShared(reg, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "tolsey_bridge_connected", Help: "1 while the bridge is connected to its remote, else 0.", ConstLabels: labels,
	}, func() float64 {
		if b.connected.Load() {
			return 1
		}
		return 0
	}))
	for _, r := range b.rules {
		if r.bq == "" {
			continue
		}
		labels := prometheus.Labels{"bridge": m.name, "rule": r.name}
		registerShared(reg, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "tolsey_bridge_buffered_messages", Help: "Messages waiting in a rule's on-disk buffer for the remote's acknowledgement.", ConstLabels: labels,
		}, func() float64 { return float64(r.bufferStats().Messages) }))
		registerShared(reg, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "tolsey_bridge_buffered_bytes", Help: "Bytes held in a rule's on-disk buffer.", ConstLabels: labels,
		}, func() float64 { return float64(r.bufferStats().Bytes) }))
	}
	return m
}

// registerShared registers c, or returns the collector already registered
// under its description.
func registerShared(reg prometheus.Registerer, c prometheus.Collector) prometheus.Collector {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			return are.ExistingCollector
		}
	}
	return c
}

func (m *amqpMetrics) message(r *amqpRule, direction string) {
	if direction == "in" {
		m.in[r].Inc()
	} else {
		m.out[r].Inc()
	}
}

func (m *amqpMetrics) drop(reason string) {
	m.dropped.WithLabelValues(m.name, reason).Inc()
}
