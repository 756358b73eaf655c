package core

// Shared subscriptions across the gateways of a cluster (docs/cluster.md,
// "Shared subscriptions across gateways"). A shared group (MQTT
// $share/g/f, an AMQP shared subscription) may have members on several
// gateways; each message goes to one member cluster-wide. The gateway a
// message entered decides, once, for every group:
//
//   - a group with members on another gateway is skipped by the local
//     fan-out; the cluster sends the message to a NATS queue group for it,
//     NATS picks one gateway (this one included), and that gateway hands
//     it to one of its members (PublishShare);
//   - a group with members here only is served here, as without a cluster.
//
// A message that entered another gateway and comes in through the cluster
// was decided there: the local fan-out skips every group.

import (
	"context"
	"errors"
)

// Shares is a cluster's view of the shared groups other gateways hold.
type Shares interface {
	// Elsewhere reports whether another gateway holds members of group on
	// filter. It runs on publishers' goroutines: one map lookup.
	Elsewhere(group, filter string) bool
}

type sharesBox struct{ s Shares }

// SetShares installs the cluster's view; nil removes it (the gateway
// serves its groups alone again).
func (r *Router) SetShares(s Shares) {
	if s == nil {
		r.shares.Store(nil)
		return
	}
	r.shares.Store(&sharesBox{s})
}

// ShareFilter is the filter a shared group is announced and addressed
// by: $share/<group>/<filter>.
func ShareFilter(group, filter string) string { return sharePrefix + group + "/" + filter }

// SkipsGroup reports whether the local fan-out of m must leave out the
// shared group on filter (a front-end that selects group members itself,
// the MQTT front-end through mochi, asks it per group). target is the
// group a PublishShare delivery is for ($share/g/f), "" otherwise.
func (r *Router) SkipsGroup(m *Message, group, filter, target string) bool {
	if target != "" {
		return ShareFilter(group, filter) != target
	}
	b := r.shares.Load()
	if b == nil {
		return false
	}
	if m != nil && m.Origin.Node != "" && m.Origin.Node != r.opts.Node {
		return true // its gateway decided
	}
	return b.s.Elsewhere(group, filter)
}

// Clustered reports whether a cluster's view of shared groups is set.
func (r *Router) Clustered() bool { return r.shares.Load() != nil }

// skipsGroupSub is SkipsGroup for one of the router's own group members.
func (r *Router) skipsGroupSub(m *Message, sub *Subscription, target string) bool {
	if target == "" && r.shares.Load() == nil {
		return false
	}
	return r.SkipsGroup(m, sub.Options.Group, sub.Filter, target)
}

// ErrNoMember is a FilterSource subscriber's answer to a PublishShare
// delivery for a group it has no member of (counted as a refusal: the
// cluster hands the message to another gateway).
var ErrNoMember = errors.New("core: no member of the shared group here")

// PublishShare delivers m, which the cluster chose this gateway for, to
// one member of the shared group target ($share/g/f) and to nobody else:
// the router's own group of that name and filter, and every FilterSource
// subscriber (the MQTT front-end) with Delivery.Share set, which hands it
// to one of its members of target if it has any, or refuses it with
// ErrNoMember. Matched > Failed in the result: a member took it. m is not
// stored even if retained: its gateway stored it.
func (r *Router) PublishShare(ctx context.Context, m *Message, target string) PublishResult {
	if m.QoS == 0 {
		return r.publishTo(ctx, m, nil, target)
	}
	a := acksPool.Get().(*Acks)
	return r.waitAcks(a, r.publishTo(ctx, m, r.prepAcks(a), target))
}

// shareCandidates removes, in place, the subscriptions a PublishShare
// delivery cannot reach: all but group members and FilterSource
// subscribers. Origin skips do not apply: the MQTT front-end's own
// message comes back to it when NATS picks this gateway.
func shareCandidates(s []*Subscription) []*Subscription {
	out := s[:0]
	for _, x := range s {
		if _, fs := x.Subscriber.(FilterSource); x.group != nil || fs {
			out = append(out, x)
		}
	}
	return out
}
