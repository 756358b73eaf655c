package mqtt

// Client takeover across the gateways of a cluster (docs/cluster.md,
// "Client takeover"): a client id is unique in the cluster, as on one
// broker [MQTT-3.1.4-3].
//
// A CONNECT, once authenticated (OnConnect), is stamped with the time and
// claimed: the cluster tells every other gateway "client X connects at
// gateway N, stamp S" and waits (bounded) until each has answered. A
// gateway told so (TakenOver) ends its own connection of X if that one is
// older (MQTT 5: DISCONNECT 0x8E Session taken over; 3.1.1: the
// connection closed) and, with a shared session store, lets go of X's
// session: it forgets it without deleting the stored copy, waits until
// what it queued for the store is written, then answers. The claiming
// gateway then reads X's session from the store (fetch) before mochi takes
// the session, so a persistent session moves with its client.
//
// Two connections of X at once on two gateways: each claims, each
// compares; the newer stamp wins everywhere (equal stamps: the larger
// node id), so exactly one stays, as on one broker the last CONNECT does.

import (
	"sync"
	"sync/atomic"
	"time"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/tolsey/tolsey/mqtt/session"
)

// Cluster is the cluster as the MQTT front-end sees it
// (bridge/cluster.Cluster, wired by the gateway).
type Cluster interface {
	// Claim tells the other gateways that client connects here at stamp
	// (unix ns) and returns once each has let go of it, or after the
	// cluster's takeover timeout. It reports whether each has: false when
	// one may still hold the client's session. On the client's reader.
	Claim(client string, stamp int64) bool
}

// clusterIDs is this gateway's newest connection of each client id while
// it is open, with its stamp; mu guards it (readers in OnConnect and
// OnDisconnect, the cluster's goroutine in TakenOver).
type clusterIDs struct {
	mu    sync.Mutex
	local map[string]localConn // guarded by mu
	swept int                  // guarded by mu: len(local) after the last sweep
}

type localConn struct {
	cl    *mochi.Client
	stamp int64
	// claimed: its claim has returned (set under the id's session lock).
	// A takeover from another gateway keeps the session for it from then
	// on; before, it lets the session go and the connection reads it back
	// from the store (lost).
	claimed bool
	// lost: a takeover let the session held here go while this
	// connection claimed the id (TakenOver).
	lost bool
	// epoch: the one its claim took the id's session with from a shared
	// store (session.Shared), for a session new here.
	epoch uint64
}

