package gateway

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tolsey/tolsey/core/queue"
	queueembedded "github.com/tolsey/tolsey/core/queue/embedded"
	queueredis "github.com/tolsey/tolsey/core/queue/redis"
)

// openQueueBackend opens the store of durable queues that queues.backend
// names. The one place that knows the backends.
func (g *Gateway) openQueueBackend(ctx context.Context) (queue.Backend, error) {
	switch b := g.cfg.Queues.Backend; b {
	case "memory":
		return queue.NewMemory(), nil
	case "embedded":
		if err := os.MkdirAll(g.cfg.DataDir, 0o755); err != nil {
			return nil, &ConfigError{Key: "data.dir", Msg: err.Error()}
		}
		qb, err := queueembedded.Open(filepath.Join(g.cfg.DataDir, queueembedded.FileName), queueembedded.Options{
			Logger: g.log.With("part", "queues"), MaxLog: g.cfg.Queues.MaxLog})
		if err != nil {
			return nil, &ConfigError{Key: "queues.backend", Msg: "embedded: " + err.Error()}
		}
		return qb, nil
	case "redis":
		qb, err := queueredis.Open(ctx, queueredis.Options{URL: g.cfg.RedisURL, Node: g.cfg.NodeID})
		if err != nil {
			return nil, &ConfigError{Key: "queues.backend", Msg: "redis (retain.redis.url): " + err.Error()}
		}
		return qb, nil
	default:
		return nil, &ConfigError{Key: "queues.backend", Msg: fmt.Sprintf("unknown backend %q", b)}
	}
}

// startQueues builds the queue engine on the router, then declares the
// queues of queues.declare. A declared queue the backend holds already
// takes the file's configuration and keeps its messages; a queue the
// backend holds and the file does not name (created through the admin
// API) stays: the file adds and changes, it never deletes. It comes after
// the router and before the bridge and the front-ends, which publish into
// it and consume from it, so that it stops after them: the engine first,
// then its backend. The alternate destinations of queues.addresses are
// set last, once the queues they name exist.
func (g *Gateway) startQueues(ctx context.Context) error {
	b, err := g.openQueueBackend(ctx)
	if err != nil {
		return err
	}
	g.onStop(func(context.Context) error { return b.Close() })
	if c, ok := b.(*queueembedded.Backend); ok {
		g.queueStore.Store(c)
		g.metrics.GaugeFunc("tolsey_queue_checkpoint_failing",
			"1 while the embedded queue store's checkpoints (its write-ahead log applied to queues.db) fail, else 0: appends are still taken, the log and memory grow until one succeeds or the log holds queues.embedded.maxLog, past which publishes are refused as a full queue's. GET /readyz names the cause.",
			func() float64 {
				if c.CheckpointErr() != nil {
					return 1
				}
				return 0
			})
		g.metrics.CounterFunc("tolsey_queue_checkpoint_failures_total",
			"Checkpoints of the embedded queue store that failed (each is tried again about a second later).", nil,
			func() float64 { return float64(c.CheckpointFailures()) })
	}
	shared := g.followsQueues()
	var changed func(string)
	if shared {
		// The others read the declaration again (startCluster wires
		// their side); before the cluster starts there is nobody to tell.
		changed = func(name string) {
			if c := g.cluster.Load(); c != nil {
				c.QueueChanged(name)
			}
		}
	}
	e, err := queue.New(ctx, queue.Options{
		Router:  g.router,
		Backend: b,
		Limits:  g.cfg.Queues.Limits,
		Window:  g.cfg.Queues.Window,
		// One shared queue per name for the whole cluster (docs/cluster.md).
		LocalOnly: shared,
		Changed:   changed,
		Logger:    g.log.With("part", "queues"),
	})
	if err != nil {
		return err
	}
	g.queues.Store(e)
	g.onStop(func(context.Context) error { e.Close(); return nil })
	for i, cfg := range g.cfg.Queues.Declare {
		if _, err := e.Declare(ctx, cfg); err != nil {
			return &ConfigError{Key: fmt.Sprintf("queues.declare[%d]", i), Msg: err.Error()}
		}
	}
	// After the declares: every alternate names one of them.
	if err := e.SetAlternates(g.cfg.Queues.Addresses); err != nil {
		return &ConfigError{Key: "queues.addresses", Msg: err.Error()}
	}
	g.metrics.Registry.MustRegister(queueCollector{e})
	return nil
}

