package mqtt

import (
	"context"
	"errors"
	"os"
	"slices"
	"sync"
	"time"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tolsey/tolsey/core"
	"github.com/tolsey/tolsey/core/metrics"
	"github.com/tolsey/tolsey/retain"
)

// hook is the gateway's mochi hook and the MQTT front-end's core.Subscriber.
// mochi calls it on the goroutine of the client concerned (its reader,
// mostly), the router calls Deliver on the publisher's goroutine. It routes
// publishes and wills itself, refuses what is over the topic limits, and
// hands the rest to the parts below, each with its own lock, goroutines and
// ownership comment:
//   - acks.go: the acknowledgement of a publish the router handles, given
//     later when a subscriber holds it (a bridge buffer's durable write),
//     with its reason code;
//   - replay (retained.go): stored copies for late subscribers;
//   - backlog (backlog.go): QoS 1/2 messages a full write queue would have
//     lost;
//   - queues (queues.go): $queue/<name> subscriptions and publishes, the
//     queue engine's consumers;
//   - exceptions (exceptions.go): the exceptions MQTT 5 subscribers attach
//     to their subscriptions, applied per recipient in OnACLCheck;
//   - auth (auth.go): who each client is, and the ACL on its publishes,
//     subscriptions and deliveries.
type hook struct {
	mochi.HookBase
	s *Server

	replay  *replayer
	backlog backlog
	queues  *queues
	except  *exceptions
	auth    *authz
	quota   subQuota // mqtt.maxSubscriptions (subquota.go)

	// Fixed at construction.
	limits core.TopicLimits   // the router's: mqtt.maxTopicLevels, mqtt.maxTopicLength
	in     prometheus.Counter // messages in over MQTT, resolved once: it counts every publish
	out    *metrics.Outlet    // messages from other front-ends injected (Deliver)

	// Wills routed by OnWill, so that OnWillSent does not route them again:
	// OnWill runs on the dying client's goroutine, OnWillSent there or, for
	// a delayed will, on mochi's loop. willMu guards wills.
	willMu sync.Mutex
	wills  map[*mochi.Client]struct{}
}

var _ core.Subscriber = (*hook)(nil)

func newHook(s *Server) *hook {
	return &hook{
		s:       s,
		replay:  newReplayer(s),
		backlog: backlog{s: s},
		queues:  newQueues(s),
		except:  newExceptions(),
		auth:    newAuthz(s),
		quota:   subQuota{max: s.opts.MaxSubscriptions},
		limits:  s.opts.Router.TopicLimits(),
		in:      s.opts.Metrics.Counter(s.opts.Metrics.InVec(), "mqtt"),
		out:     s.opts.Metrics.Outlet("mqtt"),
		wills:   map[*mochi.Client]struct{}{},
	}
}

func (h *hook) ID() string { return "gateway" }

// provided is the set of mochi events the hook handles; mochi asks once,
// when the hook is added (patch 34), and keeps a table per event.
var provided = func() (t [256]bool) {
	for _, b := range []byte{
		mochi.OnConnectAuthenticate, mochi.OnACLCheck, mochi.OnPublish,
		mochi.OnSubscribe, mochi.OnSubscribed,
		mochi.OnPacketProcessed, mochi.OnPacketEncode, mochi.OnWill, mochi.OnWillSent,
		mochi.OnPublishDropped, mochi.OnQosDropped, mochi.OnConnect,
		mochi.OnSessionEstablished, mochi.OnDisconnect, mochi.OnPacketRead, mochi.OnUnsubscribed,
		mochi.OnClientExpired, mochi.OnSelectSubscribers,
	} {
		t[b] = true
	}
	return t
}()

func (h *hook) Provides(b byte) bool { return provided[b] }

var _ mochi.PacketHook = (*hook)(nil)

