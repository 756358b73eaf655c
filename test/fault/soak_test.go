package fault

import (
	"strings"
	"testing"
	"time"

	"github.com/tolsey/tolsey/test/fault/soak"
)

// Drill 8 (docs/reliability.md), soak, short version: the mixed load of the hour-long
// soak (test/fault/soak; command test/fault/cmd/soak) at fixed, modest
// rates for 20 s (2 min with -long), with persistent sessions going
// offline and back several times. Asserted: no acknowledged message lost
// (MQTT QoS 1 live subscriber, retained updates' live subscriber, AMQP
// topic receiver, durable queue consumer; the persistent subscribers'
// losses at takeover, a known bug, are reported), no client
// error, no ERROR line in the gateway's log, and the goroutines and fds the
// load's clients held given back once they are gone (compared with before
// the load after settling, with a generous margin; no timing).
func TestSoakShort(t *testing.T) {
	d := 20 * time.Second
	if *long {
		d = 2 * time.Minute
	}
	gw := start(t, "--data.dir="+t.TempDir(), "--amqp.listen=127.0.0.1:0", "--mqtt.sessions.backend=embedded",
		`--queues.declare=[{"name":"soak"}]`)
	res, err := soak.Run(soak.Config{
		MQTT: gw.mqtt, AMQP: gw.amqp, Admin: gw.admin, PID: gw.Cmd.Process.Pid, Queue: "soak",
		Duration: d, Sample: 2 * time.Second,
		Rates:  soak.Rates{QoS1: 100, Persistent: 20, Retained: 20, AMQPTopic: 100, AMQPQueue: 20},
		Online: 5 * time.Second, Offline: 2 * time.Second, Churn: 100 * time.Millisecond,
		Log: gw.Lines,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range res.Flows {
		t.Logf("%-10s sent %6d got %6d errors %d lost %d dups %d", f.Name, f.Sent, f.Got, f.Errors, f.Lost, f.Dups)
		if f.Sent == 0 {
			t.Errorf("flow %s sent nothing", f.Name)
		}
		if f.Lost != 0 {
			// The persistent flow included: mochi patch 25 fixed the loss
			// at session takeovers this drill found.
			t.Errorf("flow %s: %d acknowledged messages lost: %s", f.Name, f.Lost, f.LostDesc)
		}
	}
	t.Logf("%v of load, %d churn connections; goroutines %d before, %d after; fds %d before, %d after; RSS %s before, %s after",
		res.Elapsed.Round(time.Second), res.Churned, res.Before.Goroutines, res.After.Goroutines, res.Before.FDs, res.After.FDs,
		soak.MiB(float64(res.Before.RSS)), soak.MiB(float64(res.After.RSS)))
	t.Logf("gateway log: %v", res.Log)
	if res.Errors != 0 {
		t.Errorf("%d client errors: %s", res.Errors, strings.Join(res.FirstErrors, "; "))
	}
	if res.Log.Error != 0 {
		t.Errorf("ERROR lines in the gateway's log: %v", res.Log)
	}
	if res.Churned == 0 {
		t.Error("no churn connection made")
	}
	// The load's clients are gone: what they held must be given back. The
	// margins allow for the gateway's own background work (a compaction, a
	// timer) running at that moment, not for one per client.
	if res.After.Goroutines > res.Before.Goroutines+10 {
		t.Errorf("goroutines %d after the load, %d before", res.After.Goroutines, res.Before.Goroutines)
	}
	if res.After.FDs > res.Before.FDs+5 {
		t.Errorf("fds %d after the load, %d before", res.After.FDs, res.Before.FDs)
	}
}
