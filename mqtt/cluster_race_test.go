package mqtt

// Two races of a session between two gateways (docs/cluster.md, "Races
// fixed"): two front-ends in this process, A and B, on one real Redis
// session store, their claims answered by functions, so that each test
// holds the one interleaving it is about.

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/tolsey/tolsey/mqtt/session"
	"github.com/tolsey/tolsey/retain"
	"github.com/tolsey/tolsey/retain/memory"
	"github.com/tolsey/tolsey/retain/redistest"
)

// startGatewayPair runs two front-ends, nodes "a" and "b", whose sessions
// are in one Redis store and whose claims ca and cb answer.
func startGatewayPair(t *testing.T, ca, cb Cluster) (a, b *Server) {
	t.Helper()
	return startGatewayPairWrap(t, ca, cb, nil)
}

// startGatewayPairWrap is startGatewayPair with A's store wrapped by wrapA
// when not nil.
func startGatewayPairWrap(t *testing.T, ca, cb Cluster, wrapA func(*session.Redis) session.Backend) (a, b *Server) {
	t.Helper()
	rs := redistest.Start(t)
	start := func(node string, c Cluster, wrap func(*session.Redis) session.Backend) *Server {
		r, err := session.OpenRedis(context.Background(), rs.URL(), t.Name()+":")
		if err != nil {
			t.Fatal(err)
		}
		var sb session.Backend = r
		if wrap != nil {
			sb = wrap(r)
		}
		return startTestServer(t, memory.New(retain.Limits{}), func(o *Options) {
			o.Sessions, o.Cluster, o.Node = sb, c, node
		})
	}
	return start("a", ca, wrapA), start("b", cb, nil)
}

// settled waits until everything s queued for its session store is
// written (or refused).
func settled(s *Server) {
	done := make(chan struct{})
	if s.sessions.log.After(session.Mark{}, func(error) { close(done) }) {
		<-done
	}
}

// A clean start on B after a claim A did not answer in time deletes the
// stored session; A, only slow, goes on writing it (a message queued for
// it, its disconnect). What A writes after the delete must not put the
// session back: a later resume would find that stale copy. With the
// epoch, B's clean start takes the id with a new epoch and A's writes,
// with the old one, are refused. Before, A's writes recreated the session
// and the resume on B found it (session present 1).
func TestCleanStartAfterUnansweredClaimIsNotWrittenBack(t *testing.T) {
	var bAnswered atomic.Bool
	a, b := startGatewayPair(t, claimFunc(answered), claimFunc(func(string, int64) bool { return bAnswered.Load() }))

	dev, _ := dialSession(t, a.Addr(), "dev", 5, false)
	dev.subscribeQoS1(t, "d/#")
	waitUntil(t, "dev's session stored on A", func() bool { return a.sessions.isKnown("dev") })
	settled(a)

	// B: dev connects with clean start; A never answers the claim.
	c, present := dialSessionExpiry(t, b.Addr(), "dev", 5, true, 0)
	if present {
		t.Fatal("a clean start found a session")
	}
	c.disconnect(t)

	// A, slow, has not let go: a message is queued for dev there (its
	// PUBACK waits for the write), then dev's connection there ends.
	pub := dialRaw(t, a.Addr(), "pub", 0)
	pub.publishWait(t, "d/x", "late", 1, 1)
	dev.disconnect(t)
	waitOffline(t, a, "dev")
	settled(a)

	// dev resumes on B, every claim answered now.
	bAnswered.Store(true)
	_, present = dialSession(t, b.Addr(), "dev", 5, false)
	if present {
		t.Fatal("the resume found the session the clean start deleted: a slow gateway wrote it back")
	}
}

