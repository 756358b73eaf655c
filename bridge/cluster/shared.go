package cluster

// Shared subscriptions across gateways (core/shared.go, docs/cluster.md):
// each shared group ($share/g/f, an AMQP shared subscription) gets each
// message once cluster-wide, whichever gateways its members are on.
//
//   - Every gateway with members of a group subscribes, on the bridge's
//     connection, to <prefix>.share.<hash> in the NATS queue group of the
//     same name: NATS hands each message sent there to one of them. The
//     subscription is made before the group is announced ('+' in the
//     interest summary), and dropped with the group's last member here
//     (at the next summary).
//   - The gateway a message enters sends it there once for every matching
//     group another gateway announced (the summaries), and its local
//     fan-out leaves those groups out (Router.SkipsGroup); a group held
//     here only is served here. It sends on a second connection of its
//     own, made without NoEcho: NATS may pick this gateway's own members.
//   - The gateway NATS picks publishes the message to that group alone
//     (Router.PublishShare): one of its members takes it.
//   - A message from another gateway's stream (<prefix>.msg.<node>)
//     reaches no group here: its gateway did the above.
//
// A message on <prefix>.share.<hash> is one byte (the hops: how often a
// gateway without a member handed it on), "$share/g/f", NUL and the
// core/codec encoding; the group is checked, so a hash collision cannot
// misdeliver.

import (
	"context"
	"encoding/hex"
	"hash/fnv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tolsey/tolsey/core"
	"github.com/tolsey/tolsey/core/codec"
)

// groupKey is one shared group: its name and filter.
type groupKey struct{ group, filter string }

// remoteGroup is a group another gateway holds, as the writer addresses it.
type remoteGroup struct {
	key     groupKey
	share   string // $share/g/f
	subject string // <prefix>.share.<hash>
}

// shareView is the immutable set of groups other gateways hold, swapped
// whole when a summary changes it; publishers read it without a lock.
type shareView struct {
	set  map[groupKey]struct{}
	list []remoteGroup
}

// shares is the cluster's shared-group state. mu guards byPeer and local.
type shares struct {
	c      *Cluster
	mu     sync.Mutex
	byPeer map[string]map[string]struct{} // node → its groups ($share/g/f)
	local  map[string]*localGroup         // $share/g/f held here → its queue subscription
	view   atomic.Pointer[shareView]
	conn   *nats.Conn // echo on: share copies are published here

	out, in, bounced atomic.Uint64
}

// localGroup is this gateway's place in a group's NATS queue group.
type localGroup struct {
	sub   *nats.Subscription
	since time.Time // kept at least a while: the index may not show it yet
}

var _ core.Shares = (*shares)(nil)

func newShares(c *Cluster) *shares {
	s := &shares{c: c, byPeer: map[string]map[string]struct{}{}, local: map[string]*localGroup{}}
	s.view.Store(&shareView{})
	return s
}

// shareSubject is the NATS subject and queue group of a group.
func (c *Cluster) shareSubject(share string) string {
	h := fnv.New64a()
	_, _ = h.Write([]byte(share))
	return c.opts.Prefix + ".share." + hex.EncodeToString(h.Sum(nil))
}

// Elsewhere implements core.Shares.
func (s *shares) Elsewhere(group, filter string) bool {
	_, ok := s.view.Load().set[groupKey{group, filter}]
	return ok
}

// start opens the echo connection and offers the view to the router.
func (s *shares) start() error {
	o := s.c.opts.Conn.Opts
	o.NoEcho = false // this gateway's own members are in the queue groups too
	o.Name += " (shared subscriptions)"
	o.RetryOnFailedConnect = true
	o.ReconnectedCB, o.DisconnectedErrCB, o.ClosedCB, o.DisconnectedCB = nil, nil, nil, nil
	o.AsyncErrorCB = nil
	// nats.go's own dialing: the bridge's dialer keeps the connection it
	// dialed last, to cut it when the bridge's stop runs out of time, and
	// dialing through it this one would take that place.
	o.CustomDialer = nil
	nc, err := o.Connect()
	if err != nil {
		return err
	}
	s.conn = nc
	s.c.opts.Router.SetShares(s)
	return nil
}

// stop leaves the queue groups; the writer has ended.
func (s *shares) stop() {
	s.c.opts.Router.SetShares(nil)
	s.mu.Lock()
	for k, l := range s.local {
		_ = l.sub.Unsubscribe()
		delete(s.local, k)
	}
	s.mu.Unlock()
	if s.conn != nil {
		_ = s.conn.FlushTimeout(s.c.opts.FlushTimeout)
		s.conn.Close()
	}
}

