package mqtt

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/tolsey/tolsey/core"
	"github.com/tolsey/tolsey/mqtt/session"
)

// Persistent sessions (docs/mqtt-frontend.md, "Persistent sessions").
//
// mochi keeps sessions in memory and tells its hooks of every change; its
// own storage hooks write each change in a transaction of its own, one
// fsync per packet. The sessions hook here listens to the same events and
// queues each change on a session.Log, which commits what has queued up in
// one transaction: the number of fsyncs follows the number of commits the
// disk can do, not the number of messages. At start the stored sessions
// are put back into mochi (restore, sessions_restore.go) before any client
// can connect.
//
// The promise to publishers: a QoS 1/2 PUBLISH whose fan-out queued a
// session write is acknowledged only once that write is durable. OnPublish
// defers the ack (mochi's DeferAck, patch 12, shared with the router's
// answer by patch 18); mochi then fans the message out on the same reader,
// storing it in the sessions it reaches (OnQosPublish); OnPublished waits
// on the Log for everything queued so far and answers the ack. A message
// from another front-end is held the same way through core.Delivery.Acks
// (Deliver).

// sessions is the second mochi hook, added after the gateway's own, so its
// OnPublish sees the packet the gateway's returned. mochi calls it on the
// goroutine of the client concerned (its reader, a publisher's reader
// for OnQosPublish, mochi's loop for OnClientExpired); none of it waits for
// the disk.
type sessions struct {
	mochi.HookBase
	s   *Server
	b   session.Backend
	log *session.Log // nil until Start

	order atomic.Uint64 // the order of in-flight records, restored by it

	mu sync.Mutex
	// known: the client ids with a stored session, each with the epoch
	// its ops carry (session.Shared; 0 in a store of one gateway).
	known map[string]uint64 // guarded by mu
	count atomic.Int64      // len(known), read without mu on every publish

	// The in-flight messages stored with patch 13's held mark (never
	// sent), per client: when mochi sends one (OnPacketSent) it is stored
	// again without it, so that after a restart it goes again with DUP.
	heldMu sync.Mutex
	held   map[string]map[uint16]struct{} // guarded by heldMu

	// The ack each publisher's reader deferred in OnPublish, taken back in
	// OnPublished: both run on that reader, one after the other.
	pendMu  sync.Mutex
	pending map[*mochi.Client]pendingAck // guarded by pendMu

	// The client ids whose session delete (an operator's, an expiry) is
	// queued and not yet committed, each with a channel closed once it
	// is. A connect reading the session from a shared store waits for it
	// (fetch): read before, the deleted session came back, and the
	// delete, of an older epoch than the connect took, was refused.
	delMu   sync.Mutex
	deletes map[string]chan struct{} // guarded by delMu

	// The client ids whose session a claim here is reading from a shared
	// store and restoring into mochi (fetch), each with a channel closed
	// once it is: one claim of an id at a time (fetchLock, cluster.go).
	fetchMu  sync.Mutex
	fetching map[string]chan struct{} // guarded by fetchMu
}

type pendingAck struct {
	ack  *mochi.PendingAck
	id   uint16
	mark session.Mark // when the ack was deferred
}

func newSessions(s *Server, b session.Backend) *sessions {
	return &sessions{s: s, b: b, known: map[string]uint64{}, pending: map[*mochi.Client]pendingAck{},
		held: map[string]map[uint16]struct{}{}, deletes: map[string]chan struct{}{},
		fetching: map[string]chan struct{}{}}
}

// beginDelete notes that a delete of id's session is about to be queued
// (queueDelete), before the session is let go: a connect from then on
// waits for it (deleteDone).
func (ss *sessions) beginDelete(id string) chan struct{} {
	done := make(chan struct{})
	ss.delMu.Lock()
	ss.deletes[id] = done
	ss.delMu.Unlock()
	return done
}

// queueDelete queues the delete of id's session noted by beginDelete and
// closes done once it is committed (or failed: the store's error is the
// log's to report).
func (ss *sessions) queueDelete(id string, epoch uint64, done chan struct{}) {
	ss.log.Enqueue(session.Op{Kind: session.DeleteSession, Client: id, Epoch: epoch})
	end := func(error) { ss.endDelete(id, done) }
	if !ss.log.After(session.Mark{}, end) {
		end(nil)
	}
}