// A takeover on A (B's claim) while a new connection of the id on A is
// still claiming lets the session go like any other; the new connection's
// claim makes B let go in turn and reads the session back, with what B
// added to it. Before, A kept its copy for the new connection: what B did
// with the session meanwhile (here a subscription) was lost, and A went
// on writing a session B had taken.
func TestLocalConnectDuringTakeoverReadsTheSessionBack(t *testing.T) {
	release := make(chan struct{})
	var holdDev atomic.Bool
	a, b := startGatewayPair(t, claimFunc(func(client string, _ int64) bool {
		if client == "dev" && holdDev.Load() {
			<-release // B's answer to the new connection's claim comes later
		}
		return true
	}), claimFunc(answered))

	old, _ := dialSession(t, a.Addr(), "dev", 5, false)
	old.subscribeQoS1(t, "a/#")
	waitUntil(t, "dev's session stored on A", func() bool { return a.sessions.isKnown("dev") })
	old.disconnect(t)
	waitOffline(t, a, "dev")
	settled(a)

	// B's claim reaches A; as A lets the session go, dev connects to A
	// again and claims (held until released).
	holdDev.Store(true)
	type dialed struct {
		c       *rawClient
		present bool
	}
	cur := make(chan dialed, 1)
	hook := func(string) {
		go func() {
			var d dialed
			// Sent also when dialSession's t.Fatal ends this goroutine:
			// the test's own goroutine then reports the failed dial.
			defer func() { cur <- d }()
			d.c, d.present = dialSession(t, a.Addr(), "dev", 5, false)
		}()
		waitUntil(t, "the new connection claiming", func() bool {
			a.ids.mu.Lock()
			defer a.ids.mu.Unlock()
			_, ok := a.ids.local["dev"]
			return ok
		})
	}
	testHookTakenOver.Store(&hook)
	t.Cleanup(func() { testHookTakenOver.Store(nil) })
	letGo := make(chan struct{})
	a.TakenOver("dev", time.Now().UnixNano(), "b", func(bool) { close(letGo) })
	<-letGo
	testHookTakenOver.Store(nil)

	// B's claim was answered: dev's connection there reads the session
	// and subscribes to b/#.
	onB, present := dialSession(t, b.Addr(), "dev", 5, false)
	if !present {
		t.Fatal("B found no session")
	}
	onB.subscribeQoS1(t, "b/#")
	// The new connection's claim reaches B: B lets the session go.
	bLetGo := make(chan struct{})
	b.TakenOver("dev", time.Now().UnixNano(), "a", func(bool) { close(bLetGo) })
	<-bLetGo
	close(release)

	d := <-cur
	if d.c == nil {
		t.Fatal("the new connection on A failed")
	}
	if !d.present {
		t.Fatal("the new connection on A found no session")
	}
	for _, topic := range []string{"a/x", "b/x"} {
		if subs := a.mochi.Topics.Subscribers(topic); len(subs.Subscriptions) == 0 {
			t.Errorf("the session on A has no subscription for %s", topic)
		}
	}
	pub := dialRaw(t, a.Addr(), "pub", 0)
	pub.publishWait(t, "b/x", "m1", 1, 1)
	d.c.expectPublish(t, "b/x", "m1", 1, false)
}

// A persistent session started while a connection of the id whose
// session was not stored holds it here (no fetch: mochi holds the id)
// takes an epoch of its own: its writes are not refused. (Without,
// they carried epoch 0 while the clean start had raised the id's.)
func TestSessionNewOverUnstoredLocalIsWritten(t *testing.T) {
	var r *session.Redis
	s := startClusterServer(t, claimFunc(answered), func(rr *session.Redis) session.Backend {
		r = rr
		return rr
	})
	first, present := dialSessionExpiry(t, s.Addr(), "dev", 5, true, 0)
	if present {
		t.Fatal("a clean start found a session")
	}
	_ = first
	cur, _ := dialSession(t, s.Addr(), "dev", 5, false)
	cur.subscribeQoS1(t, "d/#")
	waitUntil(t, "dev's session stored", func() bool { return s.sessions.isKnown("dev") })
	settled(s)
	if n := r.Refused(); n != 0 {
		t.Fatalf("%d writes of the new session refused", n)
	}
	if subs := storedSubs(t, r, "dev"); len(subs) != 1 {
		t.Fatalf("stored subscriptions %v; want 1", subs)
	}
}

