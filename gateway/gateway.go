// Package gateway wires the parts together and owns their lifecycle: it
// builds every part from Config, starts them in a fixed order (admin API,
// retained store, router, queues, bridge, MQTT, AMQP), stops them in
// reverse, and serves the admin HTTP API. It is the only package that knows every part.
package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tolsey/tolsey/amqp"
	"github.com/tolsey/tolsey/bridge"
	"github.com/tolsey/tolsey/bridge/cluster"
	"github.com/tolsey/tolsey/core"
	"github.com/tolsey/tolsey/core/accept"
	"github.com/tolsey/tolsey/core/auth"
	"github.com/tolsey/tolsey/core/limits"
	"github.com/tolsey/tolsey/core/metrics"
	"github.com/tolsey/tolsey/core/queue"
	queueembedded "github.com/tolsey/tolsey/core/queue/embedded"
	"github.com/tolsey/tolsey/core/tlsconf"
	"github.com/tolsey/tolsey/mqtt"
	"github.com/tolsey/tolsey/retain"
)

// Gateway is one running gateway.
type Gateway struct {
	cfg         *Config
	log         *slog.Logger
	metrics     *metrics.Metrics
	store       retain.Store
	router      *core.Router
	queues      atomic.Pointer[queue.Engine]          // set once at start; the admin API reads it meanwhile
	queueStore  atomic.Pointer[queueembedded.Backend] // the embedded queue store (nil: another), for /readyz; set at start
	mqtt        *mqtt.Server
	amqp        *amqp.Server                    // nil when amqp.listen is empty
	nats        *bridge.NATS                    // nil when bridge.nats.url is empty
	amqpBridges []*bridge.AMQP                  // bridge.amqp
	cluster     atomic.Pointer[cluster.Cluster] // nil unless cluster.enabled; set at start while the admin API may read it
	admin       *adminServer
	tls         []tlsHolder       // the TLS sections listeners use; set before any starts
	auth        *auth.Live        // set before any listener starts; swapped inside on Reload
	admission   *limits.Admission // limits.*: one for every listener of both front-ends; nil: none
	reloadMu    sync.Mutex        // one Reload at a time (SIGHUP and the admin API may race)

	ready   atomic.Bool
	stopped atomic.Bool
	mu      sync.Mutex // guards stops
	stops   []func(context.Context) error
}

// New builds a gateway from cfg; Start starts it.
func New(cfg *Config, log *slog.Logger) *Gateway {
	if log == nil {
		log = slog.Default()
	}
	m := metrics.New()
	m.Registry.MustRegister(buildInfoGauge(Build()))
	g := &Gateway{cfg: cfg, log: log, metrics: m}
	// What /readyz answers, for alerting on a store outage or a failed
	// listener without probing (deploy/prometheus/alerts.yaml).
	m.GaugeFunc("tolsey_ready", "1 while /readyz answers 200 (started, listeners accepting, store reachable), else 0.",
		func() float64 {
			if g.Ready() != nil {
				return 0
			}
			return 1
		})
	return g
}

// NewLogger builds the logger the config asks for.
func NewLogger(cfg *Config) *slog.Logger {
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(cfg.LogLevel))
	o := &slog.HandlerOptions{Level: lvl}
	if cfg.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(os.Stderr, o))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, o))
}

