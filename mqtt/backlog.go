package mqtt

import (
	"errors"
	"sync"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/tolsey/tolsey/core"
)

// backlog keeps the QoS 1/2 messages mochi drops when a connected client's
// write queue (mqtt.maxPendingWrites) is full: mochi would forget them, so an
// at-least-once message would be lost to a subscriber that was merely slow.
// Each is put in the session's inflight store (so a reconnecting persistent
// session gets it again, and the client's PUBACK clears it) and written by a
// per-client goroutine that exists only while that client has a backlog.
//
// Writing from a goroutine of its own matters: mochi's alternative, sending
// held-back messages from the client's reader goroutine, blocks that reader
// on a full socket while the client waits for its own PUBACKs to be read —
// a deadlock seen with paho.golang under load.
//
// Goroutines: keep runs on the publisher's goroutine (OnPublishDropped,
// inside mochi's fan-out); one drain goroutine per client with a backlog
// writes it; forget runs on the client's reader as it leaves; close on
// Shutdown's goroutine. mu guards clients, closing and every clientBacklog.
type backlog struct {
	s *Server

	mu      sync.Mutex
	clients map[*mochi.Client]*clientBacklog
	closing bool
	wg      sync.WaitGroup
}

type clientBacklog struct {
	pkts    []packets.Packet
	running bool
}

// keep keeps pk, which mochi dropped for cl (see backlog), at the QoS and
// with the flags cl's subscriptions give it. QoS 0 messages are dropped,
// as MQTT allows; both kinds are counted by mochi in
// tolsey_mqtt_messages_dropped_total, and the kept ones in
// tolsey_messages_dropped_total{reason="requeued"}.
func (b *backlog) keep(cl *mochi.Client, pk packets.Packet) {
	if pk.FixedHeader.Qos == 0 {
		return
	}
	s := b.s
	m := matching(cl, pk)
	if m.best.Filter == "" {
		// No subscription of cl matches: unsubscribed, or a reconnect took
		// the session over (and the subscriptions with it) since the
		// publisher found cl.
		b.toSuccessor(cl, pk)
		return
	}
	out := pk.Copy(false)
	out.FixedHeader.Qos = min(pk.FixedHeader.Qos, m.qos, s.mochi.Options.Capabilities.MaximumQos)
	if out.FixedHeader.Qos == 0 {
		return
	}
	if !m.rap || cl.Properties.ProtocolVersion < 5 {
		out.FixedHeader.Retain = false // [MQTT-3.3.1-12]
	}
	if len(m.ids) > 0 {
		out.Properties.SubscriptionIdentifier = m.ids
	}
	if s.inflightFull(cl) {
		s.opts.Metrics.Drop("mqtt", "inflight_full")
		return
	}
	if err := s.track(cl, &out); err != nil {
		if errors.Is(err, errTakenOver) {
			b.toSuccessor(cl, pk)
		}
		return
	}
	if s.sessions != nil {
		// Stored for a persistent session, as mochi stores its own
		// (OnQosPublish); mochi then drops the entry of the copy it refused
		// (patch 32), so a restart or a move sends the message once.
		s.sessions.OnQosPublish(cl, out, 0, 0)
	}
	// Not waiting for the send quota (docs/mqtt-frontend.md, "Receive
	// Maximum"); counted in it, as mochi counted it before it dropped it.
	cl.State.Inflight.DecreaseSendQuota()
	s.opts.Metrics.Drop("mqtt", "requeued") // not lost: counted to show pressure
	b.push(cl, out)
}

// toSuccessor hands pk to the connection that took cl's session over
// since mochi handed it to keep, as mochi does for its own deliveries
// (patch 25). mochi took its own copy out of cl's inflight store before
// calling keep (patch 32: a copy the takeover had inherited is never
// handed to keep), so the message is in no store: put into cl's after the
// takeover copied it, it would be lost although its publisher had its
// PUBACK. It goes through mochi's queue, which holds it until the new
// connection's CONNACK; a clean start has no subscription to take it.
func (b *backlog) toSuccessor(cl *mochi.Client, pk packets.Packet) {
	if b.s.mochi.InSession(cl, func() {}) {
		return // not taken over: cl no longer subscribes
	}
	next, ok := b.s.mochi.Clients.Get(cl.ID)
	if !ok || next == cl {
		return
	}
	if m := matching(next, pk); m.qos > 0 {
		// The subscriptions merged as mochi's fan-out merges them: the
		// highest QoS, Retain As Published from any, every identifier.
		sub := m.best
		sub.RetainAsPublished = m.rap
		if len(m.ids) > 0 {
			sub.Identifiers = make(map[string]int, len(m.ids))
			for i, id := range m.ids {
				sub.Identifiers[m.idFilters[i]] = id
			}
		}
		_ = b.s.mochi.PublishToSuccessor(cl, sub, pk)
	}
}

// subMatch is what cl's subscriptions make of a message: the highest QoS of
// those that match it (0: none), the one that gives it, Retain As
// Published from any, and their subscription identifiers.
type subMatch struct {
	best packets.Subscription
	qos  byte
	rap  bool
	ids  []int
	// idFilters[i] is the filter of ids[i].
	idFilters []string
}

func matching(cl *mochi.Client, pk packets.Packet) (m subMatch) {
	for _, sub := range cl.State.Subscriptions.GetAll() {
		f := sub.Filter
		if _, sf, ok := core.SplitShared(f); ok {
			f = sf
		}
		if !core.Match(f, pk.TopicName) || (sub.NoLocal && pk.Origin == cl.ID) {
			continue
		}
		if m.best.Filter == "" || sub.Qos > m.best.Qos {
			m.best = sub
		}
		m.qos = max(m.qos, sub.Qos)
		m.rap = m.rap || sub.RetainAsPublished
		if sub.Identifier > 0 {
			m.ids = append(m.ids, sub.Identifier)
			m.idFilters = append(m.idFilters, sub.Filter)
		}
	}
	return m
}

func (b *backlog) push(cl *mochi.Client, pk packets.Packet) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closing {
		return // stays in the session's inflight store
	}
	if b.clients == nil {
		b.clients = map[*mochi.Client]*clientBacklog{}
	}
	c := b.clients[cl]
	if c == nil {
		c = &clientBacklog{}
		b.clients[cl] = c
	}
	c.pkts = append(c.pkts, pk)
	if !c.running {
		c.running = true
		b.wg.Add(1)
		go b.drain(cl, c)
	}
}

// drain writes cl's backlog until it is empty or the connection is gone;
// what it could not write stays in the session's inflight store.
func (b *backlog) drain(cl *mochi.Client, c *clientBacklog) {
	defer b.wg.Done()
	for {
		b.mu.Lock()
		if len(c.pkts) == 0 || cl.Closed() {
			c.running = false
			c.pkts = nil
			if b.clients[cl] == c {
				delete(b.clients, cl)
			}
			b.mu.Unlock()
			return
		}
		pk := c.pkts[0]
		c.pkts = c.pkts[1:]
		b.mu.Unlock()
		_ = cl.WritePacket(pk) // an error means closed: checked above
	}
}

// forget drops cl's backlog (its messages stay in the session).
func (b *backlog) forget(cl *mochi.Client) {
	b.mu.Lock()
	if c := b.clients[cl]; c != nil {
		c.pkts = nil
	}
	b.mu.Unlock()
}

// close stops new drain goroutines and waits for running ones, which end
// once their connections are closed.
func (b *backlog) close() {
	b.mu.Lock()
	b.closing = true
	for _, c := range b.clients {
		c.pkts = nil
	}
	b.mu.Unlock()
	b.wg.Wait()
}
