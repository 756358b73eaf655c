package amqp

import (
	"encoding/hex"
	"strings"
	"sync"

	"github.com/tolsey/tolsey/amqp/internal/encoding"
	"github.com/tolsey/tolsey/amqp/internal/frames"
	"github.com/tolsey/tolsey/core"
	"github.com/tolsey/tolsey/core/queue/match"
	"github.com/tolsey/tolsey/core/selector"
)

// JMS durable and shared subscriptions (Qpid JMS; README, "AMQP 1.0").
//
// A subscription outlives the links that consume from it:
//
//   - durable: the receiver's source has expiry-policy "never" and a
//     durability other than none. Its identity is container-id + link
//     name. A detach with closed=false (or a lost connection) keeps it,
//     and messages published meanwhile wait in its backlog (at most
//     LinkBuffer; beyond that they are dropped and counted); an attach with
//     the same identity resumes it; a detach with closed=true removes it.
//     An attach with a null source looks it up (Qpid JMS unsubscribe).
//   - shared: the source has capability "shared". Its identity is the link
//     name up to "|" (Qpid JMS names further consumers "sub|2", "sub|3",
//     and non-durable ones "sub|volatile1"), qualified by the container-id
//     unless the source also has capability "global". Each message goes to
//     one of the attached links. A non-durable shared subscription ends
//     with its last link; shared subscriptions get no retained messages
//     (docs/architecture.md, decision 1).
//
// The subscriptions here live in memory, and a gateway restart forgets
// them: non-durable shared ones, and durable ones only without a queue
// engine or on a filter the queue grammar reads otherwise. A durable
// subscription is otherwise a queue of the engine (durable.go).

const (
	capShared encoding.Symbol = "shared"
	capGlobal encoding.Symbol = "global"
	capShSubs encoding.Symbol = "SHARED-SUBS"
)

// subscription is one durable and/or shared subscription: one router
// subscription, consumed by the links attached to it over time.
type subscription struct {
	srv     *Server
	key     string
	filter  string
	noLocal bool
	durable bool
	shared  bool
	except  []match.Filter     // the except filter (exceptions.go)
	sel     *selector.Selector // the JMS selector (selectors.go), or nil
	source  frames.Source      // what an attach answer says about it
	sub     *core.Subscription

	mu      sync.Mutex
	members []*outLink // copied on write: Deliver reads it outside the lock
	next    int
	backlog msgQueue // durable: messages waiting for a link
	removed bool
}

var _ core.Subscriber = (*subscription)(nil)

// subscriptionKey names a subscription. ok is false when the link is
// neither durable nor shared.
func subscriptionKey(container, link string, src *frames.Source) (key string, durable, shared, ok bool) {
	durable = src.ExpiryPolicy == frames.ExpiryNever && src.Durable != frames.DurabilityNone
	shared = hasCap(src.Capabilities, capShared)
	if !durable && !shared {
		return "", false, false, false
	}
	name := link
	if shared {
		name, _, _ = strings.Cut(link, "|")
		if hasCap(src.Capabilities, capGlobal) {
			container = ""
		}
	}
	return container + "\x00" + name, durable, shared, true
}

// Deliver implements core.Subscriber: one attached link gets m (round
// robin, skipping full ones); with none attached a durable subscription
// keeps it.
func (s *subscription) Deliver(m *core.Message, _ core.Delivery) error {
	if match.AnyMatches(s.except, m.Topic) || !s.sel.MatchMessage(m) {
		return nil
	}
	q := queued{m: m}
	for range 3 { // a link closing under us: look again
		s.mu.Lock()
		members := s.members
		if len(members) == 0 {
			if s.durable && !s.removed {
				if s.backlog.len() < s.srv.opts.LinkBuffer {
					s.backlog.push(q)
					s.mu.Unlock()
					return nil
				}
				s.mu.Unlock()
				s.srv.opts.Metrics.Drop("amqp", "slow_consumer")
				return nil
			}
			s.mu.Unlock()
			return nil
		}
		start := s.next
		s.next++
		s.mu.Unlock()
		closed, readers := false, 0
		for i := range members {
			l := members[(start+i)%len(members)]
			if !l.mayRead(m.Topic) { // the ACL in force for that member's identity
				continue
			}
			readers++
			ok, c := l.offer(q, false)
			if ok {
				return nil
			}
			closed = closed || c
		}
		if readers == 0 {
			return nil // no member may read it: not a slow consumer
		}
		if !closed {
			break
		}
	}
	s.srv.opts.Metrics.Drop("amqp", "slow_consumer")
	return nil
}

// bind makes l a consumer of s; a durable backlog moves to l first.
func (s *subscription) bind(l *outLink) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.members = append(s.members[:len(s.members):len(s.members)], l)
	l.group = s
	if s.backlog.len() > 0 {
		l.mu.Lock()
		for q, ok := s.backlog.pop(); ok; q, ok = s.backlog.pop() {
			if l.mayRead(q.m.Topic) { // a partial link skips what it may not read
				l.live.push(q)
			}
		}
		wake := !l.ready
		l.ready = true
		l.mu.Unlock()
		if wake {
			l.c.markReady(l)
		}
		s.backlog.reset()
	}
}

