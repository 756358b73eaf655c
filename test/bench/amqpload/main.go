// Command amqpload measures message throughput through the gateway for the
// four ways a message can cross it, in one run, and prints each against
// MQTT→MQTT:
//
//	go run ./test/bench/amqpload [-pubs 4 -subs 4 -n 20000 -size 64 -rounds 2]
//
// It builds cmd/gateway and runs it as a child process (retain.backend=
// memory, every listener on a free port), so that the gateway's own CPU
// per delivered message (utime+stime from /proc/PID/stat, before and after
// each phase) is printed apart from the clients'; -gateway-args adds
// flags (e.g. "--amqp.linkBuffer=4096"). Per round and flow it connects fresh clients: P publishers
// and S subscribers; paho.golang MQTT 5 clients for MQTT, go-amqp for AMQP.
// Publisher i sends n messages round-robin on amqpload/<flow>/p{i}/s{j};
// subscriber j listens on amqpload/<flow>/+/s{j}, so each message is
// delivered exactly once. MQTT publishes are QoS 0; AMQP sends are
// presettled (durable=false: QoS 0 in the gateway), so no flow waits for
// acknowledgements. Payloads carry the send time: latency is end to end on
// one clock. A phase ends when every message arrived or subscribers got
// nothing for -idle. Unpaced, publishers outrun subscribers and QoS 0
// messages are dropped for slow consumers (mochi's per-client queue, the
// AMQP link buffer): the rate printed is what subscribers received per
// second, and the loss is printed beside it. -rate paces publishers to
// compare latencies at a load every flow sustains.
//
// Clients and gateway share the machine, as they share the CPU in every
// flow. Goal (docs/benchmarks.md, "Goals"): every cross-protocol flow at
// least 0.8× MQTT→MQTT.
package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"net"
	"os"
	"regexp"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	goamqp "github.com/Azure/go-amqp"
	"github.com/eclipse/paho.golang/paho"

	"github.com/tolsey/tolsey/test/bench/internal/rig"
)

type config struct {
	pubs, subs, n, size, rounds int
	fanout                      bool // every subscriber gets every message
	rate                        int  // per publisher, msgs/s; 0 = as fast as possible
	idle                        time.Duration
}

type flow struct {
	name     string
	pubAMQP  bool
	subAMQP  bool
	baseline bool
}

var flows = []flow{
	{name: "MQTT→MQTT", baseline: true},
	{name: "MQTT→AMQP", subAMQP: true},
	{name: "AMQP→MQTT", pubAMQP: true},
	{name: "AMQP→AMQP", pubAMQP: true, subAMQP: true},
}

type result struct {
	sent, got int64
	elapsed   time.Duration
	p50, p99  time.Duration
	cpu       time.Duration // the gateway's, during the phase
}

func (r result) rate() float64 { return float64(r.got) / r.elapsed.Seconds() }

// cpuPerMsg is the gateway's CPU per delivered message, in µs.
func (r result) cpuPerMsg() float64 {
	return float64(r.cpu) / float64(time.Microsecond) / float64(max(r.got, 1))
}

// target is the gateway under load: a child process.
type target struct {
	child      *rig.Child
	mqtt, amqp string
}

func (t *target) MQTTAddr() string { return t.mqtt }
func (t *target) AMQPAddr() string { return t.amqp }

