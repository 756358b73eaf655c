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
	type loaded struct {
		cl       *mochi.Client
		inflight []inflightRecord
	}
	ms := ss.s.mochi
	byID := map[string]*loaded{}
	var subs, msgs int
	err := ss.b.Load(func(kind session.Kind, id string, key, value []byte) error {
		switch kind {
		case session.PutClient:
			var rec clientRecord
			if err := json.Unmarshal(value, &rec); err != nil {
				return fmt.Errorf("client %q: %w", id, err)
			}
			cl := ms.NewClient(nil, rec.Listener, id, false)
			cl.Properties.Username = rec.Username
			cl.Properties.Clean = rec.Clean
			cl.Properties.ProtocolVersion = rec.ProtocolVersion
			cl.Properties.Props = rec.Props
			cl.Properties.Will = rec.Will
			cl.Stop(packets.ErrServerShuttingDown) // disconnected from now: its expiry runs
			byID[id] = &loaded{cl: cl}
		case session.PutSub:
			l := byID[id]
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
			subs++
		case session.PutInflight:
			l := byID[id]
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
	})
	if err != nil {
		return fmt.Errorf("mqtt: restore sessions: %w", err)
	}
	var last uint64
	for id, l := range byID {
		slices.SortFunc(l.inflight, func(a, b inflightRecord) int { return cmp.Compare(a.Order, b.Order) })
		for _, r := range l.inflight {
			pk := packets.Packet{
				FixedHeader: r.FH, PacketID: r.ID, TopicName: r.Topic, Payload: r.Payload,
				Origin: r.Origin, Created: r.Created, Expiry: r.Expiry, Properties: r.Props,
			}
			if l.cl.State.Inflight.Set(pk) {
				atomic.AddInt64(&ms.Info.Inflight, 1)
				msgs++
			}
			if pk.FixedHeader.Type == packets.Publish && pk.Expiry < 0 {
				ss.markHeld(id, pk.PacketID, true)
			}
			last = max(last, r.Order)
		}
		ms.Clients.Add(l.cl)
		ss.known[id] = struct{}{}
	}
	ss.count.Store(int64(len(ss.known)))
	// A will still set belongs to a connection the process ended without
	// a DISCONNECT (a clean one clears it [MQTT-3.1.2-10], and the record
	// is stored again then): sent now, or after its delay from now.
	for _, l := range byID {
		if l.cl.Properties.Will.Flag > 0 {
			ms.RestoreWill(l.cl)
		}
	}
	ss.order.Store(last)
	if len(byID) > 0 {
		ss.s.log.Info("mqtt sessions restored", "sessions", len(byID), "subscriptions", subs, "messages", msgs)
	}
	return nil
}
