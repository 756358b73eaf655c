package mqtt

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	mochi "github.com/mochi-mqtt/server/v2"

	"github.com/tolsey/tolsey/core"
	"github.com/tolsey/tolsey/core/coretest"
)

// TestDeliveryAllocBudget holds the allocations of one MQTT→MQTT message,
// read, fanned out and written to one subscriber through the gateway's
// mochi (BenchmarkMochiPublish's path: processPacket, the hook, the
// subscriber's writer), to a budget. Upstream's path made 19 per QoS 0
// message and 26 per QoS 1 one; patch 21 (PATCHES.md) took out the per
// packet encode buffers, the subscription map copies and the empty maps
// of every lookup (5 and 10), patch 23 the lookup itself for a topic seen
// before (2 and 7: the subscriber's copy of the packet, queued, is what
// is left of QoS 0), patch 27 that copy (a pooled encoding is queued:
// 1.7), patch 28 the publisher's PUBACK put in its inflight store and
// taken out again, whose map was made anew for every message (1.1 for
// QoS 1), patch 33 the copy of the payload for each subscriber
// (1.5–1.7 → 0.4–0.5 and 1.2 → 0.1; to four subscribers 4.7 → 0.4–0.7
// and 4.4 → 0.6–0.7 per message published). Counted over the whole process, the writer goroutines
// included; run without -race (test/run's budget set), which changes
// allocation counts. Per message published, not per delivery.
func TestDeliveryAllocBudget(t *testing.T) {
	if raceEnabled {
		t.Skip("-race changes allocation counts")
	}
	for _, tc := range []struct {
		qos    byte
		subs   int
		budget float64
	}{{0, 1, 1}, {1, 1, 1}, {0, 4, 1.5}, {1, 4, 1.5}} {
		ms := benchServer(t).mochi
		pub := benchPubSub(t, ms)
		for i := 1; i < tc.subs; i++ {
			benchSubscriber(t, ms, fmt.Sprintf("sub%d", i))
		}
		pk := benchPublish("load/p0/s0")
		pk.FixedHeader.Qos = tc.qos
		if tc.qos > 0 {
			pk.PacketID = 7
		}
		per := allocsPerPublish(t, ms, tc.subs, func() {
			if err := ms.InjectPacket(pub, pk); err != nil {
				t.Fatal(err)
			}
		})
		t.Logf("QoS %d, %d subscribers: %.2f allocations per message published (budget %v)", tc.qos, tc.subs, per, tc.budget)
		if per > tc.budget {
			t.Errorf("QoS %d, %d subscribers: %.2f allocations per message published, budget %v", tc.qos, tc.subs, per, tc.budget)
		}
	}
}

// TestRoutedDeliveryAllocBudget holds the allocations of one message from
// another front-end (a NATS bridge's inbound one, an AMQP one) handed by
// the router to the MQTT front-end (Deliver: the packet injected through
// mochi's inline client) and written to MQTT subscribers, per message
// published. mochi copied the payload for every subscriber of an injected
// PUBLISH (its caller might change it) until Deliver marked it fixed
// (mochi patch 45: a published core.Message never changes): QoS 0 to one
// subscriber 1.5 → 0.1–0.4, to four 4.5 → 0.5–0.9 (what is left is the
// subscribers' writers, as in TestDeliveryAllocBudget). Counted over the whole
// process, as TestDeliveryAllocBudget; not under -race.
func TestRoutedDeliveryAllocBudget(t *testing.T) {
	if raceEnabled {
		t.Skip("-race changes allocation counts")
	}
	for _, tc := range []struct {
		subs   int
		budget float64
	}{{1, 0.8}, {4, 1.5}} {
		s := benchServer(t)
		ms := s.mochi
		if s.inline() == nil {
			t.Fatal("no inline client")
		}
		for i := range tc.subs {
			benchSubscriber(t, ms, fmt.Sprintf("sub%d", i))
		}
		m := &core.Message{Topic: "load/p0/s0", Payload: make([]byte, 64), Origin: core.Origin{Protocol: core.ProtocolNATS}}
		ctx := context.Background()
		per := allocsPerPublish(t, ms, tc.subs, func() { s.opts.Router.Publish(ctx, m) })
		t.Logf("%d subscribers: %.2f allocations per message published (budget %v)", tc.subs, per, tc.budget)
		if per > tc.budget {
			t.Errorf("%d subscribers: %.2f allocations per message published, budget %v", tc.subs, per, tc.budget)
		}
	}
}

// allocsPerPublish calls publish 100 times to warm up (pools, the write
// queues' rings, map growth), then 5,000 times, each time waiting until
// mochi has written every copy to the subs subscribers, and returns the
// process's allocations per call of the 5,000.
func allocsPerPublish(t *testing.T, ms *mochi.Server, subs int, publish func()) float64 {
	t.Helper()
	const warm, n = 100, 5000
	sent := func() int64 { return atomic.LoadInt64(&ms.Info.MessagesSent) }
	for range warm {
		publish()
	}
	coretest.Eventually(t, "warm-up written", 10*time.Second, func() bool { return sent() >= int64(warm*subs) })
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range n {
		publish()
	}
	coretest.Eventually(t, "every message written", 10*time.Second, func() bool { return sent() >= int64((warm+n)*subs) })
	runtime.ReadMemStats(&after)
	return float64(after.Mallocs-before.Mallocs) / n
}
