// Command mqttload runs the same MQTT load against the gateway, bare
// mochi-mqtt, Mosquitto and the NATS server's MQTT listener, in one run,
// and compares them.
//
//	go run ./test/bench/mqttload [-targets gateway,mochi,mosquitto,nats -qos 0,1 -n 20000 -rounds 1 -profile DIR]
//
// It builds cmd/gateway (retain.backend=memory, no AMQP) and
// test/bench/baremochi into a temporary directory, installs Debian's
// mosquitto with apt-get when it is missing, builds nats-server at the
// version go.mod requires into the user cache directory, and starts each as
// a child process on a free port of 127.0.0.1, each with its defaults
// (mosquitto: persistence off; nats-server: JetStream in the temporary
// directory, which its MQTT listener needs).
//
// Every phase uses fresh connections of this program's own MQTT client
// (client.go; MQTT 3.1.1 by default, which all four speak) and reads the
// server's CPU time (utime+stime, /proc/PID/stat) and its write system
// calls (syscw, /proc/PID/io: below 1 per delivered message when it
// coalesces packets into one write) before and after.
// Scenarios, each at QoS 0 and 1, unpaced, 64 B payloads:
//
//   - pairs (4 → 4): publisher i publishes round-robin on load/p{i}/s{j},
//     subscriber j subscribes load/+/s{j}: each message is delivered once;
//   - fanout (1 → 4): one publisher on load/p0/all, four subscribers of
//     load/+/all: each message is delivered four times;
//   - fanin (4 → 1): four publishers, one subscriber of load/+/s0;
//
// and latency: pairs at a steady 8,000 msgs/s in all (2,000 per
// publisher), QoS 1, publish → deliver p50/p99. Payloads carry the send
// time, so latency is measured on the one machine's clock. Rounds rotate
// which target goes first.
//
// Goals: docs/benchmarks.md ("MQTT side by side").
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tolsey/tolsey/test/bench/internal/rig"
)

// scenario is one load shape at one QoS.
type scenario struct {
	name       string
	pubs, subs int
	fanout     bool // every subscriber gets every message (one topic)
	qos        byte
	n          int // messages per publisher
	rate       int // per publisher, msgs/s; 0 = unpaced
}

// delivered is how many deliveries the scenario expects.
func (s scenario) delivered() int {
	if s.fanout {
		return s.n * s.pubs * s.subs
	}
	return s.n * s.pubs
}

type target struct {
	name  string
	child *rig.Child
}

type options struct {
	targets   []string
	scenarios []string
	n, latN   int
	latRate   int
	size      int
	window    int
	proto     byte
	rounds    int
	idle      time.Duration
	gwArgs    []string
	profile   string        // directory for the gateway's CPU profiles, one per phase
	profFor   time.Duration // how long each profile runs
	qos       []byte        // the QoS levels of the unpaced scenarios
}

func main() {
	var o options
	targets := flag.String("targets", "gateway,mochi,mosquitto,nats", "servers to run, comma-separated (gateway first: ratios are gateway / each other)")
	scen := flag.String("scenarios", "pairs,fanout,fanin,latency", "scenarios, comma-separated")
	flag.IntVar(&o.n, "n", 20000, "messages per publisher per unpaced phase")
	flag.IntVar(&o.latN, "lat-n", 10000, "messages per publisher in the latency phase")
	flag.IntVar(&o.latRate, "lat-rate", 2000, "latency phase: msgs/s per publisher (4 publishers)")
	flag.IntVar(&o.size, "size", 64, "payload bytes (at least 8: the send time)")
	flag.IntVar(&o.window, "window", 256, "QoS 1 PUBLISHes a publisher keeps unacknowledged")
	proto := flag.Int("proto", 4, "MQTT protocol level: 4 (3.1.1, all servers) or 5 (not nats)")
	flag.IntVar(&o.rounds, "rounds", 1, "rounds; each rotates which target goes first")
	flag.DurationVar(&o.idle, "idle", 3*time.Second, "a phase ends when subscribers get nothing for this long (QoS 0 drops)")
	gwArgs := flag.String("gateway-args", "", "extra gateway flags, space-separated (e.g. --mqtt.maxPendingWrites=128)")
	qos := flag.String("qos", "0,1", "QoS levels of the unpaced scenarios, comma-separated")
	flag.StringVar(&o.profile, "profile", "", "save a CPU profile of the gateway (admin /debug/pprof) from the start of each of its phases into this directory, and its allocation profile before and after each phase (*-allocs-0/1.pprof; compare with go tool pprof -diff_base)")
	flag.DurationVar(&o.profFor, "profile-seconds", 3*time.Second, "length of each -profile")
	flag.Parse()
	o.targets = strings.Split(*targets, ",")
	o.scenarios = strings.Split(*scen, ",")
	o.proto = byte(*proto)
	o.size = max(o.size, 8)
	o.gwArgs = strings.Fields(*gwArgs)
	qs, err := rig.IntList(*qos, 0)
	if err != nil {
		fmt.Fprintln(os.Stderr, "-qos:", err)
		os.Exit(2)
	}
	for _, q := range qs {
		if q > 1 {
			fmt.Fprintln(os.Stderr, "-qos: 0 or 1")
			os.Exit(2)
		}
		o.qos = append(o.qos, byte(q))
	}
	if o.proto != 4 && o.proto != 5 {
		fmt.Fprintln(os.Stderr, "-proto must be 4 or 5")
		os.Exit(2)
	}

	r, err := rig.New()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer r.Close()
	if err := run(r, &o); err != nil {
		r.Fatal(err)
	}
}

