//go:build unix

package amqp

import (
	"context"
	"errors"
	"flag"
	"os"
	"runtime"
	"runtime/metrics"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tolsey/tolsey/amqp/internal/buffer"
	"github.com/tolsey/tolsey/amqp/internal/frames"
	"github.com/tolsey/tolsey/core"
)

var (
	fanoutN        = flag.Int("fanout.n", 0, "TestFanOutCost: messages to publish (0 skips the test)")
	fanoutSessions = flag.Int("fanout.sessions", 64, "TestFanOutCost: sessions the client opens")
	fanoutLinks    = flag.Int("fanout.links", 1024, "TestFanOutCost: receivers on \"#\" the client tries to attach per session")
)

// TestFanOutCost measures what publishing costs when one connection holds
// as many receiving links on "#" as the gateway lets it (an abuse probe: 256
// sessions × 1,024 links, then 1,000 small messages cost 605 CPU-seconds
// and 10 GB). It is a measurement, not a check, and runs only when asked:
//
//	go test -count=1 -run '^TestFanOutCost$' -v ./amqp/ -args -fanout.n=100 [-fanout.sessions=64 -fanout.links=1024]
//
// One raw client opens the sessions and attaches receivers on "#"
// (presettled, credit for every message) until the gateway refuses one;
// then n messages of 64 bytes are published through the router, as an
// MQTT publish is, and the test waits until the client has read every
// transfer. It reports the links held, the process's CPU time (the
// gateway's fan-out, plus the client reading frames without decoding
// them) and the Go heap: allocated per message, and the peak of live heap
// objects sampled every 10 ms.
func TestFanOutCost(t *testing.T) {
	n := *fanoutN
	if n == 0 {
		t.Skip("a measurement: run with -args -fanout.n=N")
	}
	e := startServer(t, func(o *Options) { o.IdleTimeout = 0 })
	c := rawDial(t, e.addr)
	c.open(nil)
	const window = 1<<31 - 1
	for ch := range uint16(*fanoutSessions) {
		c.send(ch, &frames.Begin{IncomingWindow: window, OutgoingWindow: 1000}, nil)
		expectFrame[*frames.Begin](c)
	}
	settled := frames.SenderSettleModeSettled
	links := 0
	refused := false
	// Attach in batches, answering refusals, and stop at the first one: a
	// client that ignored them would be closed (TestUnansweredRefusals).
	for ch := range uint16(*fanoutSessions) {
		for first := 0; first < *fanoutLinks && !refused; first += 256 {
			var out buffer.Buffer
			last := min(first+256, *fanoutLinks)
			for h := first; h < last; h++ {
				a := attachReceiver("fan", uint32(h), "#")
				a.SndSettleMode = &settled
				if err := frames.AppendFrame(&out, frames.TypeAMQP, ch, a, nil); err != nil {
					t.Fatal(err)
				}
			}
			c.writeRaw(out.Written())
			out.Reset()
			for range last - first {
				a := expectFrame[*frames.Attach](c)
				if a.Source == nil {
					refused = true
					expectFrame[*frames.Detach](c)
					c.send(ch, &frames.Detach{Handle: a.Handle, Closed: true}, nil)
					continue
				}
				links++
				f := &frames.Flow{NextIncomingID: ptr(uint32(0)), IncomingWindow: window, OutgoingWindow: 1000,
					Handle: ptr(a.Handle), DeliveryCount: ptr(uint32(0)), LinkCredit: ptr(uint32(n))}
				if err := frames.AppendFrame(&out, frames.TypeAMQP, ch, f, nil); err != nil {
					t.Fatal(err)
				}
			}
			c.writeRaw(out.Written())
		}
	}
	// The refused links' detach answers arrive in the stream read below.
	eventually(t, "every subscription", func() bool { return e.router.Len() == links })
	t.Logf("links held: %d (tried %d sessions × %d)", links, *fanoutSessions, *fanoutLinks)

	want := int64(links) * int64(n)
	var got atomic.Int64
	done := make(chan error, 1)
	_ = c.nc.SetReadDeadline(time.Time{})
	go func() { // count transfer frames without decoding them
		for {
			f, err := c.r.ReadFrame()
			if err != nil {
				done <- err
				return
			}
			if len(f.Body) > 2 && f.Body[0] == 0 && f.Body[1] == 0x53 && f.Body[2] == 0x14 { // described by smallulong 0x14: transfer
				got.Add(1)
			}
		}
	}()
	// Every delivery is read, or dropped for a full link queue (more
	// messages than LinkBuffer published faster than they go out).
	settledAll := func() bool { return got.Load()+int64(e.dropped("slow_consumer")) >= want }

	runtime.GC()
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(sample)
	base, alloc0 := sample[0].Value.Uint64(), sample[1].Value.Uint64()
	peak := base
	cpu0 := cpuTime(t)
	start := time.Now()
	stopSampling := make(chan struct{})
	sampled := make(chan uint64)
	go func() {
		p := base
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		for {
			select {
			case <-stopSampling:
				sampled <- p
				return
			case <-tick.C:
				metrics.Read(s)
				p = max(p, s[0].Value.Uint64())
			}
		}
	}()
	payload := make([]byte, 64)
	for range n {
		res := e.router.Publish(context.Background(), &core.Message{Topic: "fan/out", Payload: payload, Created: time.Now()})
		if res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	var readErr error
	tick := time.NewTicker(time.Millisecond)
	for deadline := time.Now().Add(30 * time.Minute); !settledAll() && readErr == nil; {
		select {
		case readErr = <-done:
		case <-tick.C:
			if time.Now().After(deadline) {
				readErr = errors.New("timed out")
			}
		}
	}
	tick.Stop()
	elapsed := time.Since(start)
	cpu := cpuTime(t) - cpu0
	close(stopSampling)
	peak = max(peak, <-sampled)
	metrics.Read(sample)
	alloc := sample[1].Value.Uint64() - alloc0
	if readErr != nil {
		t.Fatalf("after %d of %d transfers: %v", got.Load(), want, readErr)
	}
	_ = c.nc.SetReadDeadline(time.Now()) // ends the counting goroutine
	if err := <-done; err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatal(err)
	}
	t.Logf("published %d messages to %d links: %d deliveries, %v dropped (slow consumer), in %v (wall)",
		n, links, got.Load(), e.dropped("slow_consumer"), elapsed.Round(time.Millisecond))
	t.Logf("CPU %.2f s: %.1f ms per message, %.2f µs per message and link", cpu.Seconds(),
		float64(cpu)/float64(n)/1e6, float64(cpu)/float64(want)/1e3)
	t.Logf("heap: %.1f MiB allocated (%.1f KiB per message); live heap objects %.1f MiB before, peak %.1f MiB (+%.1f MiB)",
		float64(alloc)/(1<<20), float64(alloc)/float64(n)/1024, float64(base)/(1<<20), float64(peak)/(1<<20), float64(peak-base)/(1<<20))
}

// cpuTime is the process's user + system CPU time so far.
func cpuTime(t *testing.T) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
