package bridge

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/tolsey/tolsey/core"
	"github.com/tolsey/tolsey/core/coretest"
)

// countAtDelivery records, when a message reaches it, how many messages
// the bridge's inbound rule had counted.
type countAtDelivery struct {
	b    *NATS
	seen atomic.Int64 // the rule's In at the delivery, plus one; 0: none yet
}

func (c *countAtDelivery) Deliver(*core.Message, core.Delivery) error {
	c.seen.Store(int64(c.b.Status().Rules[0].In) + 1)
	return nil
}

// TestInCountedBeforeDelivery: a message brought in from NATS is counted
// (the rule's in, for the admin API and /metrics) before any subscriber
// has it, so whoever received it never reads a count without it
// (test/e2e TestBridgeNATSCoreBothWays read In 0 after its MQTT
// subscriber had the message).
func TestInCountedBeforeDelivery(t *testing.T) {
	s, _ := startNATS(t)
	router := core.NewRouter(core.RouterOptions{Node: "n1"})
	b := startBridge(t, router, s.ClientURL(), BufferOptions{}, Rule{Direction: In, Local: "ci/#", Remote: "ci.>"})
	c := &countAtDelivery{b: b}
	sub, err := router.Subscribe("ci/#", c, core.SubOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer router.Unsubscribe(sub)
	nc := natsConn(t, s)
	if err := nc.Publish("ci.x", []byte("1")); err != nil {
		t.Fatal(err)
	}
	coretest.Eventually(t, "the message delivered", 10*time.Second, func() bool { return c.seen.Load() != 0 })
	if in := c.seen.Load() - 1; in != 1 {
		t.Errorf("the rule counted %d in when its message was delivered, want 1", in)
	}
}
