package mqtt

// The front-end's side of client takeover across gateways (cluster.go),
// with a real Redis session store. The cluster itself (NATS) is the
// bridge/cluster package's and test/e2e's; here Options.Cluster is a
// function answering the claim, so that each test can hold the one
// interleaving it is about.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/tolsey/tolsey/core"
	"github.com/tolsey/tolsey/mqtt/session"
	"github.com/tolsey/tolsey/retain"
	"github.com/tolsey/tolsey/retain/memory"
	"github.com/tolsey/tolsey/retain/redistest"
)

// claimFunc is a Cluster whose claims f answers.
type claimFunc func(client string, stamp int64) bool

func (f claimFunc) Claim(client string, stamp int64) bool { return f(client, stamp) }

// startClusterServer runs a front-end whose sessions are in a Redis
// store under a prefix of the test's own (wrapped by wrap when not nil)
// and whose claims c answers.
func startClusterServer(t *testing.T, c Cluster, wrap func(*session.Redis) session.Backend) *Server {
	t.Helper()
	rs := redistest.Start(t)
	r, err := session.OpenRedis(context.Background(), rs.URL(), t.Name()+":")
	if err != nil {
		t.Fatal(err)
	}
	var b session.Backend = r
	if wrap != nil {
		b = wrap(r)
	}
	return startTestServer(t, memory.New(retain.Limits{}), func(o *Options) {
		o.Sessions, o.Cluster = b, c
	})
}

func answered(string, int64) bool { return true }

// A claim that not every gateway answered in time leaves the client's
// session unknown: a gateway that did not answer may hold it and write
// it still. A CONNECT resuming a session (clean start 0) is then refused
// as server busy (MQTT 5 0x89, 3.1.1 0x03) rather than given what the
// store has; a clean start needs nothing from the store and goes ahead.
// Before, the stored session was read anyway.
func TestClaimNotAnsweredRefusesResumedSession(t *testing.T) {
	s := startClusterServer(t, claimFunc(func(string, int64) bool { return false }), nil)
	for _, tc := range []struct {
		version byte
		clean   bool
		want    byte
	}{{5, false, 0x89}, {4, false, 0x03}, {5, true, 0}, {4, true, 0}} {
		c := dialRawConn(t, s.Addr(), tc.version)
		pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect},
			Connect: packets.ConnectParams{ProtocolName: []byte("MQTT"), Clean: tc.clean, Keepalive: 30,
				ClientIdentifier: fmt.Sprintf("mover%d%v", tc.version, tc.clean)}}
		if tc.version == 5 {
			pk.Properties.SessionExpiryInterval, pk.Properties.SessionExpiryIntervalFlag = 3600, true
		}
		c.write(t, pk)
		ack := c.read(t)
		if ack.FixedHeader.Type != packets.Connack || ack.ReasonCode != tc.want {
			t.Errorf("MQTT %d clean start %v: want CONNACK %#x, got %v %#x", tc.version, tc.clean, tc.want,
				packets.PacketNames[ack.FixedHeader.Type], ack.ReasonCode)
		}
	}
	s.ids.mu.Lock()
	defer s.ids.mu.Unlock()
	for id, lc := range s.ids.local {
		if lc.cl.Closed() {
			t.Errorf("refused connection %s left in the claimed ids", id)
		}
	}
}

// A connection whose CONNACK cannot be written (its client went after the
// claim) never reaches OnDisconnect: its claimed id is swept, not kept for
// ever. Before, each such connection left its entry.
func TestClaimOfFailedConnectionIsSwept(t *testing.T) {
	var conns sync.Map // client id → *net.TCPConn
	s := startClusterServer(t, claimFunc(func(client string, _ int64) bool {
		if c, ok := conns.Load(client); ok {
			// Reset at once (SO_LINGER 0): the CONNACK write fails.
			_ = c.(*net.TCPConn).SetLinger(0)
			_ = c.(*net.TCPConn).Close()
		}
		return true
	}), nil)
	const n = 150
	for i := range n {
		c := dialRawConn(t, s.Addr(), 5)
		id := fmt.Sprint("gone", i)
		conns.Store(id, c.conn)
		c.write(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect},
			Connect: packets.ConnectParams{ProtocolName: []byte("MQTT"), Clean: true, Keepalive: 30, ClientIdentifier: id}})
		if _, err := c.next(); err == nil {
			t.Fatalf("%s: a packet after the connection was reset", id)
		}
	}
	// The last sweep ran at most 63 claims ago.
	waitUntil(t, "failed connections' ids swept", func() bool {
		s.ids.mu.Lock()
		defer s.ids.mu.Unlock()
		return len(s.ids.local) < 100
	})
}

// applyWatch is the Redis session store noting whether a write of
// client's record was committed after done was called.
type applyWatch struct {
	*session.Redis
	client string
	mu     sync.Mutex
	done   bool // the takeover answered
	wrote  int  // client records committed: 1 before done, 2 after
}

func (w *applyWatch) Apply(ops []session.Op) error {
	err := w.Redis.Apply(ops)
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, op := range ops {
		if op.Client == w.client && op.Kind == session.PutClient && w.wrote == 0 {
			w.wrote = 1
			if w.done {
				w.wrote = 2
			}
		}
	}
	return err
}