// ProvidesPacket tells mochi (patch 36, asked once) the packet types
// OnPacketRead and OnPacketProcessed act on, so that neither is called
// (with a copy of the packet) for every PUBLISH: OnPacketRead for a
// PUBACK, OnPacketProcessed for a SUBSCRIBE and the acknowledgements.
func (h *hook) ProvidesPacket(ev, typ byte) bool {
	switch ev {
	case mochi.OnPacketRead:
		return typ == packets.Puback
	case mochi.OnPacketProcessed:
		switch typ {
		case packets.Subscribe, packets.Puback, packets.Pubrec, packets.Pubrel, packets.Pubcomp:
			return true
		}
		return false
	}
	return true
}

// OnConnectAuthenticate admits every client: OnConnect has authenticated
// it already (auth.go says why there).
func (h *hook) OnConnectAuthenticate(*mochi.Client, packets.Packet) bool { return true }

// OnACLCheck answers mochi for a PUBLISH (write true: allowed here, the
// ACL is applied in OnPublish, after the topic alias is resolved), for each
// filter of a SUBSCRIBE (decided in OnSubscribe, auth.go), and for each
// recipient of a message (publishToClient, write false), where the ACL and
// then the recipient's exceptions (exceptions.go) keep out what they match.
func (h *hook) OnACLCheck(cl *mochi.Client, topic string, write bool) bool {
	return write || !h.quota.refused(cl, topic) && h.auth.mayRead(cl, topic) && h.except.allows(cl, topic)
}

func (h *hook) OnSessionEstablished(cl *mochi.Client, _ packets.Packet) {
	h.s.opts.Metrics.Conn("mqtt", 1)
	if !cl.Net.Inline {
		h.auth.inherited(cl)
		h.queues.resume(cl) // a session carried on consumes its queues again
	}
}

// OnPacketRead settles the queue delivery a PUBACK acknowledges, before
// mochi processes it (queues.acked says why then); mochi calls it for a
// PUBACK only (ProvidesPacket).
func (h *hook) OnPacketRead(cl *mochi.Client, pk packets.Packet) (packets.Packet, error) {
	if pk.FixedHeader.Type == packets.Puback {
		h.queues.acked(cl, pk)
	}
	return pk, nil
}

// OnUnsubscribed closes the queue consumers of the filters removed and
// drops their exceptions: mochi calls it for an UNSUBSCRIBE and whenever a
// session's subscriptions end.
func (h *hook) OnUnsubscribed(cl *mochi.Client, pk packets.Packet) {
	if !cl.Net.Inline {
		h.queues.unsubscribed(cl, pk.Filters)
		h.except.unsubscribed(cl, pk.Filters)
		// A cluster's summary shrinks soon after, not at its next period.
		h.s.opts.Router.FiltersRemoved()
	}
}

func (h *hook) OnDisconnect(cl *mochi.Client, err error, expire bool) {
	h.s.opts.Metrics.Conn("mqtt", -1)
	// Why the connection ended: a failed write first (the reader then ends
	// it at its deadline), else the first reason it was stopped, not the
	// read that saw it close.
	if wf := cl.WriteFailure(); wf != nil {
		err = wf
	} else if cause := cl.StopCause(); cause != nil {
		err = cause
	}
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded) && errors.Is(err, mochi.ErrWriteFailed):
		h.s.opts.Metrics.Closed("mqtt", "write_timeout")
		h.s.log.Info("mqtt client disconnected: it stopped reading", "client", cl.ID, "remote", cl.Net.Remote,
			"timeout", h.s.opts.WriteTimeout)
	case errors.Is(err, packets.ErrPacketTooLarge):
		h.s.opts.Metrics.Closed("mqtt", "packet_too_large")
	case errors.Is(err, packets.ErrTooManyUserProperties):
		h.s.opts.Metrics.Closed("mqtt", "too_many_user_properties")
	}
	h.s.forgetLocal(cl)
	h.replay.forget(cl)
	h.backlog.forget(cl)
	h.queues.forget(cl)
	if expire {
		h.auth.forget(cl)
	}
	// else the session lives on offline: the messages queued for it are
	// checked against the identity it connected with until it expires
	// (OnClientExpired) or a connection carries it on.
}

