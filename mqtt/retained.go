package mqtt

import (
	"context"
	"errors"
	"slices"
	"time"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/gatewayd/gateway/core"
)

// Retained copies for a late subscriber (docs/mqtt-frontend.md).
//
// mochi adds a SUBSCRIBE's subscriptions and writes the SUBACK on the
// client's reader goroutine, between OnSubscribe and OnPacketProcessed. The
// stored copies are then written by one worker goroutine per client, in
// SUBSCRIBE order, so that the reader keeps reading the client's PUBACKs: a
// QoS 1 set larger than the session's inflight window waits for them instead
// of being cut short, and a client that stops reading while its own PUBACK
// writes block cannot deadlock the reader.
//
// From OnSubscribe until the last copy is out, the client's gate holds back
// live PUBLISHes (OnPacketEncode), so a stale stored copy never lands after
// a newer live message on the same topic.

// retainedOrigin marks the copies the hook writes itself: the gate lets them
// through.
const retainedOrigin = "\x00retained"

// clientSubs is one client's SUBSCRIBEs with retained copies to send.
// Guarded by hook.subMu.
type clientSubs struct {
	gate     chan struct{} // closed once every copy is out (or the client left)
	released bool          // gate closed
	cur      *pendingSub   // the SUBSCRIBE mochi is processing
	jobs     []*pendingSub // processed SUBSCRIBEs, copies still to send
	running  bool          // a worker is sending jobs
}

type pendingSub struct {
	filters []packets.Subscription
	existed []bool
	codes   []byte
	at      time.Time // when mochi had added the subscriptions
}

// OnSubscribe refuses filters over the topic limits, notes which filters
// the session held already (for Retain Handling 1) before mochi adds them,
// and closes the client's gate.
func (h *hook) OnSubscribe(cl *mochi.Client, pk packets.Packet) packets.Packet {
	if cl.Net.Inline {
		return pk
	}
	pk.Filters = h.refuseFilters(cl, pk.Filters)
	p := &pendingSub{filters: pk.Filters, existed: make([]bool, len(pk.Filters))}
	for i, f := range pk.Filters {
		_, p.existed[i] = cl.State.Subscriptions.Get(f.Filter)
	}
	h.subMu.Lock()
	c := h.clients[cl]
	if c == nil {
		c = &clientSubs{gate: make(chan struct{})}
		h.clients[cl] = c
		h.gateN.Add(1)
	}
	c.cur = p
	h.subMu.Unlock()
	return pk
}

// refuseFilters returns filters with each one over the topic limits
// replaced by the empty filter, which mochi answers with SUBACK 0x8F Topic
// Filter invalid [MQTT-4.7.3-1] (0x80 Failure for MQTT 3.1.1) without
// indexing it. The check must come before mochi's index: it costs levels ×
// length there (its isolateParticle walks the filter from the start for
// each level), under the index's lock, so one filter of 32,767 levels
// stalled every other client's SUBSCRIBE for seconds, and again when its
// client left (issue 7 item 6). mochi has no hook that returns per-filter
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

func (h *hook) OnSubscribed(cl *mochi.Client, _ packets.Packet, codes []byte) {
	if cl.Net.Inline {
		return
	}
	h.subMu.Lock()
	if c := h.clients[cl]; c != nil && c.cur != nil {
		c.cur.codes, c.cur.at = codes, time.Now()
	}
	h.subMu.Unlock()
}

// OnPacketProcessed runs after mochi has written the SUBACK: the SUBSCRIBE's
// retained copies are queued for the client's worker.
func (h *hook) OnPacketProcessed(cl *mochi.Client, pk packets.Packet, err error) {
	if pk.FixedHeader.Type != packets.Subscribe || cl.Net.Inline {
		return
	}
	h.subMu.Lock()
	defer h.subMu.Unlock()
	c := h.clients[cl]
	if c == nil {
		return
	}
	p := c.cur
	c.cur = nil
	if p != nil && err == nil && len(p.codes) == len(p.filters) {
		c.jobs = append(c.jobs, p)
	}
	switch {
	case len(c.jobs) > 0 && !c.running && !h.closing:
		c.running = true
		h.workers.Add(1)
		go h.retainedWorker(cl, c)
	case !c.running:
		h.releaseLocked(cl, c)
	}
}

// gate returns the channel live PUBLISHes to cl wait on, or nil.
func (h *hook) gate(cl *mochi.Client) chan struct{} {
	h.subMu.Lock()
	defer h.subMu.Unlock()
	if c := h.clients[cl]; c != nil {
		return c.gate
	}
	return nil
}

