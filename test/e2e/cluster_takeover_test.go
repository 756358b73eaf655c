package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	pahov3 "github.com/eclipse/paho.mqtt.golang"
	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/tolsey/tolsey/gateway"
	"github.com/tolsey/tolsey/mqtt"
	"github.com/tolsey/tolsey/retain/redistest"
)

// cluster2 runs gateways a and b clustered on one NATS and one Redis,
// with set applied, and waits until each lists both.
func cluster2(t *testing.T, set ...string) []*gateway.Gateway {
	t.Helper()
	_, gs := cluster2On(t, set...)
	return gs
}

func cluster2On(t *testing.T, set ...string) (*natsserver.Server, []*gateway.Gateway) {
	t.Helper()
	s := startNATS(t, 0, "")
	r := startRedis(t)
	gs := []*gateway.Gateway{startGateway(t, clusterArgs(s, r, "a", set...)...), startGateway(t, clusterArgs(s, r, "b", set...)...)}
	for _, g := range gs {
		eventually(t, "both gateways to list a,b", func() bool {
			st, _ := clusterOf(g.AdminAddr())
			return memberNodes(st) == "a,b"
		})
	}
	return s, gs
}

// watched5 is an MQTT 5 client that notes the server's DISCONNECT and
// the end of its connection.
type watched5 struct {
	*paho.Client
	mu     sync.Mutex
	reason int // the server's DISCONNECT reason code; -1: none
	msgs   chan *paho.Publish
}

func connectWatched(t *testing.T, addr, id string, cp *paho.Connect) (*watched5, *paho.Connack) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	w := &watched5{reason: -1, msgs: make(chan *paho.Publish, 1000)}
	w.Client = paho.NewClient(paho.ClientConfig{ClientID: id, Conn: conn,
		OnServerDisconnect: func(d *paho.Disconnect) {
			w.mu.Lock()
			w.reason = int(d.ReasonCode)
			w.mu.Unlock()
		},
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(pr paho.PublishReceived) (bool, error) {
			w.msgs <- pr.Packet
			return true, nil
		}},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if cp == nil {
		cp = &paho.Connect{CleanStart: true, KeepAlive: 30}
	}
	cp.ClientID = id
	ca, err := w.Connect(ctx, cp)
	if err != nil || ca.ReasonCode != 0 {
		t.Fatalf("connect %s to %s: %v %+v", id, addr, err, ca)
	}
	t.Cleanup(func() { _ = w.Disconnect(&paho.Disconnect{}) })
	return w, ca
}

func (w *watched5) serverReason() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.reason
}

func (w *watched5) isClosed() bool {
	select {
	case <-w.Done():
		return true
	default:
		return false
	}
}

// connectedOn counts the connected sessions of id on g.
func connectedOn(t *testing.T, g *gateway.Gateway, id string) int {
	t.Helper()
	for _, s := range sessionsAt(t, g.AdminAddr()) {
		if s.ClientID == id && s.Connected {
			return 1
		}
	}
	return 0
}

// A client id is unique across the cluster: the same id connecting to
// another gateway ends the old connection, MQTT 5 with DISCONNECT 0x8E
// (session taken over) and MQTT 3.1.1 by closing it, as one broker does.
// The new connection stays and works.
func TestClusterTakeover(t *testing.T) {
	gs := cluster2(t, "--cluster.heartbeat=200ms")
	a, b := gs[0], gs[1]

	old, _ := connectWatched(t, a.MQTTAddr(), "dev5", nil)
	cur, _ := connectWatched(t, b.MQTTAddr(), "dev5", nil)
	eventually(t, "the connection on a to get DISCONNECT 0x8E and close", func() bool {
		return old.serverReason() == 0x8E && old.isClosed()
	})
	if cur.isClosed() || connectedOn(t, b, "dev5") != 1 || connectedOn(t, a, "dev5") != 0 {
		t.Fatalf("after the takeover: new closed %v, on b %d, on a %d", cur.isClosed(), connectedOn(t, b, "dev5"), connectedOn(t, a, "dev5"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := cur.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "t/#", QoS: 1}}}); err != nil {
		t.Fatalf("the new connection: %v", err)
	}
	if st := clusterStatus(t, a); st.Takeover == nil || st.Takeover.TakenOver != 1 {
		t.Fatalf("a's takeover counter: %+v", st.Takeover)
	}

	lost := make(chan struct{})
	o := pahov3.NewClientOptions().AddBroker("tcp://" + a.MQTTAddr()).SetClientID("dev3").SetProtocolVersion(4).
		SetAutoReconnect(false).SetConnectionLostHandler(func(pahov3.Client, error) { close(lost) })
	c3 := pahov3.NewClient(o)
	if tok := c3.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("connect dev3: %v", tok.Error())
	}
	t.Cleanup(func() { c3.Disconnect(100) })
	connect3(t, "tcp://"+b.MQTTAddr(), "dev3")
	select {
	case <-lost:
	case <-time.After(10 * time.Second):
		t.Fatal("the MQTT 3.1.1 connection on a was not closed when dev3 connected to b")
	}
	if connectedOn(t, b, "dev3") != 1 {
		t.Fatal("dev3 not connected on b")
	}
}

