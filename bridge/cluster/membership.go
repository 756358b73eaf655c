package cluster

// Membership (docs/cluster.md, "Members"): each gateway announces itself
// on <prefix>.node.<node> every heartbeat period and keeps the view of the
// others from what it hears on <prefix>.node.*; no consensus, no gossip:
// NATS carries the heartbeats and each gateway decides alone.
//
//   - a gateway silent for three periods is removed at the next check
//     (one per period): within four periods of its last heartbeat;
//   - a gateway that stops cleanly says goodbye (Bye): removed at once;
//   - a heartbeat with Hello asks every gateway for its own at once: sent
//     at start and after each NATS reconnect, so a newcomer's view (and
//     the others' view of it) fills in one round trip, not one period;
//   - a heartbeat on this gateway's own subject comes from another
//     process (the connection is NoEcho): a node.id used twice. Both log
//     it and list it; the one that started later is not ready (Ready), so
//     a load balancer keeps the first.

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// Self is what this gateway announces of itself besides its identity,
// read at each heartbeat (Cluster.SetSelf).
type Self struct {
	MQTT        string // advertised MQTT address
	AMQP        string // advertised AMQP address
	Admin       string // admin API address
	Connections int64  // MQTT and AMQP connections open
}

// Member is one gateway of the cluster (GET /api/v1/cluster).
type Member struct {
	Node        string    `json:"node"`
	Instance    string    `json:"instance"` // random per process: two with one node.id differ here
	Self        bool      `json:"self,omitempty"`
	MQTT        string    `json:"mqtt,omitempty"`
	AMQP        string    `json:"amqp,omitempty"`
	Admin       string    `json:"admin,omitempty"`
	Started     time.Time `json:"started"` // its own clock
	Uptime      float64   `json:"uptimeSeconds"`
	Connections int64     `json:"connections"`
	LastHeard   time.Time `json:"lastHeard"` // this gateway's clock
}

// heartbeat is one announcement on <prefix>.node.<node>, JSON.
type heartbeat struct {
	Node     string `json:"n"`
	Instance string `json:"i"`
	MQTT     string `json:"mqtt,omitempty"`
	AMQP     string `json:"amqp,omitempty"`
	Admin    string `json:"admin,omitempty"`
	Started  int64  `json:"s"`  // unix ms, the sender's clock
	Uptime   int64  `json:"up"` // ms: skew between clocks does not bend it
	Conns    int64  `json:"c"`
	Hello    bool   `json:"hello,omitempty"` // answer with yours now
	Bye      bool   `json:"bye,omitempty"`   // leaving: forget me now
}

// heard is a member as last heard.
type heard struct {
	hb heartbeat
	at time.Time
}

// membership is the cluster view. mu guards peers and dups; nats.go's
// subscription goroutine writes them, the loop expires them, the admin
// API reads them.
type membership struct {
	instance string
	started  time.Time
	self     atomic.Pointer[func() Self]

	mu    sync.Mutex
	peers map[string]*heard // by node
	dups  map[string]*heard // other processes announcing this node, by instance

	sub        *nats.Subscription
	now        chan struct{} // a heartbeat asked for: another's hello, SetSelf
	hello      chan struct{} // a heartbeat with hello asked for: NATS reconnected
	reconnects atomic.Uint64
}

func newMembership() *membership {
	b := make([]byte, 8)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return &membership{
		instance: hex.EncodeToString(b),
		started:  time.Now(),
		peers:    map[string]*heard{},
		dups:     map[string]*heard{},
		now:      make(chan struct{}, 1),
		hello:    make(chan struct{}, 1),
	}
}

// SetSelf tells the cluster how to read this gateway's addresses and
// connection count; called once the listeners are up (before, heartbeats
// carry the identity only).
func (c *Cluster) SetSelf(f func() Self) {
	c.mem.self.Store(&f)
	signal(c.mem.now) // the others learn the addresses now, not a period later
}

// Instance is this process's random identity in the cluster.
func (c *Cluster) Instance() string { return c.mem.instance }

