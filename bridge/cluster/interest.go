package cluster

// Interest-based forwarding (docs/cluster.md): each gateway announces the
// filters its consumers hold on <prefix>.interest.<node>, and sends a
// message to NATS only when another gateway's filters match its topic.
//
// Messages on <prefix>.interest.<node>:
//
//	'+' filter                    one filter about to be subscribed (at once)
//	'=' filter \x00 filter …      the full summary (every period, on
//	                              removals after a short delay, on request)
//	'*' gen ':' i ':' n \x00 filter \x00 filter …
//	                              part i (from 0) of n of summary gen, when
//	                              the summary is larger than the server's
//	                              max_payload: the n parts together are the
//	                              full summary
//
// A split summary is preceded by "=#" with the header Tolsey-Interest:
// parts, for gateways of a version before parts: they ignore '*' and take
// "=#" (send this gateway everything, as that version did for a summary
// too large); a gateway that knows parts ignores that message. The parts
// of one summary are published under one lock, in order, and NATS keeps
// one publisher's order: a receiver assembles them in order, and a part
// out of order (one lost, another summary begun) drops what it had
// gathered; only a complete summary replaces what was known.
//
// <prefix>.interest.sync (empty) asks every gateway for its full summary.
// \x00 cannot be in a filter [MQTT-4.7.3-2].
//
// The summary may be larger than the truth, never smaller: an added filter
// is announced before it takes effect and stays in this gateway's
// summaries for two periods whatever the index says (the index may not
// have it yet when a summary is built); a summary from another gateway
// replaces what was known of it; a gateway silent for three periods is
// forgotten; for one period after start and after a NATS reconnect, while
// summaries may be missing, every message is sent.

import (
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tolsey/tolsey/core"
)

// interest is the cluster's summary state. mu guards own and peers;
// the index is the router of the other gateways' filters (one
// subscription per gateway and filter), safe for concurrent use.
type interest struct {
	mu           sync.Mutex
	recent, prev map[string]struct{} // own filters added this period and the one before
	peers        map[string]*peer
	gen          uint64 // own split summaries sent

	index    *core.Router
	openTill atomic.Int64  // unix ns: send everything until then (start, reconnect)
	changed  chan struct{} // a removal or a sync request: summary soon
	resync   chan struct{} // NATS reconnected
}

// peer is one other gateway's summary; it is its own core.Subscriber in
// the index.
type peer struct {
	node  string
	subs  map[string]*core.Subscription
	heard time.Time

	// The parts of a split summary gathered so far: of summary gen, the
	// next one expected is next (0: none gathered).
	gen     uint64
	next    int
	pending []string
}

// Deliver is never called: the index is only asked Wants.
func (*peer) Deliver(*core.Message, core.Delivery) error { return nil }

// summaryDelay gathers a burst of removals into one summary.
const summaryDelay = 100 * time.Millisecond

