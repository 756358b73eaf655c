package gateway

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/tolsey/tolsey/amqp"
	"github.com/tolsey/tolsey/bridge/cluster"
	"github.com/tolsey/tolsey/mqtt"
)

// ClusterConfig is cluster.* (docs/cluster.md).
type ClusterConfig struct {
	Enabled bool
	Prefix  string
	// Heartbeat, Advertise and TakeoverTimeout: membership and takeover
	// across gateways (docs/cluster.md, "Members", "Client takeover").
	Heartbeat       time.Duration
	Advertise       string
	TakeoverTimeout time.Duration
}

// buildClusterConfig reads cluster.* and checks what a cluster needs: the
// NATS connection it shares with the bridge, the retained store the
// gateways share, and a node.id that can name this gateway in a subject.
func buildClusterConfig(c *Config, get func(string) string) error {
	c.Cluster.Enabled = get("cluster.enabled") == "true"
	c.Cluster.Prefix = get("cluster.prefix")
	c.Cluster.Advertise = get("cluster.advertise")
	c.Cluster.Heartbeat, _ = time.ParseDuration(normDuration(get("cluster.heartbeat")))
	c.Cluster.TakeoverTimeout, _ = time.ParseDuration(normDuration(get("cluster.takeoverTimeout")))
	if !c.Cluster.Enabled {
		return nil
	}
	if c.Cluster.Heartbeat <= 0 {
		return &ConfigError{Key: "cluster.heartbeat", Msg: "must be above 0: the gateways know each other by it"}
	}
	p := c.Cluster.Prefix
	if p == "" || strings.ContainsAny(p, "*> \t\r\n") || strings.HasPrefix(p, ".") || strings.HasSuffix(p, ".") || strings.Contains(p, "..") {
		return &ConfigError{Key: "cluster.prefix", Msg: fmt.Sprintf("%q is not a subject prefix (tokens without wildcards, such as gw)", p)}
	}
	if len(c.Bridge.NATS.URLs) == 0 {
		return &ConfigError{Key: "bridge.nats.url", Msg: "cluster.enabled needs a NATS URL: the gateways exchange messages through NATS"}
	}
	if c.RetainBackend != "redis" {
		return &ConfigError{Key: "retain.backend", Msg: fmt.Sprintf("cluster.enabled needs redis (is %s): the gateways share one retained store", c.RetainBackend)}
	}
	if err := cluster.ValidNode(c.NodeID); err != nil {
		return &ConfigError{Key: "node.id", Msg: "cluster.enabled: " + err.Error() + "; set node.id to a name unique in the cluster"}
	}
	return nil
}

// startCluster joins the cluster on the NATS bridge's connection. It comes
// after the bridge, so it stops before it (stops run in reverse): the
// connection outlives the cluster's last publish.
func (g *Gateway) startCluster(ctx context.Context) error {
	if !g.cfg.Cluster.Enabled {
		return nil
	}
	if g.nats == nil || g.nats.Conn() == nil {
		return fmt.Errorf("cluster: no NATS connection (bridge.nats.url)")
	}
	opts := cluster.Options{
		Conn:   g.nats.Conn(),
		Router: g.router,
		Node:   g.cfg.NodeID,
		Prefix: g.cfg.Cluster.Prefix,
		Logger: g.log,

		Heartbeat:       g.cfg.Cluster.Heartbeat,
		TakeoverTimeout: g.cfg.Cluster.TakeoverTimeout,
	}
	if g.followsQueues() {
		opts.QueueChanged = g.followQueue
		opts.Reconnected = func() {
			if e := g.queues.Load(); e != nil {
				e.FollowSoon()
			}
		}
	}
	c, err := cluster.New(opts)
	if err != nil {
		return err
	}
	if err := c.Start(ctx); err != nil {
		return err
	}
	g.cluster.Store(c)
	if g.followsQueues() {
		// What the others changed while this gateway started, before it
		// heard their news.
		if e := g.queues.Load(); e != nil {
			e.FollowSoon()
		}
	}
	g.onStop(c.Stop)
	g.metrics.GaugeFunc("tolsey_cluster_members", "Gateways of the cluster this one hears from, itself included.",
		func() float64 { return float64(len(c.Members())) })
	g.metrics.GaugeFunc("tolsey_cluster_duplicate_node", "Other processes heard announcing this gateway's node.id (must be 0).",
		func() float64 { return float64(len(c.Duplicates())) })
	g.metrics.CounterFunc("tolsey_cluster_takeovers_total", "MQTT connections ended here because their client id connected to another gateway.", nil,
		func() float64 { return float64(c.TakeoverStats().TakenOver) })
	g.metrics.CounterFunc("tolsey_cluster_reconnects_total", "NATS reconnections after which the cluster announced itself again.", nil,
		func() float64 { return float64(c.Reconnects()) })
	return nil
}

