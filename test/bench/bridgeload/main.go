// Command bridgeload measures the NATS bridge against bare nats.go clients
// doing the same work, in one run, and the drain of its store-and-forward
// buffer after an outage.
//
//	go run ./test/bench/bridgeload [-pubs 4 -subs 4 -n 20000 -jsn 2500 -window 64 -drain 100000 -drain-pubs 32 -rounds 2 -client lean]
//
// It builds cmd/gateway and nats-server (v2, the version go.mod pins) into
// a temporary directory and runs both as child processes on free ports,
// nats-server with JetStream in a file store there. nats-server runs as a
// process of its own rather than inside this program so that its CPU is
// measured apart from the clients' (rig's /proc accounting, as for the
// gateway), it runs exactly as an operator runs it, and the outage of the
// drain phase is a real shutdown and restart on the same port and store.
// The gateway runs with retain.backend=memory and four bridge rules:
//
//	out q0out/#  → q0out.>  qos 0          in  q0in/# ← q0in.> qos 0
//	out jsout/#  → jsout.>  JetStream      out drain/# → drain.> JetStream
//
// Flows, each next to bare nats.go clients doing the same with the same
// counts and payloads (64 B, the send time in the first 8), fresh clients
// per phase, rounds alternating which goes first:
//
// MQTT clients are lean ones (-client lean, the default: lean.go, MQTT
// 3.1.1, publishes pipelined through a 32 KiB buffer as nats.go does) or
// paho.golang ones (-client paho, MQTT 5, a write per publish and several
// goroutines per client, which cost this program 8–17 µs of CPU per
// message against about 1 µs for a nats.go pair: docs/benchmarks.md).
//
//   - q0out: P MQTT publishers at QoS 0 on q0out/p{i}/s{j} → bridge
//     → S nats.go subscribers on q0out.*.s{j}; bare: P nats.go publishers
//     → S nats.go subscribers.
//   - q0in: P nats.go publishers on q0in.p{i}.s{j} → bridge → S MQTT
//     subscribers on q0in/+/s{j}; bare as above.
//   - js: P MQTT publishers at QoS 1 on jsout/p{i}/s{j}, -window publishes
//     per connection awaiting PUBACK → bridge → stream BRIDGEJS; bare: P
//     nats.go JetStream async publishers with the same window (and a
//     Nats-Msg-Id each, as the bridge sends) → stream BAREJS. An ordered
//     consumer on each stream times publish → stored.
//   - drain: nats-server stopped (SIGTERM), -drain QoS 1 publishes through
//     the JetStream rule into the on-disk buffer, nats-server started
//     again: the rate from the bridge's reconnect (tolsey_bridge_connected
//     back to 1) to the stream holding them all.
//
// Unpaced, publishers run flat out and QoS 0 messages a slow side cannot
// take are dropped (the bridge's writer queue, nats.go's slow-consumer
// limit, mochi's write queue): the rate printed is what subscribers
// received per second, with the loss beside it. Goals (docs/bridge.md): q0out and
// q0in at least 0.7× bare, drain at least 20,000 msgs/s.
//
// The summary puts each QoS 0 flow's three sides side by side with the CPU
// each process spent per delivered message (/proc): gateway, nats-server,
// and this program's clients. The bridged flow and MQTT→MQTT share one
// MQTT leg, so the gateway's CPU difference between them is the bridge's
// leg less the MQTT leg it stands in for, and MQTT→MQTT/bare is the most a
// flow with an MQTT leg reaches on this box. -profile q0out,q0in takes a
// gateway CPU profile of each direction's first bridged phase.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tolsey/tolsey/test/bench/internal/rig"
)

type config struct {
	pubs, subs, n, jsn, size, rounds int
	window, drain, drainPubs         int
	rate                             int // per publisher, msgs/s, QoS 0 flows; 0 = unpaced
	idle                             time.Duration
	flows                            map[string]bool
	profile                          map[string]bool // flows whose first bridge phase is profiled
	profileOut                       string
	profileFor                       time.Duration
	gateway                          string // a prebuilt gateway binary; "": build ./cmd/gateway
	client                           string // MQTT clients: lean or paho
}

