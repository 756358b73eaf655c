package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/tolsey/tolsey/gateway"
)

// parked is the number of messages in the alternate queue "parked" of g.
func parked(t *testing.T, g *gateway.Gateway) int {
	t.Helper()
	code, body := httpDo(t, "GET", "http://"+g.AdminAddr()+"/api/v1/queues/parked")
	if code != 200 {
		t.Fatalf("GET parked: %d %s", code, body)
	}
	var q struct{ Messages int }
	if err := json.Unmarshal([]byte(body), &q); err != nil {
		t.Fatal(err)
	}
	return q.Messages
}

// TestClusterAlternateParksOnce: an alternate destination in a cluster
// (docs/queues.md, "Alternate destinations"; each gateway with its own
// embedded "parked") takes a publish that no consumer on any gateway
// receives, once, on the gateway it entered; and none while a consumer on
// another gateway receives it. Before, the cluster's own subscription
// counted as a live consumer of every local message (nothing was ever
// parked where it entered), and the alternates' filters were announced
// to the other gateways, which each parked a copy.
func TestClusterAlternateParksOnce(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "alternates.yaml")
	if err := os.WriteFile(cfg, []byte("queues:\n  declare:\n    - name: parked\n  addresses:\n    - prefix: alt/\n      alternate: parked\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, gs := cluster3(t, "--config="+cfg)
	a, b, c := gs[0], gs[1], gs[2]
	pub := connect5(t, a.MQTTAddr(), "alt-pub")
	n := 0
	publish := func() string {
		n++
		body := fmt.Sprintf("m%d", n)
		pub.publish(t, &paho.Publish{Topic: "alt/x", QoS: 1, Payload: []byte(body)})
		return body
	}

	// Nobody subscribes anywhere: parked on a, once the interest summaries
	// are exchanged (until then every message is sent to the cluster).
	eventually(t, "a publish nobody receives parked on the gateway it entered", func() bool {
		publish()
		return parked(t, a) > 0
	})
	if pb, pc := parked(t, b), parked(t, c); pb != 0 || pc != 0 {
		t.Fatalf("parked on the other gateways too: b %d, c %d", pb, pc)
	}

	// A consumer on b: a publish on a reaches it and is parked nowhere.
	sub := connect5(t, b.MQTTAddr(), "alt-sub")
	sub.subscribe(t, paho.SubscribeOptions{Topic: "alt/#", QoS: 1})
	got := func(body string) bool {
		for {
			select {
			case p := <-sub.msgs:
				if string(p.Payload) == body {
					return true
				}
			case <-time.After(200 * time.Millisecond):
				return false
			}
		}
	}
	eventually(t, "b's subscription known on a", func() bool { return got(publish()) })
	before := parked(t, a)
	if body := publish(); !got(body) {
		eventually(t, "the last publish on b", func() bool { return got(body) })
	}
	if after, pb, pc := parked(t, a), parked(t, b), parked(t, c); after != before || pb != 0 || pc != 0 {
		t.Fatalf("a publish that b's consumer received was parked: a %d → %d, b %d, c %d", before, after, pb, pc)
	}
}