// claim stamps cl's CONNECT and claims its id in the cluster, then reads
// its session from a shared store when this gateway does not hold it. It
// refuses cl when a newer connection elsewhere took the id meanwhile, and
// a resumed session (clean start 0, shared store) when a gateway did not
// answer the claim in time: that one may still hold the session and write
// it, so what the store has is not known to be its last state. The client
// is told the server is busy (MQTT 5 0x89; 3.1.1 0x03 Server unavailable)
// and tries again: by then that gateway has answered, or is dead and left
// the member list (docs/cluster.md, "Client takeover"). A clean start
// needs nothing from the store and goes ahead. A resume of a session held
// here is checked against the store's epoch (heldStale): held here while
// another gateway took it (its claim never reached this one), it is
// dropped and read from the store like one held elsewhere.
func (s *Server) claim(cl *mochi.Client) error {
	if s.opts.Cluster == nil || cl.Net.Inline {
		return nil
	}
	stamp := time.Now().UnixNano()
	s.ids.mu.Lock()
	if s.ids.local == nil {
		s.ids.local = map[string]localConn{}
	}
	if len(s.ids.local) >= 2*s.ids.swept+64 {
		// mochi calls OnDisconnect only for a client it attached: one whose
		// CONNACK could not be written leaves its entry (forgetLocal never
		// runs). Swept when the map has doubled, so the cost per connect
		// stays constant, as auth.go does with its own.
		for id, lc := range s.ids.local {
			if lc.cl.Closed() {
				delete(s.ids.local, id)
			}
		}
		s.ids.swept = len(s.ids.local)
	}
	s.ids.local[cl.ID] = localConn{cl: cl, stamp: stamp}
	s.ids.mu.Unlock()
	answered := s.opts.Cluster.Claim(cl.ID, stamp)
	// Under the id's session lock, which TakenOver lets a session go
	// under: from here on a takeover keeps the session held here for this
	// connection; one before let it go, and this connection reads it back
	// from the store (docs/cluster.md, "A local connect while a takeover
	// lets the session go").
	lost := false
	s.mochi.WithSessionLock(cl.ID, func() {
		s.ids.mu.Lock()
		if lc, ok := s.ids.local[cl.ID]; ok && lc.cl == cl {
			lc.claimed = true
			lost = lc.lost
			s.ids.local[cl.ID] = lc
		}
		s.ids.mu.Unlock()
	})
	if cl.Closed() {
		return packets.ErrSessionTakenOver // a newer CONNECT elsewhere won (TakenOver)
	}
	ss := s.sessions
	if ss == nil {
		return nil
	}
	if lost {
		// What this gateway wrote of the session it let go is committed
		// before it is read back (after that, with an older epoch, it
		// would be refused).
		ss.settle()
	}
	if cl.Properties.Clean {
		ss.dropStored(cl)
		return nil
	}
	if _, shared := ss.b.(session.Shared); shared && !answered && !ss.isKnown(cl.ID) {
		return s.refuseBusy(cl, notLetGo)
	}
	if stale, mine := ss.heldStale(cl); stale {
		// Another gateway took the session since this one last held it:
		// it may hold it still, as for a session not held here (above).
		if !answered {
			return s.refuseBusy(cl, notLetGo)
		}
		if h := testHookStale.Load(); h != nil {
			(*h)(cl)
		}
		s.dropStale(cl.ID, mine)
	}
	// One claim of the id at a time reads the store: a second one would
	// take the session again, with a newer epoch, and its restore replace
	// the first connection in mochi (docs/cluster.md, "Races fixed").
	unlock, ok := ss.fetchLock(cl.ID, s.opts.ConnectTimeout)
	if !ok {
		return s.refuseBusy(cl, "another connect of the client is still reading its session")
	}
	defer unlock()
	ss.fetch(cl)
	return nil
}

// refuseBusy refuses cl's CONNECT as server busy (MQTT 5 0x89; 3.1.1 0x03
// Server unavailable): a gateway did not let go of its session in time,
// or (why) another connect of the id here did not read it in time.
func (s *Server) refuseBusy(cl *mochi.Client, why string) error {
	s.forgetLocal(cl) // refused: mochi calls no OnDisconnect
	code := packets.ErrServerBusy
	if cl.Properties.ProtocolVersion < 5 {
		code = packets.ErrServerUnavailable
	}
	s.log.Warn("mqtt connect refused: "+why, "client", cl.ID, "remote", cl.Net.Remote)
	_ = s.mochi.SendConnack(cl, code, false, nil)
	return code
}

// heldStale reports whether the session of cl's id that mochi holds here,
// for a resume (clean start 0), is stale: another gateway took it from the
// shared store since (its claim never reached this one, cut off from NATS),
// so the store's epoch of the id is newer than the one this gateway writes
// it with. One Redis round trip, only when mochi holds a stored session of
// the id. When Redis fails, the held session is kept and written unfenced
// from now on, as after a failed take (fetch): with the epoch it holds, if
// stale, none of its writes would be stored. mine is the epoch the copy
// held here is written with.
func (ss *sessions) heldStale(cl *mochi.Client) (stale bool, mine uint64) {
	sh, ok := ss.b.(session.Shared)
	if !ok {
		return false, 0
	}
	if _, held := ss.s.mochi.Clients.Get(cl.ID); !held {
		return false, 0
	}
	mine, known := ss.knownEpoch(cl.ID)
	if !known || mine == session.Unfenced {
		return false, 0
	}
	cur, err := sh.Epoch(cl.ID)
	if err != nil {
		ss.unfence(cl.ID)
		ss.s.setEpoch(cl, session.Unfenced)
		ss.s.log.Error("mqtt session epoch not read from the shared store; the session held here goes on, its writes unfenced",
			"client", cl.ID, "error", err)
		return false, 0
	}
	if cur > mine {
		ss.s.log.Info("mqtt session held here is stale: another gateway took it; it is read from the shared store",
			"client", cl.ID, "epoch", mine, "stored_epoch", cur)
		return true, mine
	}
	return false, 0
}

