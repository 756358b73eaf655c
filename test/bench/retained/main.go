// Command retained measures what retained messages cost: memory per stored
// message and the time a late subscriber waits for the ones it matches.
//
//	go run ./test/bench/retained [-n 1000000] [-targets memory,embedded,redis,mochi] [-pubs 4 | -pubs 1,64] [-profile DIR]
//
// For each target in turn (the gateway with retain.backend=memory, embedded
// and redis — against a real redis-server started on a free port without
// persistence — and bare mochi), it starts the server as a child process,
// reads its settled RSS, stores N retained messages of 64 B through MQTT
// (QoS 0 pipelined by a few publishers, then one QoS 1 publish each as a
// fence: mochi handles a connection's packets in order, so the PUBACK means
// every earlier publish has been processed), reads the settled RSS again,
// then times late subscriptions: a fresh client subscribes
// bench/dev{g}/+ (exactly 100 retained topics, bench/dev{g}/s{0..99}, for
// N/100 groups) and the clock runs from SUBSCRIBE sent to the 100th message
// received.
//
// -pubs takes a list: each target runs once per publisher count, side by
// side (64 publishers stand for a bulk import or a bridge), and the table
// gives the server's (and redis-server's) CPU per stored message, the
// figure that stays comparable on a busy machine.
//
// -profile DIR saves a CPU profile of the gateway (admin /debug/pprof)
// from the start of each load phase, -profile-seconds long, and its
// allocation profile before and after the load (*-allocs-0/1.pprof), as
// mqttload does.
//
// Goals (docs/benchmarks.md, "Goals"): ≤ 1 KiB RSS per retained message on
// every backend (bare mochi was measured at ~4.8 KiB); late-subscription
// p99 ≤ 10 ms on Redis.
package main

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/tolsey/tolsey/test/bench/internal/rig"
)

const group = 100 // retained topics per bench/dev{g}/+ filter

type config struct {
	n, size, pubs, samples int
	embeddedPubs           int
	settle                 time.Duration
	pubsList               []int         // -pubs: one column per count and target
	profile                string        // -profile: directory for the gateway's profiles
	profFor                time.Duration // -profile-seconds
}

// result is one target's column in the table.
type result struct {
	name          string
	err           error
	pubs          int
	stored        float64 // tolsey_retained_messages, or -1 (mochi)
	load          time.Duration
	before, after int64 // server RSS
	heapBefore    float64
	heapAfter     float64 // go_memstats_heap_inuse_bytes (gateway)
	redisBefore   int64
	redisAfter    int64
	loadCPU       time.Duration // server CPU spent loading
	redisCPU      time.Duration // redis-server's
	lat           []time.Duration
	short         int // late subscriptions that got fewer than 100
	wrongRetain   int // messages without RETAIN=1
}

