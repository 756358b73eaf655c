package gateway

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/tolsey/tolsey/bridge/cluster"
)

// ClusterConfig is cluster.* (docs/cluster.md).
type ClusterConfig struct {
	Enabled bool
	Prefix  string
}

// buildClusterConfig reads cluster.* and checks what a cluster needs: the
// NATS connection it shares with the bridge, the retained store the
// gateways share, and a node.id that can name this gateway in a subject.
func buildClusterConfig(c *Config, get func(string) string) error {
	c.Cluster.Enabled = get("cluster.enabled") == "true"
	c.Cluster.Prefix = get("cluster.prefix")
	if !c.Cluster.Enabled {
		return nil
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
	c, err := cluster.New(cluster.Options{
		Conn:   g.nats.Conn(),
		Router: g.router,
		Node:   g.cfg.NodeID,
		Prefix: g.cfg.Cluster.Prefix,
		Logger: g.log,
	})
	if err != nil {
		return err
	}
	if err := c.Start(ctx); err != nil {
		return err
	}
	g.cluster.Store(c)
	g.onStop(c.Stop)
	return nil
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

// ClusterStatus is GET /api/v1/cluster: this gateway's part. The list of
// every gateway (presence) is not done yet (docs/cluster.md).
type ClusterStatus struct {
	Enabled bool           `json:"enabled"`
	Node    string         `json:"node"`
	Prefix  string         `json:"prefix,omitempty"`
	Stats   *cluster.Stats `json:"stats,omitempty"`
}

// Cluster is this gateway's cluster state.
func (g *Gateway) Cluster() ClusterStatus {
	c := g.cluster.Load()
	s := ClusterStatus{Enabled: c != nil, Node: g.cfg.NodeID}
	if c != nil {
		st := c.Stats()
		s.Prefix, s.Stats = g.cfg.Cluster.Prefix, &st
	}
	return s
}

func (a *adminServer) clusterStatus(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, a.g.Cluster())
}