func (o *options) scenarioList() ([]scenario, error) {
	var out []scenario
	for _, name := range o.scenarios {
		var s scenario
		switch name {
		case "pairs":
			s = scenario{pubs: 4, subs: 4}
		case "fanout":
			s = scenario{pubs: 1, subs: 4, fanout: true}
		case "fanin":
			s = scenario{pubs: 4, subs: 1}
		case "latency":
			out = append(out, scenario{name: name, pubs: 4, subs: 4, qos: 1, n: o.latN, rate: o.latRate})
			continue
		default:
			return nil, fmt.Errorf("unknown scenario %q", name)
		}
		s.name, s.n = name, o.n
		for _, q := range o.qos {
			s.qos = q
			out = append(out, s)
		}
	}
	return out, nil
}

func startTarget(r *rig.Rig, name string, o *options) (*rig.Child, error) {
	switch name {
	case "gateway":
		bin, err := r.Build("gateway", "./cmd/gateway")
		if err != nil {
			return nil, err
		}
		return r.StartGateway("gateway", bin, append([]string{"--retain.backend=memory"}, o.gwArgs...)...)
	case "mochi":
		bin, err := r.Build("baremochi", "./test/bench/baremochi")
		if err != nil {
			return nil, err
		}
		return r.StartMochi("mochi", bin)
	case "mosquitto":
		return startMosquitto(r)
	case "nats":
		if o.proto == 5 {
			return nil, errors.New("nats-server speaks MQTT 3.1.1 only: use -proto 4 or leave nats out")
		}
		return startNATS(r)
	}
	return nil, fmt.Errorf("unknown target %q", name)
}

