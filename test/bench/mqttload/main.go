// Command mqttload runs the same MQTT load against the gateway and against
// bare mochi-mqtt, in one run, and compares them.
//
//	go run ./test/bench/mqttload [-pubs 4 -subs 4 -n 50000 -size 64 -rounds 2]
//
// It builds cmd/gateway (retain.backend=memory, no AMQP) and
// test/bench/baremochi into a temporary directory and starts them as child
// processes on free ports: the gateway and mochi, each with its defaults
// (the same write queue of 8192 packets per client; -mochi-pending and
// -gateway-args set others). Per round and QoS, every target gets a fresh set of paho.golang
// MQTT 5 clients: P publishers, S subscribers. Publisher i publishes
// round-robin on load/p{i}/s{j}; subscriber j subscribes load/+/s{j}, so
// every subscriber hears every publisher on a topic set of its own and each
// message is delivered once. Payloads carry the send time, so end-to-end
// latency is measured on the one machine's clock. Rounds alternate which
// target goes first.
//
// Goal (docs/benchmarks.md, "Goals"): gateway throughput at most 10% below bare mochi's.
package main

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/tolsey/tolsey/test/bench/internal/rig"
)

type config struct {
	pubs, subs, n, size, rounds int
	rate                        int // per publisher, msgs/s; 0 = as fast as possible
	qos                         []byte
	mochiPending                []int
	gatewayArgs                 []string
	idle                        time.Duration
}

type target struct {
	name  string
	child *rig.Child
}

// result is one (round, target, QoS) phase.
type result struct {
	sent, got int
	elapsed   time.Duration
	p50, p99  time.Duration
	srvCPU    time.Duration // server process CPU during the phase
	cliCPU    time.Duration // this program's CPU during the phase
}

// cpuPerMsg is server CPU per delivered message.
func (r result) cpuPerMsg() time.Duration { return r.srvCPU / time.Duration(max(r.got, 1)) }

func (r result) rate() float64 { return float64(r.got) / r.elapsed.Seconds() }

func main() {
	var c config
	var qos, pend string
	flag.IntVar(&c.pubs, "pubs", 4, "publishers")
	flag.IntVar(&c.subs, "subs", 4, "subscribers (each on its own topic set)")
	flag.IntVar(&c.n, "n", 50000, "messages per publisher per phase")
	flag.IntVar(&c.size, "size", 64, "payload bytes (at least 8: the send time)")
	flag.IntVar(&c.rounds, "rounds", 2, "rounds; the order of targets alternates")
	flag.IntVar(&c.rate, "rate", 0, "messages/s per publisher; 0 = as fast as possible")
	flag.StringVar(&qos, "qos", "0,1", "QoS levels, comma-separated")
	flag.StringVar(&pend, "mochi-pending", "0", "bare mochi targets by MaximumClientWritesPending, comma-separated (0 = mochi default 8192, as the gateway's mqtt.maxPendingWrites)")
	gwArgs := flag.String("gateway-args", "", "extra gateway flags, space-separated (e.g. --mqtt.maxPendingWrites=128)")
	flag.DurationVar(&c.idle, "idle", 3*time.Second, "a phase ends when subscribers get nothing for this long (QoS 0 losses)")
	cpuprofile := flag.String("cpuprofile", "", "write this program's (the clients') CPU profile here")
	flag.Parse()
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	for _, q := range strings.Split(qos, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(q))
		if err != nil || v < 0 || v > 2 {
			fmt.Fprintf(os.Stderr, "bad -qos %q\n", qos)
			os.Exit(2)
		}
		c.qos = append(c.qos, byte(v))
	}
	for _, p := range strings.Split(pend, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || v < 0 {
			fmt.Fprintf(os.Stderr, "bad -mochi-pending %q\n", pend)
			os.Exit(2)
		}
		c.mochiPending = append(c.mochiPending, v)
	}
	c.size = max(c.size, 8)

	r, err := rig.New()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer r.Close()
	c.gatewayArgs = strings.Fields(*gwArgs)
	if err := run(r, &c); err != nil {
		pprof.StopCPUProfile()
		r.Fatal(err)
	}
}

