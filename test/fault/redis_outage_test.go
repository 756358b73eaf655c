package fault

import (
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"

	"github.com/tolsey/tolsey/core/coretest"
	"github.com/tolsey/tolsey/retain/redistest"
)

// Drill 2 (docs/reliability.md), Redis outage under load with retain.backend=redis.
// The gateway reaches a real redis-server through a cutting proxy: Cut is
// Redis gone for the gateway (every connection closed, new ones refused)
// while Redis keeps its data, as for a Redis restart with persistence or
// a network partition. Two paced publishers send live QoS 1 messages to a
// subscriber the whole time; a third publishes retained messages. Promised:
// live traffic goes on (every PUBACKed live message arrives; the rate
// during the outage over the rate before is reported), retained publishes
// are answered 0x80 during the outage and 0x00 otherwise, and nothing else
// is refused; /readyz is 503 during the outage and 200 soon after; a
// retained publish the client retried through the outage is stored.
func TestRedisOutageUnderLoad(t *testing.T) {
	outage := 5 * time.Second
	readyBound := 10 * time.Second // generous on a loaded 2-core box
	if *long {
		outage, readyBound = 30*time.Second, 2*time.Second // the promise of docs/reliability.md
	}
	rs := redistest.Start(t)
	px := redistest.NewProxy(t, rs.Addr)
	gw := start(t, "--retain.backend=redis", "--retain.redis.url="+px.URL(), "--data.dir="+t.TempDir(), "--amqp.listen=127.0.0.1:0")
	amqpRet := amqpSender(t, gw.amqp, "topic://ret/amqp")

	sub := dial5(t, gw.mqtt, "sub", true, 1<<16)
	sub.subscribe(t, "live/#", 1)

	// The delivered count and when each arrived, read by the drill.
	var delivered atomic.Int64
	var arrivals []time.Time
	var amu sync.Mutex
	subDone := make(chan struct{})
	go func() {
		defer close(subDone)
		for {
			select {
			case m := <-sub.msgs:
				if m.Topic == "live/end" {
					return
				}
				delivered.Add(1)
				amu.Lock()
				arrivals = append(arrivals, time.Now())
				amu.Unlock()
			case <-time.After(outage + 60*time.Second):
				return
			}
		}
	}()

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var liveAcked, liveRefused atomic.Int64
	const pubs, every = 2, 4 * time.Millisecond // 500 msg/s offered in all
	for i := range pubs {
		c := dial5(t, gw.mqtt, fmt.Sprintf("live%d", i), true, 1)
		paced(&wg, stop, every, func(n int) {
			code, err := c.pub(fmt.Sprintf("live/%d", i), []byte(strconv.Itoa(n)), false)
			if err != nil || code != 0 {
				liveRefused.Add(1)
				return
			}
			liveAcked.Add(1)
		})
	}

	// The retained publisher: one topic per attempt, answers recorded by
	// phase (0 before the cut, 1 during, 2 after the restore).
	var phase atomic.Int32
	var codes [3]sync.Map // code → *atomic.Int64
	count := func(ph int32, code byte) {
		v, _ := codes[ph].LoadOrStore(code, new(atomic.Int64))
		v.(*atomic.Int64).Add(1)
	}
	rc := dial5(t, gw.mqtt, "retainer", true, 1)
	paced(&wg, stop, 50*time.Millisecond, func(n int) {
		ph := phase.Load()
		code, err := rc.pub("ret/k", []byte(strconv.Itoa(n)), true)
		if err != nil {
			code = 0xff // no PUBACK at all
		}
		// An answer that straddles a phase change is counted in
		// neither: the store's view of the outage lags the cut.
		if phase.Load() == ph {
			count(ph, code)
		}
	})

	before := 3 * time.Second
	time.Sleep(before) // the load runs; a drill's schedule, not a wait for a condition
	tCut := time.Now()
	phase.Store(1)
	px.Cut()
	coretest.Eventually(t, "/readyz 503 during the outage", 10*time.Second, func() bool { return gw.readyz() == 503 })
	tNoticed := time.Since(tCut)
	if st := amqpRet.retained(t, "during"); !isRejected(st, goamqp.ErrCondInternalError) {
		t.Errorf("an AMQP retained send during the outage: %T %+v, want rejected %s", st, st, goamqp.ErrCondInternalError)
	}

	// The retried publisher: sends its value during the outage and again
	// until a PUBACK 0x00, as an application that must not lose it does.
	retried := make(chan time.Duration, 1)
	go func() {
		c := dial5(t, gw.mqtt, "retrier", true, 1)
		t0 := time.Now()
		for {
			if code, err := c.pub("ret/retry", []byte("set-during-outage"), true); err == nil && code == 0 {
				retried <- time.Since(t0)
				return
			}
			time.Sleep(200 * time.Millisecond) // the client's own retry interval
		}
	}()

	time.Sleep(outage - time.Since(tCut))
	if st := gw.readyz(); st != 503 {
		t.Errorf("/readyz %d at the end of the outage, want 503", st)
	}
	tRestore := time.Now()
	px.Restore()
	coretest.Eventually(t, "/readyz 200 after the outage", 30*time.Second, func() bool { return gw.readyz() == 200 })
	readyAfter := time.Since(tRestore)
	// Until the store is back (the index rebuilt), 0x80 is still the
	// truthful answer: "after" starts once /readyz says so.
	phase.Store(2)
	if st := amqpRet.retained(t, "after"); !isAccepted(st) {
		t.Errorf("an AMQP retained send after the outage: %T %+v, want accepted", st, st)
	}
	var retryTook time.Duration
	select {
	case retryTook = <-retried:
	case <-time.After(30 * time.Second):
		t.Fatal("the retried retained publish never got PUBACK 0x00 after the outage")
	}
	time.Sleep(2 * time.Second) // the load runs after the outage too
	close(stop)
	wg.Wait()
	endc := dial5(t, gw.mqtt, "end", true, 1)
	if code, err := endc.pub("live/end", nil, false); err != nil || code != 0 {
		t.Fatalf("end marker: %#x %v", code, err)
	}
	<-subDone

	// Rates: live messages delivered per second before the cut and during
	// the outage.
	amu.Lock()
	var nBefore, nDuring int
	for _, a := range arrivals {
		switch {
		case a.Before(tCut) && a.After(tCut.Add(-before+500*time.Millisecond)):
			nBefore++
		case !a.Before(tCut) && a.Before(tRestore):
			nDuring++
		}
	}
	amu.Unlock()
	rateBefore := float64(nBefore) / (before - 500*time.Millisecond).Seconds()
	rateDuring := float64(nDuring) / tRestore.Sub(tCut).Seconds()
	ratio := rateDuring / rateBefore
	t.Logf("outage %v: live rate before %.0f msg/s, during %.0f msg/s, ratio %.2f; live acked %d, delivered %d, refused %d",
		tRestore.Sub(tCut).Round(time.Millisecond), rateBefore, rateDuring, ratio, liveAcked.Load(), delivered.Load(), liveRefused.Load())
	t.Logf("/readyz 503 %v after the cut, 200 %v after the restore; the retried retained publish succeeded %v after its first try",
		tNoticed.Round(time.Millisecond), readyAfter.Round(time.Millisecond), retryTook.Round(time.Millisecond))
	for ph, name := range []string{"before", "during", "after"} {
		codes[ph].Range(func(k, v any) bool {
			t.Logf("retained publishes %s the outage: PUBACK %#02x × %d", name, k, v.(*atomic.Int64).Load())
			return true
		})
	}

	if liveRefused.Load() != 0 {
		t.Errorf("%d live publishes refused or unanswered: an outage of the retained store must not touch live traffic", liveRefused.Load())
	}
	if delivered.Load() < liveAcked.Load() {
		t.Errorf("the subscriber got %d live messages of %d acknowledged", delivered.Load(), liveAcked.Load())
	}
	if nDuring == 0 {
		t.Error("no live message delivered during the outage")
	}
	for ph := range 3 {
		codes[ph].Range(func(k, _ any) bool {
			if code := k.(byte); code != 0 && !(ph == 1 && code == 0x80) {
				t.Errorf("a retained publish %s the outage got %#02x; want 0x00 (0x80 only during)", []string{"before", "during", "after"}[ph], code)
			}
			return true
		})
	}
	if v, ok := codes[1].Load(byte(0x80)); !ok || v.(*atomic.Int64).Load() == 0 {
		t.Error("no retained publish was answered 0x80 during the outage")
	}
	if readyAfter > readyBound {
		t.Errorf("/readyz 200 only %v after Redis came back; promised within %v", readyAfter, readyBound)
	}
	if got := retainedOf(t, gw.mqtt, "ret/retry"); got != "set-during-outage" {
		t.Errorf("retained ret/retry after the outage = %q, want the value retried through it", got)
	}
}