// Two connections of one client id at once on two gateways, many times:
// each time exactly one stays connected in the cluster.
func TestClusterTakeoverRace(t *testing.T) {
	gs := cluster2(t, "--cluster.heartbeat=200ms")
	for i := range 10 {
		id := fmt.Sprint("race", i)
		var wg sync.WaitGroup
		for _, g := range gs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				conn, err := net.Dial("tcp", g.MQTTAddr())
				if err != nil {
					t.Error(err)
					return
				}
				c := paho.NewClient(paho.ClientConfig{ClientID: id, Conn: conn})
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				_, _ = c.Connect(ctx, &paho.Connect{ClientID: id, CleanStart: true, KeepAlive: 30}) // the loser may be refused
				t.Cleanup(func() { _ = c.Disconnect(&paho.Disconnect{}) })
			}()
		}
		wg.Wait()
		eventually(t, id+" connected on exactly one gateway", func() bool {
			return connectedOn(t, gs[0], id)+connectedOn(t, gs[1], id) == 1
		})
	}
}

// A persistent session moves with its client (mqtt.sessions.backend:
// redis): its subscriptions, and the messages queued for it on the
// gateway it left while it was offline, come back on the gateway it
// connects to next.
func TestClusterSessionMoves(t *testing.T) {
	gs := cluster2(t, "--cluster.heartbeat=200ms", "--mqtt.sessions.backend=redis")
	a, b := gs[0], gs[1]
	first, _ := connectWatched(t, a.MQTTAddr(), "mover", persistentConnect())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := first.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "mv/#", QoS: 1}}}); err != nil {
		t.Fatal(err)
	}
	if err := first.Disconnect(&paho.Disconnect{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "mover offline on a", func() bool { return connectedOn(t, a, "mover") == 0 })
	// Queued on a for the offline session, by publishers on a and on b.
	pa := connect5(t, a.MQTTAddr(), "pa")
	pb := connect5(t, b.MQTTAddr(), "pb")
	for k := range 5 {
		pa.publish(t, &paho.Publish{Topic: "mv/a", QoS: 1, Payload: []byte(fmt.Sprint("a", k))})
		pb.publish(t, &paho.Publish{Topic: "mv/b", QoS: 1, Payload: []byte(fmt.Sprint("b", k))})
	}
	eventually(t, "a to hold 10 messages for mover", func() bool {
		for _, s := range sessionsAt(t, a.AdminAddr()) {
			if s.ClientID == "mover" {
				return s.Queued == 10
			}
		}
		return false
	})

	moved, got := resumeOn(t, b.MQTTAddr(), "mover", 10)
	for k := range 5 {
		if got[fmt.Sprint("a", k)] != 1 || got[fmt.Sprint("b", k)] != 1 {
			t.Fatalf("queued messages on b: %v", got)
		}
	}
	// a let go of it; its subscription works on b, from either gateway.
	for _, s := range sessionsAt(t, a.AdminAddr()) {
		if s.ClientID == "mover" {
			t.Fatalf("a still holds mover's session: %+v", s)
		}
	}
	pa.publish(t, &paho.Publish{Topic: "mv/a", QoS: 1, Payload: []byte("live")})
	select {
	case m := <-moved.msgs:
		if string(m.Payload) != "live" {
			t.Fatalf("got %q, want live", m.Payload)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the moved subscription does not receive a's publish")
	}

	// A clean start on a discards the session b let go of; a clean
	// start 0 on b afterwards finds none [MQTT-3.1.2-4].
	clean, _ := connectWatched(t, a.MQTTAddr(), "mover", nil)
	eventually(t, "b to end mover's connection", func() bool { return moved.serverReason() == 0x8E })
	if err := clean.Disconnect(&paho.Disconnect{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "mover gone from a", func() bool { return connectedOn(t, a, "mover") == 0 })
	if _, ca := connectWatched(t, b.MQTTAddr(), "mover", persistentConnect()); ca.SessionPresent {
		t.Fatal("session present 1 after a clean start: the discarded session came back from the store")
	}
}

// sessionsAt is GET /api/v1/sessions of the admin API at addr.
func sessionsAt(t *testing.T, addr string) []mqtt.SessionInfo {
	t.Helper()
	b, err := httpGet("http://" + addr + "/api/v1/sessions")
	if err != nil {
		t.Fatal(err)
	}
	var out []mqtt.SessionInfo
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return out
}

// The gateway holding an offline persistent session is killed with
// kill -9: the client connecting to another gateway gets the session as
// the dead one last wrote it (every message whose publisher got a PUBACK
// there), and the dead gateway, restarted, leaves the session to the
// gateway that holds it now.
func TestClusterSessionMovesAfterKill9(t *testing.T) {
	bin := buildGatewayBinary(t)
	s := startNATS(t, 0, "")
	r := startRedis(t)
	set := []string{"--cluster.heartbeat=200ms", "--mqtt.sessions.backend=redis"}
	a := runGatewayProc(t, bin, clusterArgs(s, r, "a", append(set, "--data.dir="+t.TempDir())...)...)
	b := startGateway(t, clusterArgs(s, r, "b", set...)...)
	eventually(t, "b to list a", func() bool {
		st, _ := clusterOf(b.AdminAddr())
		return memberNodes(st) == "a,b"
	})
	first, _ := connectWatched(t, a.mqtt, "mover", persistentConnect())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := first.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "mk/#", QoS: 1}}}); err != nil {
		t.Fatal(err)
	}
	if err := first.Disconnect(&paho.Disconnect{}); err != nil {
		t.Fatal(err)
	}
	// Published on a: each PUBACK waits until the session's copy is in
	// Redis (docs/mqtt-frontend.md, "Persistent sessions").
	pa := connect5(t, a.mqtt, "pa")
	for k := range 5 {
		if r := pa.publish(t, &paho.Publish{Topic: "mk/x", QoS: 1, Payload: []byte(fmt.Sprint(k))}); r.ReasonCode != 0 {
			t.Fatalf("publish %d: %#x", k, r.ReasonCode)
		}
	}
	a.Kill()
	// While b still lists a, a claim goes unanswered and the resume is
	// refused as server busy (a may hold the session still: mqtt/cluster.go
	// claim); the client tries again once a has left b's list.
	eventually(t, "b to drop a", func() bool {
		st, _ := clusterOf(b.AdminAddr())
		return memberNodes(st) == "b"
	})

	moved, got := resumeOn(t, b.MQTTAddr(), "mover", 5)
	for k := range 5 {
		if got[fmt.Sprint(k)] != 1 {
			t.Fatalf("acknowledged messages on b after a died: %v", got)
		}
	}
	a2 := runGatewayProc(t, bin, clusterArgs(s, r, "a", append(set, "--data.dir="+t.TempDir())...)...)
	for _, si := range sessionsAt(t, a2.admin) {
		if si.ClientID == "mover" {
			t.Fatalf("the restarted a restored the session b holds: %+v", si)
		}
	}
	pa2 := connect5(t, a2.mqtt, "pa2")
	publishUntil(t, "a publish on the restarted a to reach mover on b", pa2, "mk/x", moved.msgs)
}

