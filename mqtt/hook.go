package mqtt

import (
	"context"
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"time"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gatewayd/gateway/core"
	"github.com/gatewayd/gateway/core/metrics"
	"github.com/gatewayd/gateway/retain"
)

// storeTimeout bounds one retained-store call made on a client's goroutine,
// so a hung backend delays that client, never wedges it.
const storeTimeout = 5 * time.Second

// hook is the gateway's mochi hook and the MQTT front-end's core.Subscriber.
type hook struct {
	mochi.HookBase
	s *Server

	// PUBACK/PUBREC reason overrides for publishes whose retained write
	// failed: the live delivery still happens, the ack tells the truth.
	ackMu   sync.Mutex
	acks    map[ackKey]packets.Code
	ackWait atomic.Int32 // len(acks), read without the lock on every ack

	// Per-client state of SUBSCRIBEs and their retained copies (retained.go).
	subMu   sync.Mutex
	clients map[*mochi.Client]*clientSubs
	gateN   atomic.Int32 // clients whose gate is closed, read without the lock on every PUBLISH
	workers sync.WaitGroup
	closing bool // guarded by subMu: no new retained workers

	backlog backlog // QoS 1/2 messages a full write queue would have lost

	limits core.TopicLimits // the router's: mqtt.maxTopicLevels, mqtt.maxTopicLength

	in  prometheus.Counter // messages in over MQTT, resolved once: it counts every publish
	out *metrics.Outlet    // deliveries the hook makes (other front-ends' messages, retained copies)

	// wills routed by OnWill, so that OnWillSent does not route them again.
	willMu sync.Mutex
	wills  map[*mochi.Client]struct{}
}

type ackKey struct {
	cl *mochi.Client
	id uint16
}

var _ core.Subscriber = (*hook)(nil)

func newHook(s *Server) *hook {
	return &hook{s: s, limits: s.opts.Router.TopicLimits(),
		in: s.opts.Metrics.Counter(s.opts.Metrics.InVec(), "mqtt"), out: s.opts.Metrics.Outlet("mqtt"),
		acks:    map[ackKey]packets.Code{},
		clients: map[*mochi.Client]*clientSubs{}, wills: map[*mochi.Client]struct{}{}}
}

func (h *hook) ID() string { return "gateway" }

// provided is the set of mochi events the hook handles; mochi asks on
// every event, so this is a table, not a search.
var provided = func() (t [256]bool) {
	for _, b := range []byte{
		mochi.OnConnectAuthenticate, mochi.OnACLCheck, mochi.OnPublish,
		mochi.OnRetainMessage, mochi.OnSubscribe, mochi.OnSubscribed,
		mochi.OnPacketProcessed, mochi.OnPacketEncode, mochi.OnWill, mochi.OnWillSent,
		mochi.OnPublishDropped, mochi.OnConnect,
		mochi.OnSessionEstablished, mochi.OnDisconnect,
	} {
		t[b] = true
	}
	return t
}()

func (h *hook) Provides(b byte) bool { return provided[b] }

// OnConnectAuthenticate admits every client: authentication is a later issue.
func (h *hook) OnConnectAuthenticate(*mochi.Client, packets.Packet) bool { return true }

// OnACLCheck allows every topic: authorisation is a later issue.
func (h *hook) OnACLCheck(*mochi.Client, string, bool) bool { return true }

func (h *hook) OnSessionEstablished(cl *mochi.Client, _ packets.Packet) {
	h.s.opts.Metrics.Conn("mqtt", 1)
}