// Start starts every part in order. When one fails, those already started
// are stopped and the error is returned.
func (g *Gateway) Start(ctx context.Context) (err error) {
	defer func() {
		if err != nil {
			sctx, cancel := context.WithTimeout(context.Background(), g.cfg.ShutdownTimeout)
			defer cancel()
			_ = g.Stop(sctx)
		}
	}()
	if err := g.startAuth(); err != nil {
		return err
	}
	if err := g.startTLS(); err != nil {
		return err
	}
	g.watchTLS(g.cfg.TLSWatch)
	if g.cfg.AdminListen != "" {
		g.admin = newAdminServer(g)
		if err := g.admin.start(g.cfg.AdminListen, g.tlsFor("admin.tls")); err != nil {
			return err
		}
		g.onStop(g.admin.stop)
		g.log.Info("admin API listening", "addr", g.admin.addr())
		g.countAcceptFailures(g.admin.ln)
	}

	store, err := g.openStore(ctx)
	if err != nil {
		return err
	}
	g.store = store
	g.onStop(func(context.Context) error { return store.Close() })
	g.metrics.GaugeFunc("tolsey_retained_messages", "Retained messages held by the store.",
		func() float64 { return float64(store.Stats().Count) })
	g.metrics.GaugeFunc("tolsey_retained_bytes", "Bytes of retained messages held by the store.",
		func() float64 { return float64(store.Stats().Bytes) })

	g.router = core.NewRouter(core.RouterOptions{
		Retainer: retain.Retainer{Store: store},
		Node:     g.cfg.NodeID,
		// One rule for every protocol's topics; the front-ends read it
		// from the router.
		TopicLimits: core.TopicLimits{MaxLevels: g.cfg.MQTT.MaxTopicLevels, MaxLength: g.cfg.MQTT.MaxTopicLength},
		Topics:      core.NewTopicTable(topicTableSize), // GET /api/v1/topics
	})

	if err := g.startQueues(ctx); err != nil {
		return err
	}

	if err := g.startBridge(ctx); err != nil {
		return err
	}
	if err := g.startCluster(ctx); err != nil {
		return err
	}

	sessions, err := g.openSessions(ctx)
	if err != nil {
		return err
	}
	g.admission = limits.New(limits.Options{
		MaxConnections: g.cfg.Limits.MaxConnections,
		MaxPerAddress:  g.cfg.Limits.MaxPerAddress,
		Rate:           g.cfg.Limits.ConnectRate,
		Burst:          g.cfg.Limits.ConnectBurst,
	})
	g.mqtt, err = mqtt.New(mqtt.Options{
		Admission:           g.admission,
		MaxSubscriptions:    g.cfg.MQTT.MaxSubscriptions,
		Auth:                g.auth,
		Listen:              g.cfg.MQTT.Listen,
		WSListen:            g.cfg.MQTT.WSListen,
		TLSListen:           g.cfg.MQTT.TLSListen,
		WSSListen:           g.cfg.MQTT.WSSListen,
		TLS:                 serverTLS(g.tlsFor("mqtt.tls")),
		Router:              g.router,
		Store:               store,
		Metrics:             g.metrics,
		Logger:              g.log,
		Node:                g.cfg.NodeID,
		MaxPendingWrites:    g.cfg.MQTT.MaxPendingWrites,
		MaxInflight:         g.cfg.MQTT.MaxInflight,
		ReceiveMaximum:      g.cfg.MQTT.ReceiveMaximum,
		MaxPacketSize:       g.cfg.MQTT.MaxPacketSize,
		MaxUserProperties:   g.cfg.MQTT.MaxUserProperties,
		MaxMessageExpiry:    g.cfg.MQTT.MaxMessageExpiry,
		MaxSessionExpiry:    g.cfg.MQTT.MaxSessionExpiry,
		MaxKeepAlive:        g.cfg.MQTT.MaxKeepAlive,
		WriteTimeout:        writeTimeout(g.cfg.MQTT.WriteTimeout),
		SlowSubscriberStall: writeTimeout(g.cfg.MQTT.SlowSubscriberStall),
		SendBuffer:          g.cfg.Limits.SendBuffer,
		ConnectTimeout:      g.cfg.MQTT.ConnectTimeout,
		Queues:              g.queues.Load(),
		AutoCreateQueues:    g.cfg.Queues.AutoCreate,
		V311Full:            g.cfg.Queues.V311Full,
		Sessions:            sessions,
		Cluster:             g.mqttCluster(),
	})
	if err != nil {
		return err
	}
	if c := g.cluster.Load(); c != nil {
		c.SetClients(g.mqtt) // before any client connects: claims from other gateways reach it
	}
	if err := g.mqtt.Start(); err != nil {
		return err
	}
	g.onStop(g.mqtt.Shutdown)
	for _, l := range g.mqtt.Listeners() {
		g.countAcceptFailures(l)
	}
	ms := g.mqtt
	g.metrics.CounterFunc("tolsey_mqtt_packets_sent_total", "MQTT packets sent by mochi.", nil,
		func() float64 { return float64(atomic.LoadInt64(&ms.Info().PacketsSent)) })
	g.metrics.CounterFunc("tolsey_mqtt_messages_sent_total", "MQTT PUBLISH packets sent to clients.", nil,
		func() float64 { return float64(atomic.LoadInt64(&ms.Info().MessagesSent)) })
	g.metrics.CounterFunc("tolsey_mqtt_messages_dropped_total", "MQTT messages dropped by mochi (client write queue full).", nil,
		func() float64 { return float64(atomic.LoadInt64(&ms.Info().MessagesDropped)) })
	g.metrics.CounterFunc("tolsey_mqtt_inflight_dropped_total", "MQTT QoS 1/2 messages dropped because a session held mqtt.maxInflight already.", nil,
		func() float64 { return float64(atomic.LoadInt64(&ms.Info().InflightDropped)) })
	if r, ok := sessions.(interface{ Refused() uint64 }); ok {
		g.metrics.CounterFunc("tolsey_mqtt_session_writes_refused_total", "MQTT session store writes the shared store refused: their client's session was taken by another gateway since (docs/cluster.md, \"Epochs\").", nil,
			func() float64 { return float64(r.Refused()) })
	}

	if err := g.startAMQP(ctx); err != nil {
		return err
	}
	g.announceSelf()
	g.ready.Store(true)
	g.log.Info("gateway ready", "node", g.cfg.NodeID, "retain.backend", g.cfg.RetainBackend)
	return nil
}