// staleOnA leaves dev's session held by A, stale: dev subscribes to a/#
// on A; then, A never hearing of it (its claims do not reach A: A is cut
// off from NATS), dev resumes on B, which takes the session from the store
// with a newer epoch, subscribes to b/# there, and a message "m1" on b/x
// is queued for it on B while it is offline. With keep, dev's connection
// to A stays open (A has not noticed its end; it is returned), and its
// CONNECT carries a will on will/dev; else it is ended and A holds the
// session offline.
func staleOnA(t *testing.T, a, b *Server, keep bool) *rawClient {
	t.Helper()
	dev := dialRawConn(t, a.Addr(), 5)
	dev.write(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect},
		Connect: packets.ConnectParams{ProtocolName: []byte("MQTT"), Keepalive: 30, ClientIdentifier: "dev",
			WillFlag: keep, WillTopic: "will/dev", WillPayload: []byte("gone"), WillQos: 1},
		Properties: packets.Properties{SessionExpiryInterval: 3600, SessionExpiryIntervalFlag: true}})
	if ack := dev.read(t); ack.FixedHeader.Type != packets.Connack || ack.ReasonCode != 0 {
		t.Fatalf("dev on A: want a successful CONNACK, got %v", ack)
	}
	dev.subscribeQoS1(t, "a/#")
	waitUntil(t, "dev's session stored on A", func() bool { return a.sessions.isKnown("dev") })
	if !keep {
		dev.disconnect(t)
		waitOffline(t, a, "dev")
	}
	settled(a)

	onB, present := dialSession(t, b.Addr(), "dev", 5, false)
	if !present {
		t.Fatal("B found no session")
	}
	onB.subscribeQoS1(t, "b/#")
	onB.disconnect(t)
	waitOffline(t, b, "dev")
	pub := dialRaw(t, b.Addr(), "pub", 0)
	pub.publishWait(t, "b/x", "m1", 1, 1) // queued for dev on B, stored before its PUBACK
	settled(b)
	if _, ok := a.mochi.Clients.Get("dev"); !ok {
		t.Fatal("A no longer holds dev's session: the test needs its stale copy")
	}
	return dev
}

// The session a resume on A gets from the store: B's subscription and
// queued message; what A writes of it afterwards is accepted.
func wantStoredSessionOnA(t *testing.T, a *Server, back *rawClient) {
	t.Helper()
	ra := a.sessions.b.(*session.Redis)
	if subs := a.mochi.Topics.Subscribers("b/x"); len(subs.Subscriptions) == 0 {
		t.Fatal("the session on A has no subscription for b/x: A handed dev its stale copy")
	}
	m := back.expectPublish(t, "b/x", "m1", 1, false)
	back.puback(t, m.PacketID)
	back.subscribeQoS1(t, "c/#")
	waitUntil(t, "c/# on A", func() bool { return len(a.mochi.Topics.Subscribers("c/x").Subscriptions) > 0 })
	settled(a)
	if n := ra.Refused(); n != 0 {
		t.Errorf("%d of A's writes of the session refused", n)
	}
	if subs := storedSubs(t, ra, "dev"); len(subs) != 3 || !subs["a/#"] || !subs["b/#"] || !subs["c/#"] {
		t.Fatalf("stored subscriptions %v; want a/#, b/#, c/#", subs)
	}
}

// A holds dev's session offline in mochi; B takes it from the store (its
// claim never reaches A), and the session gets a new subscription and a
// queued message on B. dev then resumes on A. A's copy is stale (the
// store's epoch of dev is newer than the one A holds): A drops it and
// takes the session from the store, so dev gets B's subscription and
// message, and what A writes of the session is accepted. Before, A handed
// dev its own copy (no b/#, no message) and every write of it was refused.
func TestResumeOnStaleHolderTakesTheStoredSession(t *testing.T) {
	a, b := startGatewayPair(t, claimFunc(answered), claimFunc(answered))
	staleOnA(t, a, b, false)
	back, present := dialSession(t, a.Addr(), "dev", 5, false)
	if !present {
		t.Fatal("A found no session")
	}
	wantStoredSessionOnA(t, a, back)
}