func (h *hook) OnDisconnect(cl *mochi.Client, err error, _ bool) {
	h.s.opts.Metrics.Conn("mqtt", -1)
	if cause := cl.StopCause(); cause != nil {
		err = cause // the first reason the connection ended, not the read that saw it close
	}
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded) && errors.Is(err, mochi.ErrWriteFailed):
		h.s.opts.Metrics.Closed("mqtt", "write_timeout")
		h.s.log.Info("mqtt client disconnected: it stopped reading", "client", cl.ID, "remote", cl.Net.Remote,
			"timeout", h.s.opts.WriteTimeout)
	case errors.Is(err, packets.ErrPacketTooLarge):
		h.s.opts.Metrics.Closed("mqtt", "packet_too_large")
	}
	h.forgetSubs(cl)
	h.backlog.forget(cl)
	if h.ackWait.Load() > 0 {
		h.ackMu.Lock()
		for k := range h.acks {
			if k.cl == cl {
				delete(h.acks, k)
			}
		}
		h.ackWait.Store(int32(len(h.acks)))
		h.ackMu.Unlock()
	}
}

// OnPublish feeds an MQTT publish into the router: the retained store first
// (before mochi acknowledges it, so an acknowledged retained publish is
// durable), then every non-MQTT subscriber. mochi then delivers it to MQTT
// subscribers itself.
func (h *hook) OnPublish(cl *mochi.Client, pk packets.Packet) (packets.Packet, error) {
	if cl.Net.Inline {
		return pk, nil // injected by Deliver: already routed
	}
	if err := h.limits.CheckTopic(pk.TopicName); err != nil {
		return pk, h.refusePublish(cl, &pk, err)
	}
	h.in.Inc()
	if !pk.FixedHeader.Retain && !h.s.opts.Router.Wants(pk.TopicName, core.ProtocolMQTT) {
		return pk, nil // MQTT-only traffic: mochi fans it out, nothing else to do
	}
	m := toMessage(&pk, cl.ID, h.s.opts.Node, time.Now())
	ctx := context.Background()
	if m.Retain {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, storeTimeout)
		defer cancel()
	}
	res := h.s.opts.Router.Publish(ctx, m)
	if res.RetainErr != nil {
		h.retainFailed(cl, &pk, res.RetainErr)
	}
	return pk, nil
}

// refusePublish answers a PUBLISH whose topic is over the topic limits, and
// returns the error that makes mochi drop it. The topic is well formed, so
// this is no protocol error: the answer is the one MQTT has for a server
// that does not accept a publish.
//   - MQTT 5, QoS 1/2: PUBACK/PUBREC 0x90 Topic Name invalid ("not accepted
//     by this Server"); the connection goes on. Written here rather than
//     returned to mochi as a reason code: mochi answers a refused QoS 2
//     PUBLISH with a PUBACK where a PUBREC is due.
//   - MQTT 5, QoS 0: no ack exists, so DISCONNECT 0x90 [MQTT-4.13.2-1].
//   - MQTT 3.1.1: no reason codes; a server that does not accept a PUBLISH
//     must either acknowledge it as if taken or close the network
//     connection [MQTT-3.3.5-2]. We close: the publisher learns of it.
func (h *hook) refusePublish(cl *mochi.Client, pk *packets.Packet, err error) error {
	h.s.opts.Metrics.TopicRefused("mqtt", core.LimitReason(err))
	h.s.log.Debug("publish refused", "client", cl.ID, "topic", pk.TopicName, "error", err)
	switch {
	case cl.Properties.ProtocolVersion < 5:
		cl.Stop(packets.ErrTopicNameInvalid)
	case pk.FixedHeader.Qos == 0:
		_ = h.s.mochi.DisconnectClient(cl, packets.ErrTopicNameInvalid)
	default:
		ack := packets.Packet{
			FixedHeader: packets.FixedHeader{Type: packets.Puback},
			PacketID:    pk.PacketID,
			ReasonCode:  packets.ErrTopicNameInvalid.Code,
			Properties:  packets.Properties{ReasonString: err.Error()},
		}
		if pk.FixedHeader.Qos == 2 {
			ack.FixedHeader.Type = packets.Pubrec // a PUBREC >= 0x80 ends the flow [MQTT-4.3.3]
		}
		_ = cl.WritePacket(ack) // a closed connection ends the client anyway
	}
	return packets.ErrRejectPacket
}

