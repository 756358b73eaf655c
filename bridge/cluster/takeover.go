package cluster

// Client takeover across gateways (docs/cluster.md, "Client takeover"):
// a gateway accepting a CONNECT claims its client id on <prefix>.takeover
// with a reply subject; every other gateway asks its front-end to let go
// of the id (TakenOver) and answers; the claim returns when every gateway
// heard from (membership.go) has answered, or after TakeoverTimeout (a
// gateway dead but not yet removed is waited for that long).
//
// Answers come to one subscription per gateway, <inbox>.<claim number>,
// rather than a subscription per CONNECT. Each names the gateway that
// answers, and the claim waits for the gateways it lists as members, not
// for as many answers: a gateway starting up (it answers claims before its
// first heartbeat) or stopping (after its goodbye) answers too, at once,
// and counting it could end the wait before the gateway holding the
// session had let go of it.

import (
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// Clients is the front-end whose client ids are unique in the cluster
// (the MQTT server, wired by the gateway).
type Clients interface {
	// TakenOver: client connected to gateway node at stamp (unix ns).
	// A local connection of it that is older ends and its session is let
	// go; done(ended) runs once that is done (on any goroutine), ended
	// true when a connection was ended. Must not block on the network.
	TakenOver(client string, stamp int64, node string, done func(ended bool))
}

// claimMsg is a claim on <prefix>.takeover, JSON.
type claimMsg struct {
	Client string `json:"c"`
	Stamp  int64  `json:"s"`
	Node   string `json:"n"`
}

// takeover is the claims' state.
type takeover struct {
	clients atomic.Pointer[Clients]
	sub     *nats.Subscription // claims from the others
	rsub    *nats.Subscription // answers to ours
	inbox   string

	mu      sync.Mutex
	waiting map[uint64]*claimWait // guarded by mu: our claims waiting for answers, by number
	next    uint64                // guarded by mu

	takenOver, timeouts atomic.Uint64
}

// SetClients hands the cluster the front-end to tell of claims; claims
// before it are answered at once (no client can be connected yet).
func (c *Cluster) SetClients(cl Clients) { c.tk.clients.Store(&cl) }

func (c *Cluster) takeoverSubject() string { return c.opts.Prefix + ".takeover" }

func (c *Cluster) startTakeover() error {
	t := c.tk
	t.waiting = map[uint64]*claimWait{}
	t.inbox = c.opts.Conn.NewRespInbox()
	rs, err := c.opts.Conn.Subscribe(t.inbox+".*", c.answerIn)
	if err != nil {
		return err
	}
	t.rsub = rs
	s, err := c.opts.Conn.Subscribe(c.takeoverSubject(), c.claimIn)
	if err != nil {
		_ = rs.Unsubscribe()
		return err
	}
	t.sub = s
	if err := c.startContainers(); err != nil { // container.go: the same answers
		_ = s.Unsubscribe()
		_ = rs.Unsubscribe()
		return err
	}
	return nil
}

func (c *Cluster) stopTakeover() {
	c.stopContainers()
	t := c.tk
	if t.sub != nil {
		_ = t.sub.Unsubscribe()
	}
	if t.rsub != nil {
		_ = t.rsub.Unsubscribe()
	}
}

// Claim implements the MQTT front-end's Cluster: it tells the others that
// client connects here at stamp and waits until each gateway heard from
// has let go of it, at most TakeoverTimeout. It reports whether each did:
// false after the timeout or when the claim could not be sent, when a
// gateway may still hold the client's session and write it.
func (c *Cluster) Claim(client string, stamp int64) bool {
	answered, _ := c.ask(c.takeoverSubject(), client, stamp)
	return answered
}

// ask publishes a claim of id at stamp on subject and waits until every
// gateway heard from has answered, at most TakeoverTimeout. It reports
// whether each did, and whether one answered that id is in use there
// (answerInUse).
func (c *Cluster) ask(subject, id string, stamp int64) (answered, inUse bool) {
	t := c.tk
	pending := c.peerNodes()
	b, _ := json.Marshal(&claimMsg{Client: id, Stamp: stamp, Node: c.opts.Node})
	if len(pending) == 0 {
		// Nobody heard from yet: told all the same (a gateway starting
		// meanwhile), nobody waited for.
		_ = c.opts.Conn.Publish(subject, b)
		return true, false
	}
	w := &claimWait{pending: pending, done: make(chan struct{})}
	t.mu.Lock()
	t.next++
	n := t.next
	t.waiting[n] = w
	t.mu.Unlock()
	defer func() {
		t.mu.Lock()
		delete(t.waiting, n)
		t.mu.Unlock()
	}()
	if err := c.opts.Conn.PublishRequest(subject, t.inbox+"."+strconv.FormatUint(n, 10), b); err != nil {
		t.timeouts.Add(1)
		return false, false // NATS down: nobody can be told (docs/cluster.md, "Client takeover")
	}
	timer := time.NewTimer(c.opts.TakeoverTimeout)
	defer timer.Stop()
	select {
	case <-w.done:
	case <-timer.C:
		t.timeouts.Add(1)
		c.log.Debug("cluster claim: not every gateway answered", "subject", subject, "id", id)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(w.pending) == 0, w.inUse
}

// claimWait is one claim of ours waiting: the gateways yet to answer.
type claimWait struct {
	pending map[string]bool // guarded by takeover.mu
	inUse   bool            // guarded by takeover.mu: a gateway answered answerInUse
	done    chan struct{}   // closed when pending is empty
}

// answerInUse follows the node id in an answer whose gateway holds the
// claimed id on an older connection it keeps (container.go).
const answerInUse = "\x00in-use"

// answerIn takes one gateway's answer to a claim of ours: its body is the
// answering gateway's node id; one the claim does not wait for changes
// nothing.
func (c *Cluster) answerIn(msg *nats.Msg) {
	t := c.tk
	n, err := strconv.ParseUint(msg.Subject[strings.LastIndexByte(msg.Subject, '.')+1:], 10, 64)
	if err != nil {
		return
	}
	node, inUse := strings.CutSuffix(string(msg.Data), answerInUse)
	t.mu.Lock()
	defer t.mu.Unlock()
	w := t.waiting[n]
	if w == nil || !w.pending[node] {
		return
	}
	w.inUse = w.inUse || inUse
	delete(w.pending, node)
	if len(w.pending) == 0 {
		close(w.done)
	}
}

// claimIn is another gateway's claim, on nats.go's goroutine: the
// front-end lets go of the id, then the claim is answered.
func (c *Cluster) claimIn(msg *nats.Msg) {
	var cm claimMsg
	if err := json.Unmarshal(msg.Data, &cm); err != nil || cm.Client == "" || cm.Node == c.opts.Node {
		return
	}
	answer := func(ended bool) {
		if ended {
			c.tk.takenOver.Add(1)
		}
		if msg.Reply != "" {
			_ = c.opts.Conn.Publish(msg.Reply, []byte(c.opts.Node))
		}
	}
	p := c.tk.clients.Load()
	if p == nil {
		answer(false)
		return
	}
	(*p).TakenOver(cm.Client, cm.Stamp, cm.Node, answer)
}

// TakeoverStats are the takeover's counters.
type TakeoverStats struct {
	TakenOver uint64 `json:"takenOver"` // local connections ended: their client connected to another gateway
	Timeouts  uint64 `json:"timeouts"`  // claims not answered by every gateway within cluster.takeoverTimeout
}

// TakeoverStats returns the takeover's counters.
func (c *Cluster) TakeoverStats() TakeoverStats {
	return TakeoverStats{TakenOver: c.tk.takenOver.Load(), Timeouts: c.tk.timeouts.Load()}
}
