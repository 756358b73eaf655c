package bridge

import (
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/tolsey/tolsey/core"
)

// The allocation budget of a plain QoS 0 message's path through the bridge,
// each way, against a real nats-server: what the bridge allocates per
// message once a topic has been seen (docs/benchmarks.md, "Bridge, the
// per-message path"). A new allocation on these paths costs every message
// of every device: this test makes it a decision, not an accident.
//
// testing.AllocsPerRun counts the whole process (nats-server and nats.go's
// reader included), rounded down: the budgets hold what the bridge and the
// libraries it calls allocate for one message. Under -race the paths run
// and deliver but the counts are not checked (raceEnabled).
func TestAllocBudget(t *testing.T) {
	s, _ := startNATS(t)
	router := core.NewRouter(core.RouterOptions{Node: "n1"})
	b := startBridge(t, router, s.ClientURL(), BufferOptions{},
		Rule{Direction: Out, Local: "ao/#", Remote: "ao.>"},
		Rule{Direction: In, Local: "ai/#", Remote: "ai.>"})
	payload := make([]byte, 64)

	t.Run("out", func(t *testing.T) {
		// Out: subject mapping, headers, nats.go's publish into its
		// buffer. The test calls publishCore as the writer would: nothing
		// is queued, so the writer goroutine is parked and the test is
		// the only user of what the writer owns.
		r := b.rules[0]
		m := &core.Message{Topic: "ao/x/y", Payload: payload, Origin: core.Origin{Protocol: core.ProtocolMQTT, Node: "n1", Client: "c1"}}
		b.publishCore(r, m) // the topic seen once: its subject and headers are cached
		const budget = 2    // nats.go's header bytes (PublishMsg encodes the header map for every publish)
		if n := testing.AllocsPerRun(2000, func() { b.publishCore(r, m) }); n > budget && !raceEnabled {
			t.Errorf("out: %v allocations per message, budget %d", n, budget)
		}
		if err := b.nc.Flush(); err != nil {
			t.Fatal(err)
		}
		if got := r.out.Load(); got < 2001 {
			t.Errorf("out: %d messages published, want 2001 or more", got)
		}
	})

	t.Run("in", func(t *testing.T) {
		// In: headers (none), subject mapping, the core.Message, the
		// router's Publish (no subscriber). The message is what nats.go
		// hands the subscription's handler.
		r := b.rules[1]
		sub := &countingSub{}
		s, err := router.Subscribe("ai/#", sub, core.SubOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer router.Unsubscribe(s)
		sub.reset(1 << 30)
		msg := &nats.Msg{Subject: "ai.x.y", Data: payload}
		handle := r.inbound()
		handle(msg)
		const budget = 1 // the core.Message
		if n := testing.AllocsPerRun(2000, func() { handle(msg) }); n > budget && !raceEnabled {
			t.Errorf("in: %v allocations per message, budget %d", n, budget)
		}
		if got := sub.n.Load(); got < 2001 {
			t.Errorf("in: %d messages delivered, want 2001 or more", got)
		}
	})
}