// Drill 2, second part: Redis restarted empty (no persistence, or its data
// lost). A restart always drops the gateway's connections, so the gateway
// notices without comparing run ids: it reconnects and rebuilds its index
// by SCAN of what Redis now holds, that is nothing. What is lost is every
// retained message (the gateway's index holds topics and sizes, not
// payloads, so it has nothing to write back); the gateway must not go on
// serving retained copies it no longer has, and takes new ones at once.
func TestRedisRestartedEmpty(t *testing.T) {
	rs := redistest.Start(t)
	gw := start(t, "--retain.backend=redis", "--retain.redis.url="+rs.URL(), "--data.dir="+t.TempDir())
	c := dial5(t, gw.mqtt, "setter", true, 1)
	for _, k := range []string{"a", "b"} {
		if code, err := c.pub("ret/"+k, []byte(k), true); err != nil || code != 0 {
			t.Fatalf("retained publish ret/%s: %#x %v", k, code, err)
		}
	}
	if got := retainedOf(t, gw.mqtt, "ret/a"); got != "a" {
		t.Fatalf("ret/a before the restart = %q", got)
	}
	const rebuilt = "connected to redis; retained index rebuilt"
	n0 := gw.Logged(rebuilt)
	t0 := time.Now()
	rs.Restart()
	coretest.Eventually(t, "the index rebuilt after the restart", 30*time.Second, func() bool {
		return gw.Logged(rebuilt) > n0 && gw.readyz() == 200
	})
	t.Logf("Redis restarted empty: index rebuilt and /readyz 200 %v after the restart began", time.Since(t0).Round(time.Millisecond))
	if got := retainedOf(t, gw.mqtt, "ret/a"); got != "" {
		t.Errorf("ret/a after Redis came back empty = %q: the index still serves what Redis lost", got)
	}
	coretest.Eventually(t, "the setter's PUBACK 0x00 after the restart", 10*time.Second, func() bool {
		code, err := c.pub("ret/c", []byte("c"), true)
		return err == nil && code == 0
	})
	if got := retainedOf(t, gw.mqtt, "ret/c"); got != "c" {
		t.Errorf("ret/c set after the restart = %q", got)
	}
}

// paced runs do(0), do(1), … on a goroutine of wg, one per tick of every
// (a tick that comes while do runs is dropped: the offered rate is at most
// 1/every), until stop is closed.
func paced(wg *sync.WaitGroup, stop <-chan struct{}, every time.Duration, do func(n int)) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(every)
		defer tick.Stop()
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			do(n)
		}
	}()
}