// persistentConnect is an MQTT 5 CONNECT with clean start 0 and a
// session expiry of an hour.
func persistentConnect() *paho.Connect {
	expiry := uint32(3600)
	return &paho.Connect{CleanStart: false, KeepAlive: 30, Properties: &paho.ConnectProperties{SessionExpiryInterval: &expiry}}
}

// resumeOn connects id with clean start 0 to addr, checks that its
// session is present, and counts the first n payloads it receives.
func resumeOn(t *testing.T, addr, id string, n int) (*watched5, map[string]int) {
	t.Helper()
	w, ca := connectWatched(t, addr, id, persistentConnect())
	if !ca.SessionPresent {
		t.Fatalf("session present 0 on %s: the session did not move", addr)
	}
	got := map[string]int{}
	for range n {
		select {
		case m := <-w.msgs:
			got[string(m.Payload)]++
		case <-time.After(10 * time.Second):
			t.Fatalf("the queued messages did not follow the session; got %v", got)
		}
	}
	return w, got
}

// publishUntil publishes "after" on topic through pub until it arrives on
// msgs: a subscription that another gateway learns of soon, not at once.
func publishUntil(t *testing.T, what string, pub *client5, topic string, msgs chan *paho.Publish) {
	t.Helper()
	eventually(t, what, func() bool {
		pub.publish(t, &paho.Publish{Topic: topic, QoS: 1, Payload: []byte("after")})
		select {
		case m := <-msgs:
			return string(m.Payload) == "after"
		case <-time.After(100 * time.Millisecond):
			return false
		}
	})
}