// endDelete ends what beginDelete noted: committed, or nothing to delete.
func (ss *sessions) endDelete(id string, done chan struct{}) {
	ss.delMu.Lock()
	if ss.deletes[id] == done {
		delete(ss.deletes, id)
	}
	ss.delMu.Unlock()
	close(done)
}

// deleteDone returns once no delete of id's session is queued.
func (ss *sessions) deleteDone(id string) {
	ss.delMu.Lock()
	done := ss.deletes[id]
	ss.delMu.Unlock()
	if done == nil {
		return
	}
	if h := testHookDeleteWait.Load(); h != nil {
		(*h)(id)
	}
	<-done
}

// testHookDeleteWait, set by a test only, runs when a connect waits for
// a delete of its session.
var testHookDeleteWait atomic.Pointer[func(id string)]

func (ss *sessions) ID() string { return "sessions" }

var sessionEvents = func() (t [256]bool) {
	for _, b := range []byte{
		mochi.OnSessionEstablished, mochi.OnDisconnect, mochi.OnClientExpired,
		mochi.OnSubscribed, mochi.OnUnsubscribed, mochi.OnQosPublish, mochi.OnQosComplete,
		mochi.OnQosDropped, mochi.OnPacketProcessed, mochi.OnPublish, mochi.OnPublished,
		mochi.OnWillSent,
	} {
		t[b] = true
	}
	return t
}()

// Provides says what the hook provides; mochi asks once, as it is added.
// OnPacketSent only for a test (testHookPacketSent): the sent mark is
// written from the gateway's OnPacketEncode (sending).
func (ss *sessions) Provides(b byte) bool {
	return sessionEvents[b] || b == mochi.OnPacketSent && testHookPacketSent.Load() != nil
}

// persistent reports whether cl's session outlives its connection: MQTT 5
// with a Session Expiry Interval > 0, MQTT 3 with clean session 0
// [MQTT-3.1.2-23] [MQTT-4.1.0-2].
func persistent(cl *mochi.Client) bool {
	if cl.Net.Inline {
		return false
	}
	if cl.Properties.ProtocolVersion == 5 {
		return cl.Properties.Props.SessionExpiryInterval > 0
	}
	return !cl.Properties.Clean
}

func (ss *sessions) isKnown(id string) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	_, ok := ss.known[id]
	return ok
}

// enqueueKnown queues ops while id's session is stored here, and reports
// whether it did. The test and the queueing are one step under mu, so
// that forget orders every write: one that saw the session known is
// queued before forget returns, and a takeover letting the session go
// (TakenOver, cluster.go) waits for it with what was queued before; one
// after finds it forgotten. Checked and queued apart, a write could pass
// the takeover's "forget, then commit, then answer" and land in a shared
// store after another gateway read the session.
func (ss *sessions) enqueueKnown(id string, ops ...session.Op) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if _, ok := ss.known[id]; !ok {
		return false
	}
	ss.enqueueKnownLocked(id, ops)
	return true
}

// enqueueKnownLocked queues ops with id's epoch; mu is held and id known.
func (ss *sessions) enqueueKnownLocked(id string, ops []session.Op) {
	epoch := ss.known[id]
	if h := testHookEnqueueKnown.Load(); h != nil {
		(*h)(id)
	}
	for i := range ops {
		ops[i].Epoch = epoch
	}
	ss.log.Enqueue(ops...)
}

// knownEpoch is the epoch id's stored session is written with here, and
// whether it is stored.
func (ss *sessions) knownEpoch(id string) (uint64, bool) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	epoch, ok := ss.known[id]
	return epoch, ok
}

// unfence writes id's stored session unfenced from now on (heldStale).
func (ss *sessions) unfence(id string) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if _, ok := ss.known[id]; ok {
		ss.known[id] = session.Unfenced
	}
}

// testHookEnqueueKnown, set by a test only, runs between enqueueKnown's
// test and its queueing: the window a takeover must not pass.
var testHookEnqueueKnown atomic.Pointer[func(id string)]

// forget marks id not stored and reports whether it was, with the epoch
// its ops carried.
func (ss *sessions) forget(id string) (epoch uint64, was bool) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if epoch, was = ss.known[id]; was {
		delete(ss.known, id)
		ss.count.Add(-1)
	}
	return epoch, was
}

