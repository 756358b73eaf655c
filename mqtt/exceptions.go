package mqtt

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/tolsey/tolsey/core"
	"github.com/tolsey/tolsey/core/queue/match"
)

// Exceptions for topic subscribers (docs/queues.md, "Exceptions for topic
// subscribers"): an MQTT 5 SUBSCRIBE may carry user properties named
// exceptProperty, each a filter of the queue grammar (core/queue/match);
// they apply to every subscription that SUBSCRIBE grants, and a message
// whose topic one of them matches is not delivered through it. A later
// SUBSCRIBE to the same filter replaces its exceptions (with none, if it
// carries none), as it replaces the subscription [MQTT-3.8.4-3]; they end
// with the subscription (UNSUBSCRIBE, the session's end).
//
// mochi merges the subscriptions of one client that match a topic into one
// delivery, so the rule is per client: a message reaches a client unless
// every one of its subscriptions that matches the topic has an exception
// that matches it too. It is applied in OnACLCheck, the one hook mochi asks
// per recipient (publishToClient), for its own fan-out and for messages
// from other front-ends injected through the inline client alike; the
// replayer applies it to stored retained copies per subscription.
//
// MQTT 3.1.1 has no user properties: its clients cannot have exceptions.

// exceptProperty is the SUBSCRIBE user property that carries one exception.
const exceptProperty = "tolsey-except"

// exceptions holds the exceptions of every client that has some, by client
// id, so that they live as long as the subscriptions, across a takeover
// that keeps the session (mochi moves the subscriptions to the new client
// of the same id without OnUnsubscribed), and end with them (OnUnsubscribed,
// which mochi calls for an UNSUBSCRIBE, a clean start, an expired session
// and a clean session's end).
//
// Goroutines: the client's reader runs subscribing, subscribed and
// unsubscribed (and mochi's session expiry or a taking-over client's
// reader, unsubscribed); allows runs on every publisher's goroutine. mu
// guards clients and the clientExceptions in it.
type exceptions struct {
	// used counts the clients in clients: zero, and delivery checks
	// nothing more (one atomic load per recipient).
	used atomic.Int64

	mu      sync.RWMutex
	clients map[string]*clientExceptions
}

type clientExceptions struct {
	// byFilter: a subscription's filter, as mochi keys it ($share/...
	// included), and its exceptions (never empty).
	byFilter map[string][]match.Filter
	// subscribing holds the filters of the SUBSCRIBE being processed, from
	// OnSubscribe to OnSubscribed: mochi passes OnACLCheck the filter
	// there, not a topic, and a SUBSCRIBE must not be refused because an
	// existing exception matches the filter read as a topic. A delivery on
	// a topic equal to one of them in that window is let through: the
	// subscription being made matches it.
	subscribing []string
}

func newExceptions() *exceptions {
	return &exceptions{clients: map[string]*clientExceptions{}}
}

// parseExceptions returns the exceptions a SUBSCRIBE carries. A leading `!`
// is optional (the property already says it is one), so `!!a` is the
// exception for topic `!a`, as in a queue's subscriptions.
func parseExceptions(props []packets.UserProperty) ([]match.Filter, error) {
	var ss []string
	for _, p := range props {
		if p.Key == exceptProperty {
			ss = append(ss, p.Val)
		}
	}
	if len(ss) == 0 {
		return nil, nil
	}
	out, err := match.ParseAll(ss)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", exceptProperty, err)
	}
	return out, nil
}

// subscribing notes the filters of a SUBSCRIBE mochi is about to check and
// add (OnSubscribe); a client without exceptions costs nothing.
func (e *exceptions) subscribing(cl *mochi.Client, filters packets.Subscriptions) {
	if e.used.Load() == 0 {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if ce := e.clients[cl.ID]; ce != nil {
		ce.subscribing = ce.subscribing[:0]
		for _, f := range filters {
			ce.subscribing = append(ce.subscribing, f.Filter)
		}
	}
}

// subscribed sets exc as the exceptions of every filter the SUBSCRIBE was
// granted (codes below 0x80), replacing what those filters had. Queue
// subscriptions ($queue/<name>) take none: the queue's own subscriptions
// say what it holds.
func (e *exceptions) subscribed(cl *mochi.Client, pk packets.Packet, codes []byte, exc []match.Filter) {
	if len(exc) == 0 && e.used.Load() == 0 {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	ce := e.clients[cl.ID]
	if ce != nil {
		ce.subscribing = ce.subscribing[:0]
	}
	for i, f := range pk.Filters {
		if i >= len(codes) || codes[i] >= packets.ErrUnspecifiedError.Code {
			continue
		}
		if _, isQueue := queueName(f.Filter); isQueue {
			continue
		}
		switch {
		case len(exc) > 0 && ce == nil:
			ce = &clientExceptions{byFilter: map[string][]match.Filter{}}
			e.clients[cl.ID] = ce
			e.used.Add(1)
			fallthrough
		case len(exc) > 0:
			ce.byFilter[f.Filter] = exc
		case ce != nil:
			delete(ce.byFilter, f.Filter)
		}
	}
	e.dropEmptyLocked(cl.ID, ce)
}

// unsubscribed drops the exceptions of the filters removed.
func (e *exceptions) unsubscribed(cl *mochi.Client, filters packets.Subscriptions) {
	if e.used.Load() == 0 {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	ce := e.clients[cl.ID]
	if ce == nil {
		return
	}
	for _, f := range filters {
		delete(ce.byFilter, f.Filter)
	}
	e.dropEmptyLocked(cl.ID, ce)
}

func (e *exceptions) dropEmptyLocked(id string, ce *clientExceptions) {
	if ce != nil && len(ce.byFilter) == 0 && e.clients[id] == ce {
		delete(e.clients, id)
		e.used.Add(-1)
	}
}

// allows reports whether a message on topic may be delivered to cl: it may
// unless every subscription of cl that matches topic has an exception that
// matches it (the rule at the top of this file).
func (e *exceptions) allows(cl *mochi.Client, topic string) bool {
	if e.used.Load() == 0 {
		return true
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	ce := e.clients[cl.ID]
	if ce == nil || slices.Contains(ce.subscribing, topic) {
		return true
	}
	excluded := false
	for filter, exc := range ce.byFilter {
		if !matchSubscription(filter, topic) {
			continue
		}
		if !match.AnyMatches(exc, topic) {
			return true
		}
		excluded = true
	}
	if !excluded {
		return true // only subscriptions without exceptions match
	}
	// Each subscription with exceptions that matches excludes it; one
	// without may still take it. Rare: only a topic an exception matches.
	for filter := range cl.State.Subscriptions.GetAll() {
		if _, has := ce.byFilter[filter]; !has && matchSubscription(filter, topic) {
			return true
		}
	}
	return false
}

// excluded reports whether the exceptions of cl's subscription filter
// match topic: the per-subscription rule, for the retained copies a new
// subscription receives.
func (e *exceptions) excluded(cl *mochi.Client, filter, topic string) bool {
	if e.used.Load() == 0 {
		return false
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	ce := e.clients[cl.ID]
	return ce != nil && match.AnyMatches(ce.byFilter[filter], topic)
}

// matchSubscription matches an MQTT subscription filter, shared or not,
// against topic.
func matchSubscription(filter, topic string) bool {
	if _, f, ok := core.SplitShared(filter); ok {
		filter = f
	}
	return core.Match(filter, topic)
}
