package queue

import (
	"fmt"
	"sort"
	"strings"

	"github.com/tolsey/tolsey/core"
)

// Alternate destinations (docs/queues.md, "Alternate destinations"; the
// seed is Qpid Dispatch's fallback links): a message published under an
// address prefix that reaches no live consumer at all goes to the
// prefix's alternate queue instead of nowhere. The router decides "no
// live consumer" (core.SubOptions.Fallback, asking core.Interest of the
// subscribers that stand for many); the engine stores.

// Alternate names the queue that takes what reaches nobody under Prefix.
type Alternate struct {
	// Prefix is a topic prefix of whole levels: "orders/" and "orders"
	// both cover "orders" and every topic below it ("orders/eu/1"), not
	// "orders2". No wildcards. The longest prefix covering a topic wins.
	Prefix string
	Queue  string
}

// altTable is the engine's alternates, immutable once published: longest
// prefix first, so the first that covers a topic is the one that wins.
type altTable struct {
	alts []Alternate // Prefix without its trailing "/"
}

// altFeed is the engine's router subscriber for its alternates: a
// subscriber of its own, because the router merges one subscriber's
// matching subscriptions into one delivery, and the engine's "#" is not a
// fallback.
type altFeed struct{ e *Engine }

var (
	_ core.Subscriber = (*altFeed)(nil)
	_ core.Interest   = (*Engine)(nil)
)

// under reports whether topic is prefix p (without its trailing "/") or
// below it.
func under(topic, p string) bool {
	return strings.HasPrefix(topic, p) && (len(topic) == len(p) || topic[len(p)] == '/')
}

// SetAlternates replaces the engine's alternate destinations. Each queue
// must exist and be durable; prefixes must be distinct. An empty list
// removes them all.
func (e *Engine) SetAlternates(alts []Alternate) error {
	t := &altTable{alts: make([]Alternate, 0, len(alts))}
	seen := map[string]bool{}
	for _, a := range alts {
		p := strings.TrimSuffix(a.Prefix, "/")
		if err := core.ValidateTopic(p); err != nil || p == "" || core.HasWildcard(p) {
			return fmt.Errorf("%w: alternate prefix %q is not a topic prefix without wildcards", ErrInvalid, a.Prefix)
		}
		if seen[p] {
			return fmt.Errorf("%w: alternate prefix %q given twice", ErrInvalid, a.Prefix)
		}
		seen[p] = true
		q, ok := e.Queue(a.Queue)
		if !ok {
			return fmt.Errorf("%w: alternate queue %q", ErrNotFound, a.Queue)
		}
		if q.cfg().Temporary {
			return fmt.Errorf("%w: alternate queue %q is temporary", ErrInvalid, a.Queue)
		}
		t.alts = append(t.alts, Alternate{Prefix: p, Queue: a.Queue})
	}
	sort.SliceStable(t.alts, func(i, j int) bool { return len(t.alts[i].Prefix) > len(t.alts[j].Prefix) })
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return fmt.Errorf("queues: engine closed")
	}
	r := e.opts.Router
	var subs []*core.Subscription
	if r != nil {
		for _, a := range t.alts {
			// "p/#" covers p itself too [MQTT-4.7.1-2]: what under says.
			// LocalOnly: in a cluster, "reaches nobody" is decided where
			// the message entered (the cluster answers core.Interest
			// for the other gateways); a gateway it was sent on to does
			// not park another copy.
			sub, err := r.Subscribe(a.Prefix+"/#", &e.feed, core.SubOptions{QoS: 2, Fallback: true, LocalOnly: true})
			if err != nil {
				for _, s := range subs {
					r.Unsubscribe(s)
				}
				return fmt.Errorf("%w: alternate prefix %q: %w", ErrInvalid, a.Prefix, err)
			}
			subs = append(subs, sub)
		}
		for _, s := range e.altSubs {
			r.Unsubscribe(s)
		}
	}
	e.altSubs = subs
	e.alts.Store(t)
	return nil
}

// Alternates returns the alternate destinations, longest prefix first,
// each prefix without its trailing "/".
func (e *Engine) Alternates() []Alternate {
	if t := e.alts.Load(); t != nil {
		return append([]Alternate(nil), t.alts...)
	}
	return nil
}

// AlternateFor returns the alternate queue of the longest prefix that
// covers topic (a topic, or a filter whose levels up to the prefix's are
// literal: an AMQP qd.fallback link's address).
func (e *Engine) AlternateFor(topic string) (*Queue, bool) {
	t := e.alts.Load()
	if t == nil {
		return nil, false
	}
	for _, a := range t.alts {
		if under(topic, a.Prefix) {
			return e.Queue(a.Queue)
		}
	}
	return nil, false
}

// AlternatesMatching returns the alternate queues that may hold messages
// a subscriber of filter would have received: those of every prefix
// under which some topic matches filter. A queue is listed once.
func (e *Engine) AlternatesMatching(filter string) []*Queue {
	t := e.alts.Load()
	if t == nil {
		return nil
	}
	var out []*Queue
	for _, a := range t.alts {
		if !overlaps(filter, a.Prefix) {
			continue
		}
		if q, ok := e.Queue(a.Queue); ok && !containsQueue(out, q) {
			out = append(out, q)
		}
	}
	return out
}

func containsQueue(qs []*Queue, q *Queue) bool {
	for _, x := range qs {
		if x == q {
			return true
		}
	}
	return false
}

// overlaps reports whether some topic at or below prefix p matches the
// MQTT filter f.
func overlaps(f, p string) bool {
	if p[0] == '$' && f != "" && (f[0] == '+' || f[0] == '#') { // [MQTT-4.7.2-1]
		return false
	}
	for {
		fl, frest, fmore := cut(f)
		if fl == "#" {
			return true
		}
		pl, prest, pmore := cut(p)
		if fl != "+" && fl != pl {
			return false
		}
		if !pmore {
			return true // the rest of f matches levels below p
		}
		if !fmore {
			return false // f ends above p: it matches no topic below
		}
		f, p = frest, prest
	}
}

func cut(s string) (level, rest string, more bool) {
	level, rest, more = strings.Cut(s, "/")
	return
}

// Reaches implements core.Interest: a message reaches the engine's
// consumers when some queue's subscriptions take it.
func (e *Engine) Reaches(m *core.Message) bool {
	mp := matchPool.Get().(*[]*Queue)
	qs := e.idx.AppendMatches((*mp)[:0], m.Topic)
	n := 0
	for _, q := range qs {
		if q.intake.Load().wants(m) { // a selector or noLocal that leaves m out does not take it
			n++
		}
	}
	clear(qs)
	*mp = qs[:0]
	matchPool.Put(mp)
	return n > 0
}

// Deliver implements core.Subscriber for the alternates: the router calls
// it only for a message that reached no live consumer (a Fallback
// subscription). The message goes to the alternate of the longest prefix
// covering its topic, and the publisher, when it waits, is answered once
// the queue holds it durably, or with the queue's refusal.
func (f *altFeed) Deliver(m *core.Message, d core.Delivery) error {
	e := f.e
	t := e.alts.Load()
	if t == nil {
		return nil
	}
	for _, a := range t.alts {
		if !under(m.Topic, a.Prefix) {
			continue
		}
		if d.Acks != nil {
			d.Acks.Hold()
			e.Put(a.Queue, m, d.Acks.Done)
			return nil
		}
		e.Put(a.Queue, m, func(err error) {
			if err != nil {
				e.opts.Logger.Debug("alternate queue refused a message", "queue", a.Queue, "topic", m.Topic, "error", err)
			}
		})
		return nil
	}
	return nil
}