// OnSessionEstablished stores a persistent session, or removes the stored
// one a clean start (or a session that now ends with its connection)
// discards. A session that was not stored before (an MQTT 5 client that
// raised its expiry) has what it carried on stored with it.
func (ss *sessions) OnSessionEstablished(cl *mochi.Client, _ packets.Packet) {
	if cl.Net.Inline {
		return
	}
	if h := testHookEstablished.Load(); h != nil {
		done := (*h)(cl)
		defer done()
	}
	// One step under mu, as enqueueKnown: a takeover by another gateway
	// (TakenOver, cluster.go) ends the connection, then forgets the
	// session under mu, then commits and answers. mochi registers a
	// connection before its CONNACK and calls this after it: a connection
	// let go in between must not store its session again (the other
	// gateway has read it) nor mark it known here.
	// The epoch a clean start took the id with (dropStored): a session
	// new here is written with it.
	// A connection already taken over here (mochi calls this after the
	// CONNACK, and a newer CONNECT of the id may have been quicker) leaves
	// the store to the newer one: a clean start's delete, run late, would
	// remove the session the newer connection has just stored.
	taken := ss.s.takenEpoch(cl)
	ss.mu.Lock()
	if cl.IsTakenOver() || stoppedTakenOver(cl) {
		ss.mu.Unlock()
		return
	}
	var ops []session.Op
	dropped := false
	epoch, known := ss.known[cl.ID]
	if known && (cl.Properties.Clean || !persistent(cl)) {
		delete(ss.known, cl.ID)
		ss.count.Add(-1)
		dropped = true
		ops = append(ops, session.Op{Kind: session.DeleteSession, Client: cl.ID, Epoch: epoch})
	}
	if persistent(cl) {
		if _, known := ss.known[cl.ID]; !known {
			if !dropped {
				epoch = taken
			}
			ss.known[cl.ID] = epoch
			ss.count.Add(1)
			ops = append(ops, ss.clientOp(cl))
			for _, sub := range cl.State.Subscriptions.GetAll() {
				ops = append(ops, subOp(cl.ID, sub))
			}
			for _, pk := range cl.State.Inflight.GetAll(false) {
				ops = append(ops, ss.inflightOp(cl.ID, pk))
			}
		} else {
			ops = append(ops, ss.clientOp(cl))
		}
	}
	for i := range ops {
		ops[i].Epoch = epoch
	}
	ss.log.Enqueue(ops...)
	ss.mu.Unlock()
	if dropped {
		ss.forgetHeld(cl.ID)
	}
}

// testHookEstablished, set by a test only, runs as OnSessionEstablished
// begins; what it returns runs as it ends.
var testHookEstablished atomic.Pointer[func(cl *mochi.Client) func()]

// OnDisconnect stores the session as it is left (a clean DISCONNECT has
// removed its will [MQTT-3.1.2-10]), unless a new connection has taken
// it over and stores it itself.
func (ss *sessions) OnDisconnect(cl *mochi.Client, _ error, expire bool) {
	if h := testHookDisconnect.Load(); h != nil {
		(*h)(cl)
	}
	ss.pendMu.Lock()
	delete(ss.pending, cl)
	ss.pendMu.Unlock()
	if !expire && persistent(cl) && !cl.IsTakenOver() && !ss.takenAway(cl) {
		ss.enqueueOwn(cl, ss.clientOp(cl))
	}
}

// enqueueOwn is enqueueKnown for what cl writes of its own session as it
// ends (OnDisconnect, OnWillSent): not while mochi holds another client of
// the id. A connection that took the session over here is registered
// before it stores its record (mochi adds it under the id's session lock,
// before OnSessionEstablished), and a stale copy dropped here (dropStale)
// and taken from the store again is held by a client of its own before its
// id is known here again (restoring adds it to mochi first); so, tested
// under mu, an end that comes late writes nothing over the newer session:
// in a cluster, an old connection whose stop cause is its own (not 0x8E:
// it had ended before dropStale found it), with the newer one's epoch; in
// any gateway, the will an old connection sends as its end begins
// (OnWillSent, after the will's fan-out), over the record of the
// connection that took its session over meanwhile.
func (ss *sessions) enqueueOwn(cl *mochi.Client, ops ...session.Op) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if _, ok := ss.known[cl.ID]; !ok {
		return false
	}
	if other, ok := ss.s.mochi.Clients.Get(cl.ID); ok && other != cl {
		return false
	}
	ss.enqueueKnownLocked(cl.ID, ops)
	return true
}

