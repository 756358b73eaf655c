package mqtt

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/tolsey/tolsey/core"
	"github.com/tolsey/tolsey/core/metrics"
	"github.com/tolsey/tolsey/retain"
)

// Retained copies for a late subscriber (docs/mqtt-frontend.md). Which
// copies go is retain.Replay's rule, shared with AMQP; this file is how they
// reach an MQTT session.
//
// mochi adds a SUBSCRIBE's subscriptions and writes the SUBACK on the
// client's reader goroutine, between OnSubscribe and OnPacketProcessed. The
// stored copies are then written by one worker goroutine per client, in
// SUBSCRIBE order, so that the reader keeps reading the client's PUBACKs: a
// QoS 1 set larger than the session's inflight window waits for them instead
// of being cut short, and a client that stops reading while its own PUBACK
// writes block cannot deadlock the reader.
//
// From OnSubscribe until the last copy is out, mochi holds back the live
// PUBLISHes routed to the client (Client.HoldPublishes, patch 13 of our
// copy), so a stale stored copy never lands after a newer live message on
// the same topic. Held there, they take no place in the client's Receive
// Maximum and are not counted against the worker's window: the copies,
// which are written meanwhile, need both, and the held messages can only go
// once the copies are out (before, they waited in mochi's write queue with
// both taken, and the worker waited for them for ever).

// replayer sends late MQTT subscribers their stored retained copies.
//
// Goroutines:
//   - the client's reader goroutine runs subscribing (OnSubscribe),
//     subscribed (OnSubscribed) and queue (OnPacketProcessed) for each
//     SUBSCRIBE, and forget as the client leaves (OnDisconnect);
//   - one worker goroutine per client with copies to send runs work: queue
//     starts it, and it ends when that client's jobs are done or it left;
//   - slotFreed runs on the client's reader (an acknowledgement processed)
//     or on mochi's expiry loop (an inflight message dropped);
//   - close runs on Shutdown's goroutine, once the clients are gone.
//
// mu guards clients and closing, and the clientReplay fields marked so.
// waiting is read without it on a hot path: every acknowledgement processed.
type replayer struct {
	s    *Server
	rule retain.Replay
	out  *metrics.Outlet // copies written

	mu      sync.Mutex
	clients map[*mochi.Client]*clientReplay
	closing bool // Shutdown: no new workers

	holding atomic.Int32 // clients whose live PUBLISHes mochi holds
	waiting atomic.Int32 // workers waiting for an inflight slot
	// wakes counts the times a waiting worker was woken. Each is an
	// acknowledgement processed or an inflight message dropped, never a
	// clock (TestReplayWaitsForAcknowledgements counts them).
	wakes   atomic.Int64
	workers sync.WaitGroup
}

// clientReplay is one client's SUBSCRIBEs with retained copies to send.
type clientReplay struct {
	// Guarded by replayer.mu.
	released bool          // live PUBLISHes no longer held
	cur      *pendingSub   // the SUBSCRIBE mochi is processing
	jobs     []*pendingSub // processed SUBSCRIBEs, copies still to send
	running  bool          // a worker is sending jobs
	left     bool          // the client has left: gone is closed

	// Made with the first worker, under replayer.mu; then read without it.
	freed chan struct{} // cap 1: an inflight slot may have freed (slotFreed)
	gone  chan struct{} // closed when the client has left (forget)
}

type pendingSub struct {
	filters []packets.Subscription
	existed []bool
	codes   []byte
	at      time.Time // when mochi had added the subscriptions
}

func newReplayer(s *Server) *replayer {
	return &replayer{
		s: s,
		rule: retain.Replay{Store: s.opts.Store, Node: s.opts.Node, Metrics: s.opts.Metrics, Log: s.log,
			Live: s.opts.Router},
		out:     s.opts.Metrics.Outlet("mqtt"),
		clients: map[*mochi.Client]*clientReplay{},
	}
}

// subscribing notes which of a SUBSCRIBE's filters the session held already
// (for Retain Handling 1), before mochi adds them, and holds cl's live
// PUBLISHes.
func (r *replayer) subscribing(cl *mochi.Client, filters []packets.Subscription) {
	p := &pendingSub{filters: filters, existed: make([]bool, len(filters))}
	for i, f := range filters {
		_, p.existed[i] = cl.State.Subscriptions.Get(f.Filter)
	}
	r.mu.Lock()
	c := r.clients[cl]
	if c == nil {
		c = &clientReplay{}
		r.clients[cl] = c
		r.holding.Add(1)
		cl.HoldPublishes()
	}
	c.cur = p
	r.mu.Unlock()
}

// subscribed records the granted codes of the SUBSCRIBE in progress.
func (r *replayer) subscribed(cl *mochi.Client, codes []byte) {
	r.mu.Lock()
	if c := r.clients[cl]; c != nil && c.cur != nil {
		c.cur.codes, c.cur.at = codes, time.Now()
	}
	r.mu.Unlock()
}

// queue runs after mochi has written the SUBACK: the SUBSCRIBE's retained
// copies are queued for the client's worker.
func (r *replayer) queue(cl *mochi.Client, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.clients[cl]
	if c == nil {
		return
	}
	p := c.cur
	c.cur = nil
	if p != nil && err == nil && len(p.codes) == len(p.filters) {
		c.jobs = append(c.jobs, p)
	}
	switch {
	case len(c.jobs) > 0 && !c.running && !r.closing:
		c.running = true
		if c.freed == nil {
			c.freed, c.gone = make(chan struct{}, 1), make(chan struct{})
		}
		r.workers.Add(1)
		go r.work(cl, c)
	case !c.running:
		r.releaseLocked(cl, c)
	}
}