// testHookStale, set by a test only, runs in claim between heldStale
// finding the copy held here stale and dropStale.
var testHookStale atomic.Pointer[func(cl *mochi.Client)]

// dropStale drops the session of client that mochi holds here and another
// gateway has taken from the store since (heldStale), as TakenOver lets a
// session go but writing nothing of it: the store holds the newer one,
// which fetch then takes. Its will is not sent. A connection of client
// still open here (its client connected here again without this gateway
// noticing the old connection's end) is ended as one taken over (MQTT 5
// DISCONNECT 0x8E), without its will; what it would write as it ends is
// not written (OnDisconnect, dropInflight: its stop cause).
//
// Only the copy heldStale found stale, written with epoch stale: another
// connection of client claiming here at the same time may have dropped it
// already and taken the session from the store, with a newer epoch. That
// session is then held here and taken over in memory, as any session held
// here; dropped and read again, what that connection had queued for the
// store and not yet written would be refused (the newer read raises the
// epoch) and lost.
func (s *Server) dropStale(client string, stale uint64) {
	ss := s.sessions
	still := func() bool {
		epoch, known := ss.knownEpoch(client)
		return known && epoch == stale
	}
	if !still() {
		return
	}
	if old, ok := s.mochi.Clients.Get(client); ok && !old.Closed() {
		atomic.StoreUint32(&old.Properties.Will.Flag, 0) // as mochi clears it once sent
		_ = s.mochi.DisconnectClientNoWait(old, packets.ErrSessionTakenOver)
	}
	s.mochi.WithSessionLock(client, func() {
		cl, ok := s.mochi.Clients.Get(client)
		if !ok || cl.Net.Inline || !still() {
			return
		}
		if _, was := ss.forget(client); was {
			ss.forgetHeld(client)
		}
		if s.mochi.Clients.DeleteIf(client, cl) {
			cl.ClearInflights()
			s.mochi.UnsubscribeClient(cl)
		}
	})
}

// takenEpoch is the epoch cl's claim took its id's session with from a
// shared store (fetch, dropStored); 0 when none; Unfenced outside a
// cluster.
func (s *Server) takenEpoch(cl *mochi.Client) uint64 {
	if s.opts.Cluster == nil {
		return session.Unfenced
	}
	s.ids.mu.Lock()
	defer s.ids.mu.Unlock()
	if lc, ok := s.ids.local[cl.ID]; ok && lc.cl == cl {
		return lc.epoch
	}
	return 0
}

// setEpoch notes the epoch cl's claim took its id's session with.
func (s *Server) setEpoch(cl *mochi.Client, epoch uint64) {
	s.ids.mu.Lock()
	defer s.ids.mu.Unlock()
	if lc, ok := s.ids.local[cl.ID]; ok && lc.cl == cl {
		lc.epoch = epoch
		s.ids.local[cl.ID] = lc
	}
}

// forgetLocal drops cl from the ids when its connection ends.
func (s *Server) forgetLocal(cl *mochi.Client) {
	if s.opts.Cluster == nil {
		return
	}
	s.ids.mu.Lock()
	defer s.ids.mu.Unlock()
	if lc, ok := s.ids.local[cl.ID]; ok && lc.cl == cl {
		delete(s.ids.local, cl.ID)
	}
}