// takenAway reports whether cl's connection was ended because another
// connection took its session from a shared store (cluster.go:
// TakenOver, dropStale): the session it had is not its own to write any
// more, and a session of its id known here since is another connection's.
// Without a shared store a takeover by another gateway leaves the session
// here, offline, and what happens to it is still written here.
func (ss *sessions) takenAway(cl *mochi.Client) bool {
	if _, shared := ss.b.(session.Shared); !shared {
		return false
	}
	return stoppedTakenOver(cl)
}

// stoppedTakenOver reports whether cl's connection was ended as taken over
// (its stop cause 0x8E).
func stoppedTakenOver(cl *mochi.Client) bool {
	return errors.Is(cl.StopCause(), packets.ErrSessionTakenOver)
}

// testHookDisconnect, set by a test only, runs as OnDisconnect begins.
var testHookDisconnect atomic.Pointer[func(cl *mochi.Client)]

// OnWillSent stores the session without the will mochi has just sent
// (now, or when its delay ended), so that a restart does not send it
// again.
func (ss *sessions) OnWillSent(cl *mochi.Client, _ packets.Packet) {
	if h := testHookWillSent.Load(); h != nil {
		(*h)(cl)
	}
	if persistent(cl) {
		ss.enqueueOwn(cl, ss.clientOp(cl))
	}
}

// testHookWillSent, set by a test only, runs as OnWillSent begins.
var testHookWillSent atomic.Pointer[func(cl *mochi.Client)]

// OnClientExpired removes a session whose expiry interval has run out
// [MQTT-4.1.0-2].
func (ss *sessions) OnClientExpired(cl *mochi.Client) {
	done := ss.beginDelete(cl.ID)
	epoch, was := ss.forget(cl.ID)
	if !was {
		ss.endDelete(cl.ID, done)
		return
	}
	ss.forgetHeld(cl.ID)
	ss.queueDelete(cl.ID, epoch, done)
}

func (ss *sessions) OnSubscribed(cl *mochi.Client, pk packets.Packet, codes []byte) {
	if !persistent(cl) || !ss.isKnown(cl.ID) {
		return
	}
	var ops []session.Op
	for i, f := range pk.Filters {
		if i < len(codes) && codes[i] < packets.ErrUnspecifiedError.Code && f.Filter != "" {
			ops = append(ops, subOp(cl.ID, f))
		}
	}
	ss.enqueueKnown(cl.ID, ops...)
}

func (ss *sessions) OnUnsubscribed(cl *mochi.Client, pk packets.Packet) {
	if cl.Net.Inline || cl.IsTakenOver() || !ss.isKnown(cl.ID) {
		return
	}
	ops := make([]session.Op, 0, len(pk.Filters))
	for _, f := range pk.Filters {
		ops = append(ops, session.Op{Kind: session.DeleteSub, Client: cl.ID, Key: []byte(f.Filter)})
	}
	ss.enqueueKnown(cl.ID, ops...)
}