// As above with dev's old connection to A still open (A has not noticed
// its end): the resume on A ends it as one taken over (DISCONNECT 0x8E),
// without its will, and gets the stored session; the old connection's end
// writes nothing over it.
func TestResumeOnStaleHolderEndsItsOpenConnection(t *testing.T) {
	a, b := startGatewayPair(t, claimFunc(answered), claimFunc(answered))
	watch := dialRaw(t, a.Addr(), "watch", 0)
	watch.subscribeQoS1(t, "will/#")
	old := staleOnA(t, a, b, true)
	back, present := dialSession(t, a.Addr(), "dev", 5, false)
	if !present {
		t.Fatal("A found no session")
	}
	if pk := old.read(t); pk.FixedHeader.Type != packets.Disconnect || pk.ReasonCode != packets.ErrSessionTakenOver.Code {
		t.Fatalf("old connection: want DISCONNECT 0x8E, got %v %#x", packets.PacketNames[pk.FixedHeader.Type], pk.ReasonCode)
	}
	waitUntil(t, "the old connection's end", func() bool { return atomic.LoadInt64(&a.mochi.Info.ClientsConnected) == 2 })
	wantStoredSessionOnA(t, a, back)
	// What a will sent as the old connection ended would have reached
	// watch before this.
	pub := dialRaw(t, a.Addr(), "pub", 0)
	pub.publishWait(t, "will/fence", "fence", 1, 1)
	pk := watch.read(t)
	if pk.FixedHeader.Type != packets.Publish || pk.TopicName != "will/fence" {
		t.Fatalf("watch: want the fence first, got %v %s %q", packets.PacketNames[pk.FixedHeader.Type], pk.TopicName, pk.Payload)
	}
}

// failEpoch is the Redis store whose Epoch fails (a Redis error).
type failEpoch struct{ *session.Redis }

func (f failEpoch) Epoch(string) (uint64, error) { return 0, errors.New("injected redis error") }

// When the epoch cannot be read, the resume on A goes on with the session
// A holds, as before this check, and its writes go unfenced, as after a
// failed take ("Epochs"): A's copy is durable, not refused for as long as
// it lives.
func TestResumeOnHolderEpochReadFailsIsWritten(t *testing.T) {
	a, b := startGatewayPairWrap(t, claimFunc(answered), claimFunc(answered),
		func(r *session.Redis) session.Backend { return failEpoch{r} })
	staleOnA(t, a, b, false)
	back, present := dialSession(t, a.Addr(), "dev", 5, false)
	if !present {
		t.Fatal("A found no session")
	}
	back.subscribeQoS1(t, "c/#")
	waitUntil(t, "c/# on A", func() bool { return len(a.mochi.Topics.Subscribers("c/x").Subscriptions) > 0 })
	settled(a)
	ra := a.sessions.b.(failEpoch).Redis
	if n := ra.Refused(); n != 0 {
		t.Errorf("%d of A's writes of the session refused", n)
	}
	if subs := storedSubs(t, ra, "dev"); !subs["c/#"] {
		t.Fatalf("stored subscriptions %v; want c/# among them", subs)
	}
}

// A resume on A finding A's copy stale while A's claim was not answered
// in time is refused as server busy, as one for a session A does not
// hold: the gateway that took the session may hold it and write it still.
// Answered, the next attempt gets the stored session.
func TestResumeOnStaleHolderClaimNotAnsweredIsRefused(t *testing.T) {
	var aAnswered atomic.Bool
	aAnswered.Store(true)
	a, b := startGatewayPair(t, claimFunc(func(string, int64) bool { return aAnswered.Load() }), claimFunc(answered))
	staleOnA(t, a, b, false)
	aAnswered.Store(false)
	c := dialRawConn(t, a.Addr(), 5)
	c.write(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect},
		Connect:    packets.ConnectParams{ProtocolName: []byte("MQTT"), Keepalive: 30, ClientIdentifier: "dev"},
		Properties: packets.Properties{SessionExpiryInterval: 3600, SessionExpiryIntervalFlag: true}})
	if ack := c.read(t); ack.FixedHeader.Type != packets.Connack || ack.ReasonCode != packets.ErrServerBusy.Code {
		t.Fatalf("want CONNACK 0x89, got %v %#x", packets.PacketNames[ack.FixedHeader.Type], ack.ReasonCode)
	}
	aAnswered.Store(true)
	back, present := dialSession(t, a.Addr(), "dev", 5, false)
	if !present {
		t.Fatal("A found no session")
	}
	wantStoredSessionOnA(t, a, back)
}

