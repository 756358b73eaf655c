package fault

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"
)

// Drill 6 (docs/reliability.md), graceful shutdown under load: SIGTERM while MQTT 5
// and AMQP clients publish QoS 1 / unsettled. Promised: every acknowledged
// message is stored (the retained value a publisher last saw PUBACKed, or
// a later one it sent; every acknowledged message in the durable queue
// that stands for the persistent subscriber, found after a restart on the
// same data.dir); MQTT 5 clients get DISCONNECT 0x8B (server shutting
// down); AMQP connections are closed with amqp:connection:forced; the
// process exits 0 within shutdown.timeout.
func TestGracefulShutdownUnderLoad(t *testing.T) {
	const shutdownTimeout = 10 * time.Second
	load := 2 * time.Second
	if *long {
		load = 20 * time.Second
	}
	dir := t.TempDir()
	args := []string{"--data.dir=" + dir, "--amqp.listen=127.0.0.1:0", "--shutdown.timeout=" + shutdownTimeout.String(),
		`--queues.declare=[{"name":"drill","subscriptions":["data/#"]}]`}
	gw := start(t, args...)

	// A live MQTT subscriber with a session that outlives its connection.
	sub := dial5(t, gw.mqtt, "live-sub", false, 1<<18)
	sub.subscribe(t, "data/#", 1)

	type mqttPub struct {
		c       *client
		acked   []int // data/p<i> sequence numbers PUBACKed 0x00
		lastRet int   // the last retained value PUBACKed 0x00; -1 none
		sentRet int   // the last retained value sent
		other   map[byte]int
	}
	const pubs = 4
	mp := make([]*mqttPub, pubs)
	var wg sync.WaitGroup
	for i := range mp {
		p := &mqttPub{c: dial5(t, gw.mqtt, fmt.Sprintf("pub%d", i), true, 1), lastRet: -1, sentRet: -1, other: map[byte]int{}}
		mp[i] = p
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ; n++ {
				code, err := p.c.pub(fmt.Sprintf("data/p%d", i), []byte(fmt.Sprintf("%d:%d", i, n)), false)
				if err != nil {
					return // the connection is gone
				}
				if code != 0 {
					p.other[code]++
					continue
				}
				p.acked = append(p.acked, n)
				p.sentRet = n
				code, err = p.c.pub(fmt.Sprintf("ret/p%d", i), []byte(strconv.Itoa(n)), true)
				if err != nil {
					return
				}
				if code != 0 {
					p.other[code]++
					continue
				}
				p.lastRet = n
			}
		}()
	}

	// An AMQP sender to the same topic space, one unsettled send at a time,
	// and an AMQP receiver whose connection must be closed with forced.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	aconn, err := goamqp.Dial(ctx, "amqp://"+gw.amqp, &goamqp.ConnOptions{SASLType: goamqp.SASLTypeAnonymous()})
	if err != nil {
		t.Fatal(err)
	}
	defer aconn.Close()
	asess, err := aconn.NewSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := asess.NewReceiver(ctx, "topic://data/#", nil); err != nil {
		t.Fatal(err)
	}
	snd, err := asess.NewSender(ctx, "topic://data/amqp", nil)
	if err != nil {
		t.Fatal(err)
	}
	var amqpAcked []int
	amqpOther := map[string]int{}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for n := 0; ; n++ {
			m := goamqp.NewMessage([]byte(fmt.Sprintf("amqp:%d", n)))
			m.Header = &goamqp.MessageHeader{Durable: true, Priority: 4} // 4 as MQTT's: go-amqp's zero value, 0, would come after the fence the drain stops at (docs/queues.md, "Priority")
			r, err := snd.SendWithReceipt(ctx, m, nil)
			if err != nil {
				return
			}
			st, err := r.Wait(ctx)
			if err != nil {
				return
			}
			if _, ok := st.(*goamqp.StateAccepted); !ok {
				amqpOther[fmt.Sprintf("%T", st)]++
				continue
			}
			amqpAcked = append(amqpAcked, n)
		}
	}()

	time.Sleep(load) // the drill's schedule: load runs, then SIGTERM lands in the middle of it
	code, took := gw.Term(shutdownTimeout + 5*time.Second)
	wg.Wait()
	t.Logf("SIGTERM under load: exit %d after %v (shutdown.timeout %v)", code, took.Round(time.Millisecond), shutdownTimeout)
	if code != 0 {
		t.Errorf("exit code %d, want 0 within shutdown.timeout; log:\n%s", code, gw.Output())
	}
	if took > shutdownTimeout {
		t.Errorf("exit after %v, beyond shutdown.timeout %v", took, shutdownTimeout)
	}

	// What each client was told.
	for i, c := range append([]*client{sub}, mp[0].c, mp[1].c, mp[2].c, mp[3].c) {
		select {
		case d := <-c.gone:
			if d.ReasonCode != 0x8B {
				t.Errorf("MQTT client %d got DISCONNECT %#02x, want 0x8B server shutting down", i, d.ReasonCode)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("MQTT client %d got no DISCONNECT", i)
		}
	}
	select {
	case <-aconn.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the AMQP connection was not closed")
	}
	var ce *goamqp.ConnError
	if err := aconn.Err(); !errors.As(err, &ce) || ce.RemoteErr == nil || ce.RemoteErr.Condition != goamqp.ErrCondConnectionForced {
		t.Errorf("AMQP connection closed with %v, want %s", err, goamqp.ErrCondConnectionForced)
	}

	// The live subscriber: what it got of the acknowledged (reported; its
	// session lives in memory, so the rest is not promised across a
	// restart until sessions persist: docs/reliability.md, "Persistent MQTT sessions").
	liveGot := map[string]bool{}
	for len(sub.msgs) > 0 {
		m := <-sub.msgs
		liveGot[string(m.Payload)] = true
	}
	totalAcked, liveMissing := len(amqpAcked), 0
	for _, n := range amqpAcked {
		if !liveGot[fmt.Sprintf("amqp:%d", n)] {
			liveMissing++
		}
	}
	for i, p := range mp {
		totalAcked += len(p.acked)
		for _, n := range p.acked {
			if !liveGot[fmt.Sprintf("%d:%d", i, n)] {
				liveMissing++
			}
		}
		if len(p.other) > 0 {
			t.Logf("MQTT publisher %d was refused: %v", i, p.other)
		}
	}
	if len(amqpOther) > 0 {
		t.Logf("AMQP sender's other outcomes: %v", amqpOther)
	}
	t.Logf("acknowledged %d (AMQP %d); the live subscriber got all but %d before its DISCONNECT", totalAcked, len(amqpAcked), liveMissing)

	// After a restart on the same data.dir: the store has what was acked.
	gw2 := start(t, args...)
	for i, p := range mp {
		got := retainedOf(t, gw2.mqtt, fmt.Sprintf("ret/p%d", i))
		v, err := strconv.Atoi(got)
		if p.lastRet >= 0 && (err != nil || v < p.lastRet || v > p.sentRet) {
			t.Errorf("ret/p%d = %q after the restart; acknowledged %d, sent up to %d", i, got, p.lastRet, p.sentRet)
		}
	}
	inQueue := drainQueue(t, gw2.mqtt, "drill", "data/fence")
	lost, dups := 0, 0
	for _, n := range amqpAcked {
		if inQueue[fmt.Sprintf("amqp:%d", n)] == 0 {
			lost++
		}
	}
	for i, p := range mp {
		for _, n := range p.acked {
			if inQueue[fmt.Sprintf("%d:%d", i, n)] == 0 {
				lost++
			}
		}
	}
	for _, c := range inQueue {
		if c > 1 {
			dups += c - 1
		}
	}
	t.Logf("durable queue after the restart: %d messages, acknowledged lost %d, duplicates %d", len(inQueue), lost, dups)
	if lost != 0 {
		t.Errorf("%d acknowledged messages missing from the durable queue after a graceful shutdown", lost)
	}
	if totalAcked == 0 {
		t.Error("nothing was acknowledged: the drill had no load")
	}
}
