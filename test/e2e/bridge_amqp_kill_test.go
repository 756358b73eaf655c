package e2e

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tolsey/tolsey/core/coretest"
)

// The kill -9 drill of TestBridgeKill9StoreAndForward against a remote
// AMQP broker (a second gateway). The gateway binary runs with an outbound
// QoS 1 AMQP rule alarms/# ⇒ uplink while the remote is not running; 4 MQTT
// 5 publishers send 2,500 QoS 1 messages each; after 5,000 PUBACKs the
// gateway is killed with SIGKILL and started again on the same data.dir,
// and the publishers go on (sending again the one whose PUBACK the kill
// swallowed). Then the remote starts, a consumer attaches to uplink on it,
// and the remote becomes reachable: every PUBACKed message arrives, in
// order per publisher; duplicates are counted.
func TestBridgeAMQPKill9StoreAndForward(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the gateway and publishes 10,000 messages")
	}
	bin := buildGatewayBinary(t)
	front := freePort(t) // where the bridge finds the remote, once it is up
	args := []string{"--data.dir=" + t.TempDir(), "--node.id=edge",
		amqpBridgeFlag("cloud", front, ruleJSON{"direction": "out", "local": "alarms/#", "remote": "uplink", "qos": 1})}
	gw := runGatewayProc(t, bin, args...)
	addrs := &gwAddr{addr: gw.mqtt, changed: make(chan struct{})}

	const pubs, per = 4, 2500
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var total atomic.Int64
	kps := make([]*killPublisher, pubs)
	errs := make(chan error, pubs)
	for i := range kps {
		kps[i] = &killPublisher{id: i}
		go func(kp *killPublisher) { errs <- kp.run(ctx, addrs, per, &total) }(kps[i])
	}
	coretest.Eventually(t, "5,000 PUBACKs", 3*time.Minute, func() bool { return total.Load() >= pubs*per/2 })
	gw.kill()
	atKill := total.Load()
	gw2 := runGatewayProc(t, bin, args...)
	addrs.set(gw2.mqtt)
	for range kps {
		if err := <-errs; err != nil {
			t.Fatalf("%v\n--- gateway log:\n%s", err, gw2.output())
		}
	}
	if got := total.Load(); got != pubs*per {
		t.Fatalf("%d PUBACKs, want %d", got, pubs*per)
	}
	if n := gw2.bufferedOf(); n < int64(pubs*per)-atKill {
		t.Fatalf("the restarted gateway's buffer holds %d, want at least the %d acknowledged since the kill", n, int64(pubs*per)-atKill)
	}

	// The remote comes up with a consumer on uplink before the bridge can
	// reach it: it keeps no messages for absent consumers. Its link buffer
	// holds the whole drain, so a consumer slower than the bridge loses
	// nothing there either.
	remote := startGateway(t, "--node.id=cloud", "--amqp.linkBuffer=20000")
	rcv := amqpReceiver(t, amqpSession(t, remote), "uplink")
	ln, err := net.Listen("tcp", front)
	if err != nil {
		t.Fatalf("listen on the reserved port: %v", err)
	}
	proxy(t, ln, remote.AMQPAddr())

	seen := make([]map[int]int, pubs)
	last := make([]int, pubs)
	for i := range seen {
		seen[i], last[i] = map[int]int{}, -1
	}
	dups, outOfOrder, got := 0, 0, 0
	for drained := false; ; {
		rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
		m, err := rcv.Receive(rctx, nil)
		rcancel()
		if err != nil {
			if drained {
				break // nothing more within 2 s of the buffer emptying
			}
			if gw2.bufferedOf() == 0 {
				drained = true
			}
			if ctx.Err() != nil {
				t.Fatalf("received %d, buffer still holds %d", got, gw2.bufferedOf())
			}
			continue
		}
		_ = rcv.AcceptMessage(ctx, m)
		got++
		p, seq, ok := parsePubSeq(amqpBody(m))
		if !ok || p >= pubs {
			t.Fatalf("message %d: %q", got, amqpBody(m))
		}
		seen[p][seq]++
		if seen[p][seq] > 1 {
			dups++
			continue // order is judged on first copies
		}
		if seq <= last[p] {
			outOfOrder++
			if outOfOrder <= 5 {
				t.Errorf("publisher %d: %d after %d", p, seq, last[p])
			}
		}
		last[p] = seq
	}
	missing, resentDups := 0, 0
	for p, kp := range kps {
		for seq, ok := range kp.acked {
			if ok && seen[p][seq] == 0 {
				missing++
				if missing <= 5 {
					t.Errorf("publisher %d seq %d got a PUBACK and did not arrive", p, seq)
				}
			}
		}
		for _, seq := range kp.resent {
			resentDups += max(seen[p][seq]-1, 0)
		}
	}
	t.Logf("kill -9 after %d PUBACKs; the remote received %d messages; %d duplicates (%d of them messages their publisher sent again after the kill); missing %d; out of order %d; resent %v",
		atKill, got, dups, resentDups, missing, outOfOrder, resentOf(kps))
	if missing > 0 || outOfOrder > 0 {
		t.Fatalf("missing %d acknowledged messages, %d out of order", missing, outOfOrder)
	}
	// The remote was down for the whole drill, so the bridge sent each
	// record once: the only duplicates are the publishers' own resends.
	if dups != resentDups {
		t.Errorf("%d duplicates the publishers did not cause", dups-resentDups)
	}
}