// BenchmarkClusterConnect is the cost of the takeover claim: one MQTT 5
// CONNECT (clean start) and DISCONNECT per op on a lone gateway, on one
// of two clustered gateways, and on one of two with the sessions in
// Redis (a clean start also deletes a stored session there). The last
// case resumes one persistent session (clean start 0) on the gateway
// that holds it, each op: the claim and the epoch check (docs/cluster.md,
// "A resume on a gateway holding a stale copy").
//
//	go test -run '^$' -bench ClusterConnect -benchtime=300x ./test/e2e/
func BenchmarkClusterConnect(b *testing.B) {
	for _, c := range []struct {
		name    string
		cluster bool
		set     []string
		resume  bool
	}{
		{"alone", false, nil, false},
		{"cluster2", true, nil, false},
		{"cluster2-redis-sessions", true, []string{"--mqtt.sessions.backend=redis"}, false},
		{"cluster2-redis-sessions-resume", true, []string{"--mqtt.sessions.backend=redis"}, true},
	} {
		b.Run(c.name, func(b *testing.B) {
			var addr string
			if c.cluster {
				s := startNATS(b, 0, "")
				r := redistest.Start(b)
				g := startGateway(b, clusterArgs(s, r, "a", c.set...)...)
				startGateway(b, clusterArgs(s, r, "b", c.set...)...)
				eventually(b, "a to list b", func() bool {
					st, _ := clusterOf(g.AdminAddr())
					return memberNodes(st) == "a,b"
				})
				addr = g.MQTTAddr()
			} else {
				addr = startGateway(b).MQTTAddr()
			}
			b.ResetTimer()
			for i := range b.N {
				conn, err := net.Dial("tcp", addr)
				if err != nil {
					b.Fatal(err)
				}
				id := fmt.Sprint("bench", i)
				connect := &paho.Connect{ClientID: id, CleanStart: true, KeepAlive: 30}
				if c.resume {
					id = "bench"
					connect = persistentConnect()
					connect.ClientID = id
				}
				cl := paho.NewClient(paho.ClientConfig{ClientID: id, Conn: conn})
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				if ca, err := cl.Connect(ctx, connect); err != nil || ca.ReasonCode != 0 {
					b.Fatalf("connect: %v", err)
				}
				cancel()
				_ = cl.Disconnect(&paho.Disconnect{})
			}
		})
	}
}