func run(r *rig.Rig, c *config) error {
	gwBin, err := r.Build("gateway", "./cmd/gateway")
	if err != nil {
		return err
	}
	mochiBin, err := r.Build("baremochi", "./test/bench/baremochi")
	if err != nil {
		return err
	}
	var targets []target
	for _, p := range c.mochiPending {
		name := "mochi"
		if p > 0 {
			name = fmt.Sprintf("mochi(pending=%d)", p)
		}
		ch, err := r.StartMochi(name, mochiBin, fmt.Sprintf("--max-pending=%d", p))
		if err != nil {
			return err
		}
		targets = append(targets, target{name, ch})
	}
	gw, err := r.StartGateway("gateway", gwBin, append([]string{"--retain.backend=memory"}, c.gatewayArgs...)...)
	if err != nil {
		return err
	}
	targets = append(targets, target{"gateway", gw})

	fmt.Printf("mqttload: %d publishers × %d subscribers, %d msgs/publisher/phase, %d B payload, rate %s, %d round(s), 2 CPUs shared by clients and server\n",
		c.pubs, c.subs, c.n, c.size, rateString(c.rate), c.rounds)
	for _, t := range targets {
		fmt.Printf("  %-20s %s (pid %d)\n", t.name, t.child.Addr, t.child.PID)
	}

	// Warm up each target once (connections, goroutine stacks, heap).
	for _, t := range targets {
		w := *c
		w.n = max(c.n/10, 1000)
		if _, err := phase(t, &w, 0, "warm"); err != nil {
			return fmt.Errorf("%s warm-up: %w", t.name, err)
		}
	}

	results := map[string]map[byte][]result{}
	for _, t := range targets {
		results[t.name] = map[byte][]result{}
	}
	tw := tabwriter.NewWriter(os.Stdout, 2, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "round\tQoS\ttarget\tsent\tdelivered\tlost\tmsgs/s\tp50\tp99\tserver CPU/msg\tserver CPU\tclients CPU\t")
	for round := 0; round < c.rounds; round++ {
		order := make([]target, len(targets))
		for i := range targets {
			// Even rounds: mochi first; odd rounds: gateway first.
			if round%2 == 0 {
				order[i] = targets[i]
			} else {
				order[i] = targets[len(targets)-1-i]
			}
		}
		for _, q := range c.qos {
			for _, t := range order {
				res, err := phase(t, c, q, fmt.Sprintf("r%d", round))
				if err != nil {
					return fmt.Errorf("%s QoS %d: %w", t.name, q, err)
				}
				results[t.name][q] = append(results[t.name][q], res)
				fmt.Fprintf(os.Stderr, "  round %d QoS %d %-20s %8.0f msgs/s\n", round+1, q, t.name, res.rate())
				fmt.Fprintf(tw, "%d\t%d\t%s\t%d\t%d\t%d\t%.0f\t%s\t%s\t%.1f µs\t%.2f s\t%.2f s\t\n", round+1, q, t.name,
					res.sent, res.got, res.sent-res.got, res.rate(), rig.Ms(res.p50), rig.Ms(res.p99),
					float64(res.cpuPerMsg())/1e3, res.srvCPU.Seconds(), res.cliCPU.Seconds())
			}
		}
	}
	tw.Flush()

	fmt.Printf("\nSummary (mean over %d round(s)); ratio = gateway / mochi, goal ≥ 0.90 of mochi's throughput\n", c.rounds)
	tw = tabwriter.NewWriter(os.Stdout, 2, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "QoS\ttarget\tmsgs/s\tlost\tp50\tp99\tserver CPU/msg\tgateway/target\tverdict\t")
	gwName := targets[len(targets)-1].name
	for _, q := range c.qos {
		g := mean(results[gwName][q])
		for _, t := range targets {
			m := mean(results[t.name][q])
			ratio, verdict := "", ""
			if t.name != gwName {
				x := g.rate() / m.rate()
				ratio = fmt.Sprintf("%.2f", x)
				verdict = "PASS"
				if x < 0.9 {
					verdict = "FAIL"
				}
			}
			fmt.Fprintf(tw, "%d\t%s\t%.0f\t%d\t%s\t%s\t%.1f µs\t%s\t%s\t\n", q, t.name, m.rate(), m.sent-m.got,
				rig.Ms(m.p50), rig.Ms(m.p99), float64(m.cpuPerMsg())/1e3, ratio, verdict)
		}
	}
	tw.Flush()
	return nil
}

func rateString(r int) string {
	if r == 0 {
		return "unlimited"
	}
	return fmt.Sprintf("%d/s/publisher", r)
}

func mean(rs []result) result {
	var m result
	var rate float64
	for _, r := range rs {
		m.sent += r.sent
		m.got += r.got
		m.p50 += r.p50
		m.p99 += r.p99
		m.srvCPU += r.srvCPU
		m.cliCPU += r.cliCPU
		rate += r.rate()
	}
	n := len(rs)
	m.sent, m.got, m.p50, m.p99 = m.sent/n, m.got/n, m.p50/time.Duration(n), m.p99/time.Duration(n)
	m.srvCPU, m.cliCPU = m.srvCPU/time.Duration(n), m.cliCPU/time.Duration(n)
	rate /= float64(n)
	// Express the mean rate through elapsed so result.rate() returns it.
	m.elapsed = time.Duration(float64(m.got) / rate * float64(time.Second))
	return m
}