// joinLocal puts this gateway in share's queue group, before the group is
// announced (same connection: NATS has the subscription first).
func (s *shares) joinLocal(share string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l := s.local[share]; l != nil {
		l.since = time.Now()
		return
	}
	subj := s.c.shareSubject(share)
	sub, err := s.c.opts.Conn.QueueSubscribe(subj, subj, s.inbound)
	if err != nil {
		s.c.log.Warn("cluster: shared group not joined", "group", share, "error", err)
		return
	}
	s.local[share] = &localGroup{sub: sub, since: time.Now()}
}

// syncLocal leaves the queue groups of groups no longer held here
// (held: the router's and mochi's filters, at a summary).
func (s *shares) syncLocal(held map[string]struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for share := range held {
		if core.IsShared(share) && s.local[share] == nil {
			subj := s.c.shareSubject(share)
			if sub, err := s.c.opts.Conn.QueueSubscribe(subj, subj, s.inbound); err == nil {
				s.local[share] = &localGroup{sub: sub, since: time.Now()}
			}
		}
	}
	for share, l := range s.local {
		if _, ok := held[share]; ok || time.Since(l.since) < time.Second {
			continue
		}
		_ = l.sub.Unsubscribe()
		delete(s.local, share)
	}
}

// peerAdd records one group another gateway announced ('+').
func (s *shares) peerAdd(node, share string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	set := s.byPeer[node]
	if set == nil {
		set = map[string]struct{}{}
		s.byPeer[node] = set
	}
	if _, ok := set[share]; ok {
		return
	}
	set[share] = struct{}{}
	s.rebuildLocked()
}

// peerSet replaces what another gateway holds (a full summary); nil
// forgets the gateway.
func (s *shares) peerSet(node string, set map[string]struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.byPeer[node]
	if len(old) == len(set) {
		same := true
		for k := range set {
			if _, ok := old[k]; !ok {
				same = false
				break
			}
		}
		if same {
			return
		}
	}
	if set == nil {
		delete(s.byPeer, node)
	} else {
		s.byPeer[node] = set
	}
	s.rebuildLocked()
}

func (s *shares) rebuildLocked() {
	v := &shareView{set: map[groupKey]struct{}{}}
	for _, set := range s.byPeer {
		for share := range set {
			g, f, ok := core.SplitShared(share)
			if !ok {
				continue
			}
			k := groupKey{g, f}
			if _, dup := v.set[k]; dup {
				continue
			}
			v.set[k] = struct{}{}
			v.list = append(v.list, remoteGroup{key: k, share: share, subject: s.c.shareSubject(share)})
		}
	}
	s.view.Store(v)
}

// deliverShares queues m, which entered this gateway, once for every
// matching group another gateway holds: one filter match per group (a
// cluster holds few groups; the view is swapped whole, so a message is
// decided on one view).
func (c *Cluster) deliverShares(m *core.Message, d core.Delivery) {
	v := c.sh.view.Load()
	for i := range v.list {
		g := &v.list[i]
		if core.Match(g.key.filter, m.Topic) {
			c.enqueue(queued{m: m, share: g}, d)
		}
	}
}

// maxHops bounds how often a copy is handed on by gateways that had no
// member of its group (their queue subscriptions outlive their last
// member by up to a summary period).
const maxHops = 2

// inbound hands a message NATS chose this gateway for to the group. With
// no member here (the last one left since this gateway joined the queue
// group), it publishes the copy again on the bridge's connection, whose
// NoEcho keeps it from this gateway's own queue subscription: NATS picks
// another member gateway, if any.
func (s *shares) inbound(msg *nats.Msg) {
	data := msg.Data
	i := 1
	for i < len(data) && data[i] != 0 {
		i++
	}
	if len(data) == 0 || i == len(data) {
		s.c.dropped.Add(1)
		return
	}
	hops, share := data[0], string(data[1:i])
	m, err := codec.Decode(data[i+1:])
	if err != nil || s.c.shareSubject(share) != msg.Subject {
		s.c.dropped.Add(1)
		return
	}
	res := s.c.opts.Router.PublishShare(context.Background(), m, share)
	if res.Matched > res.Failed {
		s.in.Add(1)
		return
	}
	if hops >= maxHops {
		// No member here and handed on enough: lost for the group, and
		// counted as such (sharedIn counts only copies a member took).
		s.c.dropped.Add(1)
		return
	}
	again := append([]byte{hops + 1}, data[1:]...)
	if err := s.c.opts.Conn.Publish(msg.Subject, again); err != nil {
		s.c.dropped.Add(1)
		return
	}
	s.bounced.Add(1)
}
