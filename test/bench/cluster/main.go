// Command cluster measures a cluster of gateways (docs/cluster.md,
// "Benchmarks") against one gateway, with the same load, in one run:
//
//	go run ./test/bench/cluster [-pubs 2 -subs 2 -n 20000 -qos 0,1 -subs-summary 100000]
//
// It builds cmd/gateway and nats-server (the module's dependency) and runs
// them, with redis-server, as child processes on free ports:
//
//   - one: a gateway alone (no cluster), every client on it;
//   - cross: gateways a and b clustered; publishers on a, subscribers on
//     b: every message crosses NATS (goal: >= 0.7x one at QoS 0);
//   - aggregate: publishers and subscribers on both a and b (client i on
//     a when i is even), so half the deliveries cross: on a 2-core box
//     this measures the cluster's overhead, not scaling;
//   - interest: a third gateway c with subscriptions of its own (disjoint
//     from b's) and the cluster counters: messages a sent to NATS and
//     skipped (no other gateway's interest);
//   - summary: subs-summary subscriptions spread over a, b, c (MQTT
//     clients of 1000 filters each), then each gateway's RSS and CPU over
//     3 summary periods, against the same gateways without them.
//
// The load is rig.RunLoad's: publisher i publishes round-robin on
// load/p{i}/s{j}, subscriber j subscribes load/+/s{j}.
//
// With -smoke host:port it instead checks a running cluster through its
// load balancer (deploy/cluster/run-local.sh).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/tolsey/tolsey/test/bench/internal/rig"
)

func main() {
	l := rig.Load{Pubs: 2, Subs: 2, N: 20000, Size: 64, Idle: 3 * time.Second}
	qosFlag := l.Flags("0,1")
	summarySubs := flag.Int("subs-summary", 100000, "subscriptions spread over three gateways for the interest summary figures; 0 skips")
	smokeAddr := flag.String("smoke", "", "check a running cluster through this MQTT address instead (run-local.sh)")
	smokeN := flag.Int("smoke-n", 50, "messages per publisher in -smoke")
	flag.StringVar(&profileDir, "profile", "", "save a CPU profile of each gateway of a phase (admin /debug/pprof), from its start, into this directory")
	flag.DurationVar(&profileFor, "profile-seconds", 3*time.Second, "length of each -profile")
	flag.Parse()
	if *smokeAddr != "" {
		if err := smoke(*smokeAddr, 3, 3, *smokeN); err != nil {
			fmt.Fprintln(os.Stderr, "smoke:", err)
			os.Exit(1)
		}
		return
	}
	qos, err := rig.QoS(*qosFlag)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	r, err := rig.New()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer r.Close()
	if err := run(r, l, qos, *summarySubs); err != nil {
		r.Fatal(err)
	}
}

var natsReady = regexp.MustCompile(`Server is ready`)

// -profile: where and for how long phase profiles its gateways.
var (
	profileDir string
	profileFor time.Duration
)

func run(r *rig.Rig, l rig.Load, qos []byte, summarySubs int) error {
	gw, err := r.Build("gateway", "./cmd/gateway")
	if err != nil {
		return err
	}
	natsBin, err := r.Build("nats-server", "github.com/nats-io/nats-server/v2")
	if err != nil {
		return err
	}
	port, err := rig.FreePort()
	if err != nil {
		return err
	}
	nats, err := r.Start("nats", nil, natsReady, natsBin, "-a", "127.0.0.1", "-p", fmt.Sprint(port))
	if err != nil {
		return err
	}
	redis, err := r.StartRedis("redis")
	if err != nil {
		return err
	}
	one, err := r.StartGateway("one", gw, "--retain.backend=memory")
	if err != nil {
		return err
	}
	cl := []string{"--cluster.enabled=true", fmt.Sprintf("--bridge.nats.url=nats://127.0.0.1:%d", port),
		"--retain.backend=redis", "--retain.redis.url=redis://" + redis.Addr, "--retain.redis.prefix=bench:"}
	a, err := r.StartGateway("a", gw, cl...)
	if err != nil {
		return err
	}
	b, err := r.StartGateway("b", gw, cl...)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "phase\tQoS\tmsg/s\tvs one\tgot/sent\tp50\tp99\tgateways CPU/msg\tNATS CPU/msg\n")
	for _, q := range qos {
		base, err := phase(tw, "one", []*rig.Child{one}, nats, l, q, 0, func(string) string { return one.Addr })
		if err != nil {
			return err
		}
		if _, err := phase(tw, "cross a→b", []*rig.Child{a, b}, nats, l, q, base, func(id string) string {
			if strings.Contains(id, "-sub") {
				return b.Addr
			}
			return a.Addr
		}); err != nil {
			return err
		}
		if _, err := phase(tw, "aggregate a+b", []*rig.Child{a, b}, nats, l, q, base, func(id string) string {
			if id[len(id)-1]%2 == 0 {
				return a.Addr
			}
			return b.Addr
		}); err != nil {
			return err
		}
	}
	tw.Flush()
	c, err := r.StartGateway("c", gw, cl...)
	if err != nil {
		return err
	}
	if err := interest(a, b, c, l); err != nil {
		return err
	}
	if summarySubs > 0 {
		return summary([]*rig.Child{a, b, c}, summarySubs)
	}
	return nil
}

