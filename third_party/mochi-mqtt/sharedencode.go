// SPDX-License-Identifier: MIT
// SPDX-FileCopyrightText: 2023 mochi-mqtt, mochi-co

package mqtt

import (
	"bytes"
	"sync"
	"sync/atomic"

	"github.com/mochi-mqtt/server/v2/packets"
)

// A QoS 0 PUBLISH fanned out to several clients is encoded once per
// encoding they need (gateway patch 27).
//
// Each subscriber's writer encoded its own copy, and each copy was a
// Packet (~800 B) on the heap: in test/bench/mqttload's fan-out the
// allocator was a quarter of the gateway's CPU. Now publishToSubscribers
// encodes a QoS 0 copy once for every client whose encoding is the same
// (same protocol version, retain flag, problem-info and packet-size
// limits; no subscription identifiers, no topic alias, and at MQTT 5 no
// message expiry interval the publisher set, whose time left is counted
// when the copy is written), queues the one shared Packet to each of them
// and writes the same bytes; the last writer gives the buffer back. A
// client that needs its own encoding gets its own copy, as before.
// OnPacketEncode runs once per shared encoding, with the first of its
// clients (the gateway's hook depends on the packet only); OnPacketSent
// runs for every client, as before.

// sharedVariants is the most encodings one fan-out shares; a client
// needing another gets a copy of its own.
const sharedVariants = 4

// sharedKey is what a PUBLISH's encoding depends on besides the packet.
type sharedKey struct {
	version byte
	retain  bool
	noInfo  bool   // DisallowProblemInfo
	maxSize uint32 // the client's Maximum Packet Size (0: none)
}

// fanout is one publish's shared encodings, on the publisher's goroutine.
type fanout struct {
	keys [sharedVariants]sharedKey
	enc  [sharedVariants]*sharedPublish
	n    int
	// sharePayload: the publish's payload is shared by the subscribers'
	// copies, not copied for each (gateway patch 33).
	sharePayload bool
}

// sharedPublish is a PUBLISH and its encoding, queued to several clients.
type sharedPublish struct {
	pk   packets.Packet // queued; pk.Mods.Shared is this
	buf  bytes.Buffer
	refs atomic.Int32 // the fan-out's own, and one per queue it is in
}

var sharedPublishes = sync.Pool{New: func() any { return new(sharedPublish) }}

// Bytes implements packets.SharedEncoding.
func (sp *sharedPublish) Bytes() []byte { return sp.buf.Bytes() }

// Release implements packets.SharedEncoding: the last reference puts sp
// back in the pool (a buffer past 64 KiB is let go).
func (sp *sharedPublish) Release() {
	if sp.refs.Add(-1) != 0 {
		return
	}
	sp.pk = packets.Packet{}
	if sp.buf.Cap() > 64<<10 {
		sp.buf = bytes.Buffer{}
	}
	sp.buf.Reset()
	sharedPublishes.Put(sp)
}

// releaseShared drops the queue's reference of a packet taken off it.
func releaseShared(pk *packets.Packet) {
	if sp := pk.Mods.Shared; sp != nil {
		sp.Release()
	}
}

// shared returns the packet to queue to cl for out, one shared with the
// other clients of this fan-out whose encoding is the same, holding a
// reference for the queue; nil when cl needs a copy of its own (or f is
// nil: no fan-out).
func (f *fanout) shared(cl *Client, out *packets.Packet) *packets.Packet {
	if f == nil || out.FixedHeader.Qos != 0 || cl.Net.Inline || cl.Net.Conn == nil ||
		len(out.Properties.SubscriptionIdentifier) > 0 || out.Properties.TopicAliasFlag {
		return nil
	}
	p := &cl.Properties
	if p.ProtocolVersion >= 5 && out.Properties.MessageExpiryInterval > 0 {
		return nil // its time left is counted when it is written [MQTT-3.3.2-6]
	}
	k := sharedKey{version: p.ProtocolVersion, retain: out.FixedHeader.Retain,
		noInfo: p.Props.RequestProblemInfoFlag && p.Props.RequestProblemInfo == 0, maxSize: p.Props.MaximumPacketSize}
	var sp *sharedPublish
	for i := 0; i < f.n; i++ {
		if f.keys[i] == k {
			sp = f.enc[i]
			break
		}
	}
	if sp == nil {
		if f.n == sharedVariants {
			return nil
		}
		sp = sharedPublishes.Get().(*sharedPublish)
		sp.pk = *out
		cl.prepareFields(&sp.pk)
		cl.ops.hooks.onPacketEncode(cl, &sp.pk) // in place: patch 38
		if err := sp.pk.PublishEncode(&sp.buf); err != nil ||
			(sp.pk.Mods.MaxSize > 0 && uint32(sp.buf.Len()) > sp.pk.Mods.MaxSize) {
			sp.refs.Store(1)
			sp.Release()
			return nil // cl's own write refuses it, as before
		}
		sp.pk.Mods.Shared = sp
		sp.refs.Store(1)
		f.keys[f.n], f.enc[f.n] = k, sp
		f.n++
	}
	sp.refs.Add(1)
	return &sp.pk
}

// release drops the fan-out's own references.
func (f *fanout) release() {
	for i := 0; i < f.n; i++ {
		f.enc[i].Release()
		f.enc[i] = nil
	}
	f.n = 0
}

// writeShared writes a shared encoding b of pk (gateway patch 27).
func (cl *Client) writeShared(pk *packets.Packet, b []byte) error {
	n, err := cl.writeEncoded(b, packets.Publish, writeWait)
	if err != nil {
		return err
	}
	cl.sent(pk, b, n)
	return nil
}