// The end of the old connection a stale resume ended (above) comes after
// the new connection took the session from the store: it writes nothing
// (its session was taken away), so the stored record stays the new
// connection's. Before, with the new connection's epoch then known here,
// the old one's record (session expiry 3600 s) went over the new one's
// (7200 s).
func TestStaleConnectionEndWritesNothing(t *testing.T) {
	a, b := startGatewayPair(t, claimFunc(answered), claimFunc(answered))
	staleOnA(t, a, b, true)
	held, free, _ := holdOldEnd(t, &testHookDisconnect)

	back, present := dialSessionExpiry(t, a.Addr(), "dev", 5, false, 7200)
	if !present {
		t.Fatal("A found no session")
	}
	m := back.expectPublish(t, "b/x", "m1", 1, false)
	back.puback(t, m.PacketID)
	back.subscribeQoS1(t, "c/#") // after OnSessionEstablished stored the record
	select {
	case <-held:
	case <-time.After(20 * time.Second):
		t.Fatal("the old connection's end never came")
	}
	free()
	waitUntil(t, "the old connection's end", func() bool { return atomic.LoadInt64(&a.mochi.Info.ClientsConnected) == 1 })
	settled(a)
	if got := storedExpiry(t, a.sessions.b.(*session.Redis), "dev"); got != 7200 {
		t.Fatalf("stored record's session expiry %d; want the new connection's 7200", got)
	}
}

// The old connection ended by itself (its client's socket closed) just
// before the stale resume: dropStale finds it closed, so its stop cause is
// its own (not 0x8E), and its end is still to come when the new
// connection stores its session. It writes nothing then: the id is held
// by another client here. Before, the stop-cause check let its record
// (session expiry 3600 s) go over the new connection's (7200 s), written
// with the new connection's epoch.
func TestStaleConnectionEndedByItselfWritesNothing(t *testing.T) {
	a, b := startGatewayPair(t, claimFunc(answered), claimFunc(answered))
	old := staleOnA(t, a, b, true)
	held, free, oldCl := holdOldEnd(t, &testHookDisconnect)

	_ = old.conn.Close() // the old connection ends by itself; its end is held
	select {
	case <-held:
	case <-time.After(20 * time.Second):
		t.Fatal("the old connection's end never came")
	}
	if errors.Is(oldCl.Load().StopCause(), packets.ErrSessionTakenOver) {
		t.Fatal("the old connection was taken over; the test needs it ended by itself")
	}
	back, present := dialSessionExpiry(t, a.Addr(), "dev", 5, false, 7200)
	if !present {
		t.Fatal("A found no session")
	}
	m := back.expectPublish(t, "b/x", "m1", 1, false)
	back.puback(t, m.PacketID)
	back.subscribeQoS1(t, "c/#") // after OnSessionEstablished stored the record
	free()
	waitUntil(t, "the old connection's end", func() bool { return atomic.LoadInt64(&a.mochi.Info.ClientsConnected) == 1 })
	settled(a)
	if got := storedExpiry(t, a.sessions.b.(*session.Redis), "dev"); got != 7200 {
		t.Fatalf("stored record's session expiry %d; want the new connection's 7200", got)
	}
}

// gatedApply is the Redis store whose commits wait while its gate is
// closed.
type gatedApply struct {
	*session.Redis
	mu   sync.Mutex
	gate chan struct{} // nil: open
}

func (g *gatedApply) Apply(ops []session.Op) error {
	g.mu.Lock()
	gate := g.gate
	g.mu.Unlock()
	if gate != nil {
		<-gate
	}
	return g.Redis.Apply(ops)
}

func (g *gatedApply) close() {
	g.mu.Lock()
	g.gate = make(chan struct{})
	g.mu.Unlock()
}

func (g *gatedApply) open() {
	g.mu.Lock()
	if g.gate != nil {
		close(g.gate)
		g.gate = nil
	}
	g.mu.Unlock()
}