func main() {
	var c config
	flag.IntVar(&c.pubs, "pubs", 4, "publishers")
	flag.IntVar(&c.subs, "subs", 4, "subscribers (each on its own topics)")
	flag.IntVar(&c.n, "n", 20000, "messages per publisher per phase")
	flag.IntVar(&c.size, "size", 64, "payload bytes (at least 8: the send time)")
	flag.IntVar(&c.rounds, "rounds", 2, "rounds; the order of flows rotates")
	flag.IntVar(&c.rate, "rate", 0, "messages/s per publisher; 0 = as fast as possible (the throughput goal is measured so)")
	flag.DurationVar(&c.idle, "idle", 2*time.Second, "a phase ends when subscribers get nothing for this long")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the load clients here (the gateway's: its admin API's /debug/pprof/profile, address printed at start)")
	gatewayArgs := flag.String("gateway-args", "", "extra gateway flags, space-separated")
	flag.BoolVar(&c.fanout, "fanout", false, "every subscriber subscribes to every publisher's topics (amqpload/<flow>/#): each message is delivered -subs times")
	only := flag.String("flows", "", "run only these flows, comma-separated, from mm, ma, am, aa (M = MQTT, A = AMQP; publisher first), e.g. to profile one: the first listed is the baseline of the ratios")
	flag.Parse()
	if *only != "" {
		var picked []flow
		for _, k := range strings.Split(*only, ",") {
			i := slices.Index([]string{"mm", "ma", "am", "aa"}, strings.TrimSpace(k))
			if i < 0 {
				fatal(fmt.Errorf("-flows: unknown flow %q", k))
			}
			picked = append(picked, flows[i])
		}
		flows = picked
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fatal(err)
		}
		defer pprof.StopCPUProfile()
	}
	c.size = max(c.size, 8)

	r, err := rig.New()
	if err != nil {
		fatal(err)
	}
	defer r.Close()
	g, err := startGateway(r, strings.Fields(*gatewayArgs))
	if err != nil {
		r.Fatal(err)
	}
	fmt.Printf("gateway pid=%d mqtt=%s amqp=%s admin=%s; %d publishers × %d messages of %d B → %d subscribers, %d rounds\n",
		g.child.PID, g.MQTTAddr(), g.AMQPAddr(), g.child.Admin, c.pubs, c.n, c.size, c.subs, c.rounds)

	results := map[string][]result{}
	for round := range c.rounds {
		for k := range flows {
			f := flows[(k+round)%len(flows)]
			res, err := runPhase(g, c, f, round)
			if err != nil {
				r.Fatal(fmt.Errorf("%s: %w", f.name, err))
			}
			results[f.name] = append(results[f.name], res)
			fmt.Printf("round %d %-10s %9.0f msg/s  got %d/%d  p50 %v  p99 %v  gateway CPU %.1f µs/msg\n",
				round+1, f.name, res.rate(), res.got, res.sent, res.p50, res.p99, res.cpuPerMsg())
		}
	}

	best := func(name string) result {
		rs := results[name]
		return slices.MaxFunc(rs, func(a, b result) int { return int(a.rate() - b.rate()) })
	}
	base := best(flows[0].name)
	fmt.Println()
	tw := tabwriter.NewWriter(os.Stdout, 2, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "flow\tmsg/s (best)\tloss\tp50\tp99\t× MQTT→MQTT\tgateway CPU/msg (mean)\t× MQTT→MQTT\t")
	meanCPU := func(name string) float64 {
		var cpu time.Duration
		var got int64
		for _, r := range results[name] {
			cpu, got = cpu+r.cpu, got+r.got
		}
		return result{cpu: cpu, got: got}.cpuPerMsg()
	}
	baseCPU := meanCPU(flows[0].name)
	ok := true
	for _, f := range flows {
		r := best(f.name)
		ratio := r.rate() / base.rate()
		mark := ""
		if !f.baseline && ratio < 0.8 {
			mark = "  < 0.8"
			ok = false
		}
		cpu := meanCPU(f.name)
		fmt.Fprintf(tw, "%s\t%.0f\t%.2f%%\t%v\t%v\t%.2f%s\t%.1f µs\t%.2f\t\n", f.name, r.rate(), 100*float64(r.sent-r.got)/float64(r.sent),
			r.p50.Round(time.Microsecond), r.p99.Round(time.Microsecond), ratio, mark, cpu, cpu/baseCPU)
	}
	tw.Flush()
	if !ok {
		fmt.Println("goal not met: a cross-protocol flow is below 0.8× MQTT→MQTT")
		r.Close()
		os.Exit(1)
	}
	fmt.Println("goal met: every cross-protocol flow ≥ 0.8× MQTT→MQTT")
}

var amqpListening = regexp.MustCompile(`msg="amqp listening".* addr=(\S+)`)