func main() {
	var c config
	var targets, pubs string
	flag.IntVar(&c.n, "n", 1_000_000, "retained messages to store (rounded up to a multiple of 100)")
	flag.IntVar(&c.size, "size", 64, "payload bytes")
	flag.StringVar(&pubs, "pubs", "4", "publishers loading the store; a comma list (1,64) runs each target once per count, side by side")
	flag.IntVar(&c.embeddedPubs, "embedded-pubs", 64, "publishers loading the embedded store (each Set waits for its fsync, so one connection stores ~200 msgs/s)")
	flag.IntVar(&c.samples, "samples", 200, "late subscriptions timed per target")
	flag.DurationVar(&c.settle, "settle", 30*time.Second, "longest wait for RSS to settle")
	flag.StringVar(&targets, "targets", "memory,embedded,redis,mochi", "targets: gateway backends memory, embedded, redis, and mochi")
	flag.StringVar(&c.profile, "profile", "", "save a CPU profile of the gateway (admin /debug/pprof) from the start of each load phase into this directory, and its allocation profile before and after the load (*-allocs-0/1.pprof; compare with go tool pprof -diff_base)")
	flag.DurationVar(&c.profFor, "profile-seconds", 3*time.Second, "length of each -profile")
	flag.Parse()
	c.n = (c.n + group - 1) / group * group
	c.size = max(c.size, 8)
	var err error
	if c.pubsList, err = rig.IntList(pubs, 1); err != nil {
		fmt.Fprintln(os.Stderr, "-pubs:", err)
		os.Exit(2)
	}

	r, err := rig.New()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer r.Close()
	if _, err := rig.RaiseNoFile(); err != nil {
		r.Fatal(err)
	}
	gwBin, err := r.Build("gateway", "./cmd/gateway")
	if err != nil {
		r.Fatal(err)
	}
	mochiBin, err := r.Build("baremochi", "./test/bench/baremochi")
	if err != nil {
		r.Fatal(err)
	}
	fmt.Printf("retained: N=%d messages of %d B over %d groups of %d (bench/dev{g}/s{k}), %d late subscriptions per target\n",
		c.n, c.size, c.n/group, group, c.samples)

	var results []*result
	for _, t := range strings.Split(targets, ",") {
		t = strings.TrimSpace(t)
		for _, p := range c.pubsList {
			c.pubs = p
			fmt.Fprintf(os.Stderr, "== %s, %d publishers\n", t, p)
			res, err := runTarget(r, &c, t, gwBin, mochiBin)
			if err != nil {
				// Keep the other targets' figures: report the failure in the table.
				fmt.Fprintf(os.Stderr, "   %s failed: %v\n", t, err)
				res = &result{name: t + " (failed)", stored: -1, err: err}
			}
			results = append(results, res)
			if t == "embedded" {
				break // -embedded-pubs, not -pubs, sets its publishers
			}
		}
	}
	printTable(&c, results)
}

func runTarget(r *rig.Rig, c *config, t, gwBin, mochiBin string) (*result, error) {
	res := &result{name: t, stored: -1}
	var srv, redis *rig.Child
	var err error
	switch t {
	case "mochi":
		res.name = "bare mochi"
		srv, err = r.StartMochi("mochi", mochiBin)
	case "memory", "embedded":
		res.name = "gateway " + t
		srv, err = r.StartGateway("gw-"+t, gwBin, "--retain.backend="+t)
	case "redis":
		res.name = "gateway redis"
		if redis, err = r.StartRedis("redis"); err != nil {
			return nil, err
		}
		defer redis.Kill()
		srv, err = r.StartGateway("gw-redis", gwBin, "--retain.backend=redis", "--retain.redis.url=redis://"+redis.Addr+"/0")
	default:
		return nil, fmt.Errorf("unknown target %q", t)
	}
	if err != nil {
		return nil, err
	}
	defer srv.Kill()

	if res.before, err = srv.SettledRSS(c.settle); err != nil {
		return nil, err
	}
	res.heapBefore = heapInuse(srv)
	if redis != nil {
		if res.redisBefore, err = redis.RSS(); err != nil {
			return nil, err
		}
	}

	lc := *c
	if t == "embedded" {
		lc.pubs = c.embeddedPubs
	}
	res.pubs = lc.pubs
	var prof <-chan error
	var base string
	if c.profile != "" && srv.Admin != "" {
		if err := os.MkdirAll(c.profile, 0o755); err != nil {
			return nil, err
		}
		base = filepath.Join(c.profile, fmt.Sprintf("load-%s-p%d", t, lc.pubs))
		if err := rig.SaveHeapProfile(srv.Admin, base+"-allocs-0.pprof"); err != nil {
			fmt.Fprintln(os.Stderr, "allocation profile:", err)
		}
		prof = rig.ProfileGateway(srv.Admin, c.profFor, base+".pprof")
	}
	cpu0, _ := srv.CPU()
	var rcpu0 time.Duration
	if redis != nil {
		rcpu0, _ = redis.CPU()
	}
	start := time.Now()
	if err := load(srv.Addr, &lc); err != nil {
		return nil, fmt.Errorf("load: %w", err)
	}
	res.load = time.Since(start)
	cpu1, _ := srv.CPU()
	res.loadCPU = cpu1 - cpu0
	if redis != nil {
		rcpu1, _ := redis.CPU()
		res.redisCPU = rcpu1 - rcpu0
	}
	if prof != nil {
		// After the CPU figures: a profile longer than the load does not
		// stretch them.
		if err := <-prof; err != nil {
			fmt.Fprintln(os.Stderr, "profile:", err)
		}
		if err := rig.SaveHeapProfile(srv.Admin, base+"-allocs-1.pprof"); err != nil {
			fmt.Fprintln(os.Stderr, "allocation profile:", err)
		}
	}
	fmt.Fprintf(os.Stderr, "   stored %d in %v (%.0f msgs/s)\n", c.n, res.load.Round(time.Millisecond), float64(c.n)/res.load.Seconds())

	if m, err := srv.Metrics(); err == nil {
		res.stored = m["tolsey_retained_messages"]
	}
	if res.after, err = srv.SettledRSS(c.settle); err != nil {
		return nil, err
	}
	res.heapAfter = heapInuse(srv)
	if redis != nil {
		if res.redisAfter, err = redis.RSS(); err != nil {
			return nil, err
		}
	}

	if err := lateSubscriptions(srv.Addr, c, res); err != nil {
		return nil, fmt.Errorf("late subscriptions: %w", err)
	}
	return res, nil
}