// TakenOver is the cluster telling this gateway that client connected to
// gateway node at stamp. A connection of client here that is older ends
// (MQTT 5: DISCONNECT 0x8E [MQTT-3.1.4-3]); with a shared session store
// the session is let go (kept in the store, forgotten here) and done runs
// once what was queued for the store is written; else the session stays
// here, offline. done(ended) says whether a connection was ended; it may
// run on the session store's goroutine.
func (s *Server) TakenOver(client string, stamp int64, node string, done func(ended bool)) {
	s.ids.mu.Lock()
	lc, ok := s.ids.local[client]
	if ok && (lc.stamp > stamp || lc.stamp == stamp && s.opts.Node > node) {
		s.ids.mu.Unlock()
		done(false) // ours is newer: our own claim ends theirs
		return
	}
	delete(s.ids.local, client)
	s.ids.mu.Unlock()
	ended := false
	if ok && !lc.cl.Closed() {
		ended = true
		s.log.Info("mqtt client taken over by another gateway", "client", client, "node", node)
		// Closed from here on: a claim still waiting (claim) refuses it.
		_ = s.mochi.DisconnectClientNoWait(lc.cl, packets.ErrSessionTakenOver)
	}
	ss := s.sessions
	if ss == nil {
		done(ended)
		return
	}
	if _, shared := ss.b.(session.Shared); !shared {
		done(ended)
		return
	}
	if h := testHookTakenOver.Load(); h != nil {
		(*h)(client)
	}
	// Under the id's session lock (mochi patch 29), which a connection of
	// client taking the session over here holds while it inherits it: the
	// session let go is the one mochi holds for no newer local connection.
	// A connection of client registered here since the check above (its
	// CONNECT came after the claim) holds or restores the session itself;
	// removing it then took the subscriptions it had just inherited
	// (indexed by client id) and forgot what it stores.
	//
	// A newer local connection whose claim has returned keeps the session:
	// the other gateway has not read it (its claim waits for this answer;
	// timed out, a resume is refused and a clean start reads nothing), and
	// that connection's claim ended the other's. One still claiming does
	// not: kept, the session could be read by the other gateway once this
	// answers, and this one would go on writing it and hand the new
	// connection its own copy. It is let go like any other; the new
	// connection's claim then makes the other gateway let go in turn and
	// reads the session back from the store (claim, lost).
	letGo := false
	s.mochi.WithSessionLock(client, func() {
		cl, ok := s.mochi.Clients.Get(client)
		if !ok || cl.Net.Inline {
			return // not held here: nothing to wait for
		}
		s.ids.mu.Lock()
		lc, newer := s.ids.local[client]
		if newer && !lc.claimed {
			lc.lost = true
			s.ids.local[client] = lc
		}
		s.ids.mu.Unlock()
		if newer && lc.claimed {
			return // held by a newer connection whose claim ended the other's
		}
		letGo = true
		// Forgotten first: the ending connection's OnDisconnect, and
		// messages fanned out to it meanwhile, must not write to the
		// store the other gateway now reads (enqueueKnown).
		if _, was := ss.forget(client); was {
			ss.forgetHeld(client)
		}
		if s.mochi.Clients.DeleteIf(client, cl) {
			cl.ClearInflights()
			s.mochi.UnsubscribeClient(cl)
		}
	})
	// Everything queued so far (the zero Mark: since the start), this
	// session's writes among it, is written before the answer.
	if !letGo || !ss.log.After(session.Mark{}, func(error) { done(ended) }) {
		done(ended)
	}
}

// testHookTakenOver, set by a test only, runs in TakenOver after the old
// connection was told and before the session is let go.
var testHookTakenOver atomic.Pointer[func(client string)]

// notLetGo is why a resume is refused when a claim was not answered.
const notLetGo = "a gateway did not let go of the client's session in time"

// fetchLock waits until no other claim here is reading id's session from
// the store and restoring it (fetch), and marks id read by this one until
// unlock. Two resumes of one id at once on a gateway not holding its
// session both found it missing in mochi and both took it from the store,
// each with a newer epoch: the restore finishing last replaced the other
// connection in mochi (two open connections of the id, the first never
// told 0x8E), and when it had the older epoch, every later write of the
// session was refused. The second now waits, then finds the session held
// in mochi and takes it over as mochi does. Taken in claim with no other
// lock held; only claims of the same id wait on it (a takeover from
// another gateway does not). The wait is bounded by wait (the connect's
// timeout): ok false then, and the connect is refused as server busy.
func (ss *sessions) fetchLock(id string, wait time.Duration) (unlock func(), ok bool) {
	var timeout <-chan time.Time
	for {
		ss.fetchMu.Lock()
		busy := ss.fetching[id]
		if busy == nil {
			done := make(chan struct{})
			ss.fetching[id] = done
			ss.fetchMu.Unlock()
			return func() {
				ss.fetchMu.Lock()
				delete(ss.fetching, id)
				ss.fetchMu.Unlock()
				close(done)
			}, true
		}
		ss.fetchMu.Unlock()
		if h := testHookFetchWait.Load(); h != nil {
			(*h)(id)
		}
		if timeout == nil {
			t := time.NewTimer(wait)
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-busy:
		case <-timeout:
			return nil, false
		}
	}
}

