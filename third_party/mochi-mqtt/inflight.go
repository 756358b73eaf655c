// SPDX-License-Identifier: MIT
// SPDX-FileCopyrightText: 2023 mochi-mqtt, mochi-co
// SPDX-FileContributor: mochi-co

package mqtt

import (
	"sort"
	"sync"
	"sync/atomic"

	"github.com/mochi-mqtt/server/v2/packets"
)

// Inflight is a map of InflightMessage keyed on packet id.
type Inflight struct {
	sync.RWMutex
	internal            map[uint16]packets.Packet // internal contains the inflight packets
	order               map[uint16]uint64         // when each packet id was set (gateway patch)
	next                uint64                    // the next order value
	held                int                       // packets held back unsent, Expiry < 0 (gateway patch 13)
	bound               map[uint16]struct{}       // packet ids of this connection only: not cloned (gateway patch 15)
	receiveQuota        int32                     // remaining inbound qos quota for flow control
	sendQuota           int32                     // remaining outbound qos quota for flow control
	maximumReceiveQuota int32                     // maximum allowed receive quota
	maximumSendQuota    int32                     // maximum allowed send quota
}

// NewInflights returns a new instance of an Inflight packets map.
func NewInflights() *Inflight {
	return &Inflight{
		internal: map[uint16]packets.Packet{},
		order:    map[uint16]uint64{},
	}
}

// Set adds or updates an inflight packet by packet id.
func (i *Inflight) Set(m packets.Packet) bool {
	i.Lock()
	defer i.Unlock()

	old, ok := i.internal[m.PacketID]
	i.internal[m.PacketID] = m
	if !ok { // an update (PUBREC to PUBREL) keeps its place
		i.order[m.PacketID] = i.next
		i.next++
	}
	if ok && old.Expiry < 0 {
		i.held--
	}
	if m.Expiry < 0 {
		i.held++
	}
	return !ok
}

// SetBound adds an outbound packet that belongs to this connection only,
// not to the session (gateway patch 15): a message the gateway delivers
// from one of its queues, which the queue delivers again to whichever
// consumer comes next once this connection ends. It is kept, counted and
// acknowledged like any other (so its packet id is not reused and its
// PUBACK gives back the send quota), but Clone leaves it out: a session
// carried on by a new connection does not resend it, which would deliver
// it twice. Returns true if the packet id was not in use.
func (i *Inflight) SetBound(m packets.Packet) bool {
	added := i.Set(m)
	i.Lock()
	if i.bound == nil {
		i.bound = map[uint16]struct{}{}
	}
	i.bound[m.PacketID] = struct{}{}
	i.Unlock()
	return added
}

// Held returns how many packets are held back, not yet sent: those waiting
// for the client's send quota or for a hold (Client.HoldPublishes) to end
// (gateway patch 13).
func (i *Inflight) Held() int {
	i.RLock()
	defer i.RUnlock()
	return i.held
}

// Get returns an inflight packet by packet id.
func (i *Inflight) Get(id uint16) (packets.Packet, bool) {
	i.RLock()
	defer i.RUnlock()

	if m, ok := i.internal[id]; ok {
		return m, true
	}

	return packets.Packet{}, false
}

// Len returns the size of the inflight messages map.
func (i *Inflight) Len() int {
	i.RLock()
	defer i.RUnlock()
	return len(i.internal)
}

// Clone returns a new instance of Inflight with the same message data.
// This is used when transferring inflights from a taken-over session.
func (i *Inflight) Clone() *Inflight {
	c := NewInflights()
	i.RLock()
	defer i.RUnlock()
	for k, v := range i.internal {
		if _, ok := i.bound[k]; ok {
			continue // gateway patch 15: the connection's, not the session's
		}
		c.internal[k] = v
		c.order[k] = i.order[k]
	}
	c.next, c.held = i.next, i.held
	return c
}