// result is one (round, flow, target) phase.
type result struct {
	sent, got, lost  int
	elapsed          time.Duration
	p50, p99         time.Duration // publish → received (stored, for js)
	ackP50, ackP99   time.Duration // publish → PUBACK / PubAck
	gwCPU, natsCPU   time.Duration
	cliCPU           time.Duration
	bridgeDrops      int // tolsey_bridge_dropped_total during the phase
	mqttDrops        int // tolsey_mqtt_messages_dropped_total during the phase
	hasAcks, isStore bool
}

func (r result) rate() float64 { return float64(r.got) / r.elapsed.Seconds() }

func perMsg(d time.Duration, n int) string {
	return fmt.Sprintf("%.1f µs", float64(d)/1e3/float64(max(n, 1)))
}

type flowDef struct {
	name   string
	goal   float64 // bridge/bare goal; 0: none
	bridge func(ctx context.Context, e env, cs *closers) (*load, error)
	bare   func(ctx context.Context, e env, cs *closers) (*load, error)
	// mqtt, for the QoS 0 flows, is the same load MQTT → MQTT through the
	// gateway without the bridge: what the MQTT side alone reaches.
	mqtt func(ctx context.Context, e env, cs *closers) (*load, error)
}

func flowDefs(c *config) []flowDef {
	bareCore := func(_ context.Context, e env, cs *closers) (*load, error) {
		sinks, err := natsSubs(e, "bare", cs)
		if err != nil {
			return nil, err
		}
		start, err := natsPubs(e, "bare", c.n, cs)
		return &load{sinks: sinks, want: c.pubs * c.n, start: start}, err
	}
	mqttRef := func(ctx context.Context, e env, cs *closers) (*load, error) {
		sinks, err := mqttSubs(ctx, e, "ref", 0, cs)
		if err != nil {
			return nil, err
		}
		start, err := mqttPubs(ctx, e, "ref", c.n, 0, nil, cs)
		return &load{sinks: sinks, want: c.pubs * c.n, start: start}, err
	}
	return []flowDef{
		{name: "q0out", goal: 0.7, bare: bareCore, mqtt: mqttRef,
			bridge: func(ctx context.Context, e env, cs *closers) (*load, error) {
				sinks, err := natsSubs(e, "q0out", cs)
				if err != nil {
					return nil, err
				}
				start, err := mqttPubs(ctx, e, "q0out", c.n, 0, nil, cs)
				return &load{sinks: sinks, want: c.pubs * c.n, start: start}, err
			}},
		{name: "q0in", goal: 0.7, bare: bareCore, mqtt: mqttRef,
			bridge: func(ctx context.Context, e env, cs *closers) (*load, error) {
				sinks, err := mqttSubs(ctx, e, "q0in", 0, cs)
				if err != nil {
					return nil, err
				}
				start, err := natsPubs(e, "q0in", c.n, cs)
				return &load{sinks: sinks, want: c.pubs * c.n, start: start}, err
			}},
		{name: "js",
			bridge: func(ctx context.Context, e env, cs *closers) (*load, error) {
				s, stored, err := orderedSink(ctx, e, streamBridge, cs)
				if err != nil {
					return nil, err
				}
				a := &acks{}
				start, err := mqttPubs(ctx, e, "jsout", c.jsn, 1, a, cs)
				return &load{sinks: []*sink{s}, acks: a, want: c.pubs * c.jsn, start: start, stored: stored}, err
			},
			bare: func(ctx context.Context, e env, cs *closers) (*load, error) {
				s, stored, err := orderedSink(ctx, e, streamBare, cs)
				if err != nil {
					return nil, err
				}
				a := &acks{}
				start, err := jsPubs(e, "barejs", c.jsn, a, cs)
				return &load{sinks: []*sink{s}, acks: a, want: c.pubs * c.jsn, start: start, stored: stored}, err
			}},
	}
}

// set is the comma-separated names of s.
func set(s string) map[string]bool {
	m := map[string]bool{}
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			m[f] = true
		}
	}
	return m
}

// profilePath is where flow's gateway profile goes: -profile-out, with the
// flow's name before the extension when several flows are profiled.
func (c *config) profilePath(flow string) string {
	if len(c.profile) < 2 {
		return c.profileOut
	}
	ext := filepath.Ext(c.profileOut)
	return strings.TrimSuffix(c.profileOut, ext) + "-" + flow + ext
}

