package e2e

import (
	"strings"
	"testing"

	"github.com/eclipse/paho.golang/paho"
)

// A remote that rejects a bridged message: the remote gateway's retained
// store takes payloads of at most 16 bytes, so a larger retained message
// is rejected (amqp:resource-limit-exceeded, after its live delivery).
// The bridge counts it (rejected), drops it from the buffer and goes on:
// the next message arrives after it, and the rejected one is not sent
// again.
func TestBridgeAMQPRemoteRejects(t *testing.T) {
	remote := startGateway(t, "--node.id=R", "--retain.maxPayload=16")
	local := startGateway(t, "--node.id=L", amqpBridgeFlag("r", remote.AMQPAddr(),
		ruleJSON{"direction": "out", "local": "up/#", "remote": "uplink", "qos": 1}))
	rsub := connect5(t, remote.MQTTAddr(), "rsub")
	rsub.subscribe(t, paho.SubscribeOptions{Topic: "uplink", QoS: 1})
	pub := connect5(t, local.MQTTAddr(), "pub")
	big := strings.Repeat("B", 100)
	for _, p := range []*paho.Publish{
		{Topic: "up/a", QoS: 1, Retain: true, Payload: []byte(big)},
		{Topic: "up/b", QoS: 1, Payload: []byte("next")},
		{Topic: "up/c", QoS: 1, Payload: []byte("end")},
	} {
		if r := pub.publish(t, p); r.ReasonCode != 0 {
			t.Fatalf("PUBACK %#x for %s", r.ReasonCode, p.Topic)
		}
	}
	var got []string
	for len(got) == 0 || got[len(got)-1] != "end" {
		got = append(got, string(rsub.next(t).Payload))
	}
	if strings.Join(got, ",") != big+",next,end" {
		t.Errorf("the remote's subscriber got %q, want the rejected one once (its live delivery), then next, end", got)
	}
	eventually(t, "rejected counted, buffer empty", func() bool {
		r := local.Bridges()[0].Rules[0]
		return r.Dropped == 1 && r.Out == 2 && r.Buffer.Messages == 0
	})
	_, body := httpDo(t, "GET", "http://"+local.AdminAddr()+"/metrics")
	if !strings.Contains(body, `tolsey_bridge_dropped_total{bridge="r",reason="rejected"} 1`) {
		t.Errorf("metrics lack rejected 1:\n%s", grepLines(body, "tolsey_bridge_dropped"))
	}
}