func (g *Gateway) onStop(f func(context.Context) error) {
	g.mu.Lock()
	g.stops = append(g.stops, f)
	g.mu.Unlock()
}

// Stop stops the parts in reverse start order: listeners drain first, the
// store is flushed and closed after the front-ends, the admin API last.
func (g *Gateway) Stop(ctx context.Context) error {
	if !g.stopped.CompareAndSwap(false, true) {
		return nil
	}
	g.ready.Store(false)
	g.mu.Lock()
	stops := g.stops
	g.stops = nil
	g.mu.Unlock()
	var errs []error
	for i := len(stops) - 1; i >= 0; i-- {
		if err := stops[i](ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Run starts the gateway, waits for ctx to end (SIGINT/SIGTERM in main),
// then drains and stops within cfg.ShutdownTimeout. Meanwhile SIGHUP
// re-reads the users file and the TLS files (Reload).
func Run(ctx context.Context, cfg *Config, log *slog.Logger) error {
	g := New(cfg, log)
	if err := g.Start(ctx); err != nil {
		return err
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	g.serveSignals(ctx, hup)
	signal.Stop(hup)
	log.Info("shutting down", "timeout", cfg.ShutdownTimeout.String())
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	if err := g.Stop(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	log.Info("stopped")
	return nil
}

// serveSignals reloads on each hup until ctx ends.
func (g *Gateway) serveSignals(ctx context.Context, hup <-chan os.Signal) {
	for {
		select {
		case <-hup:
			g.reloadOnSignal()
		case <-ctx.Done():
			return
		}
	}
}

// reloadOnSignal runs Reload for SIGHUP; Reload logs what came of it.
func (g *Gateway) reloadOnSignal() {
	g.log.Info("SIGHUP: reloading the users file and the TLS files")
	_ = g.Reload()
}

// countAcceptFailures exports l's retried accept failures (out of file
// descriptors and the like) as tolsey_accept_failures_total{listener}.
func (g *Gateway) countAcceptFailures(l *accept.Listener) {
	g.metrics.CounterFunc("tolsey_accept_failures_total",
		"Accepts that failed with a temporary error (EMFILE, ENFILE, ECONNABORTED, timeout) and were retried.",
		prometheus.Labels{"listener": l.Name()}, func() float64 { return float64(l.Failures()) })
}

// Ready returns nil when every listener and the store are up. A listener
// that has stopped accepting (any error but the temporary ones it retries)
// makes it fail for good, naming the listener.
func (g *Gateway) Ready() error {
	if !g.ready.Load() {
		return errors.New("starting")
	}
	for _, l := range g.listeners() {
		if err := l.Err(); err != nil {
			return err
		}
	}
	if h, ok := g.store.(retain.Health); ok {
		if err := h.Ready(); err != nil {
			return fmt.Errorf("retained store: %w", err)
		}
	}
	if c := g.cluster.Load(); c != nil {
		return c.Ready() // a node.id used twice: the later gateway yields
	}
	return nil
}

// listeners are the gateway's own listening sockets that accept through
// core/accept.
func (g *Gateway) listeners() []*accept.Listener {
	var ls []*accept.Listener
	if g.admin != nil {
		ls = append(ls, g.admin.ln)
	}
	if g.amqp != nil {
		ls = append(ls, g.amqp.Listener())
		if l := g.amqp.TLSListener(); l != nil {
			ls = append(ls, l)
		}
	}
	return append(ls, g.mqtt.Listeners()...)
}

// Addresses the gateway bound (useful with port 0).
func (g *Gateway) MQTTAddr() string   { return g.mqtt.Addr() }
func (g *Gateway) MQTTWSAddr() string { return g.mqtt.WSAddr() }

// MQTTTLSAddr and MQTTWSSAddr are "" when mqtt.tls.listen, mqtt.wss.listen
// are empty.
func (g *Gateway) MQTTTLSAddr() string { return g.mqtt.TLSAddr() }
func (g *Gateway) MQTTWSSAddr() string { return g.mqtt.WSSAddr() }
func (g *Gateway) AdminAddr() string {
	if g.admin == nil {
		return ""
	}
	return g.admin.addr()
}

// Router and Store are exposed for tests and benchmarks in this module.
func (g *Gateway) Router() *core.Router { return g.router }
func (g *Gateway) Store() retain.Store  { return g.store }

// serverTLS is t's configuration, or nil for no TLS section.
func serverTLS(t *tlsconf.Config) *tls.Config {
	if t == nil {
		return nil
	}
	return t.TLSConfig()
}

// writeTimeout maps the config's 0 ("no limit"; for mqtt.slowSubscriberStall
// and bridge.nats.writerStall, "no stall") to the front-ends' and the
// bridge's negative value, whose 0 takes their default.
func writeTimeout(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}