// BenchmarkClusterCross is one QoS 0 message per op published by an MQTT
// client on gateway a to a subscriber on b, through NATS: the in-process
// cross path, to profile the cluster's own cost per message
// (docs/cluster.md, "Benchmarks"). A QoS 1 publish every 1,000 paces the
// publisher, so that no queue drops.
//
//	go test -run '^$' -bench ClusterCross -benchtime=100000x -cpuprofile /tmp/cpu.out ./test/e2e/
func BenchmarkClusterCross(b *testing.B) {
	s := startNATS(b, 0, "")
	r := redistest.Start(b)
	ga := startGateway(b, clusterArgs(s, r, "a")...)
	gb := startGateway(b, clusterArgs(s, r, "b")...)
	eventually(b, "a to list b", func() bool {
		st, _ := clusterOf(ga.AdminAddr())
		return memberNodes(st) == "a,b"
	})
	got := make(chan struct{}, 1024)
	dial := func(addr, id string, recv func(paho.PublishReceived) (bool, error)) *paho.Client {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			b.Fatal(err)
		}
		cfg := paho.ClientConfig{ClientID: id, Conn: conn}
		if recv != nil {
			cfg.OnPublishReceived = []func(paho.PublishReceived) (bool, error){recv}
		}
		cl := paho.NewClient(cfg)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if ca, err := cl.Connect(ctx, &paho.Connect{ClientID: id, CleanStart: true, KeepAlive: 30}); err != nil || ca.ReasonCode != 0 {
			b.Fatalf("connect %s: %v", id, err)
		}
		b.Cleanup(func() { _ = cl.Disconnect(&paho.Disconnect{}) })
		return cl
	}
	sub := dial(gb.MQTTAddr(), "bsub", func(pr paho.PublishReceived) (bool, error) {
		if pr.Packet.Topic == "bx/t" {
			got <- struct{}{}
		}
		return true, nil
	})
	ctx := context.Background()
	if _, err := sub.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "bx/t"}}}); err != nil {
		b.Fatal(err)
	}
	pub := dial(ga.MQTTAddr(), "bpub", nil)
	payload := make([]byte, 64)
	eventually(b, "b's subscription known to a", func() bool {
		_, _ = pub.Publish(ctx, &paho.Publish{Topic: "bx/t", Payload: payload})
		select {
		case <-got:
			return true
		case <-time.After(100 * time.Millisecond):
			return false
		}
	})
	for len(got) > 0 {
		<-got
	}
	done := make(chan struct{})
	go func() {
		for range b.N {
			<-got
		}
		close(done)
	}()
	b.ResetTimer()
	for i := range b.N {
		_, _ = pub.Publish(ctx, &paho.Publish{Topic: "bx/t", Payload: payload})
		if i%1000 == 999 {
			_, _ = pub.Publish(ctx, &paho.Publish{Topic: "bz/pace", QoS: 1})
		}
	}
	select {
	case <-done:
	case <-time.After(time.Minute):
		b.Fatal("not every message arrived on b")
	}
}

// A claim one listed gateway does not answer in time (here a member that
// only ever sent a heartbeat, as a gateway dead but not yet removed):
// with Redis sessions a resume (clean start 0) is refused as server busy,
// 0x89, rather than given a session that gateway may still hold and
// write; a clean start goes ahead. Before, the resume read the stored
// session anyway and was accepted.
func TestClusterClaimNotAnsweredRefusesResume(t *testing.T) {
	s := startNATS(t, 0, "")
	r := startRedis(t)
	b := startGateway(t, clusterArgs(s, r, "b", "--cluster.heartbeat=10s", "--cluster.takeoverTimeout=300ms",
		"--mqtt.sessions.backend=redis")...)
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	hb, _ := json.Marshal(map[string]any{"n": "z", "i": "silent", "s": time.Now().UnixMilli(), "up": 1})
	eventually(t, "b to list the silent member z", func() bool {
		_ = nc.Publish("gw.node.z", hb)
		st, _ := clusterOf(b.AdminAddr())
		return memberNodes(st) == "b,z"
	})

	conn, err := net.Dial("tcp", b.MQTTAddr())
	if err != nil {
		t.Fatal(err)
	}
	cl := paho.NewClient(paho.ClientConfig{ClientID: "resumer", Conn: conn})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cp := persistentConnect()
	cp.ClientID = "resumer"
	ca, err := cl.Connect(ctx, cp)
	if ca == nil || ca.ReasonCode != 0x89 {
		t.Fatalf("a resume whose claim z did not answer: want CONNACK 0x89, got %+v (%v)", ca, err)
	}
	if st := clusterStatus(t, b); st.Takeover == nil || st.Takeover.Timeouts == 0 {
		t.Fatalf("b's takeover timeouts: %+v", st.Takeover)
	}
	connectWatched(t, b.MQTTAddr(), "cleaner", nil) // a clean start goes ahead
}