// retainFailed records the PUBACK reason for a retained publish that was not
// stored: 0x97 quota exceeded, or 0x80 when the store failed.
func (h *hook) retainFailed(cl *mochi.Client, pk *packets.Packet, err error) {
	code := packets.ErrUnspecifiedError
	if errors.Is(err, retain.ErrQuotaExceeded) {
		code = packets.ErrQuotaExceeded
		h.s.opts.Metrics.Refused("quota")
	} else {
		h.s.opts.Metrics.StoreError("set")
		h.s.opts.Metrics.Refused("store")
		h.s.log.Warn("retained message not stored", "topic", pk.TopicName, "client", cl.ID, "error", err)
	}
	if cl.Properties.ProtocolVersion < 5 || pk.FixedHeader.Qos == 0 {
		return // MQTT 3 acks carry no reason code; QoS 0 has no ack
	}
	h.ackMu.Lock()
	h.acks[ackKey{cl, pk.PacketID}] = code
	h.ackWait.Store(int32(len(h.acks)))
	h.ackMu.Unlock()
}

// OnRetainMessage takes the message straight back out of mochi's own
// retained index: the retained store is the only place retained messages
// live (mochi would cost ~4.8 KiB per message, and would purge them).
func (h *hook) OnRetainMessage(_ *mochi.Client, pk packets.Packet, _ int64) {
	if len(pk.Payload) > 0 {
		h.s.mochi.Topics.RetainMessage(packets.Packet{TopicName: pk.TopicName})
	}
}

// OnWill routes an undelayed will before mochi delivers it to MQTT
// subscribers, as OnPublish does for a publish. mochi fans a will out first
// and calls OnWillSent after: routed there, a retained will was not yet
// stored when a client subscribing in between looked for it, and that
// client got it neither live nor stored.
func (h *hook) OnWill(cl *mochi.Client, will mochi.Will) (mochi.Will, error) {
	if cl.Properties.Will.WillDelayInterval > 0 {
		return will, nil // sent later, or never if the client comes back
	}
	// The packet mochi's sendLWT builds from the will.
	pk := packets.Packet{
		FixedHeader: packets.FixedHeader{Type: packets.Publish, Retain: will.Retain, Qos: will.Qos},
		TopicName:   will.TopicName,
		Payload:     will.Payload,
		Properties:  will.PublishProperties(),
	}
	h.routeWill(cl, &pk)
	h.willMu.Lock()
	h.wills[cl] = struct{}{}
	h.willMu.Unlock()
	return will, nil
}

// OnWillSent routes a delayed will (mochi publishes wills without
// OnPublish); undelayed ones went through OnWill.
func (h *hook) OnWillSent(cl *mochi.Client, pk packets.Packet) {
	h.willMu.Lock()
	_, routed := h.wills[cl]
	delete(h.wills, cl)
	h.willMu.Unlock()
	if !routed {
		h.routeWill(cl, &pk)
	}
}

func (h *hook) routeWill(cl *mochi.Client, pk *packets.Packet) {
	m := toMessage(pk, cl.ID, h.s.opts.Node, time.Now())
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	if res := h.s.opts.Router.Publish(ctx, m); res.RetainErr != nil {
		h.s.opts.Metrics.StoreError("set")
		h.s.log.Warn("retained will not stored", "topic", pk.TopicName, "client", cl.ID, "error", res.RetainErr)
	}
}