// OnClientExpired: an offline session ended (its expiry passed).
func (h *hook) OnClientExpired(cl *mochi.Client) {
	h.auth.forget(cl)
}

// OnPublish feeds an MQTT publish into the router: the retained store first
// (before mochi acknowledges it, so an acknowledged retained publish is
// durable), then every non-MQTT subscriber; a QoS 1/2 one is acknowledged
// once the router has its answer, possibly later (acks.go). mochi then
// delivers it to MQTT subscribers itself, without waiting for that answer.
func (h *hook) OnPublish(cl *mochi.Client, pk packets.Packet) (packets.Packet, error) {
	if cl.Net.Inline {
		return pk, nil // injected by Deliver: already routed
	}
	if err := h.limits.CheckTopic(pk.TopicName); err != nil {
		return h.refusePublishValue(cl, pk, err)
	}
	if !h.auth.mayPublish(cl, pk.TopicName) {
		return h.refuseUnauthorizedValue(cl, pk)
	}
	h.in.Inc()
	if name, ok := queueName(pk.TopicName); ok {
		return h.publishQueueValue(cl, pk, name)
	}
	if !pk.FixedHeader.Retain && pk.FixedHeader.Qos == 0 {
		return h.publishQoS0Value(cl, pk)
	}
	if !pk.FixedHeader.Retain && !h.s.opts.Router.Wants(pk.TopicName, core.ProtocolMQTT) {
		// MQTT-only traffic: mochi fans it out, nothing else to do but
		// count its topic (the router counts those it publishes).
		h.s.opts.Router.ObserveTopic(pk.TopicName, pk.Created)
		return pk, nil
	}
	return h.publishRoutedValue(cl, pk)
}

// OnPublishInline tells mochi (patch 48, asked once) that OnPublish passes
// the inline client's PUBLISHes through: Deliver injects a message the
// router has routed already, and mochi skips the hook chain for it.
func (h *hook) OnPublishInline() bool { return false }

var _ mochi.InlinePublishHook = (*hook)(nil)

// The ...Value helpers take pk by value and its address only in their own
// frame: when OnPublish itself took &pk, the whole packet (~900 B) moved to
// the heap on every call, the MQTT-only fast path's included.

func (h *hook) refusePublishValue(cl *mochi.Client, pk packets.Packet, err error) (packets.Packet, error) {
	return pk, h.refusePublish(cl, &pk, err)
}

func (h *hook) refuseUnauthorizedValue(cl *mochi.Client, pk packets.Packet) (packets.Packet, error) {
	return pk, h.refuseUnauthorized(cl, &pk)
}

func (h *hook) publishQueueValue(cl *mochi.Client, pk packets.Packet, name string) (packets.Packet, error) {
	err := h.publishQueue(cl, &pk, name) // sets pk.Ignore: before pk is returned
	return pk, err
}

// publishQoS0Value is Wants then publishRouted for a QoS 0 publish that
// is not retained, in one walk of the router's subscriptions
// (PublishWanted): no second walk for a message another front-end or the
// bridge wants, and still no message made for one nobody else wants.
func (h *hook) publishQoS0Value(cl *mochi.Client, pk packets.Packet) (packets.Packet, error) {
	r := h.s.opts.Router
	res, wanted := r.PublishWanted(context.Background(), pk.TopicName, core.ProtocolMQTT, func() *core.Message {
		return toMessage(&pk, cl.ID, h.s.opts.Node, time.Now())
	})
	if !wanted {
		// MQTT-only traffic: mochi fans it out, nothing else to do but
		// count its topic (the router counts those it publishes).
		r.ObserveTopic(pk.TopicName, pk.Created)
		return pk, nil
	}
	h.ackFor(cl, pk.TopicName, 0, res) // no ack: a refusal is counted where it happened
	return pk, nil
}

func (h *hook) publishRoutedValue(cl *mochi.Client, pk packets.Packet) (packets.Packet, error) {
	return pk, h.publishRouted(cl, &pk, toMessage(&pk, cl.ID, h.s.opts.Node, time.Now()))
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
	if cl.Properties.ProtocolVersion >= 5 && pk.FixedHeader.Qos == 0 {
		_ = h.s.mochi.DisconnectClient(cl, packets.ErrTopicNameInvalid)
		return packets.ErrRejectPacket
	}
	return h.answerRefused(cl, pk, packets.ErrTopicNameInvalid, err.Error())
}