func startGateway(r *rig.Rig, extra []string) (*target, error) {
	bin, err := r.Build("gateway", "./cmd/gateway")
	if err != nil {
		return nil, err
	}
	// Later flags win: this AMQP listener replaces the rig's none.
	args := append([]string{"--amqp.listen=127.0.0.1:0", "--retain.backend=memory"}, extra...)
	c, err := r.StartGateway("amqpload", bin, args...)
	if err != nil {
		return nil, err
	}
	m := amqpListening.FindStringSubmatch(c.Output())
	if m == nil {
		return nil, fmt.Errorf("no AMQP address in the gateway's log:\n%s", c.Output())
	}
	return &target{child: c, mqtt: c.Addr, amqp: m[1]}, nil
}

// sink counts what the subscribers of a phase receive.
type sink struct {
	got  atomic.Int64
	last atomic.Int64 // UnixNano of the last arrival
	mu   sync.Mutex
	lats []time.Duration
}

func (s *sink) take(payload []byte) {
	now := time.Now()
	if len(payload) >= 8 {
		sent := int64(binary.BigEndian.Uint64(payload))
		s.mu.Lock()
		s.lats = append(s.lats, now.Sub(time.Unix(0, sent)))
		s.mu.Unlock()
	}
	s.got.Add(1)
	s.last.Store(now.UnixNano())
}

