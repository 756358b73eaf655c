package e2e

import (
	"context"
	"testing"
	"time"
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
	const pubs, per = 4, 2500
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	kps, gw2, atKill := killDrill(ctx, t, bin, args, pubs, per)

	// The remote's link buffer holds the whole drain, so a consumer slower
	// than the bridge loses nothing there.
	rcv := remoteUp(t, front, "--amqp.linkBuffer=20000")

	dc := newDrillCount(pubs)
	for drained := false; ; {
		rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
		m, err := rcv.Receive(rctx, nil)
		rcancel()
		if err != nil {
			if drained {
				break // nothing more within 2 s of the buffer emptying
			}
			drained = gw2.bufferedOf() == 0
			if ctx.Err() != nil {
				t.Fatalf("received %d, buffer still holds %d", dc.got, gw2.bufferedOf())
			}
			continue
		}
		_ = rcv.AcceptMessage(ctx, m)
		p, seq, ok := parsePubSeq(amqpBody(m))
		if !ok || p >= pubs {
			t.Fatalf("message %d: %q", dc.got, amqpBody(m))
		}
		dc.add(t, p, seq)
	}
	// The remote was down for the whole drill, so the bridge sent each
	// record once: the only duplicates can be the publishers' own resends.
	dc.check(t, kps, atKill, "the remote")
}