// OnQosPublish stores a message mochi put in a session's inflight store:
// one queued for an offline session, one sent and not yet acknowledged,
// the server's PUBREC of an inbound QoS 2 flow. On the publisher's reader.
func (ss *sessions) OnQosPublish(cl *mochi.Client, pk packets.Packet, _ int64, _ int) {
	if h := testHookQosPublish.Load(); h != nil {
		(*h)(cl, pk)
	}
	// Not before its session is stored: OnSessionEstablished then stores
	// what it holds, and nothing is left behind by a connection that never
	// got that far.
	if !persistent(cl) || !ss.isKnown(cl.ID) {
		return
	}
	if pk.FixedHeader.Type != packets.Publish || pk.Expiry >= 0 {
		if ss.enqueueKnown(cl.ID, ss.inflightOp(cl.ID, pk)) {
			// Only for a session still known here: a forget in between
			// would leave a held mark behind.
			ss.markHeld(cl.ID, pk.PacketID, false)
		}
		return
	}
	// Held back. mochi calls this after the message is in the inflight
	// store, where sendHeld (the client's PUBACK of an earlier one, a
	// replay's end) may send it first: its OnPacketSent then found no held
	// mark, and a held record written now would be the last one stored
	// (after a restart it went again without DUP [MQTT-3.3.1-1]). So,
	// under heldMu as OnPacketSent: one sent already is stored as sent;
	// one still held is stored held and marked, and OnPacketSent, which
	// comes after sendHeld marked it sent, stores it again once it goes.
	ss.heldMu.Lock()
	defer ss.heldMu.Unlock()
	if cur, ok := cl.State.Inflight.Get(pk.PacketID); ok && cur.FixedHeader.Type == packets.Publish && cur.Expiry >= 0 {
		if ss.enqueueKnown(cl.ID, ss.inflightOp(cl.ID, cur)) {
			ss.markHeldLocked(cl.ID, pk.PacketID, false)
		}
		return
	}
	if ss.enqueueKnown(cl.ID, ss.inflightOp(cl.ID, pk)) {
		ss.markHeldLocked(cl.ID, pk.PacketID, true)
	}
}

// testHookQosPublish, set by a test only, runs as OnQosPublish begins.
var testHookQosPublish atomic.Pointer[func(cl *mochi.Client, pk packets.Packet)]

// markHeld notes whether the message id of client is stored held.
func (ss *sessions) markHeld(client string, id uint16, held bool) {
	ss.heldMu.Lock()
	defer ss.heldMu.Unlock()
	ss.markHeldLocked(client, id, held)
}

func (ss *sessions) markHeldLocked(client string, id uint16, held bool) {
	m := ss.held[client]
	switch {
	case held && m == nil:
		ss.held[client] = map[uint16]struct{}{id: {}}
	case held:
		m[id] = struct{}{}
	case m != nil:
		delete(m, id)
		if len(m) == 0 {
			delete(ss.held, client)
		}
	}
}

// wasHeldLocked reports whether the message id of client was stored held,
// and forgets it. The caller holds heldMu.
func (ss *sessions) wasHeldLocked(client string, id uint16) bool {
	m := ss.held[client]
	if _, ok := m[id]; !ok {
		return false
	}
	delete(m, id)
	if len(m) == 0 {
		delete(ss.held, client)
	}
	return true
}

// forgetHeld forgets every held mark of client (its session is deleted).
func (ss *sessions) forgetHeld(client string) {
	ss.heldMu.Lock()
	delete(ss.held, client)
	ss.heldMu.Unlock()
}

// sending stores again a message that was stored held and is now being
// sent (patch 13's sendHeld, which calls no hook), without the mark:
// after a restart it is resent with DUP [MQTT-4.4.0-1]. The gateway's
// hook calls it from OnPacketEncode, on the client's writer, before the
// bytes go out: queued after the write (OnPacketSent, as before), the
// write could come after the client had read the message, disconnected,
// and the server had stopped and closed the Log (mochi waits for each
// connection's reader, not for a writer), and was dropped.
//
// The mark's test, the look into the inflight store and the write are one
// step under heldMu, which dropInflight holds too while it clears the mark
// and writes the delete: a PUBACK read on the client's reader while this
// runs (a resend's) otherwise could have its delete written between our
// look and our write, and our write put the acknowledged message back
// into the store (resent after a restart).
func (ss *sessions) sending(cl *mochi.Client, pk *packets.Packet) {
	if pk.FixedHeader.Qos == 0 || !persistent(cl) {
		return
	}
	ss.heldMu.Lock()
	defer ss.heldMu.Unlock()
	if !ss.wasHeldLocked(cl.ID, pk.PacketID) {
		return
	}
	if sent, ok := cl.State.Inflight.Get(pk.PacketID); ok && sent.Expiry >= 0 {
		ss.enqueueKnown(cl.ID, ss.inflightOp(cl.ID, sent))
	}
}

// OnPacketSent runs testHookPacketSent: the hook provides it only when a
// test set one before the server started (Provides).
func (ss *sessions) OnPacketSent(cl *mochi.Client, pk packets.Packet, _ []byte) {
	if h := testHookPacketSent.Load(); h != nil && pk.FixedHeader.Type == packets.Publish {
		(*h)(cl, pk)
	}
}