// refuseUnauthorized answers a PUBLISH the ACL denies (counted by
// mayPublish): MQTT 5 PUBACK/PUBREC 0x87 Not authorized for QoS 1/2, a
// QoS 0 one dropped; MQTT 3.1.1, which cannot say why, closes the network
// connection [MQTT-3.3.5-2], whatever the QoS.
func (h *hook) refuseUnauthorized(cl *mochi.Client, pk *packets.Packet) error {
	if cl.Properties.ProtocolVersion >= 5 && pk.FixedHeader.Qos == 0 {
		return packets.ErrRejectPacket
	}
	return h.answerRefused(cl, pk, packets.ErrNotAuthorized, "")
}

// answerRefused closes an MQTT 3.1.1 client, or acknowledges a QoS 1/2
// MQTT 5 PUBLISH with code, and returns the error that makes mochi drop
// the PUBLISH.
func (h *hook) answerRefused(cl *mochi.Client, pk *packets.Packet, code packets.Code, why string) error {
	switch {
	case cl.Properties.ProtocolVersion < 5:
		cl.Stop(code)
	default:
		ack := packets.Packet{
			FixedHeader: packets.FixedHeader{Type: packets.Puback},
			PacketID:    pk.PacketID,
			ReasonCode:  code.Code,
			Properties:  packets.Properties{ReasonString: why},
		}
		if pk.FixedHeader.Qos == 2 {
			ack.FixedHeader.Type = packets.Pubrec // a PUBREC >= 0x80 ends the flow [MQTT-4.3.3]
		}
		_ = cl.WriteAck(ack) // behind the acks still due; a closed connection ends the client anyway
	}
	return packets.ErrRejectPacket
}

// limitSubscriptions is the limit label of a filter refused over
// mqtt.maxSubscriptions in tolsey_limit_refusals_total.
const limitSubscriptions = "subscriptions"

// OnSubscribe refuses filters over the topic limits and over the
// subscription quota (subquota.go), and every filter of a
// SUBSCRIBE whose exceptions are not valid filters, and tells the replayer
// a SUBSCRIBE has begun: it notes which filters the session held already
// (Retain Handling 1) before mochi adds them, and closes the client's gate.
func (h *hook) OnSubscribe(cl *mochi.Client, pk packets.Packet) packets.Packet {
	if cl.Net.Inline {
		return pk
	}
	filters := h.refuseFilters(cl, pk.Filters)
	if _, err := parseExceptions(pk.Properties.User); err != nil {
		h.s.log.Debug("subscription refused", "client", cl.ID, "error", err)
		filters = refuseAll(filters)
	}
	pk.Filters = h.queues.subscribe(cl, filters)
	if n := h.quota.subscribing(cl, pk.Filters); n > 0 {
		for range n {
			h.s.opts.Metrics.LimitRefused("mqtt", limitSubscriptions)
		}
		h.s.log.Debug("subscriptions refused: over mqtt.maxSubscriptions", "client", cl.ID, "refused", n,
			"max", h.quota.max)
	}
	h.auth.subscribing(cl, pk.Filters)
	h.except.subscribing(cl, pk.Filters)
	h.replay.subscribing(cl, pk.Filters)
	// Before mochi indexes the filters and answers SUBACK: a cluster's
	// other gateways learn of them first (docs/cluster.md). A refused
	// (empty) filter is not announced.
	for _, f := range pk.Filters {
		if f.Filter != "" {
			h.s.opts.Router.FilterAdded(f.Filter)
		}
	}
	return pk
}

// refuseAll returns a copy of filters with every filter made the empty
// one, which mochi refuses with SUBACK 0x8F (refuseFilters says why).
func refuseAll(filters packets.Subscriptions) packets.Subscriptions {
	out := slices.Clone(filters)
	for i := range out {
		out[i].Filter = ""
	}
	return out
}