func main() {
	var c config
	var flows string
	flag.IntVar(&c.pubs, "pubs", 4, "publishers")
	flag.IntVar(&c.subs, "subs", 4, "subscribers (QoS 0 flows; each on its own subject set)")
	flag.IntVar(&c.n, "n", 20000, "messages per publisher per QoS 0 phase")
	flag.IntVar(&c.jsn, "jsn", 2500, "messages per publisher per JetStream phase")
	flag.IntVar(&c.window, "window", 64, "QoS 1 / JetStream publishes awaiting their ack per publisher")
	flag.IntVar(&c.drain, "drain", 100000, "messages buffered during the outage, then drained")
	flag.IntVar(&c.drainPubs, "drain-pubs", 32, "QoS 1 publishers filling the buffer during the outage (each connection has one buffer write in flight: see docs/benchmarks.md)")
	flag.IntVar(&c.size, "size", 64, "payload bytes (at least 8: the send time)")
	flag.IntVar(&c.rounds, "rounds", 2, "rounds; the order of bridge and bare alternates")
	flag.IntVar(&c.rate, "rate", 0, "QoS 0 messages/s per publisher; 0 = as fast as possible")
	flag.StringVar(&flows, "flows", "q0out,q0in,js,drain", "flows to run, comma-separated")
	flag.DurationVar(&c.idle, "idle", 3*time.Second, "a phase ends when subscribers get nothing for this long (QoS 0 losses)")
	var profile string
	flag.StringVar(&profile, "profile", "", "flows (q0out, q0in, js, drain; comma-separated) whose first bridge phase is CPU-profiled in the gateway")
	flag.StringVar(&c.profileOut, "profile-out", "bridgeload-gateway.pprof", "where -profile writes the gateway's profile; with several flows, each flow's name goes before the extension")
	flag.DurationVar(&c.profileFor, "profile-seconds", 5*time.Second, "length of the -profile capture")
	flag.StringVar(&c.gateway, "gateway", "", "run this gateway binary instead of building ./cmd/gateway (to compare builds with the same program)")
	flag.StringVar(&c.client, "client", "lean", "MQTT clients: lean (test/internal/mqttlean, MQTT 3.1.1, publishes pipelined as nats.go does) or paho (paho.golang, MQTT 5, a write per publish)")
	flag.Parse()
	if c.client != "lean" && c.client != "paho" {
		fmt.Fprintln(os.Stderr, "bridgeload: -client is lean or paho")
		os.Exit(2)
	}
	c.size = max(c.size, 8)
	c.window = max(c.window, 1)
	c.flows, c.profile = set(flows), set(profile)

	r, err := rig.New()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer r.Close()
	if err := run(r, &c); err != nil {
		r.Fatal(err)
	}
}