func runPhase(g *target, c config, f flow, round int) (result, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	prefix := fmt.Sprintf("amqpload/r%d%s", round, map[bool]string{true: "a", false: "m"}[f.pubAMQP])
	prefix += map[bool]string{true: "a", false: "m"}[f.subAMQP]
	s := &sink{lats: make([]time.Duration, 0, c.pubs*c.n)}
	var closers []func()
	defer func() {
		for _, cl := range closers {
			cl()
		}
	}()

	// Subscribers.
	var wg sync.WaitGroup
	for j := range c.subs {
		filter := fmt.Sprintf("%s/+/s%d", prefix, j)
		if c.fanout {
			filter = prefix + "/#"
		}
		if f.subAMQP {
			conn, sess, err := amqpConn(ctx, g)
			if err != nil {
				return result{}, err
			}
			closers = append(closers, func() { conn.Close() })
			r, err := sess.NewReceiver(ctx, filter, &goamqp.ReceiverOptions{Credit: 1000})
			if err != nil {
				return result{}, err
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					m, err := r.Receive(ctx, nil)
					if err != nil {
						return
					}
					s.take(m.GetData())
				}
			}()
		} else {
			cl, err := mqttConn(ctx, g, fmt.Sprintf("sub-%s-%d", prefix, j), func(p *paho.Publish) { s.take(p.Payload) })
			if err != nil {
				return result{}, err
			}
			closers = append(closers, func() { _ = cl.Disconnect(&paho.Disconnect{}) })
			sa, err := cl.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: filter, QoS: 0}}})
			if err != nil || sa.Reasons[0] >= 0x80 {
				return result{}, fmt.Errorf("subscribe: %v %v", err, sa)
			}
		}
	}

	// Publishers: connect all, then start together.
	send := make([]func(topic string, payload []byte) error, c.pubs)
	for i := range c.pubs {
		if f.pubAMQP {
			conn, sess, err := amqpConn(ctx, g)
			if err != nil {
				return result{}, err
			}
			closers = append(closers, func() { conn.Close() })
			snd, err := sess.NewSender(ctx, "", nil) // anonymous relay: one link, many topics
			if err != nil {
				return result{}, err
			}
			settled := &goamqp.SendOptions{Settled: true}
			send[i] = func(topic string, payload []byte) error {
				m := goamqp.NewMessage(payload)
				m.Properties = &goamqp.MessageProperties{To: &topic}
				return snd.Send(ctx, m, settled)
			}
		} else {
			cl, err := mqttConn(ctx, g, fmt.Sprintf("pub-%s-%d", prefix, i), nil)
			if err != nil {
				return result{}, err
			}
			closers = append(closers, func() { _ = cl.Disconnect(&paho.Disconnect{}) })
			send[i] = func(topic string, payload []byte) error {
				_, err := cl.Publish(ctx, &paho.Publish{Topic: topic, QoS: 0, Payload: payload})
				return err
			}
		}
	}
	topics := make([][]string, c.pubs)
	for i := range topics {
		for j := range c.subs {
			topics[i] = append(topics[i], fmt.Sprintf("%s/p%d/s%d", prefix, i, j))
		}
	}
	cpu0, err := g.child.CPU()
	if err != nil {
		return result{}, err
	}
	start := time.Now()
	var sent atomic.Int64
	errs := make(chan error, c.pubs)
	for i := range c.pubs {
		go func() {
			payload := make([]byte, c.size)
			for k := range c.n {
				if c.rate > 0 && k%100 == 0 {
					// Pace in steps of 100 messages.
					if d := time.Until(start.Add(time.Duration(k) * time.Second / time.Duration(c.rate))); d > 0 {
						time.Sleep(d)
					}
				}
				binary.BigEndian.PutUint64(payload, uint64(time.Now().UnixNano()))
				if err := send[i](topics[i][k%c.subs], payload); err != nil {
					errs <- err
					return
				}
				sent.Add(1)
			}
			errs <- nil
		}()
	}
	for range c.pubs {
		if err := <-errs; err != nil {
			return result{}, err
		}
	}
	want := int64(c.pubs * c.n)
	if c.fanout {
		want *= int64(c.subs)
	}
	for s.got.Load() < want {
		last := time.Unix(0, s.last.Load())
		if s.last.Load() == 0 {
			last = start
		}
		if time.Since(last) > c.idle {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	end := time.Unix(0, s.last.Load())
	cpu1, err := g.child.CPU()
	if err != nil {
		return result{}, err
	}
	cancel()
	wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	slices.Sort(s.lats)
	expected := sent.Load() // deliveries due
	if c.fanout {
		expected *= int64(c.subs)
	}
	r := result{sent: expected, got: s.got.Load(), elapsed: end.Sub(start), cpu: cpu1 - cpu0}
	if n := len(s.lats); n > 0 {
		r.p50, r.p99 = s.lats[n/2], s.lats[n*99/100]
	}
	return r, nil
}

func amqpConn(ctx context.Context, g *target) (*goamqp.Conn, *goamqp.Session, error) {
	conn, err := goamqp.Dial(ctx, "amqp://"+g.AMQPAddr(), &goamqp.ConnOptions{SASLType: goamqp.SASLTypeAnonymous()})
	if err != nil {
		return nil, nil, err
	}
	sess, err := conn.NewSession(ctx, nil)
	if err != nil {
		conn.Close()
		return nil, nil, err
	}
	return conn, sess, nil
}

func mqttConn(ctx context.Context, g *target, id string, onMsg func(*paho.Publish)) (*paho.Client, error) {
	nc, err := net.Dial("tcp", g.MQTTAddr())
	if err != nil {
		return nil, err
	}
	cfg := paho.ClientConfig{ClientID: id, Conn: &bufConn{Conn: nc, r: bufio.NewReaderSize(nc, 16<<10)}}
	if onMsg != nil {
		cfg.OnPublishReceived = []func(paho.PublishReceived) (bool, error){func(pr paho.PublishReceived) (bool, error) {
			onMsg(pr.Packet)
			return true, nil
		}}
	}
	cl := paho.NewClient(cfg)
	ca, err := cl.Connect(ctx, &paho.Connect{ClientID: id, CleanStart: true, KeepAlive: 60})
	if err != nil {
		nc.Close()
		return nil, err
	}
	if ca.ReasonCode != 0 {
		nc.Close()
		return nil, fmt.Errorf("connect %s: reason %#x", id, ca.ReasonCode)
	}
	return cl, nil
}

// bufConn buffers reads: paho.golang reads packet headers byte by byte
// from its Conn, a syscall per byte, which would make the client the
// bottleneck. paho takes the sync.Locker we offer around each packet.
type bufConn struct {
	net.Conn
	sync.Mutex
	r *bufio.Reader
}

func (c *bufConn) Read(p []byte) (int, error) { return c.r.Read(p) }

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "amqpload:", err)
	os.Exit(1)
}
