package mqtt

import (
	"context"
	"sync/atomic"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/tolsey/tolsey/core"
	"github.com/tolsey/tolsey/retain"
)

// The acknowledgement of an MQTT publish the router handles
// (docs/architecture.md, "The acknowledgement back to the publisher";
// docs/mqtt-frontend.md, "Acknowledgements").
//
// A QoS 1/2 publish goes to the router with PublishAsync. When every
// subscriber answers within Deliver (the usual case), done runs before
// PublishAsync returns and OnPublish answers as it always has: mochi
// writes the ack on the reader. When a subscriber holds the answer (the
// bridge's store-and-forward buffer waiting for its group commit), the
// hook defers the ack with mochi's DeferAck (third_party/mochi-mqtt
// PATCHES.md, patch 12): the reader reads on, and done, on the holder's
// goroutine, gives mochi the code; mochi writes the acks in the order
// their PUBLISHes came [MQTT-4.6.0-2] and stops reading once the server's
// Receive Maximum of them wait. A reason code that is not success goes
// through the same deferred ack, answered at once, so that mochi delivers
// the message and writes the ack with the code, in its place.

// Where an asyncPublish is: done and OnPublish each move it on from
// pubWaiting with a compare-and-swap, so exactly one of them answers.
const (
	pubWaiting  int32 = iota // PublishAsync has not called done yet
	pubAnswered              // done ran before OnPublish deferred the ack: OnPublish answers
	pubDeferred              // OnPublish deferred the ack: done answers it
)

// asyncPublish is one QoS 1/2 publish in the router's hands. res is
// written by done before it moves state to pubAnswered, ack by OnPublish
// before it moves state to pubDeferred; each is read only by the side
// that found the other's state, so the atomic orders them.
type asyncPublish struct {
	h     *hook
	cl    *mochi.Client
	topic string
	id    uint16
	qos   byte
	state atomic.Int32
	res   core.PublishResult
	ack   *mochi.PendingAck
}

// publishRouted hands an MQTT publish to the router and answers it: on
// the reader now, or later through a deferred ack. The error is
// OnPublish's (packets.ErrRejectPacket once the connection is closed).
func (h *hook) publishRouted(cl *mochi.Client, pk *packets.Packet, m *core.Message) error {
	if pk.FixedHeader.Qos == 0 {
		// No ack: nobody waits, and a refusal is counted where it happened.
		res := h.s.opts.Router.Publish(context.Background(), m) // the store write is bounded by retain.WriteTimeout
		h.ackFor(cl, pk.TopicName, 0, res)
		return nil
	}
	return h.answerLater(cl, pk, func(done func(core.PublishResult)) {
		h.s.opts.Router.PublishAsync(context.Background(), m, done)
	})
}

// answerLater answers a QoS 1/2 publish with what start's done gives,
// on the reader now or later through a deferred ack: start hands the
// message to the router (publishRouted) or to a queue (publishQueue).
func (h *hook) answerLater(cl *mochi.Client, pk *packets.Packet, start func(done func(core.PublishResult))) error {
	p := &asyncPublish{h: h, cl: cl, topic: pk.TopicName, id: pk.PacketID, qos: pk.FixedHeader.Qos}
	start(p.done)
	if p.state.Load() == pubWaiting {
		p.ack = cl.DeferAck(*pk)
		if p.state.CompareAndSwap(pubWaiting, pubDeferred) {
			return nil // done answers
		}
	}
	// Answered before OnPublish returns: by mochi on the reader, or with
	// a code through the deferred ack, answered at once.
	code, closed := h.ackFor(cl, p.topic, p.qos, p.res)
	switch {
	case closed:
		return packets.ErrRejectPacket // mochi drops the deferred ack, if any
	case code == packets.CodeSuccess && p.ack == nil:
		return nil
	case p.ack == nil:
		p.ack = cl.DeferAck(*pk)
	}
	p.ack.Done(code)
	return nil
}

// done is PublishAsync's callback: on the reader before PublishAsync
// returns, or on the goroutine of the last subscriber to answer.
func (p *asyncPublish) done(res core.PublishResult) {
	p.res = res
	if p.state.CompareAndSwap(pubWaiting, pubAnswered) {
		return // OnPublish answers
	}
	code, _ := p.h.ackFor(p.cl, p.topic, p.qos, res) // closed: mochi writes nothing to a closed connection
	p.ack.Done(code)
}

// ackFor is the answer to a publish of the given QoS: the reason code
// of its PUBACK/PUBREC, or closed when the connection has been closed
// instead (MQTT 3.1.1 has no reason codes).
//   - A subscriber that must not lose it refused it (the bridge's
//     store-and-forward buffer is full under rejectNew, a matching queue
//     is full), or the queue it was published to could not take it: the
//     publisher must not take it as delivered. MQTT 5: 0x97 Quota
//     exceeded (0x90 Topic Name invalid for an unknown queue, 0x80 for a
//     queue store that failed), the refusal, naming the queue, as the
//     reason string (current MQTT subscribers of a topic publish still
//     get it, as for a refused retained write). MQTT 3.1.1: the
//     connection is closed [MQTT-3.3.5-2], as for a topic over the
//     limits, and the publisher sends it again once it reconnects; unless
//     every refusal is a full queue's and queues.v311Full is drop: then
//     acknowledged, and the drop counted. QoS 0: no ack exists; the
//     refusal is counted where it happened.
//   - The retained store did not take it (retain.Refused counts it): 0x97
//     quota exceeded, or 0x80 when the store failed; success for MQTT
//     3.1.1, whose acks carry no code.
func (h *hook) ackFor(cl *mochi.Client, topic string, qos byte, res core.PublishResult) (code packets.Code, closed bool) {
	if res.Err != nil {
		h.s.log.Debug("publish refused", "client", cl.ID, "topic", topic, "error", res.Err)
		switch {
		case qos == 0:
			return packets.CodeSuccess, false
		case cl.Properties.ProtocolVersion >= 5:
			return refusalCode(res.Err), false
		case h.s.opts.V311Full == V311FullDrop && onlyFull(res.Err):
			// queues.v311Full: drop. The queue counted its refusal; the
			// drop is counted here too, as the front-end's choice.
			h.s.opts.Metrics.Drop("mqtt", "queue_full")
			return packets.CodeSuccess, false
		}
		cl.Stop(packets.ErrQuotaExceeded)
		return packets.CodeSuccess, true
	}
	if res.RetainErr != nil {
		code = packets.ErrUnspecifiedError
		if retain.Refused(res.RetainErr, h.s.opts.Metrics, h.s.log, "topic", topic, "client", cl.ID) == retain.OverQuota {
			code = packets.ErrQuotaExceeded
		}
		if cl.Properties.ProtocolVersion >= 5 && qos > 0 {
			return code, false
		}
	}
	return packets.CodeSuccess, false
}
