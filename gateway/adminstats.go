package gateway

import (
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/tolsey/tolsey/retain"
)

// statsJSON is GET /api/v1/stats: one snapshot of what the web console's
// overview shows (docs/console.md). Counters are cumulative since start;
// the console samples them every few seconds and derives rates itself, so
// the gateway keeps no history and starts no goroutine for it.
type statsJSON struct {
	Time          time.Time        `json:"time"`
	Node          string           `json:"node"`
	Version       string           `json:"version"`
	UptimeSeconds float64          `json:"uptimeSeconds"`
	Ready         bool             `json:"ready"`
	NotReady      string           `json:"notReady,omitempty"` // why Ready is false, as /readyz says it
	Connections   map[string]int64 `json:"connections"`        // open, by protocol
	Messages      messagesJSON     `json:"messages"`
	Retained      sizeJSON         `json:"retained"`
	Queues        queuesStatsJSON  `json:"queues"`
	Store         storeStatsJSON   `json:"store"`
	Bridges       []bridgeStats    `json:"bridges"`
	Cluster       clusterStats     `json:"cluster"`
}

// messagesJSON: tolsey_messages_in_total summed over its labels;
// delivered, tolsey_mqtt_messages_sent_total and tolsey_messages_out_total
// of the other protocols; dropped, tolsey_messages_dropped_total and
// tolsey_mqtt_messages_dropped_total.
type messagesJSON struct {
	Received  uint64 `json:"received"`
	Delivered uint64 `json:"delivered"`
	Dropped   uint64 `json:"dropped"`
}

type sizeJSON struct {
	Count int64 `json:"count"`
	Bytes int64 `json:"bytes"`
}

type queuesStatsJSON struct {
	Count    int `json:"count"`
	Messages int `json:"messages"`
}

type storeStatsJSON struct {
	Backend string `json:"backend"`
	Ready   bool   `json:"ready"`
	Error   string `json:"error"`
}

// bridgeStats is one bridge in short; GET /api/v1/bridges has the rules.
type bridgeStats struct {
	Name      string `json:"name"`
	State     string `json:"state"`
	Buffered  int64  `json:"buffered"` // messages held on disk by its outbound rules
	LastError string `json:"lastError"`
}

type clusterStats struct {
	Enabled bool `json:"enabled"`
	Members int  `json:"members"`
}

// started is when the process loaded this package: uptime is the
// process's (several gateways in one test process share it).
var started = time.Now()

// stats is GET /api/v1/stats. It answers while the gateway starts too
// (ready false, the parts not yet built left at zero), since the console
// polls it from the first second.
func (a *adminServer) stats(w http.ResponseWriter, _ *http.Request) {
	g := a.g
	now := time.Now()
	s := statsJSON{
		Time: now.UTC(), Node: g.cfg.NodeID, Version: Build().Version,
		UptimeSeconds: now.Sub(started).Seconds(),
		Connections:   map[string]int64{"mqtt": 0, "amqp": 0},
		Store:         storeStatsJSON{Backend: g.cfg.RetainBackend},
		Bridges:       []bridgeStats{},
	}
	if err := g.Ready(); err != nil {
		s.NotReady = err.Error()
	} else {
		s.Ready = true
	}
	sumCounters(g.metrics.Connections, func(labels []*dto.LabelPair, v float64) {
		for _, l := range labels {
			if l.GetName() == "protocol" {
				s.Connections[l.GetValue()] += int64(v)
			}
		}
	})
	s.Messages.Received = sumAll(g.metrics.MessagesIn)
	// "requeued" counts QoS 1/2 copies the MQTT backlog kept (a full write
	// queue's pressure): delivered later, not lost.
	s.Messages.Dropped = sumExcept(g.metrics.Dropped, "reason", "requeued")
	// MQTT to MQTT goes through mochi alone: its PUBLISH packets sent,
	// below, count every MQTT delivery, these included.
	s.Messages.Delivered = sumExcept(g.metrics.MessagesOut, "protocol", "mqtt")
	// g.store, the bridges and the cluster are set before ready is: the
	// atomic orders them for this goroutine.
	if g.ready.Load() {
		info := g.mqtt.Info()
		s.Messages.Delivered += uint64(atomic.LoadInt64(&info.MessagesSent))
		s.Messages.Dropped += uint64(atomic.LoadInt64(&info.MessagesDropped))
		st := g.store.Stats()
		s.Retained = sizeJSON{Count: int64(st.Count), Bytes: st.Bytes}
		s.Store.Ready = true
		if h, ok := g.store.(retain.Health); ok {
			if err := h.Ready(); err != nil {
				s.Store.Ready, s.Store.Error = false, err.Error()
			}
		}
		for _, b := range g.Bridges() {
			bs := bridgeStats{Name: b.Name, State: b.State, LastError: b.LastError}
			for _, r := range b.Rules {
				if r.Buffer != nil {
					bs.Buffered += r.Buffer.Messages
				}
			}
			s.Bridges = append(s.Bridges, bs)
		}
		if c := g.cluster.Load(); c != nil {
			s.Cluster = clusterStats{Enabled: true, Members: len(c.Members())}
		}
	}
	if e := g.queues.Load(); e != nil {
		s.Queues.Count, s.Queues.Messages = e.Totals()
	}
	writeJSON(w, http.StatusOK, s)
}

// sumCounters calls f with the labels and value of every series c holds
// (a counter or gauge vector).
func sumCounters(c prometheus.Collector, f func([]*dto.LabelPair, float64)) {
	ch := make(chan prometheus.Metric)
	go func() {
		c.Collect(ch)
		close(ch)
	}()
	for m := range ch {
		var d dto.Metric
		if m.Write(&d) != nil {
			continue
		}
		switch {
		case d.Counter != nil:
			f(d.Label, d.Counter.GetValue())
		case d.Gauge != nil:
			f(d.Label, d.Gauge.GetValue())
		}
	}
}

// sumExcept is a counter vector's total over the series whose label name
// is not value.
func sumExcept(c prometheus.Collector, name, value string) uint64 {
	var n float64
	sumCounters(c, func(labels []*dto.LabelPair, v float64) {
		for _, l := range labels {
			if l.GetName() == name && l.GetValue() == value {
				return
			}
		}
		n += v
	})
	return uint64(n)
}

// sumAll is a counter vector's total over its labels.
func sumAll(c prometheus.Collector) uint64 {
	var n float64
	sumCounters(c, func(_ []*dto.LabelPair, v float64) { n += v })
	return uint64(n)
}
