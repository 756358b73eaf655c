package mqtt

import (
	"errors"
	"sync/atomic"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// A session's inflight store, used as mochi uses it. mochi has no call that
// sends a QoS 1/2 message to one client with a packet id and a place in its
// inflight store, so the gateway keeps Inflight and Info.Inflight in step
// itself when it writes such a message (a retained copy, a kept message)
// (third_party/mochi-mqtt/PATCHES.md, "Workarounds that live outside this
// copy"). A QoS 2 flow a PUBREC >= 0x80 ends is released by mochi's
// deferred ack (patch 12). These run on whichever goroutine writes.

// track gives a QoS 1/2 PUBLISH the gateway writes itself a packet id and a
// place in the session's inflight store, as mochi's publishToClient does for
// its own: the client's PUBACK clears it (and gives back a unit of the
// client's send quota, which the caller took) and a reconnecting persistent
// session gets it again.
//
// Under the client id's session lock (mochi patch 32): a session taken
// over by a new connection has been copied to it, so pk is not added to
// this one and errTakenOver is returned.
func (s *Server) track(cl *mochi.Client, pk *packets.Packet) error {
	var err error
	if !s.mochi.InSession(cl, func() { err = s.trackIn(cl, pk, cl.State.Inflight.Set) }) {
		return errTakenOver
	}
	return err
}

// errTakenOver: the session was taken over by a new connection of its
// client id while a message for it was on its way.
var errTakenOver = errors.New("mqtt: session taken over")

// trackBound is track for a queue delivery: the message belongs to this
// connection, not to the session (patch 15), since its queue delivers it
// again once the connection ends.
func (s *Server) trackBound(cl *mochi.Client, pk *packets.Packet) error {
	return s.trackIn(cl, pk, cl.State.Inflight.SetBound)
}

func (s *Server) trackIn(cl *mochi.Client, pk *packets.Packet, set func(packets.Packet) bool) error {
	id, err := cl.NextPacketID()
	if err != nil {
		s.opts.Metrics.Drop("mqtt", "packet_ids_exhausted")
		return packets.ErrQuotaExceeded
	}
	pk.PacketID = uint16(id)
	if set(*pk) {
		atomic.AddInt64(&s.mochi.Info.Inflight, 1)
	}
	return nil
}

// takeSlot takes a place for one more QoS 1/2 retained copy in flight to
// cl, and reports whether there was one: a unit of the client's send quota
// (its Receive Maximum [MQTT-3.3.4-9]), and fewer than mqtt.maxInflight
// messages sent and not acknowledged. Messages mochi holds back unsent (the
// live ones held while the copies go, patch 13) do not count: they wait
// for the copies, which must not wait for them.
func (s *Server) takeSlot(cl *mochi.Client) bool {
	in := cl.State.Inflight
	return in.Len()-in.Held() < int(s.mochi.Options.Capabilities.MaximumInflight) && in.TakeSendQuota()
}

// inflightFull reports whether cl's session holds mqtt.maxInflight messages
// in flight: mochi drops a QoS 1/2 message it would add then, and so does
// the backlog.
func (s *Server) inflightFull(cl *mochi.Client) bool {
	return cl.State.Inflight.Len() >= int(s.mochi.Options.Capabilities.MaximumInflight)
}
