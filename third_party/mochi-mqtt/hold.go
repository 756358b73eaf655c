// SPDX-License-Identifier: MIT
// SPDX-FileCopyrightText: 2023 mochi-mqtt, mochi-co

package mqtt

import (
	"sync"
	"sync/atomic"
	"time"

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
// publisher's message was written first [MQTT-3.2.0-1]. A message for an
// offline session is held as well: never sent, it still expires, while a
// sent one waits for its acknowledgement (ClearExpiredInflights).

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
// held back while PUBLISHes are held, while earlier ones wait, when no send
// quota is left, or when the client is not connected (it is sent as the
// quota allows once it is, and expires until then [MQTT-3.3.2-5]);
// otherwise it takes one unit of the quota. It reports whether pk is held,
// and whether it was added (not a resend of an id in use).
func (cl *Client) setInflight(pk *packets.Packet) (held, added bool) {
	h := &cl.State.hold
	in := cl.State.Inflight
	h.mu.Lock()
	defer h.mu.Unlock()
	held = h.n > 0 || cl.Net.Conn == nil || cl.Closed() || in.Held() > 0 || !in.TakeSendQuota()
	if held {
		pk.Expiry = heldExpiry(pk.Expiry)
	}
	return held, in.Set(*pk)
}

// A held message is one whose Expiry is negative (upstream's -1); it keeps
// its expiry time e there as -1-e, so that it still expires while held
// and, once sent, its Message Expiry Interval is lowered by the time it
// waited [MQTT-3.3.2-6] (it was sent with the publisher's interval, and
// an expired one was sent all the same). -1 is a held message that does
// not expire.
func heldExpiry(e int64) int64 { return -1 - e }

// expiryOf returns the expiry time of an inflight packet, held or not (0:
// none).
func expiryOf(pk packets.Packet) int64 {
	if pk.Expiry < 0 {
		return -1 - pk.Expiry
	}
	return pk.Expiry
}

// sendHeld queues the client's held-back QoS 1/2 PUBLISHes, oldest first,
// while the send quota allows and nothing holds them. It always takes the
// lock: a publisher that found no quota may not have marked its message
// held yet, and only the lock orders its decision against this one (a
// check of Held first lost that wake-up, and the message waited, with
// every later one, for the client's next packet).
func (cl *Client) sendHeld() {
	cl.State.hold.mu.Lock()
	cl.sendHeldLocked()
	cl.State.hold.mu.Unlock()
}

// sendHeldLocked is sendHeld; the caller holds cl.State.hold.mu. A
// message that expired while held is not sent [MQTT-3.3.2-5]: it is left
// for the expiry loop, which deletes it and tells the hooks (not here,
// under the lock a hook may take the other way round). When the write
// queue is full, the rest waits for the writer, which calls sendHeld when
// it has emptied the queue.
func (cl *Client) sendHeldLocked() {
	in := cl.State.Inflight
	if cl.State.hold.n > 0 || in.Held() == 0 || cl.Closed() {
		return
	}
	now := time.Now().Unix()
	maximumExpiry := cl.ops.options.Capabilities.MaximumMessageExpiryInterval
	for _, pk := range in.GetAll(true) {
		if inflightExpired(pk, now, maximumExpiry) {
			continue
		}
		if !in.TakeSendQuota() {
			return
		}
		// Marked sent before it is queued: its PUBACK may come before
		// this returns, and must find it sent. Once sent it no longer
		// expires: onward delivery has begun [MQTT-3.3.2-5].
		sent := pk
		sent.Expiry = expiryOf(pk)
		in.Set(sent)
		if !cl.enqueue(&sent) {
			in.Set(pk) // held again, until the writer has room
			in.IncreaseSendQuota()
			return
		}
	}
}