// unbind takes l out of s. Messages l had not sent go back to a durable
// backlog, ahead of newer ones. closed (a detach with closed=true) ends a
// durable subscription when l was its last link; a non-durable shared
// subscription ends with its last link whatever closed says.
func (s *subscription) unbind(l *outLink, unsent []queued, closed bool) {
	s.mu.Lock()
	members := make([]*outLink, 0, len(s.members))
	for _, x := range s.members {
		if x != l {
			members = append(members, x)
		}
	}
	s.members = members
	end := len(members) == 0 && (closed || !s.durable)
	s.mu.Unlock()
	if end && s.srv.removeSubscription(s) {
		return
	}
	s.requeue(unsent)
}

// requeue gives back messages a link took but did not deliver: to another
// link, or to the front of a durable backlog.
func (s *subscription) requeue(qs []queued) {
	if len(qs) == 0 {
		return
	}
	s.mu.Lock()
	if len(s.members) > 0 || !s.durable || s.removed {
		s.mu.Unlock()
		for _, q := range qs {
			if !q.retained {
				_ = s.Deliver(q.m, core.Delivery{})
			}
		}
		return
	}
	defer s.mu.Unlock()
	s.backlog.pushFront(qs)
	for s.backlog.len() > s.srv.opts.LinkBuffer {
		s.backlog.dropBack()
		s.srv.opts.Metrics.Drop("amqp", "slow_consumer")
	}
}

// attached reports whether a link consumes from s.
func (s *subscription) attached() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.members) > 0
}

// lookupSubscription finds the subscription a link name refers to, for an
// attach with a null source, and binds l to it.
func (srv *Server) lookupSubscription(container string, l *outLink) (*subscription, error) {
	srv.subsMu.Lock()
	defer srv.subsMu.Unlock()
	name, _, _ := strings.Cut(l.name, "|")
	for _, k := range []string{container + "\x00" + l.name, container + "\x00" + name, "\x00" + name} {
		if s := srv.subs[k]; s != nil {
			if !s.shared && s.attached() {
				return nil, linkErr(frames.ErrCondResourceLocked, "subscription %q is in use", l.name)
			}
			l.filter = s.filter
			s.bind(l)
			return s, nil
		}
	}
	return nil, linkErr(frames.ErrCondNotFound, "no source, and no subscription named %q", l.name)
}

// openSubscription binds l to the subscription for key, creating it (and
// its router subscription) when there is none or when the existing one,
// idle, has another topic or options (JMS: changing a durable subscription
// replaces it). created reports a new subscription. A subscription in use
// by a link that cannot share it is refused with amqp:resource-locked.
func (srv *Server) openSubscription(l *outLink, key string, noLocal, durable, shared bool, container string, src frames.Source) (sub *subscription, created bool, err error) {
	filter := l.filter
	srv.subsMu.Lock()
	defer srv.subsMu.Unlock()
	if old := srv.subs[key]; old != nil {
		same := old.filter == filter && old.noLocal == noLocal && old.durable == durable && old.shared == shared &&
			sameExceptions(old.except, l.except) && sameSelector(old.sel, l.sel)
		busy := old.attached()
		switch {
		case same && (shared || !busy):
			old.bind(l)
			return old, false, nil
		case busy:
			return nil, false, linkErr(frames.ErrCondResourceLocked, "subscription %q is in use", displayKey(key))
		}
		srv.dropSubscriptionLocked(old)
	}
	s := &subscription{
		srv:     srv,
		key:     key,
		filter:  filter,
		noLocal: noLocal,
		durable: durable,
		shared:  shared,
		except:  l.except,
		sel:     l.sel,
		source:  src,
	}
	opts := core.SubOptions{QoS: 2, NoLocal: noLocal, Client: container}
	if shared {
		// A router group of one member here (s picks the link); in a
		// cluster, the links of every gateway attached to the same
		// subscription share its messages (core/shared.go).
		opts.Group = shareGroup(key)
	}
	rs, err := srv.opts.Router.Subscribe(filter, s, opts)
	if err != nil {
		return nil, false, linkErr(frames.ErrCondInvalidField, "%v", err)
	}
	s.sub = rs
	srv.subs[key] = s
	s.bind(l)
	return s, true, nil
}

// removeSubscription ends s unless a link has bound to it meanwhile.
func (srv *Server) removeSubscription(s *subscription) bool {
	srv.subsMu.Lock()
	defer srv.subsMu.Unlock()
	if srv.subs[s.key] != s || s.attached() {
		return false
	}
	srv.dropSubscriptionLocked(s)
	return true
}

func (srv *Server) dropSubscriptionLocked(s *subscription) {
	delete(srv.subs, s.key)
	srv.opts.Router.Unsubscribe(s.sub)
	s.mu.Lock()
	s.removed = true
	s.backlog.reset()
	s.mu.Unlock()
}

// dropSubscriptions ends every subscription (Shutdown).
func (srv *Server) dropSubscriptions() {
	srv.subsMu.Lock()
	defer srv.subsMu.Unlock()
	for _, s := range srv.subs {
		srv.dropSubscriptionLocked(s)
	}
}

// shareGroup names a shared subscription as a router group: a token
// ($share/<group>/<filter> must hold it: no "/", "+" or "#"), the same on
// every gateway for the same key.
func shareGroup(key string) string { return "amqp-" + hex.EncodeToString([]byte(key)) }

func displayKey(key string) string {
	c, n, _ := strings.Cut(key, "\x00")
	if c == "" {
		return n
	}
	return c + "/" + n
}