func run(r *rig.Rig, c *config) error {
	gwBin := c.gateway
	if gwBin == "" {
		var err error
		if gwBin, err = r.Build("gateway", "./cmd/gateway"); err != nil {
			return err
		}
	}
	natsBin, err := r.Build("nats-server", "github.com/nats-io/nats-server/v2")
	if err != nil {
		return err
	}
	ns, err := newNATSServer(r, natsBin)
	if err != nil {
		return err
	}
	if err := createStreams(ns.url()); err != nil {
		return err
	}
	gw, err := r.StartGateway("gateway", gwBin, "--retain.backend=memory", "--bridge.nats.url="+ns.url(), rulesFlag())
	if err != nil {
		return err
	}
	if _, err := waitFor("bridge connected", 30*time.Second, 20*time.Millisecond, func() (bool, error) {
		v, err := gwMetric(gw.Admin, "tolsey_bridge_connected")
		return v == 1, err
	}); err != nil {
		return err
	}
	fmt.Printf("bridgeload: %d publishers × %d subscribers, QoS 0 %d msgs/publisher/phase, JetStream %d msgs/publisher/phase (window %d), %d B payload, %d round(s), drain %d, %s MQTT clients; 2 CPUs shared by clients and servers\n",
		c.pubs, c.subs, c.n, c.jsn, c.window, c.size, c.rounds, c.drain, c.client)
	fmt.Printf("  gateway      %s (pid %d)\n  nats-server  %s (pid %d), JetStream file store\n\n", gw.Addr, gw.PID, ns.url(), ns.child.PID)

	defs := flowDefs(c)
	var active []flowDef
	for _, f := range defs {
		if c.flows[f.name] {
			active = append(active, f)
		}
	}
	ph := &phaser{c: c, gw: gw, ns: ns}

	// Warm up every side once (connections, stacks, heap, streams).
	for _, f := range active {
		w := *c
		w.n, w.jsn = max(c.n/10, 1000), max(c.jsn/10, 500)
		wdefs := flowDefs(&w)
		for _, wf := range wdefs {
			if wf.name != f.name {
				continue
			}
			if _, err := ph.run(&w, wf.bridge, "warm-"+f.name+"-bridge", ""); err != nil {
				return fmt.Errorf("%s warm-up (bridge): %w", f.name, err)
			}
			if _, err := ph.run(&w, wf.bare, "warm-"+f.name+"-bare", ""); err != nil {
				return fmt.Errorf("%s warm-up (bare): %w", f.name, err)
			}
			if wf.mqtt != nil {
				if _, err := ph.run(&w, wf.mqtt, "warm-"+f.name+"-mqtt", ""); err != nil {
					return fmt.Errorf("%s warm-up (mqtt): %w", f.name, err)
				}
			}
		}
	}

	results := map[string]map[string][]result{}
	tw := tabwriter.NewWriter(os.Stdout, 2, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "round\tflow\ttarget\tsent\tdelivered\tlost\tmsgs/s\tp50\tp99\tack p50\tack p99\tgateway CPU/msg\tnats CPU/msg\tbridge drops\t")
	profiled := map[string]bool{}
	for round := 0; round < c.rounds; round++ {
		for _, f := range active {
			sides := []string{"bridge", "bare"}
			if f.mqtt != nil {
				sides = append(sides, "mqtt")
			}
			if round%2 == 1 {
				slices.Reverse(sides)
			}
			for _, side := range sides {
				mk := map[string]func(context.Context, env, *closers) (*load, error){"bridge": f.bridge, "bare": f.bare, "mqtt": f.mqtt}[side]
				prof := ""
				if side == "bridge" && c.profile[f.name] && !profiled[f.name] {
					prof, profiled[f.name] = c.profilePath(f.name), true
				}
				res, err := ph.run(c, mk, fmt.Sprintf("r%d-%s-%s", round, f.name, side), prof)
				if err != nil {
					return fmt.Errorf("round %d %s %s: %w", round+1, f.name, side, err)
				}
				if results[f.name] == nil {
					results[f.name] = map[string][]result{}
				}
				results[f.name][side] = append(results[f.name][side], res)
				fmt.Fprintf(os.Stderr, "  round %d %-6s %-6s %8.0f msgs/s, lost %d\n", round+1, f.name, side, res.rate(), res.lost)
				ack50, ack99 := "-", "-"
				if res.hasAcks {
					ack50, ack99 = rig.Ms(res.ackP50), rig.Ms(res.ackP99)
				}
				fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\t%d\t%.0f\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t\n", round+1, f.name, side,
					res.sent, res.got, res.lost, res.rate(), rig.Ms(res.p50), rig.Ms(res.p99), ack50, ack99,
					perMsg(res.gwCPU, res.got), perMsg(res.natsCPU, res.got), res.bridgeDrops)
			}
		}
	}
	tw.Flush()

	if len(active) > 0 {
		summary(c, active, results)
	}

	if c.flows["drain"] {
		if err := drainPhase(c, gw, ns); err != nil {
			return fmt.Errorf("drain: %w", err)
		}
	}
	return nil
}