func run(r *rig.Rig, o *options) error {
	scens, err := o.scenarioList()
	if err != nil {
		return err
	}
	var targets []target
	for _, name := range o.targets {
		c, err := startTarget(r, name, o)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		targets = append(targets, target{name, c})
	}
	fmt.Printf("mqttload: MQTT %s, %d msgs/publisher/phase, %d B payload, QoS 1 window %d, latency phase %d msgs/s in all, %d round(s); 2 CPUs shared by clients and servers; %s\n",
		map[byte]string{4: "3.1.1", 5: "5"}[o.proto], o.n, o.size, o.window, 4*o.latRate, o.rounds, time.Now().UTC().Format("2006-01-02 15:04 UTC"))
	for _, t := range targets {
		fmt.Printf("  %-10s %s (pid %d)\n", t.name, t.child.Addr, t.child.PID)
	}

	// Warm up each target (connections, stacks, heap; NATS creates its
	// MQTT streams on the first connection).
	for _, t := range targets {
		for _, q := range []byte{0, 1} {
			w := scenario{name: "warm", pubs: 4, subs: 4, qos: q, n: max(o.n/10, 1000)}
			if _, err := phase(t, w, o, "warm"); err != nil {
				return fmt.Errorf("%s warm-up: %w", t.name, err)
			}
		}
	}

	type key struct {
		scen string
		qos  byte
		tgt  string
	}
	results := map[key][]result{}
	tw := tabwriter.NewWriter(os.Stdout, 2, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "round\tscenario\tQoS\ttarget\texpected\tdelivered\tdrops\tmsgs/s\tp50\tp99\tserver CPU/msg\twrites/msg\t")
	for round := 0; round < o.rounds; round++ {
		for _, s := range scens {
			for i := range targets {
				t := targets[(i+round)%len(targets)]
				res, err := phase(t, s, o, fmt.Sprintf("r%d", round))
				if err != nil {
					return fmt.Errorf("%s %s QoS %d: %w", t.name, s.name, s.qos, err)
				}
				k := key{s.name, s.qos, t.name}
				results[k] = append(results[k], res)
				fmt.Fprintf(os.Stderr, "  round %d %-8s QoS %d %-10s %8.0f msgs/s %6d drops %6.1f µs/msg %5.2f writes/msg\n", round+1, s.name, s.qos, t.name, res.rate(), res.drops(), res.cpuPerMsg(), res.writesPerMsg())
				fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%d\t%d\t%d\t%.0f\t%s\t%s\t%.1f µs\t%.2f\t\n", round+1, s.name, s.qos, t.name,
					res.want, res.got, res.drops(), res.rate(), rig.Ms(res.p50), rig.Ms(res.p99), res.cpuPerMsg(), res.writesPerMsg())
			}
		}
	}
	tw.Flush()

	// Side by side: per scenario, each target's mean, and gateway / peer.
	fmt.Printf("\nSide by side (mean over %d round(s)); µs = server CPU per delivered message; ratio = gateway msgs/s / peer msgs/s\n", o.rounds)
	tw = tabwriter.NewWriter(os.Stdout, 2, 8, 2, ' ', tabwriter.AlignRight)
	head := "scenario\tQoS\t"
	for _, t := range targets {
		head += t.name + " msgs/s\tdrops\tµs\twr/msg\t"
	}
	for _, t := range targets[1:] {
		head += "gw/" + t.name + "\t"
	}
	fmt.Fprintln(tw, head)
	seen := map[key]bool{}
	for _, s := range scens {
		k0 := key{s.name, s.qos, ""}
		if seen[k0] {
			continue
		}
		seen[k0] = true
		line := fmt.Sprintf("%s\t%d\t", s.name, s.qos)
		means := make([]result, len(targets))
		for i, t := range targets {
			means[i] = mean(results[key{s.name, s.qos, t.name}])
			m := means[i]
			if s.rate > 0 {
				line += fmt.Sprintf("p50 %s p99 %s\t%d\t%.1f\t%.2f\t", rig.Ms(m.p50), rig.Ms(m.p99), m.drops(), m.cpuPerMsg(), m.writesPerMsg())
			} else {
				line += fmt.Sprintf("%.0f\t%d\t%.1f\t%.2f\t", m.rate(), m.drops(), m.cpuPerMsg(), m.writesPerMsg())
			}
		}
		for i := range targets[1:] {
			if s.rate > 0 {
				line += fmt.Sprintf("p99 %.2f\t", float64(means[0].p99)/float64(max(means[i+1].p99, 1)))
			} else {
				line += fmt.Sprintf("%.2f\t", means[0].rate()/means[i+1].rate())
			}
		}
		fmt.Fprintln(tw, line)
	}
	tw.Flush()
	return nil
}

// result is one phase.
type result struct {
	want, got int
	elapsed   time.Duration
	p50, p99  time.Duration
	srvCPU    time.Duration
	writes    int64 // the server's write system calls (syscw)
}

func (r result) rate() float64      { return float64(r.got) / r.elapsed.Seconds() }
func (r result) drops() int         { return r.want - r.got }
func (r result) cpuPerMsg() float64 { return float64(r.srvCPU) / float64(max(r.got, 1)) / 1e3 }

// writesPerMsg is the server's write system calls per delivered message:
// below 1 when it coalesces packets into one write (its acks and the
// PUBACKs it writes to QoS 1 publishers count too).
func (r result) writesPerMsg() float64 { return float64(r.writes) / float64(max(r.got, 1)) }

// writeCalls reads syscw, the write-like system calls pid made so far
// (write, writev, sendmsg...), from /proc/PID/io; 0 when it cannot.
func writeCalls(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "syscw: "); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

func mean(rs []result) result {
	var m result
	var rate float64
	for _, r := range rs {
		m.want += r.want
		m.got += r.got
		m.p50 += r.p50
		m.p99 += r.p99
		m.srvCPU += r.srvCPU
		m.writes += r.writes
		rate += r.rate()
	}
	n := max(len(rs), 1)
	m.want, m.got, m.p50, m.p99, m.srvCPU = m.want/n, m.got/n, m.p50/time.Duration(n), m.p99/time.Duration(n), m.srvCPU/time.Duration(n)
	m.writes /= int64(n)
	m.elapsed = time.Duration(float64(m.got) / (rate / float64(n)) * float64(time.Second))
	return m
}