// QueueStoreDegraded says why the queue store is degraded, for /readyz's
// body, or "": checkpoints failing leave the gateway ready (appends are
// still logged and acknowledged), but the log and memory grow, up to
// queues.embedded.maxLog, past which publishes are refused (it says so).
func (g *Gateway) QueueStoreDegraded() string {
	c := g.queueStore.Load()
	if c == nil {
		return ""
	}
	if err := c.CheckpointErr(); err != nil {
		return "queue store degraded: " + err.Error()
	}
	return ""
}

// followsQueues: the gateways of the cluster share one queue store
// (Redis), whose declarations each engine follows (docs/cluster.md,
// "Queues").
func (g *Gateway) followsQueues() bool {
	return g.cfg.Cluster.Enabled && g.cfg.Queues.Backend == "redis"
}

// followQueue reads the declaration of the queue another gateway
// announced (cluster.Options.QueueChanged).
func (g *Gateway) followQueue(name string) {
	e := g.queues.Load()
	if e == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.Follow(ctx, name); err != nil {
		// The engine's periodic reading tries again.
		g.log.Warn("queue declared by another gateway not followed", "queue", name, "error", err)
	}
}

// Queues is the queue engine, for tests and benchmarks in this module.
func (g *Gateway) Queues() *queue.Engine { return g.queues.Load() }

// queueCollector exports every queue's depth and counters, read from
// Queue.Info at scrape time: nothing is counted per message.
type queueCollector struct{ e *queue.Engine }

var (
	queueMessagesDesc = prometheus.NewDesc("tolsey_queue_messages",
		"Messages a queue holds (ready, in flight and stored).", []string{"queue"}, nil)
	queueBytesDesc = prometheus.NewDesc("tolsey_queue_bytes",
		"Bytes of the messages a queue holds.", []string{"queue"}, nil)
	queueConsumersDesc = prometheus.NewDesc("tolsey_queue_consumers",
		"Consumers attached to a queue, standby and browsers included.", []string{"queue"}, nil)
	queueEventsDesc = prometheus.NewDesc("tolsey_queue_messages_total",
		"What happened to a queue's messages since the gateway started: in (stored), out (delivered, redeliveries included), acked, redelivered, expired, dead_lettered, dropped (rejected or over maxDeliveries without a dead-letter queue), refused (publishes refused: full, store failed).",
		[]string{"queue", "event"}, nil)
)

func (c queueCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- queueMessagesDesc
	ch <- queueBytesDesc
	ch <- queueConsumersDesc
	ch <- queueEventsDesc
}

func (c queueCollector) Collect(ch chan<- prometheus.Metric) {
	for _, q := range c.e.Queues() {
		i := q.Info()
		n := q.Name()
		ch <- prometheus.MustNewConstMetric(queueMessagesDesc, prometheus.GaugeValue, float64(i.Messages), n)
		ch <- prometheus.MustNewConstMetric(queueBytesDesc, prometheus.GaugeValue, float64(i.Bytes), n)
		ch <- prometheus.MustNewConstMetric(queueConsumersDesc, prometheus.GaugeValue, float64(i.Consumers), n)
		k := i.Counters
		for _, ev := range []struct {
			name string
			v    uint64
		}{
			{"in", k.In}, {"out", k.Out}, {"acked", k.Acked}, {"redelivered", k.Redelivered},
			{"expired", k.Expired}, {"dead_lettered", k.DeadLettered}, {"dropped", k.Dropped}, {"refused", k.Refused},
		} {
			ch <- prometheus.MustNewConstMetric(queueEventsDesc, prometheus.CounterValue, float64(ev.v), n, ev.name)
		}
	}
}