// testHookPacketSent, set by a test only before the server starts, runs
// once a PUBLISH has been written, on the client's writer.
var testHookPacketSent atomic.Pointer[func(cl *mochi.Client, pk packets.Packet)]

func (ss *sessions) OnQosComplete(cl *mochi.Client, pk packets.Packet) {
	ss.dropInflight(cl, pk.PacketID)
}
func (ss *sessions) OnQosDropped(cl *mochi.Client, pk packets.Packet) {
	ss.dropInflight(cl, pk.PacketID)
}

func (ss *sessions) dropInflight(cl *mochi.Client, id uint16) {
	// Not for a session forgotten here: one let go to another gateway
	// (cluster.go) keeps its messages in the shared store. Nor for a
	// connection whose session a newer one of its client took over: mochi
	// clears the old connection's in-flight messages (ClearInflights,
	// OnQosDropped) after handing them on, and deleting them from the
	// store would leave them out of it until the new connection resends
	// them (a crash between the two lost them; a held one is not resent).
	// A clean-start takeover deletes the whole session instead
	// (OnSessionEstablished).
	if persistent(cl) && !cl.IsTakenOver() && !ss.takenAway(cl) && ss.isKnown(cl.ID) {
		// Under heldMu, as OnPacketSent's write of the same message.
		ss.heldMu.Lock()
		defer ss.heldMu.Unlock()
		ss.markHeldLocked(cl.ID, id, false)
		ss.enqueueKnown(cl.ID, session.Op{Kind: session.DeleteInflight, Client: cl.ID, Key: packetKey(id)})
	}
}

// OnPacketProcessed stores the PUBREL that replaced a QoS 2 PUBLISH once
// the client's PUBREC came: mochi sets it without OnQosPublish.
func (ss *sessions) OnPacketProcessed(cl *mochi.Client, pk packets.Packet, err error) {
	if err != nil || pk.FixedHeader.Type != packets.Pubrec || !persistent(cl) {
		return
	}
	if rel, ok := cl.State.Inflight.Get(pk.PacketID); ok && rel.FixedHeader.Type == packets.Pubrel {
		ss.enqueueKnown(cl.ID, ss.inflightOp(cl.ID, rel))
	}
}

// OnPublishInline tells mochi (patch 48) that OnPublish passes the inline
// client's PUBLISHes through: they have no ack to defer.
func (ss *sessions) OnPublishInline() bool { return false }

var _ mochi.InlinePublishHook = (*sessions)(nil)

// OnPublish defers the ack of a QoS 1/2 PUBLISH while any session is
// stored: its fan-out may reach one (OnPublished answers it).
func (ss *sessions) OnPublish(cl *mochi.Client, pk packets.Packet) (packets.Packet, error) {
	if cl.Net.Inline || pk.FixedHeader.Qos == 0 || pk.Ignore || ss.count.Load() == 0 {
		return pk, nil
	}
	p := pendingAck{ack: cl.DeferAck(pk), id: pk.PacketID, mark: ss.log.Mark()}
	ss.pendMu.Lock()
	ss.pending[cl] = p
	ss.pendMu.Unlock()
	return pk, nil
}

// OnPublished answers the ack OnPublish deferred once what the fan-out
// queued is durable: at once when it queued nothing.
func (ss *sessions) OnPublished(cl *mochi.Client, pk packets.Packet) {
	if cl.Net.Inline || pk.FixedHeader.Qos == 0 {
		return
	}
	ss.pendMu.Lock()
	p, ok := ss.pending[cl]
	delete(ss.pending, cl)
	ss.pendMu.Unlock()
	if !ok || p.id != pk.PacketID {
		return
	}
	if !ss.log.After(p.mark, func(err error) { p.ack.Done(ss.failed(cl, err)) }) {
		p.ack.Done(packets.CodeSuccess)
	}
}