// releaseLocked opens c's gate and forgets c. h.subMu is held.
func (h *hook) releaseLocked(cl *mochi.Client, c *clientSubs) {
	if h.clients[cl] == c {
		delete(h.clients, cl)
	}
	if !c.released {
		c.released = true
		h.gateN.Add(-1)
		close(c.gate)
	}
}

// forgetSubs drops cl's pending copies when it disconnects.
func (h *hook) forgetSubs(cl *mochi.Client) {
	h.subMu.Lock()
	defer h.subMu.Unlock()
	if c := h.clients[cl]; c != nil {
		c.jobs, c.cur = nil, nil
		if !c.running {
			h.releaseLocked(cl, c)
		}
	}
}

// closeWorkers stops new workers and waits for running ones; they end once
// their connections are closed.
func (h *hook) closeWorkers() {
	h.subMu.Lock()
	h.closing = true
	for _, c := range h.clients {
		c.jobs = nil
	}
	h.subMu.Unlock()
	h.workers.Wait()
}

func (h *hook) retainedWorker(cl *mochi.Client, c *clientSubs) {
	defer h.workers.Done()
	for {
		h.subMu.Lock()
		if len(c.jobs) == 0 || h.closing {
			c.running = false
			c.jobs = nil
			if c.cur == nil { // no SUBSCRIBE in progress: every copy is out
				h.releaseLocked(cl, c)
			}
			h.subMu.Unlock()
			return
		}
		p := c.jobs[0]
		c.jobs = c.jobs[1:]
		h.subMu.Unlock()
		for i, sub := range p.filters {
			if p.codes[i] >= packets.ErrUnspecifiedError.Code {
				continue
			}
			sub.Qos = p.codes[i] // granted QoS
			h.sendRetained(cl, sub, p.existed[i], p.at)
		}
	}
}

// sendRetained delivers the stored retained messages matching sub, with
// RETAIN=1 [MQTT-3.3.1-9]. A message this gateway received after the
// subscription was in place reaches the client live; its stored copy is
// skipped so the client does not get it twice.
func (h *hook) sendRetained(cl *mochi.Client, sub packets.Subscription, existed bool, subscribed time.Time) {
	if core.IsShared(sub.Filter) {
		return // no retained messages for shared subscriptions [MQTT-4.8.2]
	}
	if sub.RetainHandling == 2 || (sub.RetainHandling == 1 && existed) {
		return // [MQTT-3.3.1-10] [MQTT-3.3.1-11]
	}
	// No deadline: a large set to a slow client takes as long as it takes;
	// the store bounds its own round trips, and a closed client ends it.
	now := time.Now()
	err := h.s.opts.Store.Match(context.Background(), sub.Filter, func(m *core.Message) bool {
		if m.Expired(now) || (m.Created.After(subscribed) && m.Origin.Node == h.s.opts.Node) {
			return true
		}
		pk := toPacket(m, true, now)
		pk.Origin = retainedOrigin
		pk.FixedHeader.Qos = min(m.QoS, sub.Qos)
		if sub.Identifier > 0 {
			pk.Properties.SubscriptionIdentifier = []int{sub.Identifier}
		}
		if err := h.writeRetained(cl, pk); err != nil {
			return !errors.Is(err, mochi.ErrConnectionClosed)
		}
		h.out.Out(time.Time{})
		return true
	})
	if err != nil {
		h.s.opts.Metrics.StoreError("match")
		h.s.log.Warn("retained messages not delivered", "filter", sub.Filter, "client", cl.ID, "error", err)
	}
}

// writeRetained sends one retained copy, tracking QoS 1/2 in the session's
// inflight store as mochi does for its own deliveries. When the session's
// inflight window (mqtt.maxInflight) is full it waits for the client's
// acknowledgements rather than drop the copy.
func (h *hook) writeRetained(cl *mochi.Client, pk packets.Packet) error {
	if pk.FixedHeader.Qos > 0 {
		for wait := time.Millisecond; cl.State.Inflight.Len() >= int(h.s.mochi.Options.Capabilities.MaximumInflight); {
			if cl.Closed() {
				return mochi.ErrConnectionClosed
			}
			time.Sleep(wait)
			wait = min(2*wait, 50*time.Millisecond)
		}
		if err := h.track(cl, &pk); err != nil {
			return err
		}
	}
	return cl.WritePacket(pk)
}
