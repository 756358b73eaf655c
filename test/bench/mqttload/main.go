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
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/tolsey/tolsey/test/bench/internal/rig"
)

type config struct {
	load         rig.Load
	rounds       int
	qos          []byte
	mochiPending []int
	gatewayArgs  []string
}

type target struct {
	name  string
	child *rig.Child
}

// result is one (round, target, QoS) phase.
type result = rig.LoadResult

func main() {
	c := config{load: rig.Load{Pubs: 4, Subs: 4, N: 50000, Size: 64, Idle: 3 * time.Second}}
	var pend string
	qos := c.load.Flags("0,1")
	flag.IntVar(&c.rounds, "rounds", 2, "rounds; the order of targets alternates")
	flag.StringVar(&pend, "mochi-pending", "0", "bare mochi targets by MaximumClientWritesPending, comma-separated (0 = mochi default 8192, as the gateway's mqtt.maxPendingWrites)")
	gwArgs := flag.String("gateway-args", "", "extra gateway flags, space-separated (e.g. --mqtt.maxPendingWrites=128)")
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
	var err error
	if c.qos, err = rig.QoS(*qos); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	for _, p := range strings.Split(pend, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || v < 0 {
			fmt.Fprintf(os.Stderr, "bad -mochi-pending %q\n", pend)
			os.Exit(2)
		}
		c.mochiPending = append(c.mochiPending, v)
	}
	c.load.Size = max(c.load.Size, 8)

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
		c.load.Pubs, c.load.Subs, c.load.N, c.load.Size, rateString(c.load.Rate), c.rounds)
	for _, t := range targets {
		fmt.Printf("  %-20s %s (pid %d)\n", t.name, t.child.Addr, t.child.PID)
	}

	// Warm up each target once (connections, goroutine stacks, heap).
	for _, t := range targets {
		w := c.load
		w.N = max(c.load.N/10, 1000)
		if _, err := phase(t, w, 0, "warm"); err != nil {
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
				res, err := phase(t, c.load, q, fmt.Sprintf("r%d", round))
				if err != nil {
					return fmt.Errorf("%s QoS %d: %w", t.name, q, err)
				}
				results[t.name][q] = append(results[t.name][q], res)
				fmt.Fprintf(os.Stderr, "  round %d QoS %d %-20s %8.0f msgs/s\n", round+1, q, t.name, res.Rate())
				fmt.Fprintf(tw, "%d\t%d\t%s\t%d\t%d\t%d\t%.0f\t%s\t%s\t%.1f µs\t%.2f s\t%.2f s\t\n", round+1, q, t.name,
					res.Sent, res.Got, res.Sent-res.Got, res.Rate(), rig.Ms(res.P50), rig.Ms(res.P99),
					float64(res.CPUPerMsg())/1e3, res.SrvCPU.Seconds(), res.CliCPU.Seconds())
			}
		}
	}
	tw.Flush()

	fmt.Printf("\nSummary (mean over %d round(s)); ratio = gateway / mochi, goal ≥ 0.90 of mochi's throughput\n", c.rounds)
	tw = tabwriter.NewWriter(os.Stdout, 2, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "QoS\ttarget\tmsgs/s\tlost\tp50\tp99\tserver CPU/msg\tgateway/target\tverdict\t")
	gwName := targets[len(targets)-1].name
	for _, q := range c.qos {
		g := rig.MeanLoad(results[gwName][q])
		for _, t := range targets {
			m := rig.MeanLoad(results[t.name][q])
			ratio, verdict := "", ""
			if t.name != gwName {
				x := g.Rate() / m.Rate()
				ratio = fmt.Sprintf("%.2f", x)
				verdict = "PASS"
				if x < 0.9 {
					verdict = "FAIL"
				}
			}
			fmt.Fprintf(tw, "%d\t%s\t%.0f\t%d\t%s\t%s\t%.1f µs\t%s\t%s\t\n", q, t.name, m.Rate(), m.Sent-m.Got,
				rig.Ms(m.P50), rig.Ms(m.P99), float64(m.CPUPerMsg())/1e3, ratio, verdict)
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

// phase runs one load phase against t at QoS q with fresh clients.
func phase(t target, l rig.Load, q byte, tag string) (result, error) {
	dial := func(ctx context.Context, id string, onMsg func(*paho.Publish)) (*paho.Client, error) {
		return rig.Connect(ctx, t.child.Addr, id, onMsg)
	}
	return rig.RunLoad(t.child, dial, l, q, tag)
}