// refuseFilters returns filters with each one over the topic limits
// replaced by the empty filter, which mochi answers with SUBACK 0x8F Topic
// Filter invalid [MQTT-4.7.3-1] (0x80 Failure for MQTT 3.1.1) without
// indexing it. The check comes before mochi's index, under whose lock a
// filter is indexed: before mochi patch 43 that cost levels × length (its
// isolateParticle walked the filter from the start for each level), so one
// filter of 32,767 levels stalled every other client's SUBSCRIBE for
// seconds, and again when its client left; it is linear now, and nothing
// over the limits gets in. mochi has no hook that returns per-filter
// reason codes; OnSubscribe may rewrite the packet, and an empty filter is
// the one invalid value mochi checks first. filters is copied, not changed:
// mochi passes the packet it read on to OnPacketProcessed.
func (h *hook) refuseFilters(cl *mochi.Client, filters packets.Subscriptions) packets.Subscriptions {
	var out packets.Subscriptions
	for i, f := range filters {
		err := h.limits.CheckFilter(f.Filter)
		if err == nil {
			continue
		}
		h.s.opts.Metrics.TopicRefused("mqtt", core.LimitReason(err))
		h.s.log.Debug("subscription refused", "client", cl.ID, "filter", f.Filter, "error", err)
		if out == nil {
			out = slices.Clone(filters)
		}
		out[i].Filter = ""
	}
	if out == nil {
		return filters
	}
	return out
}

func (h *hook) OnSubscribed(cl *mochi.Client, pk packets.Packet, codes []byte) {
	if !cl.Net.Inline {
		exc, _ := parseExceptions(pk.Properties.User) // refused in OnSubscribe if invalid
		h.quota.subscribed(cl, pk, codes)             // first: it may change codes the others read
		h.auth.subscribed(cl)
		h.except.subscribed(cl, pk, codes, exc)
		h.replay.subscribed(cl, codes)
		h.queues.subscribed(cl, pk, codes)
	}
}

// OnPacketProcessed runs on the client's reader once mochi has handled a
// packet from it. After a SUBSCRIBE (its SUBACK written) the retained copies
// are queued for the client's replay worker. After an acknowledgement
// mochi may have freed an inflight slot and given back send quota, which a
// replay worker may be waiting for. Signalled after every acknowledgement
// rather than from OnQosComplete: one place for every way a slot frees,
// and a wake that finds none just waits again. mochi calls it for those
// packet types only (ProvidesPacket).
func (h *hook) OnPacketProcessed(cl *mochi.Client, pk packets.Packet, err error) {
	if cl.Net.Inline {
		return
	}
	switch pk.FixedHeader.Type {
	case packets.Subscribe:
		h.replay.queue(cl, err)
		h.queues.attachPending(cl) // after the SUBACK, as the retained copies
	case packets.Puback, packets.Pubrec, packets.Pubrel, packets.Pubcomp:
		h.replay.slotFreed(cl)
		h.queues.slotFreed(cl)
	}
}

// OnQosDropped: mochi dropped an inflight message (expired, or a PUBREC
// >= 0x80 from the client), on the client's reader or its expiry loop; the
// slot may be one a replay or queue worker waits for.
func (h *hook) OnQosDropped(cl *mochi.Client, _ packets.Packet) {
	h.replay.slotFreed(cl)
	h.queues.slotFreed(cl)
}

// OnPublishDropped: mochi dropped a message for a client whose write queue
// is full; the backlog keeps a QoS 1/2 one.
func (h *hook) OnPublishDropped(cl *mochi.Client, pk packets.Packet) {
	if !cl.Net.Inline {
		h.backlog.keep(cl, pk)
	}
}