func heapInuse(c *rig.Child) float64 {
	m, err := c.Metrics()
	if err != nil {
		return -1
	}
	return m["go_memstats_heap_inuse_bytes"]
}

// load stores c.n retained messages: publisher p takes every c.pubs-th
// group, QoS 0, then a QoS 1 fence.
func load(addr string, c *config) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Hour)
	defer cancel()
	groups := c.n / group
	var wg sync.WaitGroup
	errs := make(chan error, c.pubs)
	for p := 0; p < c.pubs; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl, err := rig.Connect(ctx, addr, fmt.Sprintf("loader%d", p), nil)
			if err != nil {
				errs <- err
				return
			}
			defer cl.Disconnect(&paho.Disconnect{})
			payload := make([]byte, c.size)
			for g := p; g < groups; g += c.pubs {
				for k := 0; k < group; k++ {
					binary.BigEndian.PutUint64(payload, uint64(g*group+k))
					// QoS 0: paho writes the packet before Publish returns,
					// so reusing the payload buffer is safe.
					_, err := cl.Publish(ctx, &paho.Publish{Topic: fmt.Sprintf("bench/dev%d/s%d", g, k), Retain: true, Payload: payload})
					if err != nil {
						errs <- err
						return
					}
				}
			}
			if _, err := cl.Publish(ctx, &paho.Publish{Topic: "bench/fence", QoS: 1, Payload: []byte("fence")}); err != nil {
				errs <- fmt.Errorf("fence: %w", err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// lateSubscriptions times c.samples fresh subscriptions to random groups.
func lateSubscriptions(addr string, c *config, res *result) error {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < c.samples; i++ {
		g := rng.IntN(c.n / group)
		d, n, wrong, err := lateSubscription(addr, fmt.Sprintf("late%d", i), fmt.Sprintf("bench/dev%d/+", g))
		if err != nil {
			return err
		}
		if n < group {
			res.short++
			continue
		}
		res.wrongRetain += wrong
		res.lat = append(res.lat, d)
	}
	return nil
}

// lateSubscription connects, subscribes filter and waits (up to 10 s) for
// 100 messages; it returns the time from SUBSCRIBE sent to the 100th.
func lateSubscription(addr, id, filter string) (time.Duration, int, int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	var got, wrong atomic.Int32
	done := make(chan time.Time, 1)
	cl, err := rig.Connect(ctx, addr, id, func(p *paho.Publish) {
		if !p.Retain {
			wrong.Add(1)
		}
		if got.Add(1) == group {
			done <- time.Now()
		}
	})
	if err != nil {
		return 0, 0, 0, err
	}
	defer cl.Disconnect(&paho.Disconnect{})
	start := time.Now()
	if err := rig.Subscribe(ctx, cl, filter, 0); err != nil {
		return 0, 0, 0, err
	}
	select {
	case end := <-done:
		return end.Sub(start), int(got.Load()), int(wrong.Load()), nil
	case <-time.After(10 * time.Second):
		return 0, int(got.Load()), int(wrong.Load()), nil
	}
}

func printTable(c *config, results []*result) {
	fmt.Println()
	tw := tabwriter.NewWriter(os.Stdout, 2, 8, 2, ' ', tabwriter.AlignRight)
	row := func(label string, f func(*result) string) {
		fmt.Fprint(tw, label, "\t")
		for _, r := range results {
			if r.err != nil && label != "" {
				fmt.Fprint(tw, "failed\t")
				continue
			}
			fmt.Fprint(tw, f(r), "\t")
		}
		fmt.Fprintln(tw)
	}
	perMsg := func(a, b int64) float64 { return float64(b-a) / float64(c.n) }
	row("", func(r *result) string { return r.name })
	row("retained messages (server's count)", func(r *result) string {
		if r.stored < 0 {
			return "n/a"
		}
		return fmt.Sprintf("%.0f", r.stored)
	})
	row("loading publishers", func(r *result) string { return fmt.Sprint(r.pubs) })
	row("load time", func(r *result) string { return r.load.Round(time.Millisecond).String() })
	row("load rate (msgs/s)", func(r *result) string { return fmt.Sprintf("%.0f", float64(c.n)/r.load.Seconds()) })
	row("server CPU per stored msg", func(r *result) string {
		return fmt.Sprintf("%.1f µs", float64(r.loadCPU)/float64(time.Microsecond)/float64(c.n))
	})
	row("redis-server CPU per stored msg", func(r *result) string {
		if r.redisCPU == 0 {
			return "-"
		}
		return fmt.Sprintf("%.1f µs", float64(r.redisCPU)/float64(time.Microsecond)/float64(c.n))
	})
	row("server RSS before", func(r *result) string { return rig.MiB(r.before) })
	row("server RSS after", func(r *result) string { return rig.MiB(r.after) })
	row("server RSS per retained msg", func(r *result) string { return fmt.Sprintf("%.0f B", perMsg(r.before, r.after)) })
	row("Go heap in use per msg (/metrics)", func(r *result) string {
		if r.heapAfter < 0 || r.heapBefore < 0 {
			return "n/a"
		}
		return fmt.Sprintf("%.0f B", (r.heapAfter-r.heapBefore)/float64(c.n))
	})
	row("redis-server RSS per msg", func(r *result) string {
		if r.redisAfter == 0 {
			return "-"
		}
		return fmt.Sprintf("%.0f B", perMsg(r.redisBefore, r.redisAfter))
	})
	row("goal ≤ 1 KiB/msg (server RSS)", func(r *result) string {
		if perMsg(r.before, r.after) <= 1024 {
			return "PASS"
		}
		return "FAIL"
	})
	row("late subscriptions complete", func(r *result) string {
		return fmt.Sprintf("%d/%d", len(r.lat), len(r.lat)+r.short)
	})
	row("late sub p50 (100 msgs)", func(r *result) string { return rig.Ms(rig.Percentile(rig.Sorted(r.lat), 50)) })
	row("late sub p99", func(r *result) string { return rig.Ms(rig.Percentile(rig.Sorted(r.lat), 99)) })
	row("late sub max", func(r *result) string { return rig.Ms(rig.Percentile(rig.Sorted(r.lat), 100)) })
	row("msgs without RETAIN=1", func(r *result) string { return fmt.Sprint(r.wrongRetain) })
	row("goal p99 ≤ 10 ms (Redis)", func(r *result) string {
		if r.name != "gateway redis" {
			return "-"
		}
		if r.short == 0 && rig.Percentile(rig.Sorted(r.lat), 99) <= 10*time.Millisecond {
			return "PASS"
		}
		return "FAIL"
	})
	tw.Flush()
	for _, r := range results {
		if r.err != nil {
			fmt.Printf("%s: %v\n", r.name, r.err)
		}
	}
}