// phase runs one load and prints its row; where maps a client id to the
// gateway it connects to.
func phase(tw io.Writer, name string, gws []*rig.Child, nats *rig.Child, l rig.Load, q byte, base float64, where func(id string) string) (float64, error) {
	cpu0 := cpuOf(gws)
	n0, _ := nats.CPU()
	var profiles []<-chan error
	if profileDir != "" {
		for _, g := range gws {
			file := filepath.Join(profileDir, fmt.Sprintf("%s-q%d-%s.pprof", strings.ReplaceAll(name, " ", "-"), q, g.Name))
			profiles = append(profiles, rig.ProfileGateway(g.Admin, profileFor, file))
		}
	}
	dial := func(ctx context.Context, id string, onMsg func(*paho.Publish)) (*paho.Client, error) {
		return rig.Connect(ctx, where(id), id, onMsg)
	}
	res, err := rig.RunLoad(gws[0], dial, l, q, strings.ReplaceAll(name, " ", "-"))
	for _, p := range profiles {
		if perr := <-p; perr != nil {
			fmt.Fprintln(os.Stderr, "profile:", perr)
		}
	}
	if err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	cpu := cpuOf(gws) - cpu0
	n1, _ := nats.CPU()
	ratio := "-"
	if base > 0 {
		ratio = fmt.Sprintf("%.2fx", res.Rate()/base)
	}
	got := max(res.Got, 1)
	fmt.Fprintf(tw, "%s\t%d\t%.0f\t%s\t%d/%d\t%s\t%s\t%s\t%s\n", name, q, res.Rate(), ratio, res.Got, res.Sent,
		rig.Ms(res.P50), rig.Ms(res.P99), cpu/time.Duration(got), (n1-n0)/time.Duration(got))
	return res.Rate(), nil
}

func cpuOf(cs []*rig.Child) (d time.Duration) {
	for _, c := range cs {
		x, _ := c.CPU()
		d += x
	}
	return d
}

type stats struct {
	Out, Skipped uint64
}

func clusterStats(c *rig.Child) (stats, error) {
	resp, err := http.Get("http://" + c.Admin + "/api/v1/cluster")
	if err != nil {
		return stats{}, err
	}
	defer resp.Body.Close()
	var v struct {
		Stats stats `json:"stats"`
	}
	err = json.NewDecoder(resp.Body).Decode(&v)
	return v.Stats, err
}