// failed is the ack's code for a session write that failed: MQTT 5
// 0x80; MQTT 3.1.1 has no code, so the connection is closed and the
// client publishes again [MQTT-3.3.5-2].
func (ss *sessions) failed(cl *mochi.Client, err error) packets.Code {
	if err == nil {
		return packets.CodeSuccess
	}
	ss.s.opts.Metrics.Drop("mqtt", "session_store_failed")
	if cl.Properties.ProtocolVersion >= 5 {
		return packets.ErrUnspecifiedError
	}
	cl.Stop(packets.ErrUnspecifiedError)
	return packets.CodeSuccess
}

// holdDelivery holds a message from another front-end (Deliver) until
// what its fan-out queued, since m, is durable.
func (ss *sessions) holdDelivery(acks *core.Acks, m session.Mark) {
	if ss == nil || acks == nil {
		return
	}
	acks.Hold()
	if !ss.log.After(m, acks.Done) {
		acks.Done(nil)
	}
}

// mark is Log.Mark, the zero Mark when sessions are not kept.
func (ss *sessions) mark() session.Mark {
	if ss == nil {
		return session.Mark{}
	}
	return ss.log.Mark()
}

// clientRecord is a session's stored client: what mochi's loadClients
// restores, and the will (docs/mqtt-frontend.md says what is done with it).
type clientRecord struct {
	Listener        string             `json:"l,omitempty"`
	Username        []byte             `json:"u,omitempty"`
	ProtocolVersion byte               `json:"v"`
	Clean           bool               `json:"c,omitempty"`
	Props           packets.Properties `json:"p"`
	Will            mochi.Will         `json:"w"`
	// Node is the gateway that stored it last (its node.id): in a
	// cluster, the one that holds the session (docs/cluster.md).
	Node string `json:"n,omitempty"`
}

func (ss *sessions) clientOp(cl *mochi.Client) session.Op {
	p := cl.Properties.Props
	rec := clientRecord{
		Listener:        cl.Net.Listener,
		Username:        cl.Properties.Username,
		ProtocolVersion: cl.Properties.ProtocolVersion,
		Clean:           cl.Properties.Clean,
		Props: packets.Properties{
			SessionExpiryInterval:     p.SessionExpiryInterval,
			SessionExpiryIntervalFlag: p.SessionExpiryIntervalFlag,
			ReceiveMaximum:            p.ReceiveMaximum,
			TopicAliasMaximum:         p.TopicAliasMaximum,
			MaximumPacketSize:         p.MaximumPacketSize,
			RequestProblemInfo:        p.RequestProblemInfo,
			RequestProblemInfoFlag:    p.RequestProblemInfoFlag,
			RequestResponseInfo:       p.RequestResponseInfo,
			User:                      p.User,
		},
		Will: cl.Properties.Will,
		Node: ss.s.opts.Node,
	}
	v, _ := json.Marshal(&rec) // plain data: cannot fail
	return session.Op{Kind: session.PutClient, Client: cl.ID, Value: v}
}

func subOp(id string, sub packets.Subscription) session.Op {
	v, _ := json.Marshal(&sub)
	return session.Op{Kind: session.PutSub, Client: id, Key: []byte(sub.Filter), Value: v}
}

// inflightRecord is a stored in-flight packet. Order restores the order
// the session's messages were queued in [MQTT-4.6.0-6]; Expiry keeps
// patch 13's held mark (< 0: never sent, goes without DUP).
type inflightRecord struct {
	Order   uint64              `json:"o"`
	FH      packets.FixedHeader `json:"h"`
	ID      uint16              `json:"i"`
	Topic   string              `json:"t,omitempty"`
	Payload []byte              `json:"b,omitempty"`
	Origin  string              `json:"f,omitempty"`
	Created int64               `json:"c,omitempty"`
	Expiry  int64               `json:"e,omitempty"`
	Props   packets.Properties  `json:"p"`
}

func (ss *sessions) inflightOp(id string, pk packets.Packet) session.Op {
	rec := inflightRecord{
		Order: ss.order.Add(1), FH: pk.FixedHeader, ID: pk.PacketID, Topic: pk.TopicName,
		Payload: pk.Payload, Origin: pk.Origin, Created: pk.Created, Expiry: pk.Expiry, Props: pk.Properties,
	}
	v, _ := json.Marshal(&rec)
	return session.Op{Kind: session.PutInflight, Client: id, Key: packetKey(pk.PacketID), Value: v}
}

func packetKey(id uint16) []byte { return binary.BigEndian.AppendUint16(nil, id) }
