package e2e

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/tolsey/tolsey/core/coretest"
)

// The kill -9 test of persistent MQTT sessions (docs/reliability.md, "Persistent MQTT
// sessions"): an acknowledged QoS 1 publish to an offline persistent
// subscriber is never lost.

// sessionClient connects id to addr as an MQTT 5 client with a session
// expiry of an hour and the given clean start, handing every PUBLISH it
// receives to got (paho acknowledges it after got returns). It returns
// the client and the CONNACK's session present flag.
func sessionClient(t *testing.T, addr, id string, clean bool, got func(*paho.Publish)) (*paho.Client, bool) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c := paho.NewClient(paho.ClientConfig{ClientID: id, Conn: conn,
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(pr paho.PublishReceived) (bool, error) {
			got(pr.Packet)
			return true, nil
		}}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	expiry := uint32(3600)
	ca, err := c.Connect(ctx, &paho.Connect{ClientID: id, CleanStart: clean, KeepAlive: 30,
		Properties: &paho.ConnectProperties{SessionExpiryInterval: &expiry}})
	if err != nil || ca.ReasonCode != 0 {
		t.Fatalf("connect %s: %v %v", id, err, ca)
	}
	t.Cleanup(func() { _ = c.Disconnect(&paho.Disconnect{}) })
	return c, ca.SessionPresent
}

// TestSessionKill9KeepsAckedPublishes: a persistent MQTT 5 subscriber to
// alarms/# disconnects; 4 MQTT 5 publishers send 400 QoS 1 messages each
// (1,600) to it while it is offline; after half of them got a PUBACK the
// gateway binary is killed with SIGKILL and started again on the same
// data.dir, and the publishers go on (sending again the one whose PUBACK
// they did not get). The subscriber then reconnects with clean start 0:
// its session is present, and every message that got a PUBACK arrives, in
// order per publisher; duplicates come only from the publishers' resends.
// Before sessions were stored, the subscriber found no session at all.
func TestSessionKill9KeepsAckedPublishes(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the gateway and publishes 1,600 messages across a kill -9")
	}
	bin := buildGatewayBinary(t)
	args := []string{"--data.dir=" + t.TempDir(), "--mqtt.sessions.backend=embedded"} // runGatewayProc's retain.backend=memory would keep them in memory
	gw := runGatewayProc(t, bin, args...)

	sub, _ := sessionClient(t, gw.mqtt, "alarm-panel", true, func(*paho.Publish) {})
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	if _, err := sub.Subscribe(sctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "alarms/#", QoS: 1}}}); err != nil {
		t.Fatal(err)
	}
	cancel()
	_ = sub.Disconnect(&paho.Disconnect{})

	const pubs, per = 4, 400
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	kps, gw2, atKill := publishAcrossKill(ctx, t, bin, args, gw, pubs, per)

	var mu sync.Mutex
	dc := newDrillCount(pubs)
	_, present := sessionClient(t, gw2.mqtt, "alarm-panel", false, func(pk *paho.Publish) {
		p, seq, ok := parsePubSeq(string(pk.Payload))
		mu.Lock()
		defer mu.Unlock()
		if !ok || p >= pubs || pk.Topic != fmt.Sprintf("alarms/p%d", p) {
			t.Errorf("unexpected message %s %q", pk.Topic, pk.Payload)
			return
		}
		dc.add(t, p, seq)
	})
	if !present {
		t.Fatalf("session not present after kill -9\n--- gateway log:\n%s", gw2.Output())
	}
	coretest.Eventually(t, "every PUBACKed message delivered", 2*time.Minute, func() bool {
		mu.Lock()
		defer mu.Unlock()
		for p, kp := range kps {
			for seq, ok := range kp.acked {
				if ok && dc.seen[p][seq] == 0 {
					return false
				}
			}
		}
		return true
	})
	mu.Lock()
	defer mu.Unlock()
	dc.check(t, kps, atKill, "the persistent session")
}
