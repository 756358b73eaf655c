package core

// When this gateway received each retained message that entered another
// gateway of the cluster (docs/cluster.md, "Retained"). A subscription
// made here while such a message was on its way could get it twice: live,
// from the cluster, and as the stored copy its replay reads from the
// shared store. The replay's rule (retain.Replay.Due) skips a stored copy
// that entered this gateway after the subscription by its Created time,
// but another gateway's Created is that gateway's clock, and skew would
// turn a duplicate into a loss; the time this router received it is on
// this gateway's clock, the subscription's.

import (
	"sync"
	"time"
)

// remoteKeep is how long a receipt is kept: a replay reads the store right
// after its subscription, and only a receipt after the subscription
// matters.
const remoteKeep = time.Minute

// remoteRetained is the last retained message from another gateway per
// topic, with the time this router received it; mu guards it (publishers'
// goroutines, replays').
type remoteRetained struct {
	mu    sync.Mutex
	last  map[string]remoteRecv
	swept int // len(last) after the last sweep
}

type remoteRecv struct {
	node    string
	created time.Time
	at      time.Time
}

// noteRemoteRetained records m, a retained message from another gateway,
// before the router fans it out.
func (r *Router) noteRemoteRetained(m *Message) {
	rr := &r.remote
	now := r.opts.Now()
	rr.mu.Lock()
	defer rr.mu.Unlock()
	if rr.last == nil {
		rr.last = map[string]remoteRecv{}
	}
	if len(rr.last) >= 2*rr.swept+1024 {
		// Swept when the map has doubled: a constant cost per message.
		for t, x := range rr.last {
			if now.Sub(x.at) > remoteKeep {
				delete(rr.last, t)
			}
		}
		rr.swept = len(rr.last)
	}
	rr.last[m.Topic] = remoteRecv{node: m.Origin.Node, created: m.Created, at: now}
}

// ReceivedLiveAfter reports whether m, a stored retained message that
// entered another gateway, is one this router received from the cluster,
// and so fanned out to the subscriptions then in place, after since (its
// own clock). A replay skips such a copy: it was delivered live.
func (r *Router) ReceivedLiveAfter(m *Message, since time.Time) bool {
	rr := &r.remote
	rr.mu.Lock()
	defer rr.mu.Unlock()
	x, ok := rr.last[m.Topic]
	return ok && x.node == m.Origin.Node && x.created.Equal(m.Created) && x.at.After(since)
}