func newInterest() *interest {
	return &interest{
		recent:  map[string]struct{}{},
		prev:    map[string]struct{}{},
		peers:   map[string]*peer{},
		index:   core.NewRouter(core.RouterOptions{}),
		changed: make(chan struct{}, 1),
		resync:  make(chan struct{}, 1),
	}
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// wanted reports whether another gateway may want a message on topic.
func (c *Cluster) wanted(topic string) bool {
	if time.Now().UnixNano() < c.in_.openTill.Load() {
		return true
	}
	return c.in_.index.Wants(topic, "")
}

// startInterest subscribes to the summaries, watches this gateway's
// router and asks the others for theirs.
func (c *Cluster) startInterest() error {
	in := c.in_
	in.openTill.Store(time.Now().Add(c.opts.InterestPeriod).UnixNano())
	ns, err := c.opts.Conn.Subscribe(c.opts.Prefix+".interest.>", c.interestIn)
	if err != nil {
		return err
	}
	c.isub = ns
	c.opts.Router.WatchFilters(c.filterChanged)
	// Chained: the bridge owns the connection's handler.
	prev := c.opts.Conn.Opts.ReconnectedCB
	c.opts.Conn.SetReconnectHandler(func(nc *nats.Conn) {
		if prev != nil {
			prev(nc)
		}
		signal(in.resync)
		c.reconnected() // membership.go
		if c.opts.Reconnected != nil {
			c.opts.Reconnected()
		}
	})
	c.wg.Add(1)
	go c.interestLoop()
	return nil
}

// stopInterest stops watching and announcing and ends the writer and
// the interest loop (c.done).
func (c *Cluster) stopInterest() {
	c.opts.Router.WatchFilters(nil)
	if c.isub != nil {
		_ = c.isub.Unsubscribe()
	}
	c.stop.Do(func() { close(c.done) })
}

// filterChanged is the router's watcher: an added filter is announced at
// once, on the subscriber's goroutine, before it takes effect.
func (c *Cluster) filterChanged(filter string) {
	in := c.in_
	if filter == "" {
		signal(in.changed)
		return
	}
	if core.IsShared(filter) {
		c.sh.joinLocal(filter) // before the announcement (shared.go)
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	// Under mu: a summary published after this announcement holds it.
	in.recent[filter] = struct{}{}
	_ = c.opts.Conn.Publish(c.isubject, append([]byte{'+'}, filter...))
}

// interestLoop publishes the summary every period, soon after changes and
// on requests, and forgets silent gateways.
func (c *Cluster) interestLoop() {
	defer c.wg.Done()
	in := c.in_
	tick := time.NewTicker(c.opts.InterestPeriod)
	defer tick.Stop()
	syncSubj := c.opts.Prefix + ".interest.sync"
	_ = c.opts.Conn.Publish(syncSubj, nil)
	c.publishSummary(false)
	var soon <-chan time.Time
	for {
		select {
		case <-c.done:
			return
		case <-tick.C:
			c.expirePeers()
			c.publishSummary(true)
		case <-in.changed:
			if soon == nil {
				soon = time.After(summaryDelay)
			}
		case <-soon:
			soon = nil
			c.publishSummary(false)
		case <-in.resync:
			// Summaries sent while this gateway was away are lost.
			in.openTill.Store(time.Now().Add(c.opts.InterestPeriod).UnixNano())
			_ = c.opts.Conn.Publish(syncSubj, nil)
			c.publishSummary(false)
		}
	}
}

// publishSummary sends the full summary; rotate ages the recent additions.
func (c *Cluster) publishSummary(rotate bool) {
	in := c.in_
	set := map[string]struct{}{}
	c.opts.Router.Filters(func(f string) { set[f] = struct{}{} })
	c.sh.syncLocal(set) // the groups held here: before recent ones join set
	in.mu.Lock()
	defer in.mu.Unlock()
	for f := range in.recent {
		set[f] = struct{}{}
	}
	for f := range in.prev {
		set[f] = struct{}{}
	}
	if rotate {
		in.prev, in.recent = in.recent, map[string]struct{}{}
	}
	size := 1
	for f := range set {
		size += len(f) + 1
	}
	max := int(c.opts.Conn.MaxPayload())
	if size-1 <= max {
		data := make([]byte, 0, size)
		data = append(data, '=')
		first := true
		for f := range set {
			if !first {
				data = append(data, 0)
			}
			first = false
			data = append(data, f...)
		}
		_ = c.opts.Conn.Publish(c.isubject, data)
		return
	}
	c.publishParts(set, max)
}

// partsHeader is the header of the "=#" that precedes a split summary.
const partsHeader = "Tolsey-Interest"

// partOverhead bounds a part's '*' gen ':' i ':' n \x00.
const partOverhead = 1 + 3*20 + 3

// publishParts sends set as parts of at most max bytes (the server's
// max_payload), in.mu held; a filter too long for any part is sent as
// "#" (everything, rather than being forgotten).
func (c *Cluster) publishParts(set map[string]struct{}, max int) {
	in := c.in_
	budget := max - partOverhead
	var parts [][]string
	var cur []string
	used := 0
	for f := range set {
		if len(f) > budget-1 {
			f = "#"
		}
		if used+len(f)+1 > budget && len(cur) > 0 {
			parts = append(parts, cur)
			cur, used = nil, 0
		}
		cur = append(cur, f)
		used += len(f) + 1
	}
	parts = append(parts, cur)
	in.gen++
	if c.opts.Conn.HeadersSupported() {
		old := nats.NewMsg(c.isubject)
		old.Header.Set(partsHeader, "parts")
		old.Data = []byte("=#")
		_ = c.opts.Conn.PublishMsg(old)
	}
	head := strconv.FormatUint(in.gen, 10) + ":"
	n := ":" + strconv.Itoa(len(parts))
	buf := make([]byte, 0, max)
	for i, p := range parts {
		buf = append(append(append(append(buf[:0], '*'), head...), strconv.Itoa(i)...), n...)
		for _, f := range p {
			buf = append(append(buf, 0), f...)
		}
		// nats.go copies buf before Publish returns.
		_ = c.opts.Conn.Publish(c.isubject, buf)
	}
}

// interestIn handles another gateway's announcement or a sync request.
func (c *Cluster) interestIn(msg *nats.Msg) {
	in := c.in_
	node := strings.TrimPrefix(msg.Subject, c.opts.Prefix+".interest.")
	if node == "sync" {
		signal(in.changed)
		return
	}
	if node == c.opts.Node || len(msg.Data) == 0 {
		return
	}
	if msg.Header != nil && msg.Header.Get(partsHeader) != "" {
		return // for gateways that do not know parts: the parts follow
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	p := in.peers[node]
	if p == nil {
		p = &peer{node: node, subs: map[string]*core.Subscription{}, heard: time.Now()}
		in.peers[node] = p
	}
	body := string(msg.Data[1:])
	switch msg.Data[0] {
	case '+':
		if core.IsShared(body) {
			c.sh.peerAdd(node, body) // shared.go: not the stream's interest
			break
		}
		c.addPeerFilter(p, body)
	case '=':
		p.next, p.pending = 0, nil
		var fs []string
		if body != "" {
			fs = strings.Split(body, "\x00")
		}
		c.replacePeer(p, fs)
	case '*':
		head, rest, has := strings.Cut(body, "\x00")
		gen, i, n, ok := parsePart(head)
		if !ok || i != p.next || (i > 0 && gen != p.gen) {
			// Out of order: a part lost, or another summary begun.
			p.next, p.pending = 0, nil
			if !ok || i != 0 {
				return
			}
		}
		p.gen = gen
		if has {
			p.pending = append(p.pending, strings.Split(rest, "\x00")...)
		}
		p.next = i + 1
		if p.next == n {
			fs := p.pending
			p.next, p.pending = 0, nil
			c.replacePeer(p, fs)
		}
	}
}

// parsePart reads a part's gen ':' i ':' n.
func parsePart(h string) (gen uint64, i, n int, ok bool) {
	g, rest, ok1 := strings.Cut(h, ":")
	is, ns, ok2 := strings.Cut(rest, ":")
	if !ok1 || !ok2 {
		return 0, 0, 0, false
	}
	gen, err1 := strconv.ParseUint(g, 10, 64)
	i, err2 := strconv.Atoi(is)
	n, err3 := strconv.Atoi(ns)
	if err1 != nil || err2 != nil || err3 != nil || i < 0 || i >= n {
		return 0, 0, 0, false
	}
	return gen, i, n, true
}

// replacePeer makes fs, a full summary, what is known of p; mu is held.
func (c *Cluster) replacePeer(p *peer, fs []string) {
	p.heard = time.Now()
	keep := map[string]struct{}{}
	groups := map[string]struct{}{}
	for _, f := range fs {
		if core.IsShared(f) {
			groups[f] = struct{}{}
			continue
		}
		keep[f] = struct{}{}
		c.addPeerFilter(p, f)
	}
	c.sh.peerSet(p.node, groups)
	for f, s := range p.subs {
		if _, ok := keep[f]; !ok {
			c.in_.index.Unsubscribe(s)
			delete(p.subs, f)
		}
	}
}

// addPeerFilter indexes f for p; mu is held.
func (c *Cluster) addPeerFilter(p *peer, f string) {
	if _, ok := p.subs[f]; ok {
		return
	}
	s, err := c.in_.index.Subscribe(f, p, core.SubOptions{})
	if err != nil {
		// Not a filter here (other topic limits): send p everything
		// rather than nothing.
		s, err = c.in_.index.Subscribe("#", p, core.SubOptions{})
		if err != nil {
			return
		}
	}
	p.subs[f] = s
}

// expirePeers forgets gateways silent for three periods.
func (c *Cluster) expirePeers() {
	in := c.in_
	in.mu.Lock()
	defer in.mu.Unlock()
	for node, p := range in.peers {
		if time.Since(p.heard) < 3*c.opts.InterestPeriod {
			continue
		}
		for _, s := range p.subs {
			in.index.Unsubscribe(s)
		}
		delete(in.peers, node)
		c.sh.peerSet(node, nil)
		c.log.Info("cluster gateway forgotten: no interest summary", "node", node)
	}
}