// OnWill routes an undelayed will before mochi delivers it to MQTT
// subscribers, as OnPublish does for a publish. mochi fans a will out first
// and calls OnWillSent after: routed there, a retained will was not yet
// stored when a client subscribing in between looked for it, and that
// client got it neither live nor stored.
//
// A will to $queue/<name> goes into that queue only (docs/queues.md,
// "MQTT"): Ignore keeps it from mochi's fan-out, which would hand it to the
// queue's MQTT consumers straight, past the queue, and to nobody else.
func (h *hook) OnWill(cl *mochi.Client, will mochi.Will) (mochi.Will, error) {
	if _, ok := queueName(will.TopicName); ok {
		will.Ignore = true
	}
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
	if name, ok := queueName(pk.TopicName); ok {
		h.willQueue(cl, m, name)
		return
	}
	if res := h.s.opts.Router.Publish(context.Background(), m); res.RetainErr != nil {
		// Counted and logged as any retained publish; a will has no ack to tell.
		retain.Refused(res.RetainErr, h.s.opts.Metrics, h.s.log, "topic", pk.TopicName, "client", cl.ID, "will", true)
	}
}

// OnPacketEncode strips properties mochi copies onto SUBACK/UNSUBACK, and
// drops the message expiry interval mochi adds to messages that had none;
// a QoS 1/2 PUBLISH to a persistent session that was stored held is
// stored again as sent before it goes (sessions.sending). It never blocks
// on the network: it runs on the client's writer.
func (h *hook) OnPacketEncode(cl *mochi.Client, pk packets.Packet) packets.Packet {
	h.OnPacketEncodeInPlace(cl, &pk)
	return pk
}

// OnPacketEncodeInPlace is OnPacketEncode without copying the packet in
// and out (mochi patch 38), which mochi calls instead.
func (h *hook) OnPacketEncodeInPlace(cl *mochi.Client, pk *packets.Packet) {
	switch pk.FixedHeader.Type {
	case packets.Publish:
		unmarkShare(pk) // clustershare.go
		if pk.Properties.MessageExpiryInterval > noExpiryCap/2 {
			pk.Properties.MessageExpiryInterval = 0
		}
		if h.s.sessions != nil && cl != nil {
			h.s.sessions.sending(cl, pk)
		}
	case packets.Suback, packets.Unsuback:
		pk.Properties.User = nil // mochi echoes the SUBSCRIBE's user properties
	}
}

var _ mochi.EncodeInPlaceHook = (*hook)(nil)

var _ core.Interest = (*hook)(nil)
var _ core.FilterSource = (*hook)(nil)

// Filters implements core.FilterSource: the filters of every MQTT session
// mochi holds, connected or persistent and offline (a cluster's interest
// summary, docs/cluster.md). One pass over the sessions; called every few
// seconds and after unsubscriptions, not per message.
func (h *hook) Filters(fn func(string)) {
	for _, cl := range h.s.mochi.Clients.GetAll() {
		for f := range cl.State.Subscriptions.GetAll() {
			fn(f) // $share/g/f as such: a cluster serves the group (clustershare.go)
		}
	}
}

// Reaches implements core.Interest: whether m reaches an MQTT session
// (connected, or persistent and offline: it is queued for it). mochi, not
// the router, fans out to MQTT sessions, also for MQTT-origin messages,
// which the front-end's "#" skips, so the router asks here before it
// diverts a message nobody receives to an alternate queue
// (docs/queues.md, "Alternate destinations"). One lookup in mochi's topic
// index; asked only for topics an alternate covers.
func (h *hook) Reaches(m *core.Message) bool {
	return h.reachesAny(m.Topic)
}

