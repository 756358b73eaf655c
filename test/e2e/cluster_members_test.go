package e2e

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/eclipse/paho.golang/paho"
	natsserver "github.com/nats-io/nats-server/v2/server"

	"github.com/tolsey/tolsey/bridge/cluster"
	"github.com/tolsey/tolsey/gateway"
	"github.com/tolsey/tolsey/retain/redistest"
)

// clusterArgs are the flags of gateway node in the cluster on s and r.
func clusterArgs(s *natsserver.Server, r *redistest.Server, node string, set ...string) []string {
	return append([]string{"--cluster.enabled=true", "--bridge.nats.url=" + s.ClientURL(), "--node.id=" + node,
		"--retain.backend=redis", "--retain.redis.url=" + r.URL(), "--retain.redis.prefix=cluster:"}, set...)
}

// clusterOf reads GET /api/v1/cluster from the admin API at addr; ok is
// false when it cannot be read (a gateway being killed).
func clusterOf(addr string) (st gateway.ClusterStatus, ok bool) {
	b, err := httpGet("http://" + addr + "/api/v1/cluster")
	if err != nil {
		return st, false
	}
	return st, json.Unmarshal(b, &st) == nil
}

// memberNodes lists the node ids of st's members.
func memberNodes(st gateway.ClusterStatus) string {
	var ns []string
	for _, m := range st.Members {
		ns = append(ns, m.Node)
	}
	return strings.Join(ns, ",")
}

// Every gateway lists every other with its addresses, from any of them; a
// gateway that stops says goodbye and leaves the list at once, long before
// three heartbeats (one minute here) would have removed it; a second
// process with a node.id in use is reported by both, and the later one is
// not ready.
func TestClusterMembers(t *testing.T) {
	s := startNATS(t, 0, "")
	r := startRedis(t)
	slow := "--cluster.heartbeat=1m" // joins and goodbyes are immediate; expiry would take 3 min
	var gs []*gateway.Gateway
	for _, n := range []string{"a", "b", "c"} {
		gs = append(gs, startGateway(t, clusterArgs(s, r, n, slow)...))
	}
	for _, g := range gs {
		eventually(t, "every gateway to list a,b,c", func() bool {
			st, _ := clusterOf(g.AdminAddr())
			return memberNodes(st) == "a,b,c"
		})
	}
	st, _ := clusterOf(gs[0].AdminAddr())
	for i, m := range st.Members {
		g := gs[i]
		if m.MQTT != g.MQTTAddr() || m.AMQP != g.AMQPAddr() || m.Admin != g.AdminAddr() || m.Instance == "" ||
			m.Started.IsZero() || m.LastHeard.IsZero() || m.Self != (i == 0) {
			t.Errorf("member %d as a sees it: %+v (want mqtt %s amqp %s admin %s)", i, m, g.MQTTAddr(), g.AMQPAddr(), g.AdminAddr())
		}
	}

	stopGateway(t, gs[2])
	eventually(t, "c to leave a's and b's lists on its goodbye", func() bool {
		sa, _ := clusterOf(gs[0].AdminAddr())
		sb, _ := clusterOf(gs[1].AdminAddr())
		return memberNodes(sa) == "a,b" && memberNodes(sb) == "a,b"
	})

	// A second "a": both see it; it started later, so it is not ready and
	// the first one is.
	dup := startGateway(t, clusterArgs(s, r, "a", slow)...)
	eventually(t, "a to report the duplicate node.id", func() bool {
		st, _ := clusterOf(gs[0].AdminAddr())
		return len(st.Duplicates) == 1 && st.Duplicates[0].Instance == clusterStatus(t, dup).Instance
	})
	eventually(t, "the later a to report it and not be ready", func() bool {
		st, _ := clusterOf(dup.AdminAddr())
		return len(st.Duplicates) == 1 && dup.Ready() != nil
	})
	if err := gs[0].Ready(); err != nil {
		t.Fatalf("the first a is not ready: %v", err)
	}
	if code, body := httpDo(t, "GET", "http://"+dup.AdminAddr()+"/readyz"); code != 503 || !strings.Contains(body, "node.id") {
		t.Fatalf("later a's /readyz: %d %q", code, body)
	}
	if _, body := httpDo(t, "GET", "http://"+gs[0].AdminAddr()+"/metrics"); !strings.Contains(body, "tolsey_cluster_duplicate_node 1") ||
		!strings.Contains(body, "tolsey_cluster_members 2") {
		t.Fatalf("a's metrics lack the members or the duplicate:\n%s", grepLines(body, "tolsey_cluster_"))
	}
	stopGateway(t, dup)
	eventually(t, "the duplicate gone after its goodbye", func() bool {
		st, _ := clusterOf(gs[0].AdminAddr())
		return len(st.Duplicates) == 0 && memberNodes(st) == "a,b"
	})
}