// Reconnects counts NATS reconnections seen by the cluster.
func (c *Cluster) Reconnects() uint64 { return c.mem.reconnects.Load() }

func (c *Cluster) nodeSubject(node string) string { return c.opts.Prefix + ".node." + node }

// startMembership subscribes to the heartbeats and starts announcing.
func (c *Cluster) startMembership() error {
	m := c.mem
	ns, err := c.opts.Conn.Subscribe(c.opts.Prefix+".node.*", c.heartbeatIn)
	if err != nil {
		return err
	}
	m.sub = ns
	c.wg.Add(1)
	go c.memberLoop()
	return nil
}

// reconnected is chained into the connection's reconnect handler
// (interest.go): announce again at once, the others may have dropped us.
func (c *Cluster) reconnected() {
	c.mem.reconnects.Add(1)
	signal(c.mem.hello)
}

// stopMembership says goodbye; the loop ends with c.done.
func (c *Cluster) stopMembership() {
	if c.mem.sub == nil {
		return
	}
	_ = c.mem.sub.Unsubscribe()
	c.publishHeartbeat(false, true)
	// Out before the bridge closes the connection; bounded, NATS may be
	// down (then the others expire this gateway).
	_ = c.opts.Conn.FlushTimeout(time.Second)
}

// memberLoop announces every period (and when asked) and expires silent
// gateways.
func (c *Cluster) memberLoop() {
	defer c.wg.Done()
	tick := time.NewTicker(c.opts.Heartbeat)
	defer tick.Stop()
	c.publishHeartbeat(true, false)
	for {
		select {
		case <-c.done:
			return
		case <-tick.C:
			c.expireMembers(time.Now())
			c.publishHeartbeat(false, false)
		case <-c.mem.now:
			// Never with hello: two gateways would answer each other
			// for ever.
			c.publishHeartbeat(false, false)
		case <-c.mem.hello:
			c.publishHeartbeat(true, false)
		}
	}
}

func (c *Cluster) publishHeartbeat(hello, bye bool) {
	m := c.mem
	hb := heartbeat{Node: c.opts.Node, Instance: m.instance, Started: m.started.UnixMilli(),
		Uptime: time.Since(m.started).Milliseconds(), Hello: hello, Bye: bye}
	if f := m.self.Load(); f != nil {
		s := (*f)()
		hb.MQTT, hb.AMQP, hb.Admin, hb.Conns = s.MQTT, s.AMQP, s.Admin, s.Connections
	}
	b, _ := json.Marshal(&hb) // plain data: cannot fail
	// Disconnected, nats.go buffers it (ReconnectBufSize) or refuses it:
	// either way the next period announces again.
	_ = c.opts.Conn.Publish(c.nodeSubject(c.opts.Node), b)
}

