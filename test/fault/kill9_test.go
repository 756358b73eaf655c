package fault

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"
	"github.com/eclipse/paho.golang/paho"
)

// Drill 1 (docs/reliability.md), kill -9 under load: cycles of SIGKILL during a mixed
// load, each followed by a restart on the same data.dir. Load per cycle:
// MQTT 5 QoS 1 publishers to m/p<i> with a persistent subscriber to m/#
// (session expiry 1 h) that is online for the first half of the load and
// offline for the rest, so its session holds queued messages at the kill;
// each publisher also updates the retained topic r/p<i>; one AMQP sender,
// one unsettled durable transfer at a time, to the durable queue drill,
// read by an AMQP consumer that accepts what it gets. Promised, asserted:
// no acknowledged message is lost (PUBACK 0x00 → the subscriber gets it;
// accepted → the consumer gets it), each retained topic holds the last
// acknowledged value or a later one that was sent, /readyz answers 200
// within a generous 10 s of the process's start, and retained.db,
// queues.db and sessions.db pass bbolt's Tx.Check after the last kill.
// Duplicates are counted and reported: at-least-once allows them.
func TestKill9Cycles(t *testing.T) {
	cycles, load := 3, 1200*time.Millisecond
	if *long {
		cycles, load = 20, 3*time.Second
	}
	dir := t.TempDir()
	args := []string{"--data.dir=" + dir, "--amqp.listen=127.0.0.1:0", "--mqtt.sessions.backend=embedded",
		`--queues.declare=[{"name":"drill"}]`}

	const pubs = 2
	type mqttPub struct {
		acked   map[int]bool
		next    int // the next sequence number: each is sent once, a lost PUBACK is not retried
		lastRet int // the last retained value PUBACKed 0x00; -1 none
		sentRet int // the last retained value sent
	}
	mp := make([]*mqttPub, pubs)
	for i := range mp {
		mp[i] = &mqttPub{acked: map[int]bool{}, lastRet: -1, sentRet: -1}
	}
	amqpAcked := map[int]bool{}
	amqpNext := 0

	// What the persistent subscriber and the AMQP consumer got, over every
	// cycle: payload → times.
	var mu sync.Mutex
	subGot, conGot := map[string]int{}, map[string]int{}
	onSub := func(p *paho.Publish) {
		mu.Lock()
		subGot[string(p.Payload)]++
		mu.Unlock()
	}

	var readyTimes []time.Duration
	startReady := func() *proc {
		gatewayBin(t) // built before the clock starts
		t0 := time.Now()
		gw := start(t, args...)
		for gw.readyz() != 200 {
			if time.Since(t0) > 30*time.Second {
				t.Fatalf("/readyz not 200 within 30s of start:\n%s", gw.Output())
			}
			time.Sleep(5 * time.Millisecond) // a test's poll of a child process
		}
		took := time.Since(t0)
		readyTimes = append(readyTimes, took)
		if took > 10*time.Second {
			t.Errorf("/readyz 200 only %v after the process started", took)
		}
		return gw
	}

	for cycle := range cycles {
		gw := startReady()
		sub := dialWith(t, gw.mqtt, "psub", false, onSub)
		if cycle == 0 {
			sub.subscribe(t, "m/#", 1)
		}
		consumer(t, gw.amqp, &mu, conGot)

		var wg sync.WaitGroup
		for i, p := range mp {
			c := dial5(t, gw.mqtt, fmt.Sprintf("pub%d", i), true, 1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ; ; p.next++ {
					n := p.next
					code, err := c.pub(fmt.Sprintf("m/p%d", i), []byte(fmt.Sprintf("%d:%d", i, n)), false)
					if err != nil {
						p.next++
						return // killed
					}
					if code == 0 {
						p.acked[n] = true
					}
					p.sentRet = n
					code, err = c.pub(fmt.Sprintf("r/p%d", i), []byte(strconv.Itoa(n)), true)
					if err != nil {
						p.next++
						return
					}
					if code == 0 {
						p.lastRet = n
					}
				}
			}()
		}
		snd := amqpSender(t, gw.amqp, "queue://drill")
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			for ; ; amqpNext++ {
				m := goamqp.NewMessage([]byte(fmt.Sprintf("amqp:%d", amqpNext)))
				m.Header = &goamqp.MessageHeader{Durable: true, Priority: 4} // 4 as MQTT's: go-amqp's zero value, 0, would come after the fence the drain stops at (docs/queues.md, "Priority")
				r, err := snd.snd.SendWithReceipt(ctx, m, nil)
				if err != nil {
					amqpNext++
					return
				}
				st, err := r.Wait(ctx)
				if err != nil {
					amqpNext++
					return
				}
				if isAccepted(st) {
					amqpAcked[amqpNext] = true
				}
			}
		}()

		time.Sleep(load / 2) // the drill's schedule: the subscriber goes offline halfway
		_ = sub.Disconnect(&paho.Disconnect{})
		time.Sleep(load / 2)
		gw.Kill()
		wg.Wait()
	}

	// The store as kill -9 left it.
	for _, name := range []string{"retained.db", "queues.db", "sessions.db"} {
		checkBolt(t, filepath.Join(dir, name))
	}

	// Restart, reconnect, drain.
	gw := startReady()
	dialWith(t, gw.mqtt, "psub", false, onSub)
	consumer(t, gw.amqp, &mu, conGot)
	missing := func() (mq, aq []string) {
		mu.Lock()
		defer mu.Unlock()
		for i, p := range mp {
			for n := range p.acked {
				if k := fmt.Sprintf("%d:%d", i, n); subGot[k] == 0 {
					mq = append(mq, k)
				}
			}
		}
		for n := range amqpAcked {
			if k := fmt.Sprintf("amqp:%d", n); conGot[k] == 0 {
				aq = append(aq, k)
			}
		}
		return mq, aq
	}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if mq, aq := missing(); len(mq)+len(aq) == 0 {
			break
		}
	}
	if mq, aq := missing(); len(mq)+len(aq) != 0 {
		t.Errorf("acknowledged and lost: MQTT persistent session (m/#) %d %v; AMQP durable queue %d %v", len(mq), mq, len(aq), aq)
	}
	for i, p := range mp {
		got := retainedOf(t, gw.mqtt, fmt.Sprintf("r/p%d", i))
		v, err := strconv.Atoi(got)
		if p.lastRet >= 0 && (err != nil || v < p.lastRet || v > p.sentRet) {
			t.Errorf("r/p%d = %q after the last restart; acknowledged %d, sent up to %d", i, got, p.lastRet, p.sentRet)
		}
	}

	mq, aq := missing()
	mu.Lock()
	defer mu.Unlock()
	mqttAcked, dupSub, dupCon := 0, 0, 0
	for _, p := range mp {
		mqttAcked += len(p.acked)
	}
	for _, c := range subGot {
		dupSub += max(c-1, 0)
	}
	for _, c := range conGot {
		dupCon += max(c-1, 0)
	}
	var slowest time.Duration
	for _, d := range readyTimes {
		slowest = max(slowest, d)
	}
	t.Logf("%d kill -9 cycles, %v of load each: acknowledged MQTT %d, AMQP %d; lost %d (MQTT %d, AMQP %d); duplicates MQTT %d, AMQP %d",
		cycles, load, mqttAcked, len(amqpAcked), len(mq)+len(aq), len(mq), len(aq), dupSub, dupCon)
	t.Logf("process start → /readyz 200: %v (slowest %v)", readyTimes, slowest)
	if mqttAcked == 0 || len(amqpAcked) == 0 {
		t.Errorf("no load: MQTT acknowledged %d, AMQP %d", mqttAcked, len(amqpAcked))
	}
}

// consumer reads queue://drill over AMQP until its connection is lost,
// accepting each message after counting it in got (under mu).
func consumer(t *testing.T, addr string, mu *sync.Mutex, got map[string]int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, sess := amqpSession(ctx, t, addr)
	rcv, err := sess.NewReceiver(ctx, "queue://drill", &goamqp.ReceiverOptions{Credit: 100})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			m, err := rcv.Receive(context.Background(), nil)
			if err != nil {
				return
			}
			mu.Lock()
			got[string(m.GetData())]++
			mu.Unlock()
			if rcv.AcceptMessage(context.Background(), m) != nil {
				return
			}
		}
	}()
	t.Cleanup(func() {
		_ = conn.Close()
		<-done
	})
}
