package mqtt

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"sync/atomic"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/tolsey/tolsey/mqtt/session"
)

// restore puts the stored sessions back into mochi, before any listener
// accepts, as mochi's own loadClients, loadSubscriptions and loadInflight
// do for its storage hooks, with two differences: in-flight messages come
// back in the order they were queued (mochi's restore takes the store's
// order, PATCHES.md "Not patched"), and a message held back unsent keeps
// its held mark (mochi's storage.Message has no Expiry, so it would be
// resent as if sent, with DUP, past the client's Receive Maximum). Each
// session comes back disconnected; its expiry interval runs from now.
func (ss *sessions) restore() error {
	r := ss.restorer()
	if sh, ok := ss.b.(session.Shared); ok && ss.s.opts.Cluster != nil {
		// Read first: a session another gateway takes meanwhile gets a
		// newer epoch, and what this one writes of it is refused.
		e, err := sh.Epochs()
		if err != nil {
			return fmt.Errorf("mqtt: restore sessions: %w", err)
		}
		r.epochs = e
	}
	if err := ss.b.Load(r.add); err != nil {
		return fmt.Errorf("mqtt: restore sessions: %w", err)
	}
	r.finish()
	// A will still set belongs to a connection the process ended without
	// a DISCONNECT (a clean one clears it [MQTT-3.1.2-10], and the record
	// is stored again then): sent now, or after its delay from now.
	for _, l := range r.byID {
		if l.cl.Properties.Will.Flag > 0 {
			ss.s.mochi.RestoreWill(l.cl)
		}
	}
	if len(r.byID) > 0 {
		ss.s.log.Info("mqtt sessions restored", "sessions", len(r.byID), "subscriptions", r.subs, "messages", r.msgs)
	}
	return nil
}

// restoring is one restore in progress: the stored entries of one or
// more sessions (Load's order: clients, subscriptions, messages) put
// back into mochi by finish.
type restoring struct {
	ss         *sessions
	anyNode    bool              // take sessions stored by any gateway (fetch), not only this one's
	epochs     map[string]uint64 // the sessions' epochs in a shared store (session.Shared)
	byID       map[string]*loaded
	subs, msgs int
}

type loaded struct {
	cl       *mochi.Client
	inflight []inflightRecord
}

// epoch is the one id's session is written with: its epoch in a shared
// store; Unfenced outside a cluster (nobody to be fenced from).
func (r *restoring) epoch(id string) uint64 {
	if r.ss.s.opts.Cluster == nil {
		return session.Unfenced
	}
	return r.epochs[id]
}

func (ss *sessions) restorer() *restoring {
	return &restoring{ss: ss, byID: map[string]*loaded{}}
}

// add takes one stored entry. In a cluster (a shared store), a session
// another gateway last carried is left to it: that gateway holds it,
// queues its messages, and lets go of it when the client connects here
// (docs/cluster.md).
func (r *restoring) add(kind session.Kind, id string, key, value []byte) error {
	ss := r.ss
	ms := ss.s.mochi
	switch kind {
	case session.PutClient:
		var rec clientRecord
		if err := json.Unmarshal(value, &rec); err != nil {
			return fmt.Errorf("client %q: %w", id, err)
		}
		if !r.anyNode && ss.s.opts.Cluster != nil && rec.Node != "" && rec.Node != ss.s.opts.Node {
			return nil // its subscriptions and messages find no record: skipped too
		}
		cl := ms.NewClient(nil, rec.Listener, id, false)
		cl.Properties.Username = rec.Username
		cl.Properties.Clean = rec.Clean
		cl.Properties.ProtocolVersion = rec.ProtocolVersion
		cl.Properties.Props = rec.Props
		cl.Properties.Will = rec.Will
		cl.Stop(packets.ErrServerShuttingDown) // disconnected from now: its expiry runs
		r.byID[id] = &loaded{cl: cl}
	case session.PutSub:
		l := r.byID[id]
		if l == nil {
			return nil // left by a session deleted in the same batch it was written: none is
		}
		var sub packets.Subscription
		if err := json.Unmarshal(value, &sub); err != nil {
			return fmt.Errorf("subscription of %q: %w", id, err)
		}
		if ms.Topics.Subscribe(id, sub) {
			atomic.AddInt64(&ms.Info.Subscriptions, 1)
		}
		l.cl.State.Subscriptions.Add(sub.Filter, sub)
		r.subs++
	case session.PutInflight:
		l := r.byID[id]
		if l == nil {
			return nil // a write queued before its session's record: never acknowledged to anyone
		}
		var rec inflightRecord
		if err := json.Unmarshal(value, &rec); err != nil {
			return fmt.Errorf("message of %q: %w", id, err)
		}
		l.inflight = append(l.inflight, rec)
	}
	return nil
}

// finish puts each session's messages back in the order they were queued
// and registers the sessions with mochi. The order counter goes on from
// the highest restored: records written later sort after them.
func (r *restoring) finish() {
	ss := r.ss
	ms := ss.s.mochi
	var last uint64
	for id, l := range r.byID {
		slices.SortFunc(l.inflight, func(a, b inflightRecord) int { return cmp.Compare(a.Order, b.Order) })
		for _, rec := range l.inflight {
			pk := packets.Packet{
				FixedHeader: rec.FH, PacketID: rec.ID, TopicName: rec.Topic, Payload: rec.Payload,
				Origin: rec.Origin, Created: rec.Created, Expiry: rec.Expiry, Properties: rec.Props,
			}
			if l.cl.State.Inflight.Set(pk) {
				atomic.AddInt64(&ms.Info.Inflight, 1)
				r.msgs++
			}
			if pk.FixedHeader.Type == packets.Publish && pk.Expiry < 0 {
				ss.markHeld(id, pk.PacketID, true)
			}
			last = max(last, rec.Order)
		}
		ms.Clients.Add(l.cl)
		ss.mu.Lock()
		ss.known[id] = r.epoch(id)
		ss.count.Store(int64(len(ss.known)))
		ss.mu.Unlock()
	}
	for {
		o := ss.order.Load()
		if o >= last || ss.order.CompareAndSwap(o, last) {
			return
		}
	}
}