// mqttCluster is the cluster as the MQTT front-end's Options.Cluster:
// nil (not a nil pointer in an interface) outside a cluster.
func (g *Gateway) mqttCluster() mqtt.Cluster {
	if c := g.cluster.Load(); c != nil {
		return c
	}
	return nil
}

// amqpContainers is the cluster as the AMQP front-end's
// Options.Containers: nil outside a cluster.
func (g *Gateway) amqpContainers() amqp.Containers {
	if c := g.cluster.Load(); c != nil {
		return c
	}
	return nil
}

// announceSelf gives the cluster this gateway's listeners and connection
// count, once they are up (heartbeats before carry the identity only).
func (g *Gateway) announceSelf() {
	c := g.cluster.Load()
	if c == nil {
		return
	}
	c.SetSelf(func() cluster.Self {
		s := cluster.Self{MQTT: g.advertised(g.MQTTAddr()), AMQP: g.advertised(g.AMQPAddr()),
			Admin: g.advertised(g.AdminAddr()), Connections: g.mqtt.Clients()}
		if g.amqp != nil {
			s.Connections += int64(g.amqp.Connections())
		}
		return s
	})
}

// advertised is addr with its host replaced by cluster.advertise, if set.
func (g *Gateway) advertised(addr string) string {
	if addr == "" || g.cfg.Cluster.Advertise == "" {
		return addr
	}
	if _, port, err := net.SplitHostPort(addr); err == nil {
		return net.JoinHostPort(g.cfg.Cluster.Advertise, port)
	}
	return addr
}

// clusterQueueGroup is the NATS queue group prefix of the bridge's inbound
// rules in a cluster (<cluster.prefix>.bridge), so that a NATS message is
// brought in by one gateway, not by each; "" outside a cluster.
func (g *Gateway) clusterQueueGroup() string {
	if !g.cfg.Cluster.Enabled {
		return ""
	}
	return g.cfg.Cluster.Prefix + ".bridge"
}

// ClusterStatus is GET /api/v1/cluster: this gateway's part and every
// gateway it hears from (docs/cluster.md, "Members").
type ClusterStatus struct {
	Enabled  bool           `json:"enabled"`
	Node     string         `json:"node"`
	Instance string         `json:"instance,omitempty"`
	Prefix   string         `json:"prefix,omitempty"`
	Stats    *cluster.Stats `json:"stats,omitempty"`
	// Members: every gateway heard within three heartbeats, this one
	// included, sorted by node id.
	Members []cluster.Member `json:"members,omitempty"`
	// Duplicates: other processes announcing this node.id (an error in
	// the configuration; the later one is not ready).
	Duplicates []cluster.Member `json:"duplicates,omitempty"`
	// Takeover: client ids taken over across gateways.
	Takeover   *cluster.TakeoverStats `json:"takeover,omitempty"`
	Reconnects uint64                 `json:"reconnects,omitempty"` // NATS reconnections
}

// Cluster is this gateway's cluster state.
func (g *Gateway) Cluster() ClusterStatus {
	c := g.cluster.Load()
	s := ClusterStatus{Enabled: c != nil, Node: g.cfg.NodeID}
	if c != nil {
		st := c.Stats()
		s.Prefix, s.Stats = g.cfg.Cluster.Prefix, &st
		s.Instance, s.Members, s.Duplicates = c.Instance(), c.Members(), c.Duplicates()
		ts := c.TakeoverStats()
		s.Takeover, s.Reconnects = &ts, c.Reconnects()
	}
	return s
}

func (a *adminServer) clusterStatus(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, a.g.Cluster())
}