// Deliver implements core.Subscriber: a message from another front-end is
// injected through mochi's inline client, so mochi matches it against MQTT
// subscriptions and handles QoS, sessions and offline queues as for its own.
func (h *hook) Deliver(m *core.Message, d core.Delivery) error {
	now := time.Now() // one clock read per message: the expiry check and the packet's
	if m.Expired(now) {
		return nil
	}
	if d.Share == "" && !h.reachesAny(m.Topic) {
		return nil // no MQTT session here takes it: nothing to inject
	}
	cl := h.s.inline()
	if cl == nil {
		return errors.New("mqtt front-end stopped")
	}
	pk := toPacket(m, m.Retain, now)
	pk.Expiry = 0 // processPublish derives it from the interval
	// A published core.Message is never changed (core.Message), so the
	// subscribers' copies share its payload instead of copying it each
	// (mochi patch 45).
	pk.Mods.FixedPayload = true
	if !h.markShare(&pk, m, d) {
		return core.ErrNoMember // the cluster hands it to another gateway
	}
	if pk.FixedHeader.Qos > 0 {
		// mochi validates injected packets like a client's: QoS > 0 needs a
		// packet id. The inline client never acknowledges, so any will do.
		pk.PacketID = 1
	}
	mark := h.s.sessions.mark()
	if th := testHookShareInject.Load(); th != nil && d.Share != "" {
		(*th)()
	}
	if err := h.s.mochi.InjectPacket(cl, pk); err != nil {
		return err
	}
	if d.Share != "" && !shareCopyTaken(&pk) {
		return core.ErrNoMember // its last member here left meanwhile: handed on
	}
	h.s.sessions.holdDelivery(d.Acks, mark) // until the sessions it reached have it on disk
	h.out.Out(m.Created)
	return nil
}

// reachesAny reports whether topic matches any subscription in mochi's
// index: a session's, connected or persistent and offline, a shared
// group's or an inline one. Deliver skips the inject without one: an
// AMQP, bridge or cluster message nobody here subscribes to cost a
// packet, mochi's publish path and its hooks for nothing (a fifth of the
// gateway's CPU per AMQP→AMQP message when measured, 8% after patches
// 26-36: docs/benchmarks.md). The answer is the lookup the fan-out itself
// makes (patch 23's cache), kept by patch 39 also for topics that cache
// leaves out (shared groups, many subscribers), so a message that does
// go in pays one map read for it. A share copy (Delivery.Share) is not
// skipped here: markShare answers it, ErrNoMember included.
func (h *hook) reachesAny(topic string) bool {
	return h.s.mochi.Topics.HasSubscribers(topic)
}

// OnConnect refuses a will whose topic is over the topic limits, as
// OnPublish refuses such a publish: MQTT 5 with CONNACK 0x90 Topic Name
// invalid; MQTT 3.1.1, which has no return code for it, by closing the
// connection [MQTT-3.1.4-1]. It caps an MQTT 5 client's keep alive at
// mqtt.maxKeepAlive; mochi announces the cap as Server Keep Alive in the
// CONNACK [MQTT-3.2.2-21]. It answers a connection the connection limits
// refused at accept (admission.go), authenticates the client (auth.go), and
// writes the CONNACK that refuses it.
func (h *hook) OnConnect(cl *mochi.Client, pk packets.Packet) error {
	if reason := h.s.adm.refusal(cl); reason != "" {
		return h.s.adm.refuseConnect(cl, reason) // before auth: a refused client costs no password hash
	}
	if cl.Properties.ProtocolVersion >= 5 && pk.Properties.AuthenticationMethod != "" {
		// No extended authentication here (no AUTH exchange): refused with
		// the code made for it [MQTT-4.12.0-1], rather than let in as if
		// the method had been agreed.
		h.s.opts.Metrics.AuthFailure("mqtt", "auth_method")
		h.s.log.Info("mqtt connect refused", "client", cl.ID, "remote", cl.Net.Remote,
			"reason", "auth_method", "method", core.Shorten(pk.Properties.AuthenticationMethod, 64))
		_ = h.s.mochi.SendConnack(cl, packets.ErrBadAuthenticationMethod, false, nil)
		return packets.ErrBadAuthenticationMethod
	}
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
	if err := h.auth.connect(cl, pk); err != nil {
		return err
	}
	if max := uint16(h.s.opts.MaxKeepAlive / time.Second); max > 0 && cl.Properties.ProtocolVersion >= 5 &&
		(cl.State.Keepalive == 0 || cl.State.Keepalive > max) {
		cl.State.Keepalive, cl.State.ServerKeepalive = max, true
	}
	return h.s.claim(cl) // last: a refused CONNECT takes no id from another gateway (cluster.go)
}