// interest: b subscribes to load/+/s0, c to other/#; a publishes n
// messages to load/p0/s0 (wanted by b only) and n to nobody/x (wanted by
// nobody): with interest-based forwarding a sends n to NATS, not 2n.
func interest(a, b, c *rig.Child, l rig.Load) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	got := make(chan struct{}, l.N)
	sb, err := rig.Connect(ctx, b.Addr, "interest-b", func(*paho.Publish) { got <- struct{}{} })
	if err != nil {
		return err
	}
	defer sb.Disconnect(&paho.Disconnect{})
	if err := rig.Subscribe(ctx, sb, "load/+/s0", 0); err != nil {
		return err
	}
	sc, err := rig.Connect(ctx, c.Addr, "interest-c", nil)
	if err != nil {
		return err
	}
	defer sc.Disconnect(&paho.Disconnect{})
	if err := rig.Subscribe(ctx, sc, "other/#", 0); err != nil {
		return err
	}
	p, err := rig.Connect(ctx, a.Addr, "interest-a", nil)
	if err != nil {
		return err
	}
	defer p.Disconnect(&paho.Disconnect{})
	s0, err := clusterStats(a)
	if err != nil {
		return err
	}
	n := l.N
	t0 := time.Now()
	for k := range n {
		if _, err := p.Publish(ctx, &paho.Publish{Topic: "load/p0/s0", QoS: 1, Payload: []byte(fmt.Sprint(k))}); err != nil {
			return err
		}
		if _, err := p.Publish(ctx, &paho.Publish{Topic: "nobody/x", QoS: 1, Payload: []byte(fmt.Sprint(k))}); err != nil {
			return err
		}
	}
	for range n {
		select {
		case <-got:
		case <-ctx.Done():
			return fmt.Errorf("interest: b did not get every message")
		}
	}
	el := time.Since(t0)
	s1, err := clusterStats(a)
	if err != nil {
		return err
	}
	fmt.Printf("\ninterest, 3 gateways, disjoint subscriptions: a published %d (QoS 1, %d wanted by b, %d by nobody) in %s: sent to NATS %d, skipped %d (without interest-based forwarding: %d sent)\n",
		2*n, n, n, el.Round(time.Millisecond), s1.Out-s0.Out, s1.Skipped-s0.Skipped, 2*n)
	return nil
}

// summary spreads total subscriptions over the gateways (MQTT clients of
// 1000 filters each, filters sum/<gw>/<client>/<k>/#) and reports each
// gateway's RSS and its CPU over 15 s (three summary periods) before and
// after.
func summary(gws []*rig.Child, total int) error {
	idle := func() ([]int64, []time.Duration, error) {
		var rss []int64
		var cpu []time.Duration
		c0 := make([]time.Duration, len(gws))
		for i, g := range gws {
			c0[i], _ = g.CPU()
		}
		time.Sleep(15 * time.Second) // three summary periods
		for i, g := range gws {
			c1, _ := g.CPU()
			r, err := g.SettledRSS(10 * time.Second)
			if err != nil {
				return nil, nil, err
			}
			rss = append(rss, r)
			cpu = append(cpu, c1-c0[i])
		}
		return rss, cpu, nil
	}
	rss0, cpu0, err := idle()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const per = 1000
	t0 := time.Now()
	var clients []*paho.Client
	defer func() {
		for _, c := range clients {
			_ = c.Disconnect(&paho.Disconnect{})
		}
	}()
	for k := 0; k*per < total; k++ {
		g := gws[k%len(gws)]
		c, err := rig.Connect(ctx, g.Addr, fmt.Sprintf("sum-%d", k), nil)
		if err != nil {
			return err
		}
		clients = append(clients, c)
		var opts []paho.SubscribeOptions
		for f := range per {
			opts = append(opts, paho.SubscribeOptions{Topic: fmt.Sprintf("sum/%s/%d/%d/#", g.Name, k, f)})
			if len(opts) == 100 {
				if _, err := c.Subscribe(ctx, &paho.Subscribe{Subscriptions: opts}); err != nil {
					return err
				}
				opts = nil
			}
		}
	}
	made := time.Since(t0)
	rss1, cpu1, err := idle()
	if err != nil {
		return err
	}
	fmt.Printf("\ninterest summary, %d subscriptions over %d gateways (made in %s):\n", total, len(gws), made.Round(time.Millisecond))
	for i, g := range gws {
		fmt.Printf("  %s: RSS %s -> %s (+%s), CPU over 15 s idle %s -> %s\n", g.Name, rig.MiB(rss0[i]), rig.MiB(rss1[i]),
			rig.MiB(rss1[i]-rss0[i]), cpu0[i].Round(time.Millisecond), cpu1[i].Round(time.Millisecond))
	}
	return nil
}