// OnPacketEncode puts the reason code on acks of publishes whose retained
// write failed, strips properties mochi copies onto SUBACK/UNSUBACK, and
// drops the message expiry interval mochi adds to messages that had none.
func (h *hook) OnPacketEncode(cl *mochi.Client, pk packets.Packet) packets.Packet {
	switch pk.FixedHeader.Type {
	case packets.Publish:
		if pk.Properties.MessageExpiryInterval > noExpiryCap/2 {
			pk.Properties.MessageExpiryInterval = 0
		}
		if h.gateN.Load() > 0 && pk.Origin != retainedOrigin {
			if g := h.gate(cl); g != nil {
				<-g // the client's retained copies go first
			}
		}
	case packets.Puback, packets.Pubrec:
		if h.ackWait.Load() == 0 || pk.ReasonCode >= packets.ErrUnspecifiedError.Code {
			return pk
		}
		k := ackKey{cl, pk.PacketID}
		h.ackMu.Lock()
		code, ok := h.acks[k]
		delete(h.acks, k)
		h.ackWait.Store(int32(len(h.acks)))
		h.ackMu.Unlock()
		if !ok {
			return pk
		}
		pk.ReasonCode = code.Code
		pk.Properties.ReasonString = code.Reason
		if pk.FixedHeader.Type == packets.Pubrec {
			// A PUBREC >= 0x80 ends the QoS 2 flow [MQTT-4.3.3]: no PUBREL
			// follows, so release what mochi holds for it.
			if cl.State.Inflight.Delete(pk.PacketID) {
				atomic.AddInt64(&h.s.mochi.Info.Inflight, -1)
			}
			cl.State.Inflight.IncreaseReceiveQuota()
		}
	case packets.Suback, packets.Unsuback:
		pk.Properties.User = nil // mochi echoes the SUBSCRIBE's user properties
	}
	return pk
}

// Deliver implements core.Subscriber: a message from another front-end is
// injected through mochi's inline client, so mochi matches it against MQTT
// subscriptions and handles QoS, sessions and offline queues as for its own.
func (h *hook) Deliver(m *core.Message, _ core.Delivery) error {
	if m.Expired(time.Now()) {
		return nil
	}
	cl := h.s.inline()
	if cl == nil {
		return errors.New("mqtt front-end stopped")
	}
	pk := toPacket(m, m.Retain, time.Now())
	pk.Expiry = 0 // processPublish derives it from the interval
	if pk.FixedHeader.Qos > 0 {
		// mochi validates injected packets like a client's: QoS > 0 needs a
		// packet id. The inline client never acknowledges, so any will do.
		pk.PacketID = 1
	}
	if err := h.s.mochi.InjectPacket(cl, pk); err != nil {
		return err
	}
	h.out.Out(m.Created)
	return nil
}

// OnConnect refuses a will whose topic is over the topic limits, as
// OnPublish refuses such a publish: MQTT 5 with CONNACK 0x90 Topic Name
// invalid; MQTT 3.1.1, which has no return code for it, by closing the
// connection [MQTT-3.1.4-1]. It caps an MQTT 5 client's keep alive at
// mqtt.maxKeepAlive; mochi announces the cap as Server Keep Alive in the
// CONNACK [MQTT-3.2.2-21].
func (h *hook) OnConnect(cl *mochi.Client, _ packets.Packet) error {
	if w := &cl.Properties.Will; w.Flag > 0 {
		if err := h.limits.CheckTopic(w.TopicName); err != nil {
			h.s.opts.Metrics.TopicRefused("mqtt", core.LimitReason(err))
			h.s.log.Debug("connect refused: will topic", "client", cl.ID, "topic", w.TopicName, "error", err)
			if cl.Properties.ProtocolVersion >= 5 {
				_ = h.s.mochi.SendConnack(cl, packets.ErrTopicNameInvalid, false, nil)
			}
			return packets.ErrTopicNameInvalid
		}
	}
	if max := uint16(h.s.opts.MaxKeepAlive / time.Second); max > 0 && cl.Properties.ProtocolVersion >= 5 &&
		(cl.State.Keepalive == 0 || cl.State.Keepalive > max) {
		cl.State.Keepalive, cl.State.ServerKeepalive = max, true
	}
	return nil
}