// releaseLocked lets mochi send cl's held live PUBLISHes and forgets c.
// r.mu is held.
func (r *replayer) releaseLocked(cl *mochi.Client, c *clientReplay) {
	if r.clients[cl] == c {
		delete(r.clients, cl)
	}
	if !c.released {
		c.released = true
		r.holding.Add(-1)
		cl.ReleasePublishes()
	}
}

// forget drops cl's pending copies when it leaves, and wakes its worker.
func (r *replayer) forget(cl *mochi.Client) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.clients[cl]
	if c == nil {
		return
	}
	c.jobs, c.cur = nil, nil
	if c.gone != nil && !c.left {
		c.left = true
		close(c.gone)
	}
	if !c.running {
		r.releaseLocked(cl, c)
	}
}

// slotFreed tells cl's worker, if it waits for an inflight slot, that one
// may have freed. Cheap when no worker waits, as on nearly every ack.
func (r *replayer) slotFreed(cl *mochi.Client) {
	if r.waiting.Load() == 0 {
		return
	}
	r.mu.Lock()
	c := r.clients[cl]
	r.mu.Unlock()
	if c != nil && c.freed != nil {
		select {
		case c.freed <- struct{}{}:
		default: // already signalled
		}
	}
}

// close stops new workers and waits for running ones; they end once their
// clients have left, which mochi's Close has seen to.
func (r *replayer) close() {
	r.mu.Lock()
	r.closing = true
	for _, c := range r.clients {
		c.jobs = nil
	}
	r.mu.Unlock()
	r.workers.Wait()
}

func (r *replayer) work(cl *mochi.Client, c *clientReplay) {
	defer r.workers.Done()
	for {
		r.mu.Lock()
		if len(c.jobs) == 0 || r.closing {
			c.running = false
			c.jobs = nil
			if c.cur == nil { // no SUBSCRIBE in progress: every copy is out
				r.releaseLocked(cl, c)
			}
			r.mu.Unlock()
			return
		}
		p := c.jobs[0]
		c.jobs = c.jobs[1:]
		r.mu.Unlock()
		for i, sub := range p.filters {
			if _, q := queueName(sub.Filter); q || p.codes[i] >= packets.ErrUnspecifiedError.Code {
				continue // a queue has no retained copies
			}
			sub.Qos = p.codes[i] // granted QoS
			r.replay(cl, c, sub, p.existed[i], p.at)
		}
	}
}

// replay writes the stored copies due to sub (retain.Replay.Run) with
// RETAIN=1 [MQTT-3.3.1-9], QoS min(stored, granted), the subscription
// identifier and the remaining expiry interval.
func (r *replayer) replay(cl *mochi.Client, c *clientReplay, sub packets.Subscription, existed bool, since time.Time) {
	if sub.RetainHandling == 2 || (sub.RetainHandling == 1 && existed) {
		return // [MQTT-3.3.1-10] [MQTT-3.3.1-11]
	}
	// No deadline: a large set to a slow client takes as long as it takes;
	// the store bounds its own round trips, and a client that leaves ends it.
	r.rule.Run(context.Background(), sub.Filter, since, func(m *core.Message) bool {
		if r.s.hook.except.excluded(cl, sub.Filter, m.Topic) {
			return true // kept out by the subscription's exceptions (exceptions.go)
		}
		if !r.s.hook.auth.mayRead(cl, m.Topic) {
			return true // a topic the client may not read (auth.go)
		}
		pk := toPacket(m, true, time.Now())
		pk.FixedHeader.Qos = min(m.QoS, sub.Qos)
		if sub.Identifier > 0 {
			pk.Properties.SubscriptionIdentifier = []int{sub.Identifier}
		}
		if err := r.write(cl, c, pk); err != nil {
			return !errors.Is(err, mochi.ErrConnectionClosed)
		}
		r.out.Out(time.Time{})
		return true
	}, "client", cl.ID)
}

// write sends one retained copy, tracking QoS 1/2 in the session's inflight
// store as mochi does for its own deliveries. While the client's window is
// full (its Receive Maximum, or mqtt.maxInflight messages sent and not
// acknowledged) it waits for the client's acknowledgements rather than drop
// the copy.
func (r *replayer) write(cl *mochi.Client, c *clientReplay, pk packets.Packet) error {
	if pk.FixedHeader.Qos > 0 {
		if err := r.waitForSlot(cl, c); err != nil {
			return err
		}
		if err := r.s.track(cl, &pk); err != nil {
			cl.State.Inflight.IncreaseSendQuota()
			if errors.Is(err, errTakenOver) {
				return mochi.ErrConnectionClosed // the replay ends with this connection
			}
			return err
		}
	}
	return cl.WritePacket(pk)
}

// waitForSlot returns once cl may have one more QoS 1/2 message in flight,
// the unit of its send quota taken (takeSlot), or mochi.ErrConnectionClosed
// once cl has left. It sleeps on c.freed, which slotFreed fills from mochi's
// acknowledgement path: no clock, no polling.
func (r *replayer) waitForSlot(cl *mochi.Client, c *clientReplay) error {
	if r.s.takeSlot(cl) {
		return nil
	}
	// Counted before the drain and the check below, so that a slot freed
	// from here on is signalled; the check sees any freed before, so a
	// stale signal is dropped rather than counted as a wake.
	r.waiting.Add(1)
	defer r.waiting.Add(-1)
	select {
	case <-c.freed:
	default:
	}
	for !r.s.takeSlot(cl) {
		select {
		case <-c.freed:
			r.wakes.Add(1)
		case <-c.gone:
			return mochi.ErrConnectionClosed
		case <-cl.Done():
			// Stopped (a shutdown, a failed write) while its reader may
			// never reach OnDisconnect, which closes gone.
			return mochi.ErrConnectionClosed
		}
	}
	return nil
}
