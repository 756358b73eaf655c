package e2e

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
)

// slowConn reads at most 4 KiB per millisecond: a subscriber on a slow link.
type slowConn struct{ net.Conn }

func (c slowConn) Read(p []byte) (int, error) {
	time.Sleep(time.Millisecond)
	if len(p) > 4096 {
		p = p[:4096]
	}
	return c.Conn.Read(p)
}

// A QoS 1 subscriber that falls behind loses nothing: messages beyond its
// write queue (mqtt.maxPendingWrites) wait in its session instead of being
// dropped, as mochi alone would do.
func TestSlowQoS1SubscriberLosesNothing(t *testing.T) {
	g := startGateway(t, "--mqtt.maxPendingWrites=2")
	raw, err := net.Dial("tcp", g.MQTTAddr())
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *paho.Publish, 1000)
	sub := paho.NewClient(paho.ClientConfig{Conn: slowConn{raw},
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(pr paho.PublishReceived) (bool, error) {
			got <- pr.Packet
			return true, nil
		}}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := sub.Connect(ctx, &paho.Connect{ClientID: "slow", CleanStart: true}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Disconnect(&paho.Disconnect{}) })
	if _, err := sub.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "slow/#", QoS: 1}}}); err != nil {
		t.Fatal(err)
	}

	const n, pubs = 100, 4
	errs := make(chan error, pubs)
	for p := range pubs {
		c := connect5(t, g.MQTTAddr(), fmt.Sprintf("pub%d", p))
		go func() {
			payload := make([]byte, 8<<10)
			for i := range n {
				copy(payload, fmt.Sprintf("%d/%d;", p, i))
				if _, err := c.Publish(ctx, &paho.Publish{Topic: "slow/t", QoS: 1, Payload: payload}); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range pubs {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]bool{}
	for len(seen) < n*pubs {
		select {
		case m := <-got:
			seen[strings.SplitN(string(m.Payload), ";", 2)[0]] = true
		case <-time.After(30 * time.Second):
			_, metrics := httpDo(t, "GET", "http://"+g.AdminAddr()+"/metrics")
			t.Fatalf("slow QoS 1 subscriber got %d of %d messages\n%s", len(seen), n*pubs, grep(metrics, "dropped"))
		}
	}
}

// A late QoS 1 subscriber gets every stored copy of a retained set larger
// than its session's inflight window: the copies wait for PUBACKs instead
// of being dropped when mqtt.maxInflight is reached.
func TestLateSubscriberGetsRetainedSetLargerThanInflight(t *testing.T) {
	g := startGateway(t, "--mqtt.maxInflight=50")
	pub := connect5(t, g.MQTTAddr(), "pub")
	const n = 1000
	for i := range n {
		pub.publish(t, &paho.Publish{Topic: fmt.Sprintf("big/%d", i), QoS: 1, Retain: true, Payload: []byte("v")})
	}
	pub.publish(t, &paho.Publish{Topic: "big/fence", QoS: 1, Retain: true, Payload: []byte("v")})
	eventually(t, "all retained stored", func() bool { return g.Store().Stats().Count == n+1 })
	late := connect5(t, g.MQTTAddr(), "late")
	late.subscribe(t, paho.SubscribeOptions{Topic: "big/#", QoS: 1})
	seen := map[string]bool{}
	for len(seen) < n+1 {
		m := late.next(t)
		if !m.Retain {
			t.Fatalf("%s arrived with RETAIN=0", m.Topic)
		}
		seen[m.Topic] = true
	}
}