// summary prints the mean of each side per flow, the ratios to bare nats.go
// (the goal) and to MQTT→MQTT, and what the bridge costs the gateway next
// to the MQTT leg it stands in for.
func summary(c *config, active []flowDef, results map[string]map[string][]result) {
	fmt.Printf("\nSummary (mean over %d round(s)); bridge/bare and bridge/mqtt are msgs/s ratios; CPU is per delivered message, from /proc, for the\n"+
		"gateway, nats-server and this program's clients (%s MQTT clients); js latency is publish → stored\n"+
		"(ordered consumer), ack is publish → PUBACK (bridge: buffered on disk) or PubAck (bare)\n", c.rounds, c.client)
	tw := tabwriter.NewWriter(os.Stdout, 2, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "flow\ttarget\tmsgs/s\tlost\tp50\tp99\tack p99\tgateway CPU\tnats CPU\tclients CPU\tbridge/bare\tgoal\tverdict\tbridge/mqtt\t")
	var notes []string
	for _, f := range active {
		b, m := mean(results[f.name]["bridge"]), mean(results[f.name]["bare"])
		ratio := b.rate() / m.rate()
		var q result
		refRatio := ""
		sides := []string{"bridge", "bare"}
		if f.mqtt != nil {
			q = mean(results[f.name]["mqtt"])
			refRatio = fmt.Sprintf("%.2f", b.rate()/q.rate())
			sides = append(sides, "mqtt")
		}
		goal, verdict := "-", "-"
		if f.goal > 0 {
			goal = fmt.Sprintf("≥ %.2f", f.goal)
			verdict = "PASS"
			if ratio < f.goal {
				verdict = "FAIL"
			}
		}
		for _, side := range sides {
			x := b
			rs, g, v, rr := fmt.Sprintf("%.2f", ratio), goal, verdict, refRatio
			switch side {
			case "bare":
				x, rs, g, v, rr = m, "", "", "", ""
			case "mqtt":
				x, rs, g, v, rr = q, "", "", "", ""
			}
			ack99 := "-"
			if x.hasAcks {
				ack99 = rig.Ms(x.ackP99)
			}
			fmt.Fprintf(tw, "%s\t%s\t%.0f\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", f.name, side, x.rate(), x.lost,
				rig.Ms(x.p50), rig.Ms(x.p99), ack99, perMsg(x.gwCPU, x.got), perMsg(x.natsCPU, x.got), perMsg(x.cliCPU, x.got), rs, g, v, rr)
		}
		if f.mqtt != nil {
			// Bridged and MQTT→MQTT share one MQTT leg (publishers in
			// for q0out, subscribers out for q0in); the other leg is
			// NATS for one, MQTT for the other. The gateway's CPU
			// difference is the bridge's leg less the MQTT leg it
			// replaces; bare/mqtt is the most any flow with an MQTT
			// leg could reach if the bridge cost nothing.
			d := float64(b.gwCPU)/float64(max(b.got, 1)) - float64(q.gwCPU)/float64(max(q.got, 1))
			notes = append(notes, fmt.Sprintf("  %s: gateway CPU per message bridged %s vs MQTT→MQTT %s (%+.1f µs: the bridge's leg less the MQTT leg it replaces); MQTT→MQTT reaches %.2f× bare",
				f.name, perMsg(b.gwCPU, b.got), perMsg(q.gwCPU, q.got), d/1e3, q.rate()/m.rate()))
		}
	}
	tw.Flush()
	for _, n := range notes {
		fmt.Println(n)
	}
}

func mean(rs []result) result {
	var m result
	var rate float64
	for _, r := range rs {
		m.sent += r.sent
		m.got += r.got
		m.lost += r.lost
		m.p50 += r.p50
		m.p99 += r.p99
		m.ackP50 += r.ackP50
		m.ackP99 += r.ackP99
		m.gwCPU += r.gwCPU
		m.natsCPU += r.natsCPU
		m.cliCPU += r.cliCPU
		m.hasAcks = r.hasAcks
		rate += r.rate()
	}
	n := len(rs)
	d := time.Duration(n)
	m.sent, m.got, m.lost = m.sent/n, m.got/n, m.lost/n
	m.p50, m.p99, m.ackP50, m.ackP99 = m.p50/d, m.p99/d, m.ackP50/d, m.ackP99/d
	m.gwCPU, m.natsCPU, m.cliCPU = m.gwCPU/d, m.natsCPU/d, m.cliCPU/d
	rate /= float64(n)
	// Express the mean rate through elapsed so result.rate() returns it.
	m.elapsed = time.Duration(float64(m.got) / rate * float64(time.Second))
	return m
}
