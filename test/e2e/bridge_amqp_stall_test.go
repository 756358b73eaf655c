package e2e

import (
	"context"
	"encoding/json"
	"strconv"
	"sync"
	"testing"

	"github.com/tolsey/tolsey/bridge"
	"github.com/tolsey/tolsey/core"
	"github.com/tolsey/tolsey/gateway"
)

// amqpRuleStatus is the status of the one rule of local's AMQP bridge r.
func amqpRuleStatus(t *testing.T, g *gateway.Gateway) bridge.RuleStatus {
	t.Helper()
	for _, s := range g.Bridges() {
		if s.Name == "r" && len(s.Rules) == 1 {
			return s.Rules[0]
		}
	}
	t.Fatal("no AMQP bridge r with one rule")
	return bridge.RuleStatus{}
}

// A QoS 0 burst far larger than an AMQP bridge rule's queue (4,096) to a
// remote that takes it is sent whole: the publishers wait for the rule's
// sender to free room (bridge.amqp[i].writerStall, a generous bound here:
// the machine is shared). With writerStall 0 (the bridge before the
// stall) the same burst loses messages, counted.
func TestBridgeAMQPWriterStall(t *testing.T) {
	const n, pubs = 20000, 4
	for _, tc := range []struct{ name, stall string }{{"stall", "10s"}, {"no stall", "0"}} {
		t.Run(tc.name, func(t *testing.T) {
			remote := startGateway(t, "--node.id=R")
			b, _ := json.Marshal([]map[string]any{{"name": "r", "url": "amqp://" + remote.AMQPAddr(), "sasl": "anonymous",
				"writerStall": tc.stall, "rules": []ruleJSON{{"direction": "out", "local": "fast/#", "remote": "fastlink", "qos": 0}}}})
			local := startGateway(t, "--node.id=L", "--bridge.amqp="+string(b))
			eventually(t, "bridge connected", func() bool { return bridgeUp(local) })
			router := local.Router()
			// The rule's link attached: a first message sent (one more may
			// be queued behind it).
			eventually(t, "a first message sent", func() bool {
				router.Publish(context.Background(), &core.Message{Topic: "fast/first", Payload: []byte("first")})
				st := amqpRuleStatus(t, local)
				return st.Out > 0 && st.Dropped == 0
			})
			before := amqpRuleStatus(t, local)
			var wg sync.WaitGroup
			for p := 0; p < pubs; p++ {
				wg.Go(func() {
					for i := p; i < n; i += pubs {
						router.Publish(context.Background(), &core.Message{Topic: "fast/burst", Payload: []byte(strconv.Itoa(i))})
					}
				})
			}
			wg.Wait()
			var st bridge.RuleStatus
			eventually(t, "every message sent or dropped", func() bool {
				st = amqpRuleStatus(t, local)
				return st.Out+st.Dropped-before.Out-before.Dropped >= n
			})
			dropped := st.Dropped - before.Dropped
			if tc.stall == "0" {
				if dropped == 0 {
					t.Fatalf("no stall: none of a burst of %d dropped through a queue of 4096, want some", n)
				}
				return
			}
			if dropped != 0 {
				t.Fatalf("with the stall: %d of a burst of %d dropped, want none", dropped, n)
			}
		})
	}
}