// testHookFetchWait, set by a test only, runs when a claim waits for
// another claim of the id reading its session (fetchLock).
var testHookFetchWait atomic.Pointer[func(id string)]

// testHookFetched, set by a test only, runs in fetch between the session's
// read from the store and its restore into mochi.
var testHookFetched atomic.Pointer[func(cl *mochi.Client)]

// fetch reads cl's session from a shared store, unless mochi holds it:
// the session another gateway let go of (TakenOver there). It takes the
// session with a new epoch (session.Shared): what another gateway still
// writes of it is refused. Its filters are announced to the cluster
// first, as a SUBSCRIBE's are.
func (ss *sessions) fetch(cl *mochi.Client) {
	sh, ok := ss.b.(session.Shared)
	if !ok {
		return
	}
	client := cl.ID
	if _, ok := ss.s.mochi.Clients.Get(client); ok {
		if persistent(cl) && !ss.isKnown(client) {
			// A connection here whose session was not stored holds the
			// id (its own claim took the id's epoch): the session this
			// one starts is new, and written with an epoch of its own.
			if epoch, err := sh.TakeEpoch(client); err == nil {
				ss.s.setEpoch(cl, epoch)
			} else {
				// Written unfenced, as before epochs: without an epoch of
				// its own every write of the session would be refused.
				ss.s.setEpoch(cl, session.Unfenced)
				ss.s.log.Error("mqtt session epoch not taken from the shared store; its writes go unfenced", "client", client, "error", err)
			}
		}
		return
	}
	// A delete of the session still queued (an operator's, an expiry) is
	// written first: read before it, the deleted session would come back.
	ss.deleteDone(client)
	r := ss.restorer()
	r.anyNode = true
	epoch, err := sh.TakeClient(client, func(kind session.Kind, id string, key, value []byte) error {
		if kind == session.PutSub {
			ss.s.opts.Router.FilterAdded(string(key))
		}
		return r.add(kind, id, key, value)
	})
	if err != nil {
		// The client gets a new session (session present 0) and knows it
		// lost the old one [MQTT-3.2.2-2].
		// Its writes go unfenced (no epoch was taken): refused, the
		// new session would never be stored.
		ss.s.setEpoch(cl, session.Unfenced)
		ss.s.log.Error("mqtt session not read from the shared store; the client starts a new one", "client", client, "error", err)
		return
	}
	if h := testHookFetched.Load(); h != nil {
		(*h)(cl)
	}
	ss.s.setEpoch(cl, epoch)
	r.epochs = map[string]uint64{client: epoch}
	// Not its will: the gateway that held the connection sent or dropped
	// it when it ended.
	for _, l := range r.byID {
		l.cl.Properties.Will = mochi.Will{}
	}
	r.finish()
	if len(r.byID) > 0 {
		ss.s.log.Debug("mqtt session read from the shared store", "client", client, "subscriptions", r.subs, "messages", r.msgs)
	}
}

// dropStored removes cl's session from a shared store before a clean
// start takes the id [MQTT-3.1.2-4]: another gateway let go of it and
// kept it in the store, where a later clean start 0 would find it. A
// session held here is removed by OnSessionEstablished instead. Done
// before the CONNACK (the client may connect to another gateway right
// after), with a new epoch: a gateway that did not answer the claim in
// time and writes the session later is refused (session.Shared).
func (ss *sessions) dropStored(cl *mochi.Client) {
	sh, ok := ss.b.(session.Shared)
	if !ok || ss.isKnown(cl.ID) {
		return
	}
	epoch, err := sh.DropClient(cl.ID)
	if err != nil {
		ss.s.setEpoch(cl, session.Unfenced) // as in fetch: written, not refused
		ss.s.log.Error("mqtt session not deleted from the shared store before a clean start", "client", cl.ID, "error", err)
		return
	}
	ss.s.setEpoch(cl, epoch)
}

// settle waits until everything queued for the store so far is written.
func (ss *sessions) settle() {
	done := make(chan struct{})
	if ss.log.After(session.Mark{}, func(error) { close(done) }) {
		<-done
	}
}