// GetAll returns all the inflight messages.
func (i *Inflight) GetAll(immediate bool) []packets.Packet {
	i.RLock()
	defer i.RUnlock()

	m := []packets.Packet{}
	for _, v := range i.internal {
		if !immediate || (immediate && v.Expiry < 0) {
			m = append(m, v)
		}
	}

	// In the order they were set (gateway patch: upstream sorted by the
	// creation second truncated to 16 bits, unstably, so messages of one
	// second came back in any order and the order wrapped every 18 hours
	// [MQTT-4.6.0-6]).
	sort.Slice(m, func(a, b int) bool {
		return i.order[m[a].PacketID] < i.order[m[b].PacketID]
	})

	return m
}

// NextImmediate returns the next inflight packet which is indicated to be sent immediately.
// This typically occurs when the quota has been exhausted, and we need to wait until new quota
// is free to continue sending.
//
// gateway patch: it no longer read-locks around GetAll, which read-locks
// again. A recursive read lock deadlocks when a writer (Set, from a
// publisher routing a message to this client) queues between the two: the
// client's reader, the publisher and the expiry loop then waited for ever
// (seen as a QoS 1 publisher whose PUBACKs stopped).
func (i *Inflight) NextImmediate() (packets.Packet, bool) {
	m := i.GetAll(true)
	if len(m) > 0 {
		return m[0], true
	}

	return packets.Packet{}, false
}

// Delete removes an in-flight message from the map. Returns true if the message existed.
func (i *Inflight) Delete(id uint16) bool {
	i.Lock()
	defer i.Unlock()

	old, ok := i.internal[id]
	delete(i.internal, id)
	delete(i.order, id)
	delete(i.bound, id) // gateway patch 15
	if ok && old.Expiry < 0 {
		i.held--
	}
	if ok && len(i.internal) == 0 {
		// gateway patch: let an emptied session's map groups go (a map
		// keeps its largest size): most connections sit idle with nothing
		// in flight.
		i.internal, i.order, i.bound = map[uint16]packets.Packet{}, map[uint16]uint64{}, nil
	}

	return ok
}

// TakeRecieveQuota reduces the receive quota by 1.
func (i *Inflight) DecreaseReceiveQuota() {
	if atomic.LoadInt32(&i.receiveQuota) > 0 {
		atomic.AddInt32(&i.receiveQuota, -1)
	}
}

// TakeRecieveQuota increases the receive quota by 1.
func (i *Inflight) IncreaseReceiveQuota() {
	if atomic.LoadInt32(&i.receiveQuota) < atomic.LoadInt32(&i.maximumReceiveQuota) {
		atomic.AddInt32(&i.receiveQuota, 1)
	}
}

// ResetReceiveQuota resets the receive quota to the maximum allowed value.
func (i *Inflight) ResetReceiveQuota(n int32) {
	atomic.StoreInt32(&i.receiveQuota, n)
	atomic.StoreInt32(&i.maximumReceiveQuota, n)
}

// DecreaseSendQuota reduces the send quota by 1.
func (i *Inflight) DecreaseSendQuota() {
	if atomic.LoadInt32(&i.sendQuota) > 0 {
		atomic.AddInt32(&i.sendQuota, -1)
	}
}

// TakeSendQuota takes one unit of the send quota for a QoS 1/2 PUBLISH
// about to be sent, and reports whether it could: always when the client
// set no Receive Maximum (the quota is then not kept), never when none is
// left [MQTT-3.3.4-9]. Unlike a load followed by DecreaseSendQuota, two
// senders cannot both take the last unit (gateway patch 13).
func (i *Inflight) TakeSendQuota() bool {
	if atomic.LoadInt32(&i.maximumSendQuota) == 0 {
		return true
	}
	for {
		q := atomic.LoadInt32(&i.sendQuota)
		if q <= 0 {
			return false
		}
		if atomic.CompareAndSwapInt32(&i.sendQuota, q, q-1) {
			return true
		}
	}
}

// IncreaseSendQuota increases the send quota by 1.
func (i *Inflight) IncreaseSendQuota() {
	if atomic.LoadInt32(&i.sendQuota) < atomic.LoadInt32(&i.maximumSendQuota) {
		atomic.AddInt32(&i.sendQuota, 1)
	}
}

// ResetSendQuota resets the send quota to the maximum allowed value.
func (i *Inflight) ResetSendQuota(n int32) {
	atomic.StoreInt32(&i.sendQuota, n)
	atomic.StoreInt32(&i.maximumSendQuota, n)
}