// A store write of a session (here its disconnect) that has seen the
// session held here is committed before the gateway answers a takeover
// that lets it go, never after (it would land in the shared store after
// another gateway read it). The write is held between its check and its
// queueing while the takeover runs. Before, the takeover answered first
// and the write came after.
func TestSessionWriteDoesNotPassTakeover(t *testing.T) {
	var w *applyWatch
	s := startClusterServer(t, claimFunc(answered), func(r *session.Redis) session.Backend {
		w = &applyWatch{Redis: r, client: "dev"}
		return w
	})
	c, _ := dialSession(t, s.Addr(), "dev", 5, true)
	waitUntil(t, "dev's session stored", func() bool { return s.sessions.isKnown("dev") })
	// Only the disconnect's write from here on.
	waitUntil(t, "dev's record committed", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.wrote == 1
	})
	w.mu.Lock()
	w.wrote = 0
	w.mu.Unlock()

	var once sync.Once
	hook := func(id string) {
		if id != "dev" {
			return
		}
		once.Do(func() {
			answered := make(chan struct{})
			go s.TakenOver("dev", time.Now().UnixNano(), "z", func(bool) {
				w.mu.Lock()
				w.done = true
				w.mu.Unlock()
				close(answered)
			})
			// With the fix the takeover waits for this write, which holds
			// the lock: it cannot answer; bounded, not a measurement.
			select {
			case <-answered:
			case <-time.After(2 * time.Second):
			}
		})
	}
	testHookEnqueueKnown.Store(&hook)
	t.Cleanup(func() { testHookEnqueueKnown.Store(nil) })
	_ = c.conn.Close()
	waitUntil(t, "the disconnect's write committed", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.wrote != 0
	})
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.wrote == 2 {
		t.Fatal("the session's write was committed after the takeover answered")
	}
}

// A connection of the client made here while a takeover from another
// gateway lets the session go keeps the session it inherited: the
// takeover leaves a session a newer local connection holds. Before, the
// takeover removed the new connection's session and its subscriptions.
func TestTakenOverLeavesANewerLocalSession(t *testing.T) {
	s := startClusterServer(t, claimFunc(answered), nil)
	old, _ := dialSession(t, s.Addr(), "dev", 5, true)
	old.subscribeQoS1(t, "d/#")

	var cur *rawClient
	hook := func(string) {
		var present bool
		cur, present = dialSession(t, s.Addr(), "dev", 5, false)
		if !present {
			t.Error("the new local connection found no session")
		}
	}
	testHookTakenOver.Store(&hook)
	t.Cleanup(func() { testHookTakenOver.Store(nil) })
	answered := make(chan struct{})
	s.TakenOver("dev", time.Now().UnixNano(), "z", func(bool) { close(answered) })
	<-answered
	testHookTakenOver.Store(nil)

	if subs := s.mochi.Topics.Subscribers("d/x"); len(subs.Subscriptions) == 0 {
		t.Fatal("the new connection lost the subscription it inherited")
	}
	pub := dialRaw(t, s.Addr(), "pub", 0)
	pub.publishWait(t, "d/x", "m1", 1, 1)
	cur.expectPublish(t, "d/x", "m1", 1, false)
}

// A copy the cluster picked this gateway for, for one shared group
// (Router.PublishShare), reaches one member of that group and nobody else;
// when the group's last member here leaves between the front-end's check
// and mochi's fan-out, the copy reaches nobody and is refused
// (core.ErrNoMember: the cluster hands it on to another gateway). Before,
// mochi, finding no group, gave it to every plain subscriber (they had it
// already from its own gateway) and it counted as taken.
func TestShareCopyAfterLastMemberLeftIsHandedOn(t *testing.T) {
	s := startTestServer(t, memory.New(retain.Limits{}))
	member := dialRaw(t, s.Addr(), "member", 0)
	member.subscribeQoS1(t, "$share/g/t/#")
	plain := dialRaw(t, s.Addr(), "plain", 0)
	plain.subscribeQoS1(t, "t/#")
	ctx := context.Background()
	const group = "$share/g/t/#"

	if res := s.opts.Router.PublishShare(ctx, &core.Message{Topic: "t/x", QoS: 1, Payload: []byte("one")}, group); res.Matched <= res.Failed {
		t.Fatalf("a copy for a group with a member here: %+v", res)
	}
	member.expectPublish(t, "t/x", "one", 1, false)

	hook := func() {
		member.write(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Unsubscribe, Qos: 1},
			PacketID: 2, Filters: packets.Subscriptions{{Filter: group}}})
		if pk := member.read(t); pk.FixedHeader.Type != packets.Unsuback {
			t.Errorf("want UNSUBACK, got %v", packets.PacketNames[pk.FixedHeader.Type])
		}
	}
	testHookShareInject.Store(&hook)
	t.Cleanup(func() { testHookShareInject.Store(nil) })
	res := s.opts.Router.PublishShare(ctx, &core.Message{Topic: "t/x", QoS: 1, Payload: []byte("two")}, group)
	testHookShareInject.Store(nil)
	if res.Matched > res.Failed || !errors.Is(res.Err, core.ErrNoMember) {
		t.Errorf("a copy whose last member left: want it refused with ErrNoMember, got %+v", res)
	}
	// The fence comes next to the plain subscriber, not the copy.
	s.opts.Router.Publish(ctx, &core.Message{Topic: "t/fence", QoS: 1, Payload: []byte("fence")})
	plain.expectPublish(t, "t/fence", "fence", 1, false)
}