// phase runs one scenario against t with fresh connections.
func phase(t target, s scenario, o *options, tag string) (result, error) {
	var closers []*client
	defer func() {
		for _, c := range closers {
			c.close()
		}
	}()
	subs := make([]*subscriber, s.subs)
	for j := range subs {
		c, err := dialClient(t.child.Addr, fmt.Sprintf("%s-%s-q%d-sub%d", tag, s.name, s.qos, j), o.proto)
		if err != nil {
			return result{}, err
		}
		closers = append(closers, c)
		filter := fmt.Sprintf("load/+/s%d", j)
		if s.fanout {
			filter = "load/+/all"
		}
		if err := c.subscribe(filter, s.qos); err != nil {
			return result{}, err
		}
		subs[j] = &subscriber{c: c, lat: make([]time.Duration, 0, s.delivered()/s.subs+16), done: make(chan error, 1)}
	}
	pubs := make([]*publisher, s.pubs)
	for i := range pubs {
		c, err := dialClient(t.child.Addr, fmt.Sprintf("%s-%s-q%d-pub%d", tag, s.name, s.qos, i), o.proto)
		if err != nil {
			return result{}, err
		}
		closers = append(closers, c)
		p := &publisher{c: c, slots: make(chan struct{}, o.window), done: make(chan error, 1)}
		if s.fanout {
			p.topics = []string{fmt.Sprintf("load/p%d/all", i)}
		} else {
			for j := 0; j < s.subs; j++ {
				p.topics = append(p.topics, fmt.Sprintf("load/p%d/s%d", i, j))
			}
		}
		pubs[i] = p
	}
	for _, sub := range subs {
		go sub.run()
	}
	for _, p := range pubs {
		go p.readAcks()
	}

	cpu0, err := t.child.CPU()
	if err != nil {
		return result{}, err
	}
	w0 := writeCalls(t.child.PID)
	if o.profile != "" && t.child.Admin != "" && tag != "warm" {
		base := filepath.Join(o.profile, fmt.Sprintf("%s-%s-q%d", tag, s.name, s.qos))
		if err := rig.SaveHeapProfile(t.child.Admin, base+"-allocs-0.pprof"); err != nil {
			fmt.Fprintln(os.Stderr, "allocation profile:", err)
		}
		defer func() {
			if err := rig.SaveHeapProfile(t.child.Admin, base+"-allocs-1.pprof"); err != nil {
				fmt.Fprintln(os.Stderr, "allocation profile:", err)
			}
		}()
		prof := rig.ProfileGateway(t.child.Admin, o.profFor, filepath.Join(o.profile, fmt.Sprintf("%s-%s-q%d.pprof", tag, s.name, s.qos)))
		defer func() {
			if err := <-prof; err != nil {
				fmt.Fprintln(os.Stderr, "profile:", err)
			}
		}()
	}
	start := time.Now()
	errs := make(chan error, len(pubs))
	for _, p := range pubs {
		go func() { errs <- p.send(s.n, o.size, s.rate, s.qos, start) }()
	}
	for range pubs {
		if err := <-errs; err != nil {
			return result{}, fmt.Errorf("publish: %w", err)
		}
	}
	want := int64(s.delivered())
	total := func() (n int64) {
		for _, sub := range subs {
			n += sub.got.Load()
		}
		return n
	}
	failed := func() error {
		for _, sub := range subs {
			select {
			case err := <-sub.done:
				return fmt.Errorf("subscriber: %w", err)
			default:
			}
		}
		return nil
	}
	if err := rig.WaitDelivered(total, want, o.idle, failed); err != nil {
		return result{}, err
	}
	cpu1, err := t.child.CPU()
	if err != nil {
		return result{}, err
	}
	res := result{want: int(want), got: int(total()), srvCPU: cpu1 - cpu0, writes: writeCalls(t.child.PID) - w0}
	if res.got == 0 {
		return res, errors.New("no message delivered")
	}
	var last int64
	var lat []time.Duration
	for _, sub := range subs {
		last = max(last, sub.last.Load())
		sub.mu.Lock()
		lat = append(lat, sub.lat...)
		sub.mu.Unlock()
	}
	res.elapsed = time.Unix(0, last).Sub(start)
	slices.Sort(lat)
	res.p50, res.p99 = rig.Percentile(lat, 50), rig.Percentile(lat, 99)
	return res, nil
}
