package e2e

import (
	"strings"
	"testing"

	"github.com/eclipse/paho.golang/paho"

	"github.com/tolsey/tolsey/retain/redistest"
)

func startRedis(t *testing.T) *redistest.Server { return redistest.Start(t) }

func TestTwoGatewaysShareRedis(t *testing.T) {
	r := startRedis(t)
	set := []string{"--retain.backend=redis", "--retain.redis.url=" + r.URL(), "--retain.redis.prefix=shared:"}
	a := startGateway(t, append(set, "--node.id=a")...)
	b := startGateway(t, append(set, "--node.id=b")...)

	pa := connect5(t, a.MQTTAddr(), "pubA")
	pa.publish(t, &paho.Publish{Topic: "plant/line1/state", QoS: 1, Retain: true, Payload: []byte("running")})
	eventually(t, "B's index to learn plant/line1/state", func() bool { return b.Store().Stats().Count == 1 })

	lb := connect5(t, b.MQTTAddr(), "lateB")
	lb.subscribe(t, paho.SubscribeOptions{Topic: "plant/#", QoS: 1})
	if m := lb.next(t); !m.Retain || string(m.Payload) != "running" {
		t.Fatalf("late subscriber on B: retain=%v %q", m.Retain, m.Payload)
	}

	// Cleared on B is gone on A.
	pb := connect5(t, b.MQTTAddr(), "pubB")
	pb.publish(t, &paho.Publish{Topic: "plant/line1/state", QoS: 1, Retain: true})
	eventually(t, "A's index to drop plant/line1/state", func() bool { return a.Store().Stats().Count == 0 })
	la := connect5(t, a.MQTTAddr(), "lateA")
	la.subscribe(t, paho.SubscribeOptions{Topic: "plant/#", QoS: 1}, paho.SubscribeOptions{Topic: "fence/a"})
	pa.publish(t, &paho.Publish{Topic: "fence/a", QoS: 1})
	if got := retainedOnly(la.until(t, "fence/a")); len(got) != 0 {
		t.Fatalf("A still delivers %s after B cleared it", topics(got))
	}

	// Two gateways racing on one topic leave the same last message.
	for i := range 50 {
		pa.publish(t, &paho.Publish{Topic: "race", QoS: 0, Retain: true, Payload: []byte{'a', byte(i)}})
		pb.publish(t, &paho.Publish{Topic: "race", QoS: 0, Retain: true, Payload: []byte{'b', byte(i)}})
	}
	pa.publish(t, &paho.Publish{Topic: "fence/race", QoS: 1})
	pb.publish(t, &paho.Publish{Topic: "fence/race", QoS: 1})
	eventually(t, "both gateways to agree on race", func() bool {
		ma, err1 := a.Store().Get(t.Context(), "race")
		mb, err2 := b.Store().Get(t.Context(), "race")
		return err1 == nil && err2 == nil && ma != nil && mb != nil && string(ma.Payload) == string(mb.Payload)
	})
}

func TestRedisOutage(t *testing.T) {
	r := startRedis(t)
	g := startGateway(t, "--retain.backend=redis", "--retain.redis.url="+r.URL())
	base := "http://" + g.AdminAddr()
	sub := connect5(t, g.MQTTAddr(), "sub")
	sub.subscribe(t, paho.SubscribeOptions{Topic: "o/#", QoS: 1})
	pub := connect5(t, g.MQTTAddr(), "pub")
	pub.publish(t, &paho.Publish{Topic: "o/before", QoS: 1, Retain: true, Payload: []byte("1")})
	sub.next(t)

	r.Stop()
	eventually(t, "/readyz to report the outage", func() bool {
		code, body := httpDo(t, "GET", base+"/readyz")
		return code == 503 && strings.Contains(body, "retained store")
	})
	resp := pub.publish(t, &paho.Publish{Topic: "o/during", QoS: 1, Retain: true, Payload: []byte("2")})
	if resp.ReasonCode != 0x80 {
		t.Fatalf("retained publish during outage: PUBACK %#x, want 0x80", resp.ReasonCode)
	}
	if m := sub.next(t); string(m.Payload) != "2" {
		t.Fatalf("live delivery during outage got %q", m.Payload)
	}
	_, body := httpDo(t, "GET", base+"/metrics")
	if !strings.Contains(body, `tolsey_retained_store_errors_total{op="set"}`) {
		t.Fatalf("store errors not counted:\n%s", grep(body, "store_errors"))
	}

	r.Restart()
	eventually(t, "/readyz to recover", func() bool {
		code, _ := httpDo(t, "GET", base+"/readyz")
		return code == 200
	})
	if r := pub.publish(t, &paho.Publish{Topic: "o/after", QoS: 1, Retain: true, Payload: []byte("3")}); r.ReasonCode != 0 {
		t.Fatalf("after recovery PUBACK %#x", r.ReasonCode)
	}
	late := connect5(t, g.MQTTAddr(), "late")
	late.subscribe(t, paho.SubscribeOptions{Topic: "o/#", QoS: 1}, paho.SubscribeOptions{Topic: "fence/o"})
	pub.publish(t, &paho.Publish{Topic: "fence/o", QoS: 1})
	got := retainedOnly(late.until(t, "fence/o"))
	// Redis restarted empty (no persistence in the test server), so only
	// what was written after recovery is there; the failed write is not.
	if topics(got) != "o/after=3(rtrue)" {
		t.Fatalf("after recovery late subscriber got %s", topics(got))
	}
}