// heartbeatIn handles another gateway's heartbeat, on nats.go's goroutine.
func (c *Cluster) heartbeatIn(msg *nats.Msg) {
	var hb heartbeat
	if err := json.Unmarshal(msg.Data, &hb); err != nil || hb.Node == "" || hb.Instance == "" ||
		msg.Subject != c.nodeSubject(hb.Node) {
		c.log.Debug("cluster heartbeat not understood", "subject", msg.Subject)
		return
	}
	m := c.mem
	if hb.Instance == m.instance {
		return // ours (NoEcho should have kept it away)
	}
	if hb.Hello && !hb.Bye {
		signal(m.now)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if hb.Node == c.opts.Node {
		if hb.Bye {
			delete(m.dups, hb.Instance)
			return
		}
		if m.dups[hb.Instance] == nil {
			c.log.Error("cluster: another gateway announces this node.id; node.id must be unique in the cluster "+
				"(the two lose each other's messages)", "node", hb.Node, "instance", m.instance, "other", hb.Instance,
				"otherStarted", time.UnixMilli(hb.Started), "otherAdmin", hb.Admin)
		}
		m.dups[hb.Instance] = &heard{hb: hb, at: time.Now()}
		return
	}
	if hb.Bye {
		if p := m.peers[hb.Node]; p != nil && p.hb.Instance == hb.Instance {
			delete(m.peers, hb.Node)
			c.log.Info("cluster gateway left", "node", hb.Node)
		}
		return
	}
	p := m.peers[hb.Node]
	if p == nil {
		c.log.Info("cluster gateway joined", "node", hb.Node, "instance", hb.Instance, "mqtt", hb.MQTT)
		p = &heard{}
		m.peers[hb.Node] = p
	} else if p.hb.Instance != hb.Instance && p.hb.Started > hb.Started {
		// Two processes with one node.id elsewhere: they see it and
		// say so; here the member shows the newer one.
		return
	}
	p.hb, p.at = hb, time.Now()
}

// expireMembers forgets the gateways (and duplicates) silent for three
// periods.
func (c *Cluster) expireMembers(now time.Time) {
	m := c.mem
	limit := 3 * c.opts.Heartbeat
	m.mu.Lock()
	defer m.mu.Unlock()
	for node, p := range m.peers {
		if now.Sub(p.at) > limit {
			delete(m.peers, node)
			c.log.Warn("cluster gateway removed: no heartbeat", "node", node, "lastHeard", p.at)
		}
	}
	for inst, d := range m.dups {
		if now.Sub(d.at) > limit {
			delete(m.dups, inst)
		}
	}
}

// Members lists the gateways of the cluster, this one included, sorted by
// node id.
func (c *Cluster) Members() []Member {
	m := c.mem
	now := time.Now()
	self := Member{Node: c.opts.Node, Instance: m.instance, Self: true, Started: m.started,
		Uptime: now.Sub(m.started).Seconds(), LastHeard: now}
	if f := m.self.Load(); f != nil {
		s := (*f)()
		self.MQTT, self.AMQP, self.Admin, self.Connections = s.MQTT, s.AMQP, s.Admin, s.Connections
	}
	out := []Member{self}
	m.mu.Lock()
	for _, p := range m.peers {
		out = append(out, p.member(now))
	}
	m.mu.Unlock()
	slices.SortFunc(out, func(a, b Member) int { return strings.Compare(a.Node, b.Node) })
	return out
}

func (h *heard) member(now time.Time) Member {
	return Member{Node: h.hb.Node, Instance: h.hb.Instance, MQTT: h.hb.MQTT, AMQP: h.hb.AMQP, Admin: h.hb.Admin,
		Started: time.UnixMilli(h.hb.Started), Uptime: (time.Duration(h.hb.Uptime)*time.Millisecond + now.Sub(h.at)).Seconds(),
		Connections: h.hb.Conns, LastHeard: h.at}
}

// peerNodes is the node ids of the other gateways heard from.
func (c *Cluster) peerNodes() map[string]bool {
	c.mem.mu.Lock()
	defer c.mem.mu.Unlock()
	out := make(map[string]bool, len(c.mem.peers))
	for node := range c.mem.peers {
		out[node] = true
	}
	return out
}

// Duplicates lists the other processes heard announcing this gateway's
// node.id within the last three periods.
func (c *Cluster) Duplicates() []Member {
	m := c.mem
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Member
	for _, d := range m.dups {
		out = append(out, d.member(now))
	}
	slices.SortFunc(out, func(a, b Member) int { return strings.Compare(a.Instance, b.Instance) })
	return out
}

// Ready is not nil while another process that started earlier announces
// this gateway's node.id: this one, the newcomer, yields (docs/cluster.md).
func (c *Cluster) Ready() error {
	m := c.mem
	for _, d := range c.Duplicates() {
		if d.Started.UnixMilli() < m.started.UnixMilli() ||
			d.Started.UnixMilli() == m.started.UnixMilli() && d.Instance < m.instance {
			return fmt.Errorf("cluster: node.id %q is used by another gateway started earlier (instance %s, admin %s): set a unique node.id",
				c.opts.Node, d.Instance, d.Admin)
		}
	}
	return nil
}