// A gateway killed with kill -9 says nothing: the others remove it after
// three silent heartbeats, keep serving each other meanwhile, and list it
// again once it is restarted (with a new instance). Connection counts
// travel with the heartbeats.
func TestClusterMemberKill9(t *testing.T) {
	bin := buildGatewayBinary(t)
	s := startNATS(t, 0, "")
	r := startRedis(t)
	hb := "--cluster.heartbeat=200ms"
	a := startGateway(t, clusterArgs(s, r, "a", hb)...)
	b := startGateway(t, clusterArgs(s, r, "b", hb)...)
	c := runGatewayProc(t, bin, clusterArgs(s, r, "c", hb, "--data.dir="+t.TempDir())...)
	eventually(t, "a to list a,b,c", func() bool {
		st, _ := clusterOf(a.AdminAddr())
		return memberNodes(st) == "a,b,c"
	})
	connect5(t, c.mqtt, "onC")
	eventually(t, "c's connection count on a", func() bool {
		st, _ := clusterOf(a.AdminAddr())
		i := slices.IndexFunc(st.Members, func(m cluster.Member) bool { return m.Node == "c" })
		return i >= 0 && st.Members[i].Connections == 1 && st.Members[i].MQTT == c.mqtt
	})
	first, _ := clusterOf(c.admin)

	sub := connect5(t, b.MQTTAddr(), "subB")
	sub.subscribe(t, paho.SubscribeOptions{Topic: "k/#", QoS: 1})
	pub := connect5(t, a.MQTTAddr(), "pubA")

	c.Kill()
	eventually(t, "a and b to remove c after its heartbeats stop", func() bool {
		sa, _ := clusterOf(a.AdminAddr())
		sb, _ := clusterOf(b.AdminAddr())
		return memberNodes(sa) == "a,b" && memberNodes(sb) == "a,b"
	})
	pub.publish(t, &paho.Publish{Topic: "k/x", QoS: 1, Payload: []byte("while c is dead")})
	if m := sub.next(t); string(m.Payload) != "while c is dead" {
		t.Fatalf("b got %q", m.Payload)
	}

	c2 := runGatewayProc(t, bin, clusterArgs(s, r, "c", hb, "--data.dir="+t.TempDir())...)
	eventually(t, "a to list the restarted c", func() bool {
		st, _ := clusterOf(a.AdminAddr())
		i := slices.IndexFunc(st.Members, func(m cluster.Member) bool { return m.Node == "c" })
		return i >= 0 && st.Members[i].MQTT == c2.mqtt && st.Members[i].Instance != first.Instance
	})
	subC := connect5(t, c2.mqtt, "subC")
	subC.subscribe(t, paho.SubscribeOptions{Topic: "k/#", QoS: 1})
	publishUntil(t, "a's publish to reach the restarted c", pub, "k/x", subC.msgs)
	if n := c2.Logged("node.id"); n != 0 {
		t.Errorf("restarted c logged a node.id problem:\n%s", c2.Output())
	}
	if st, _ := clusterOf(a.AdminAddr()); len(st.Duplicates) != 0 {
		t.Errorf("a sees duplicates: %+v", st.Duplicates)
	}
}

// NATS restarted on its port: each gateway sees the other leave (no
// heartbeats), reconnects, announces itself again (counted in
// tolsey_cluster_reconnects_total), lists the other again, and messages
// and takeovers cross again.
func TestClusterNATSRestart(t *testing.T) {
	s, gs := cluster2On(t, "--cluster.heartbeat=200ms")
	a, b := gs[0], gs[1]
	port := natsPort(s)
	sub := connect5(t, b.MQTTAddr(), "subB")
	sub.subscribe(t, paho.SubscribeOptions{Topic: "n/#", QoS: 1})
	pub := connect5(t, a.MQTTAddr(), "pubA")

	s.Shutdown()
	s.WaitForShutdown()
	eventually(t, "each gateway to drop the other while NATS is down", func() bool {
		sa, _ := clusterOf(a.AdminAddr())
		sb, _ := clusterOf(b.AdminAddr())
		return memberNodes(sa) == "a" && memberNodes(sb) == "b"
	})
	startNATS(t, port, "")
	eventually(t, "each gateway to list both again", func() bool {
		sa, _ := clusterOf(a.AdminAddr())
		sb, _ := clusterOf(b.AdminAddr())
		return memberNodes(sa) == "a,b" && memberNodes(sb) == "a,b"
	})
	for _, g := range gs {
		if st := clusterStatus(t, g); st.Reconnects == 0 {
			t.Errorf("%s: reconnect not counted: %+v", st.Node, st)
		}
		if _, body := httpDo(t, "GET", "http://"+g.AdminAddr()+"/metrics"); !strings.Contains(body, "tolsey_cluster_reconnects_total 1") {
			t.Errorf("metrics: %s", grepLines(body, "tolsey_cluster_"))
		}
	}
	publishUntil(t, "a's messages to reach b again", pub, "n/x", sub.msgs)
	old, _ := connectWatched(t, a.MQTTAddr(), "after", nil)
	connectWatched(t, b.MQTTAddr(), "after", nil)
	eventually(t, "the takeover across the healed cluster", func() bool { return old.serverReason() == 0x8E })
}