// Two resumes of the client on A, which holds a stale copy, at once: both
// find it stale; the first to go on (y) drops it, takes the session from
// the store and subscribes, its write not yet committed; then the other
// (x) goes on. The copy it found stale is gone: it takes y's session over
// in memory, as any session held here, with y's subscription, and y's
// write is committed with the epoch y took. Before, x dropped y's session
// too and read the store again with a newer epoch: the subscription was
// in neither, and y's write of it was refused.
func TestStaleResumesAtOnceKeepTheFirstOnesWrites(t *testing.T) {
	var g *gatedApply
	a, b := startGatewayPairWrap(t, claimFunc(answered), claimFunc(answered),
		func(r *session.Redis) session.Backend { g = &gatedApply{Redis: r}; return g })
	t.Cleanup(g.open)
	staleOnA(t, a, b, false)

	entered, release := make(chan struct{}), make(chan struct{})
	var first atomic.Bool
	hook := func(*mochi.Client) {
		if first.CompareAndSwap(false, true) {
			close(entered)
			<-release
		}
	}
	testHookStale.Store(&hook)
	t.Cleanup(func() { testHookStale.Store(nil) })
	var relOnce sync.Once
	free := func() { relOnce.Do(func() { close(release) }) }
	t.Cleanup(free)

	x := dialRawConn(t, a.Addr(), 5)
	x.write(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect},
		Connect:    packets.ConnectParams{ProtocolName: []byte("MQTT"), Keepalive: 30, ClientIdentifier: "dev"},
		Properties: packets.Properties{SessionExpiryInterval: 3600, SessionExpiryIntervalFlag: true}})
	select {
	case <-entered:
	case <-time.After(20 * time.Second):
		t.Fatal("x's claim never found the copy stale")
	}

	y, present := dialSession(t, a.Addr(), "dev", 5, false)
	if !present {
		t.Fatal("y found no session")
	}
	m := y.expectPublish(t, "b/x", "m1", 1, false)
	y.puback(t, m.PacketID)
	settled(a)

	g.close()
	// Its SUBACK comes after the write is queued (OnSubscribed).
	y.subscribeQoS1(t, "y/#")
	free()
	if ack := x.read(t); ack.FixedHeader.Type != packets.Connack || ack.ReasonCode != 0 || !ack.SessionPresent {
		t.Fatalf("x: want a successful CONNACK with session present, got %v %#x present %v",
			packets.PacketNames[ack.FixedHeader.Type], ack.ReasonCode, ack.SessionPresent)
	}
	g.open()
	settled(a)
	if subs := a.mochi.Topics.Subscribers("y/x"); len(subs.Subscriptions) == 0 {
		t.Error("x's session has no subscription for y/#: y's session was dropped and read again")
	}
	if n := g.Refused(); n != 0 {
		t.Errorf("%d of A's writes of the session refused", n)
	}
	if subs := storedSubs(t, g.Redis, "dev"); !subs["y/#"] {
		t.Errorf("stored subscriptions %v; want y/# among them", subs)
	}
}

// holdOldEnd sets hook (testHookDisconnect, testHookWillSent) to hold the
// end of the old connection of "dev" (the one with a session expiry of
// 3600 s) until free is called (at the latest when the test ends). held
// is closed, and old set, when that end has begun.
func holdOldEnd(t *testing.T, hook *atomic.Pointer[func(*mochi.Client)]) (held <-chan struct{}, free func(), old *atomic.Pointer[mochi.Client]) {
	t.Helper()
	h, release := make(chan struct{}), make(chan struct{})
	old = new(atomic.Pointer[mochi.Client])
	var heldOnce, freeOnce sync.Once
	f := func(cl *mochi.Client) {
		if cl.ID == "dev" && cl.Properties.Props.SessionExpiryInterval == 3600 {
			old.Store(cl)
			heldOnce.Do(func() { close(h) })
			<-release
		}
	}
	hook.Store(&f)
	t.Cleanup(func() { hook.Store(nil) })
	free = func() { freeOnce.Do(func() { close(release) }) }
	t.Cleanup(free)
	return h, free, old
}

