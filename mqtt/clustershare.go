package mqtt

// Shared subscriptions across the gateways of a cluster (core/shared.go,
// docs/cluster.md). mochi selects the member of each $share group a
// message reaches; OnSelectSubscribers leaves out the groups the gateway
// the message entered has sent to the cluster instead, and for a message
// the cluster chose this gateway for, everybody but that one group.
//
// What Deliver knows (Delivery.Share, the message's origin) reaches
// OnSelectSubscribers inside the injected packet as a last user property
// under shareMarker; OnPacketEncode takes it off before any client sees
// it. mochi passes nothing else of ours from InjectPacket to its fan-out.

import (
	"sync/atomic"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/tolsey/tolsey/core"
)

// shareMarker keys the user property that carries the share decision: its
// value is the one group ($share/g/f) that may take the message, or "" for
// none (the message entered another gateway, which decided). An MQTT
// client cannot send a user property key with a NUL [MQTT-1.5.4-2].
const shareMarker = "\x00tolsey-share"

// shareTaken replaces the marker's value once OnSelectSubscribers has
// picked a member of the group a copy is for: Deliver reads it back after
// the fan-out (on its own goroutine) to tell a copy taken from one no
// member took, which the cluster hands on. No group is named so ($share/
// first).
const shareTaken = "\x00taken"

// markShare adds the marker to pk when the cluster decided for it. It
// reports false when pk must not be injected: a message for one group
// that no session here is a member of (mochi asks OnSelectSubscribers
// only when a group matches; without one it would reach every plain
// subscriber).
func (h *hook) markShare(pk *packets.Packet, m *core.Message, d core.Delivery) bool {
	r := h.s.opts.Router
	switch {
	case d.Share != "":
		if len(h.s.mochi.Topics.Subscribers(m.Topic).Shared[d.Share]) == 0 {
			return false
		}
		// The last member may leave before the fan-out: then mochi finds
		// no group and, without this, gave the copy to the plain
		// subscribers (mochi patch 30).
		pk.Mods.SharedOnly = true
	case r.Clustered() && m.Origin.Node != "" && m.Origin.Node != h.s.opts.Node:
	default:
		return true
	}
	u := pk.Properties.User
	pk.Properties.User = append(u[:len(u):len(u)], packets.UserProperty{Key: shareMarker, Val: d.Share})
	return true
}

// shareCopyTaken reports whether a member took the copy for one group
// Deliver injected as pk (OnSelectSubscribers marked it).
func shareCopyTaken(pk *packets.Packet) bool {
	v, _ := shareOf(pk)
	return v == shareTaken
}

// shareOf returns the marker's value and whether pk carries one.
func shareOf(pk *packets.Packet) (string, bool) {
	u := pk.Properties.User
	if n := len(u); n > 0 && u[n-1].Key == shareMarker {
		return u[n-1].Val, true
	}
	return "", false
}

// unmarkShare takes the marker off a packet about to be written.
func unmarkShare(pk *packets.Packet) {
	if _, ok := shareOf(pk); ok {
		u := pk.Properties.User
		pk.Properties.User = u[: len(u)-1 : len(u)-1]
		if len(pk.Properties.User) == 0 {
			pk.Properties.User = nil
		}
	}
}

// OnSelectSubscribers implements mochi's hook: mochi calls it, on the
// publisher's goroutine, only when shared groups match pk's topic.
func (h *hook) OnSelectSubscribers(subs *mochi.Subscribers, pk packets.Packet) *mochi.Subscribers {
	r := h.s.opts.Router
	target, marked := shareOf(&pk)
	if marked && target != "" {
		// Only that group: one of its members here, and nobody else.
		keep := subs.Shared[target]
		clear(subs.Shared)
		clear(subs.Subscriptions)
		clear(subs.InlineSubscriptions)
		if len(keep) > 0 {
			subs.Shared[target] = keep
			// In the array Deliver's packet shares (markShare made it).
			pk.Properties.User[len(pk.Properties.User)-1].Val = shareTaken
		}
		return subs
	}
	if marked {
		clear(subs.Shared) // its gateway decided for every group
		return subs
	}
	if !r.Clustered() {
		return subs
	}
	for key := range subs.Shared {
		if g, f, ok := core.SplitShared(key); ok && r.SkipsGroup(nil, g, f, "") {
			delete(subs.Shared, key)
		}
	}
	return subs
}

// testHookShareInject, set by a test only, runs in Deliver between the
// check that a copy's group has a member here and its injection.
var testHookShareInject atomic.Pointer[func()]