// subscriber collects what one subscriber receives.
type subscriber struct {
	client *paho.Client
	got    atomic.Int64
	last   atomic.Int64 // UnixNano of the latest receipt
	mu     sync.Mutex
	lat    []time.Duration
}

func (s *subscriber) onMsg(p *paho.Publish) {
	now := time.Now().UnixNano()
	if len(p.Payload) >= 8 {
		sent := int64(binary.BigEndian.Uint64(p.Payload))
		s.mu.Lock()
		s.lat = append(s.lat, time.Duration(now-sent))
		s.mu.Unlock()
	}
	s.last.Store(now)
	s.got.Add(1)
}

// phase runs one load phase against t at QoS q with fresh clients.
func phase(t target, c *config, q byte, tag string) (result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var clients []*paho.Client
	defer func() {
		for _, cl := range clients {
			_ = cl.Disconnect(&paho.Disconnect{})
		}
	}()
	subs := make([]*subscriber, c.subs)
	for j := range subs {
		s := &subscriber{lat: make([]time.Duration, 0, c.n*c.pubs/c.subs+16)}
		cl, err := rig.Connect(ctx, t.child.Addr, fmt.Sprintf("%s-q%d-sub%d", tag, q, j), s.onMsg)
		if err != nil {
			return result{}, err
		}
		clients = append(clients, cl)
		s.client = cl
		if err := rig.Subscribe(ctx, cl, fmt.Sprintf("load/+/s%d", j), q); err != nil {
			return result{}, err
		}
		subs[j] = s
	}
	pubs := make([]*paho.Client, c.pubs)
	for i := range pubs {
		cl, err := rig.Connect(ctx, t.child.Addr, fmt.Sprintf("%s-q%d-pub%d", tag, q, i), nil)
		if err != nil {
			return result{}, err
		}
		clients = append(clients, cl)
		pubs[i] = cl
	}
	topics := make([][]string, c.pubs)
	for i := range topics {
		for j := 0; j < c.subs; j++ {
			topics[i] = append(topics[i], fmt.Sprintf("load/p%d/s%d", i, j))
		}
	}

	srv0, err := t.child.CPU()
	if err != nil {
		return result{}, err
	}
	cli0 := selfCPU()
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, c.pubs)
	for i, cl := range pubs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- publish(ctx, cl, topics[i], c, q, start)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return result{}, err
		}
	}
	want := int64(c.n * c.pubs)
	total := func() (n int64) {
		for _, s := range subs {
			n += s.got.Load()
		}
		return n
	}
	prev, lastMove := total(), time.Now()
	for {
		n := total()
		if n >= want {
			break
		}
		if n != prev {
			prev, lastMove = n, time.Now()
		} else if time.Since(lastMove) > c.idle {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	srv1, err := t.child.CPU()
	if err != nil {
		return result{}, err
	}
	cli1 := selfCPU()
	var last int64
	var lat []time.Duration
	for _, s := range subs {
		last = max(last, s.last.Load())
		s.mu.Lock()
		lat = append(lat, s.lat...)
		s.mu.Unlock()
	}
	res := result{sent: int(want), got: int(total()), srvCPU: srv1 - srv0, cliCPU: cli1 - cli0}
	if res.got == 0 {
		return res, fmt.Errorf("no message delivered")
	}
	res.elapsed = time.Unix(0, last).Sub(start)
	lat = rig.Sorted(lat)
	res.p50, res.p99 = rig.Percentile(lat, 50), rig.Percentile(lat, 99)
	return res, nil
}

// publish sends c.n messages round-robin over topics. QoS 1/2 publishes are
// pipelined: paho's session keeps at most the server's Receive Maximum in
// flight and blocks the next one until an ack frees a slot.
func publish(ctx context.Context, cl *paho.Client, topics []string, c *config, q byte, start time.Time) error {
	opts := paho.PublishOptions{Method: paho.PublishMethod_AsyncSend}
	for k := 0; k < c.n; k++ {
		if c.rate > 0 && k%16 == 0 {
			due := start.Add(time.Duration(k) * time.Second / time.Duration(c.rate))
			if d := time.Until(due); d > 0 {
				time.Sleep(d)
			}
		}
		payload := make([]byte, c.size) // paho keeps QoS 1/2 packets in its session
		binary.BigEndian.PutUint64(payload, uint64(time.Now().UnixNano()))
		p := &paho.Publish{Topic: topics[k%len(topics)], QoS: q, Payload: payload}
		if _, err := cl.PublishWithOptions(ctx, p, opts); err != nil {
			return fmt.Errorf("publish: %w", err)
		}
	}
	return nil
}

// selfCPU is this process's user+system CPU time.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
