package e2e

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/tolsey/tolsey/test/internal/gwproc"
)

// TestClusterQoS1GatewayKill tests exactly what docs/cluster.md ("QoS 1
// and a gateway's death") promises: gateway a (a process) is killed with
// kill -9 while four MQTT publishers send QoS 1 messages through it to a
// subscriber on gateway b, which stays up, as NATS does. Every message a
// acknowledged (PUBACK) reaches the subscriber, once: a acknowledges only
// after NATS confirmed it read the message. The messages in flight at the
// kill (no PUBACK) are resent by their publishers through b, as an MQTT
// client resends what was not acknowledged: each then arrives at least
// once, at most twice (once if a's copy never reached NATS).
func TestClusterQoS1GatewayKill(t *testing.T) {
	bin := buildGatewayBinary(t)
	s := startNATS(t, 0, "")
	r := startRedis(t)
	common := []string{"--cluster.enabled=true", "--bridge.nats.url=" + s.ClientURL(), "--retain.backend=redis",
		"--retain.redis.url=" + r.URL(), "--retain.redis.prefix=cluster:"}
	b := startGateway(t, append(common, "--node.id=b")...)
	a := gwproc.Start(t, bin, append(common, "--node.id=a", "--data.dir="+t.TempDir())...)

	got := newShareCount()
	sub := connect5(t, b.MQTTAddr(), "sub")
	sub.subscribe(t, paho.SubscribeOptions{Topic: "k/#", QoS: 1})
	drainMQTT(t, sub, "b", got)
	probe := connect5(t, a.MQTT, "probe")
	eventually(t, "a probe from a to reach b", func() bool {
		probe.publish(t, &paho.Publish{Topic: "k/probe", QoS: 1, Payload: []byte("probe")})
		return len(got.missing([]string{"probe"})) == 0
	})

	const pubs, killAt = 4, 200
	var (
		mu       sync.Mutex
		acked    []string
		inFlight = make([]int, pubs) // the first k of each publisher not acknowledged
		total    atomic.Int64
		wg       sync.WaitGroup
	)
	for p := range pubs {
		c := connect5(t, a.MQTT, fmt.Sprintf("pub%d", p))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; ; k++ {
				inFlight[p] = k
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				res, err := c.Publish(ctx, &paho.Publish{Topic: "k/x", QoS: 1, Payload: []byte(fmt.Sprintf("p%d-%d", p, k))})
				cancel()
				if err != nil || res == nil || res.ReasonCode >= 0x80 {
					return // a is gone
				}
				mu.Lock()
				acked = append(acked, fmt.Sprintf("p%d-%d", p, k))
				mu.Unlock()
				if total.Add(1) == killAt {
					a.Kill() // kill -9, mid-flight: the others are publishing
				}
			}
		}()
	}
	wg.Wait()
	mu.Lock()
	promised := append([]string(nil), acked...)
	mu.Unlock()
	if len(promised) < killAt {
		t.Fatalf("only %d messages acknowledged before the kill", len(promised))
	}
	// The promise: everything a acknowledged arrives, with b and NATS up.
	got.waitAll(t, "acknowledged messages at the subscriber on b", promised)

	// The publishers resend what a did not acknowledge, through b.
	var resent []string
	for p := range pubs {
		c := connect5(t, b.MQTTAddr(), fmt.Sprintf("pub%d-again", p))
		body := fmt.Sprintf("p%d-%d", p, inFlight[p])
		c.publish(t, &paho.Publish{Topic: "k/x", QoS: 1, Payload: []byte(body)})
		resent = append(resent, body)
	}
	got.waitAll(t, "resent messages", resent)
	fence := connect5(t, b.MQTTAddr(), "fence")
	fence.publish(t, &paho.Publish{Topic: "k/fence", QoS: 1, Payload: []byte("fence")})
	got.waitAll(t, "the fence", []string{"fence"})

	got.mu.Lock()
	defer got.mu.Unlock()
	for _, body := range promised {
		if n := got.bodies[body]; n != 1 {
			t.Errorf("acknowledged %s arrived %d times, want once", body, n)
		}
	}
	twice := 0
	for _, body := range resent {
		switch n := got.bodies[body]; n {
		case 1:
		case 2:
			twice++ // a's copy reached NATS, its PUBACK did not reach the client
		default:
			t.Errorf("resent %s arrived %d times, want once or twice", body, n)
		}
	}
	t.Logf("killed after %d acknowledged messages; %d arrived once; %d in flight at the kill resent, %d of them had crossed already",
		killAt, len(promised), len(resent), twice)
}
