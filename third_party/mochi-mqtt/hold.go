// SPDX-License-Identifier: MIT
// SPDX-FileCopyrightText: 2023 mochi-mqtt, mochi-co

package mqtt

import (
	"sync"
	"sync/atomic"

	"github.com/mochi-mqtt/server/v2/packets"
)

// PUBLISHes held back before they are queued (gateway patch 13).
//
// Upstream holds a QoS 1/2 PUBLISH back in the inflight store (Expiry -1)
// when the client's send quota (its Receive Maximum) is used up, and sends
// one after each packet the client sends. Three faults made a client with a
// small Receive Maximum stall:
//   - a held-back message it sent left the inflight store at once, so its
//     PUBACK gave no quota back: each one lost a unit for good, and after
//     Receive Maximum of them nothing more was sent;
//   - the check of the quota and the taking of it were two steps, so two
//     publishers could both take the last unit;
//   - a hook that must send something to the client first (the gateway's
//     retained copies to a late subscriber) could only block the encoding
//     of later PUBLISHes, which had taken their inflight place and quota
//     already: the copies then waited for a quota only those blocked
//     PUBLISHes would give back.
//
// Now a held-back message stays in the inflight store once sent, until its
// acknowledgement gives its quota back; the quota is taken in one step
// (Inflight.TakeSendQuota); a later PUBLISH is held behind earlier held
// ones, so they go in order [MQTT-4.6.0-6]; and a hook may hold every
// PUBLISH to a client (HoldPublishes) without its taking any quota: QoS 1/2
// ones in the inflight store, QoS 0 ones in a list bounded by
// MaximumClientWritesPending. ReleasePublishes queues them for the writer,
// QoS 1/2 as the quota allows. The held count (Inflight.Held) lets a hook
// that sends its own QoS 1/2 PUBLISHes meanwhile count only those sent.
// mochi holds a new connection's PUBLISHes the same way until its CONNACK
// is out: a session it inherits makes it a subscriber before, and a
// publisher's message was written first [MQTT-3.2.0-1].

// publishHold is a client's hold on its PUBLISHes. mu also orders each
// publisher's decision to hold a QoS 1/2 PUBLISH back against sendHeld, so
// none is left held while the quota would let it go.
type publishHold struct {
	mu   sync.Mutex
	n    int              // guarded by mu: HoldPublishes not yet released
	qos0 []packets.Packet // guarded by mu: QoS 0 PUBLISHes held while n > 0
}

// HoldPublishes holds every PUBLISH mochi routes to the client from now on
// until ReleasePublishes: none is queued for the writer, none takes send
// quota. What is already queued still goes. Holds nest: mochi holds a new
// connection's until its CONNACK is written, a hook may hold them later.
func (cl *Client) HoldPublishes() {
	cl.State.hold.mu.Lock()
	cl.State.hold.n++
	cl.State.hold.mu.Unlock()
}

// ReleasePublishes ends one HoldPublishes; once none is left, the held QoS
// 0 PUBLISHes are queued in the order they came, then the held QoS 1/2
// ones as the send quota allows (the rest go as acknowledgements give
// quota back).
func (cl *Client) ReleasePublishes() {
	h := &cl.State.hold
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n > 0 {
		h.n--
	}
	if h.n > 0 {
		return
	}
	for i := range h.qos0 {
		if !cl.enqueue(&h.qos0[i]) {
			atomic.AddInt64(&cl.ops.info.MessagesDropped, 1)
		}
	}
	h.qos0 = nil
	cl.sendHeldLocked()
}

// holdQoS0 keeps a QoS 0 PUBLISH while the client's PUBLISHes are held. It
// reports whether they are, and whether pk was kept (false: the list is at
// MaximumClientWritesPending, as a full write queue would refuse it).
func (cl *Client) holdQoS0(pk packets.Packet) (held, kept bool) {
	h := &cl.State.hold
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n == 0 {
		return false, false
	}
	if len(h.qos0) >= int(cl.ops.options.Capabilities.MaximumClientWritesPending) {
		return true, false
	}
	h.qos0 = append(h.qos0, pk)
	return true, true
}

// setInflight puts a QoS 1/2 PUBLISH to the client in its inflight store,
// held back (Expiry -1) while PUBLISHes are held, while earlier ones wait,
// or when no send quota is left; otherwise it takes one unit of the quota.
// It reports whether pk is held, and whether it was added (not a resend of
// an id in use).
func (cl *Client) setInflight(pk *packets.Packet) (held, added bool) {
	h := &cl.State.hold
	in := cl.State.Inflight
	h.mu.Lock()
	defer h.mu.Unlock()
	held = h.n > 0 || in.Held() > 0 || !in.TakeSendQuota()
	if held {
		pk.Expiry = -1
	}
	return held, in.Set(*pk)
}

// sendHeld queues the client's held-back QoS 1/2 PUBLISHes, oldest first,
// while the send quota allows and nothing holds them.
func (cl *Client) sendHeld() {
	if cl.State.Inflight.Held() == 0 {
		return
	}
	cl.State.hold.mu.Lock()
	cl.sendHeldLocked()
	cl.State.hold.mu.Unlock()
}

// sendHeldLocked is sendHeld; the caller holds cl.State.hold.mu.
func (cl *Client) sendHeldLocked() {
	in := cl.State.Inflight
	if cl.State.hold.n > 0 || in.Held() == 0 || cl.Closed() {
		return
	}
	for _, pk := range in.GetAll(true) {
		if !in.TakeSendQuota() {
			return
		}
		// Marked sent before it is queued: its PUBACK may come before
		// this returns, and must find it sent. Once sent it no longer
		// expires: onward delivery has begun [MQTT-3.3.2-5].
		sent := pk
		sent.Expiry = 0
		in.Set(sent)
		if !cl.enqueue(&sent) {
			in.Set(pk) // held again, for the next packet
			in.IncreaseSendQuota()
			return
		}
	}
}