// storedExpiry is the session expiry interval in id's stored client
// record in the shared store, read as a gateway taking it would.
func storedExpiry(t *testing.T, r *session.Redis, id string) uint32 {
	t.Helper()
	var rec clientRecord
	if _, err := r.TakeClient(id, func(kind session.Kind, _ string, _, value []byte) error {
		if kind == session.PutClient {
			return json.Unmarshal(value, &rec)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return rec.Props.SessionExpiryInterval
}

// Two resumes of dev at once on A, which does not hold dev's session (B
// does, offline): the first (x) has read the session from the store and
// is held before its restore while the second (y) connects. y waits for
// x's restore, then finds the session held in mochi and takes it over
// locally: of the two connections the one registered last holds the id
// and the other is sent DISCONNECT 0x8E (or, taken over before its
// CONNACK went out, closed), and what A writes of the session is
// accepted. Before, y read the store too, with a newer epoch, and was
// restored and connected while x was held; x's restore then replaced y in
// mochi (y never told 0x8E: two open connections of the id) and left A
// writing the session with x's older epoch: every write was refused.
func TestResumesAtOnceReadTheStoreOnce(t *testing.T) {
	a, b := startGatewayPair(t, claimFunc(answered), claimFunc(answered))
	onB, _ := dialSession(t, b.Addr(), "dev", 5, false)
	onB.subscribeQoS1(t, "b/#")
	onB.disconnect(t)
	waitOffline(t, b, "dev")
	settled(b)

	entered, second, release := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var fetched atomic.Int32
	var secondOnce, relOnce sync.Once
	arrived := func() { secondOnce.Do(func() { close(second) }) }
	free := func() { relOnce.Do(func() { close(release) }) }
	t.Cleanup(free)
	hook := func(cl *mochi.Client) {
		if cl.ID != "dev" {
			return
		}
		if fetched.Add(1) == 1 {
			close(entered)
			<-release
		}
	}
	testHookFetched.Store(&hook)
	t.Cleanup(func() { testHookFetched.Store(nil) })
	established := func(cl *mochi.Client) func() {
		if cl.ID == "dev" {
			arrived() // before the fix: y read the store too, and connected
		}
		return func() {}
	}
	testHookEstablished.Store(&established)
	t.Cleanup(func() { testHookEstablished.Store(nil) })
	wait := func(id string) {
		if id == "dev" {
			arrived() // y waits for x's read
		}
	}
	testHookFetchWait.Store(&wait)
	t.Cleanup(func() { testHookFetchWait.Store(nil) })

	connect := func(expiry uint32) *rawClient {
		c := dialRawConn(t, a.Addr(), 5)
		c.write(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect},
			Connect:    packets.ConnectParams{ProtocolName: []byte("MQTT"), Keepalive: 30, ClientIdentifier: "dev"},
			Properties: packets.Properties{SessionExpiryInterval: expiry, SessionExpiryIntervalFlag: true}})
		return c
	}
	x := connect(3600)
	select {
	case <-entered:
	case <-time.After(20 * time.Second):
		t.Fatal("x never read the session from the store")
	}
	y := connect(7200)
	select {
	case <-second:
	case <-time.After(20 * time.Second):
		t.Fatal("y neither waited for x's read nor connected")
	}
	free()
	// The first packet of each: a CONNACK; for the connection taken over
	// before its CONNACK was out, the DISCONNECT or the connection's end
	// (mochi, as for two connects of one id at once on one broker).
	px, ex := x.next()
	py, ey := y.next()
	first, errs := []packets.Packet{px, py}, []error{ex, ey}
	// Both registered before either could be told: the one registered
	// last holds the id.
	held, ok := a.mochi.Clients.Get("dev")
	if !ok || held.Closed() {
		t.Fatal("A holds no open connection of dev")
	}
	s, l := 0, 1
	if held.Properties.Props.SessionExpiryInterval == 7200 {
		s, l = 1, 0
	}
	survivor, loser := []*rawClient{x, y}[s], []*rawClient{x, y}[l]
	if ack := first[s]; errs[s] != nil || ack.FixedHeader.Type != packets.Connack || ack.ReasonCode != 0 || !ack.SessionPresent {
		t.Fatalf("the connection holding the id: want a successful CONNACK with session present, got %v %#x present %v (%v)",
			packets.PacketNames[ack.FixedHeader.Type], ack.ReasonCode, ack.SessionPresent, errs[s])
	}
	survivor.subscribeQoS1(t, "c/#")
	settled(a)
	ra := a.sessions.b.(*session.Redis)
	if n := ra.Refused(); n != 0 {
		t.Errorf("%d of A's writes of the session refused", n)
	}
	if subs := storedSubs(t, ra, "dev"); !subs["b/#"] || !subs["c/#"] {
		t.Errorf("stored subscriptions %v; want b/# and c/# among them", subs)
	}
	// The other one ends: told 0x8E, or closed before its CONNACK. Before
	// the fix it stayed open (its read timed out).
	pk, err := first[l], errs[l]
	if errors.Is(err, io.EOF) {
		return // closed before its CONNACK
	}
	if err == nil && pk.FixedHeader.Type == packets.Connack {
		pk, err = loser.next()
	}
	if err != nil || pk.FixedHeader.Type != packets.Disconnect || pk.ReasonCode != packets.ErrSessionTakenOver.Code {
		t.Fatalf("the connection not holding the id: want DISCONNECT 0x8E, got %v %#x (%v)",
			packets.PacketNames[pk.FixedHeader.Type], pk.ReasonCode, err)
	}
}
