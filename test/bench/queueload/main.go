// Command queueload measures queue throughput through the gateway,
// publish → store → consume → ack, and compares it with RabbitMQ in the
// same run (docs/queues.md, "Performance"):
//
//	go run ./test/bench/queueload [-n 20000 -pubs 4 -subs 4 -size 1024 -window 64] [-client lean|goamqp] [-no-redis] [-no-rabbitmq] [-profile dir [-profile-for 3s]]
//
// Targets, each a fresh server process with one durable queue "load":
// the gateway binary with queues.backend=embedded (fsync'd group commits),
// the gateway with queues.backend=redis (a redis-server without
// persistence), and RabbitMQ 3.10 (Debian's rabbitmq-server, a private node
// with the rabbitmq_amqp1_0 plugin: a durable classic queue, address
// /queue/load). The same clients for all: S receivers attach first
// (credit 256 topped up by 128 after every 128 accepted, by the program
// rather than go-amqp: see runTarget), then P senders send n messages in
// all, durable and unsettled (at least once), each keeping -window sends
// in flight and counting only accepted ones; each receiver accepts every
// message with a disposition of its own. The clients are
// test/internal/amqplean's (-client lean, the default), which put the
// same frames on the wire as go-amqp's but cost a fraction of their CPU
// (on a 2-core box the clients' CPU is taken from the server), or go-amqp
// (-client goamqp). A message's latency is from
// its send to its receipt (the send time is in the payload; one clock).
// The server's CPU (the gateway's; RabbitMQ's Erlang VM, by its pid file)
// and its read and write syscalls are read from /proc; the clients' CPU
// (this program's) from getrusage. On a shared box, where the rate is
// whatever share of the cores the run gets, CPU per message is the
// steadier comparison.
// Goals: embedded ≥ 20,000 msg/s and ≥ 3× RabbitMQ.
package main

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	goamqp "github.com/Azure/go-amqp"

	"github.com/tolsey/tolsey/test/bench/internal/rig"
	"github.com/tolsey/tolsey/test/internal/amqplean"
	"github.com/tolsey/tolsey/test/internal/rabbitnode"
)

type config struct {
	n, pubs, subs, size, window int
	client                      string        // -client: lean or goamqp
	profile                     string        // -profile: where the gateway's CPU and allocation profiles go
	profileFor                  time.Duration // -profile-for: the CPU profile's length
}

type result struct {
	name     string
	got      int64
	elapsed  time.Duration
	p50, p99 time.Duration
	cpu      time.Duration // server CPU, 0 when not measured
	client   time.Duration // this program's CPU (the senders and receivers)
	syscalls int64         // server read and write syscalls (pwrite and fdatasync's writes too), 0 when not measured
	stalled  bool          // deliveries stopped before every message arrived
}

func (r result) rate() float64 { return float64(r.got) / r.elapsed.Seconds() }

var amqpListening = regexp.MustCompile(`msg="amqp listening".* addr=(\S+)`)

func main() {
	var c config
	flag.IntVar(&c.n, "n", 20000, "messages per target, in all")
	flag.IntVar(&c.pubs, "pubs", 4, "senders")
	flag.IntVar(&c.subs, "subs", 4, "receivers")
	flag.IntVar(&c.size, "size", 1024, "payload bytes (at least 8: the send time)")
	flag.IntVar(&c.window, "window", 64, "unsettled sends in flight per sender")
	flag.StringVar(&c.client, "client", "lean", "the load clients: lean (test/internal/amqplean) or goamqp (go-amqp)")
	flag.StringVar(&c.profile, "profile", "", "write each gateway's CPU profile (admin /debug/pprof/profile, while its senders run), and this program's (the clients', <target>.client.pprof), to this directory")
	flag.DurationVar(&c.profileFor, "profile-for", 3*time.Second, "the CPU profile's length (-profile)")
	skipRabbit := flag.Bool("no-rabbitmq", false, "leave RabbitMQ out")
	skipRedis := flag.Bool("no-redis", false, "leave the gateway with the Redis backend out")
	flag.Parse()
	c.size = max(c.size, 8)
	if c.client != "lean" && c.client != "goamqp" {
		fatal(fmt.Errorf("-client %q: lean or goamqp", c.client))
	}

	r, err := rig.New()
	if err != nil {
		fatal(err)
	}
	defer r.Close()
	bin, err := r.Build("gateway", "./cmd/gateway")
	if err != nil {
		r.Fatal(err)
	}
	fmt.Printf("%d messages of %d B per target: %d senders (%d in flight each) → queue → %d receivers, durable, unsettled; %s clients\n",
		c.n, c.size, c.pubs, c.window, c.subs, c.client)

	gateway := func(name string, args ...string) (string, *rig.Child) {
		g, err := r.StartGateway(name, bin, append([]string{"--amqp.listen=127.0.0.1:0", "--retain.backend=memory",
			"--log.format=text", `--queues.declare=[{"name":"load","maxMessages":1000000,"maxBytes":"4GiB"}]`}, args...)...)
		if err != nil {
			r.Fatal(err)
		}
		m := amqpListening.FindStringSubmatch(g.Output())
		if m == nil {
			r.Fatal(fmt.Errorf("%s: no AMQP address in its log:\n%s", name, g.Output()))
		}
		return m[1], g
	}
	var results []result
	run := func(name, addr, target string, g *rig.Child) {
		res, err := runTarget(c, name, addr, target, g)
		if err != nil {
			r.Fatal(fmt.Errorf("%s: %w", name, err))
		}
		res.name = name
		results = append(results, res)
		fmt.Printf("%-20s %8.0f msg/s  p50 %v  p99 %v  received %d of %d\n", name, res.rate(), res.p50.Round(time.Microsecond), res.p99.Round(time.Microsecond), res.got, c.n)
		if res.stalled {
			fmt.Printf("%-20s STALLED: deliveries stopped for 20 s with %d of %d received\n", name, res.got, c.n)
		}
	}

	addr, g := gateway("gw-embedded", "--queues.backend=embedded")
	run("gateway embedded", addr, "queue://load", g)
	g.Kill()

	if !*skipRedis {
		red, err := r.StartRedis("redis")
		if err != nil {
			r.Fatal(err)
		}
		addr, g = gateway("gw-redis", "--queues.backend=redis", "--retain.redis.url=redis://"+red.Addr+"/0")
		run("gateway redis", addr, "queue://load", g)
		g.Kill()
		red.Kill()
	}

	if !*skipRabbit {
		dir := filepath.Join(r.Dir, "rabbitmq")
		if err := os.Mkdir(dir, 0o700); err != nil {
			r.Fatal(err)
		}
		node, err := rabbitnode.Start(dir)
		if err != nil {
			r.Fatal(err)
		}
		// The Erlang VM's CPU, as the gateway's: its pid from the node's
		// pid file (the server script's child), read from /proc.
		var vm *rig.Child
		if b, err := os.ReadFile(filepath.Join(dir, "rabbit.pid")); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				vm = &rig.Child{Name: "rabbitmq", PID: pid}
			}
		}
		run("RabbitMQ 3.10", node.Addr, "/queue/load", vm)
		node.Stop()
	}

	fmt.Println()
	tw := tabwriter.NewWriter(os.Stdout, 2, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "target\tmsg/s\tp50\tp99\tserver CPU µs/msg\tserver syscalls/msg\tclient CPU µs/msg\t× RabbitMQ\t")
	var rabbit float64
	if !*skipRabbit {
		rabbit = results[len(results)-1].rate()
	}
	for _, res := range results {
		cpu, sys, ratio := "-", "-", "-"
		if res.cpu > 0 {
			cpu = fmt.Sprintf("%.1f", float64(res.cpu.Microseconds())/float64(res.got))
		}
		if res.syscalls > 0 {
			sys = fmt.Sprintf("%.2f", float64(res.syscalls)/float64(res.got))
		}
		if rabbit > 0 {
			ratio = fmt.Sprintf("%.2f", res.rate()/rabbit)
		}
		client := fmt.Sprintf("%.1f", float64(res.client.Microseconds())/float64(max(res.got, 1)))
		fmt.Fprintf(tw, "%s\t%.0f\t%v\t%v\t%s\t%s\t%s\t%s\t\n", res.name, res.rate(), res.p50.Round(time.Microsecond), res.p99.Round(time.Microsecond), cpu, sys, client, ratio)
	}
	tw.Flush()
	emb := results[0].rate()
	ok := emb >= 20000
	fmt.Printf("embedded ≥ 20,000 msg/s: %v\n", map[bool]string{true: "PASS", false: "FAIL"}[emb >= 20000])
	if rabbit > 0 {
		if e, rq := results[0], results[len(results)-1]; e.cpu > 0 && rq.cpu > 0 {
			fmt.Printf("server CPU per message, RabbitMQ / embedded: %.2f\n",
				(float64(rq.cpu)/float64(rq.got))/(float64(e.cpu)/float64(e.got)))
		}
		fmt.Printf("embedded ≥ 3× RabbitMQ: %v\n", map[bool]string{true: "PASS", false: "FAIL"}[emb >= 3*rabbit])
		ok = ok && emb >= 3*rabbit
	}
	if !ok {
		r.Close()
		os.Exit(1)
	}
}

// A receiver's credit: credit at attach, topUp more after every topUp
// messages accepted (go-amqp's automatic policy, done by hand; runTarget).
const (
	credit = 256
	topUp  = 128
)

// runTarget runs one measurement against the AMQP server at addr, queue
// address target; g, when not nil, is the server whose CPU is read.
func runTarget(c config, name, addr, target string, g *rig.Child) (result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dial := func() (*goamqp.Conn, *goamqp.Session, error) {
		conn, err := goamqp.Dial(ctx, "amqp://"+addr, &goamqp.ConnOptions{SASLType: goamqp.SASLTypeAnonymous()})
		if err != nil {
			return nil, nil, err
		}
		s, err := conn.NewSession(ctx, nil)
		if err != nil {
			conn.Close()
			return nil, nil, err
		}
		return conn, s, nil
	}
	var (
		got  atomic.Int64
		mu   sync.Mutex
		lats = make([]time.Duration, 0, c.n)
		done = make(chan struct{})
		last atomic.Int64
	)
	rctx, rcancel := context.WithCancel(ctx)
	defer rcancel()
	var wg sync.WaitGroup
	var leanRcvs []*amqplean.Conn
	for range c.subs {
		if c.client == "lean" {
			rcv, err := leanReceiver(ctx, addr, target, func() {
				if got.Add(1) == int64(c.n) {
					close(done)
				}
			}, &mu, &lats, &last)
			if err != nil {
				return result{}, err
			}
			defer rcv.Close()
			leanRcvs = append(leanRcvs, rcv)
			continue
		}
		conn, s, err := dial()
		if err != nil {
			return result{}, err
		}
		defer conn.Close()
		// Credit is managed here, not by go-amqp (Credit -1): go-amqp's
		// automatic top-up decrements its link credit without a floor,
		// and RabbitMQ 3.10's AMQP 1.0 plugin sends a few transfers past
		// the credit it was given (rabbitmq/rabbitmq-amqp1.0#50: its x-credit
		// mapping), so the credit wraps to 2^32-1, go-amqp never tops up
		// again and the receiver stalls. The policy is go-amqp's own:
		// 256 at attach, 128 more after every 128 accepted; a flow frame
		// then carries what was added plus go-amqp's (wrapped) count,
		// which is right again, so an over-delivery costs credit, not
		// the link.
		rcv, err := s.NewReceiver(ctx, target, &goamqp.ReceiverOptions{Credit: -1})
		if err != nil {
			return result{}, fmt.Errorf("receiver %s: %w", target, err)
		}
		if err := rcv.IssueCredit(credit); err != nil {
			return result{}, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			accepted := 0
			for {
				m, err := rcv.Receive(rctx, nil)
				if err != nil {
					return
				}
				now := time.Now()
				if d := m.GetData(); len(d) >= 8 {
					mu.Lock()
					lats = append(lats, now.Sub(time.Unix(0, int64(binary.BigEndian.Uint64(d)))))
					mu.Unlock()
				}
				if err := rcv.AcceptMessage(rctx, m); err != nil {
					return
				}
				last.Store(time.Now().UnixNano())
				if got.Add(1) == int64(c.n) {
					close(done)
				}
				if accepted++; accepted == topUp {
					accepted = 0
					if err := rcv.IssueCredit(topUp); err != nil {
						return
					}
				}
			}
		}()
	}
	senders := make([]*goamqp.Sender, c.pubs)
	leanSnds := make([]*amqplean.Conn, c.pubs)
	for i := range senders {
		if c.client == "lean" {
			snd, err := amqplean.Dial(ctx, addr, amqplean.Options{})
			if err != nil {
				return result{}, err
			}
			defer snd.Close()
			if err := snd.AttachSender(ctx, target, c.window); err != nil {
				return result{}, fmt.Errorf("sender %s: %w", target, err)
			}
			leanSnds[i] = snd
			continue
		}
		conn, s, err := dial()
		if err != nil {
			return result{}, err
		}
		defer conn.Close()
		if senders[i], err = s.NewSender(ctx, target, nil); err != nil {
			return result{}, fmt.Errorf("sender %s: %w", target, err)
		}
	}
	var cpu0 time.Duration
	var sys0 int64
	client0 := selfCPU()
	if g != nil {
		cpu0, _ = g.CPU()
		sys0, _ = syscalls(g.PID)
	}
	if c.profile != "" {
		stop, err := clientProfile(filepath.Join(c.profile, strings.ReplaceAll(name, " ", "-")+".client.pprof"), c.profileFor)
		if err != nil {
			return result{}, err
		}
		defer stop()
	}
	profiled := make(chan error, 1)
	if c.profile != "" && g != nil && g.Admin != "" {
		go func() {
			profiled <- profile(ctx, g.Admin, fmt.Sprintf("profile?seconds=%d", int(c.profileFor.Seconds())),
				filepath.Join(c.profile, strings.ReplaceAll(name, " ", "-")+".pprof"))
		}()
	} else {
		profiled <- nil
	}
	start := time.Now()
	errs := make(chan error, c.pubs)
	for i, snd := range senders {
		per := c.n / c.pubs
		if i < c.n%c.pubs {
			per++
		}
		if c.client == "lean" {
			go func() { errs <- leanSend(ctx, leanSnds[i], per, c) }()
			continue
		}
		go func() { errs <- send(ctx, snd, per, c) }()
	}
	for range senders {
		if err := <-errs; err != nil {
			return result{}, err
		}
	}
	stalled := false
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		// Reported, not fatal: the rate is then what arrived, over the
		// time until the last arrival.
		stalled = true
	}
	res := result{got: got.Load(), elapsed: time.Unix(0, last.Load()).Sub(start), stalled: stalled, client: selfCPU() - client0}
	if g != nil {
		cpu1, _ := g.CPU()
		res.cpu = cpu1 - cpu0
		if sys1, err := syscalls(g.PID); err == nil && sys0 > 0 {
			res.syscalls = sys1 - sys0
		}
	}
	rcancel()
	wg.Wait()
	for _, rcv := range leanRcvs {
		if err := rcv.Err(); err != nil && stalled {
			return result{}, fmt.Errorf("receiver: %w", err)
		}
	}
	if err := <-profiled; err != nil {
		return result{}, fmt.Errorf("profile: %w", err)
	}
	if c.profile != "" && g != nil && g.Admin != "" {
		// Allocations since the gateway started: the run and its setup.
		if err := profile(ctx, g.Admin, "allocs", filepath.Join(c.profile, strings.ReplaceAll(name, " ", "-")+".allocs.pprof")); err != nil {
			return result{}, fmt.Errorf("profile: %w", err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(lats)
	if n := len(lats); n > 0 {
		res.p50, res.p99 = lats[n/2], lats[n*99/100]
	}
	return res, nil
}

// send sends n durable unsettled messages, window of them in flight, and
// fails on any outcome but accepted.
func send(ctx context.Context, snd *goamqp.Sender, n int, c config) error {
	inflight := make([]goamqp.SendReceipt, 0, c.window)
	wait := func() error {
		st, err := inflight[0].Wait(ctx)
		inflight = inflight[1:]
		if err != nil {
			return err
		}
		if _, ok := st.(*goamqp.StateAccepted); !ok {
			return fmt.Errorf("outcome %T %+v", st, st)
		}
		return nil
	}
	payload := make([]byte, c.size)
	for range n {
		if len(inflight) == c.window {
			if err := wait(); err != nil {
				return err
			}
		}
		binary.BigEndian.PutUint64(payload, uint64(time.Now().UnixNano()))
		m := goamqp.NewMessage(slices.Clone(payload))
		m.Header = &goamqp.MessageHeader{Durable: true}
		r, err := snd.SendWithReceipt(ctx, m, nil)
		if err != nil {
			return err
		}
		inflight = append(inflight, r)
	}
	for len(inflight) > 0 {
		if err := wait(); err != nil {
			return err
		}
	}
	return nil
}

// leanReceiver attaches an amqplean receiver with the policy of the
// go-amqp ones (credit 256, 128 more after every 128 accepted, a
// disposition per message): its handler, on the connection's reader
// goroutine, records the latency, accepts and calls arrived.
func leanReceiver(ctx context.Context, addr, target string, arrived func(), mu *sync.Mutex, lats *[]time.Duration, last *atomic.Int64) (*amqplean.Conn, error) {
	rcv, err := amqplean.Dial(ctx, addr, amqplean.Options{})
	if err != nil {
		return nil, err
	}
	accepted := 0 // the reader goroutine's
	err = rcv.AttachReceiver(ctx, target, func(d *amqplean.Delivery) {
		now := time.Now()
		if len(d.Data) >= 8 {
			mu.Lock()
			*lats = append(*lats, now.Sub(time.Unix(0, int64(binary.BigEndian.Uint64(d.Data)))))
			mu.Unlock()
		}
		rcv.Accept(d.ID)
		last.Store(time.Now().UnixNano())
		arrived()
		if accepted++; accepted == topUp {
			accepted = 0
			rcv.IssueCredit(topUp)
		}
	})
	if err != nil {
		rcv.Close()
		return nil, fmt.Errorf("receiver %s: %w", target, err)
	}
	rcv.IssueCredit(credit)
	return rcv, nil
}

// leanSend is send with an amqplean sender (attached with -window in
// flight): the same messages, the same window; an outcome other than
// accepted ends the connection, and Ready, Send or Wait returns it. A
// message is stamped once it can go out (Ready), as send stamps after
// waiting for a place in the window: its latency starts at its send, not
// at the wait for the window, and a server that stops answering ends the
// run with ctx rather than hanging it.
func leanSend(ctx context.Context, snd *amqplean.Conn, n int, c config) error {
	payload := make([]byte, c.size)
	for range n {
		if err := snd.Ready(ctx, len(payload)); err != nil {
			return err
		}
		binary.BigEndian.PutUint64(payload, uint64(time.Now().UnixNano()))
		if err := snd.Send(payload); err != nil {
			return err
		}
	}
	if err := snd.Wait(ctx); err != nil {
		return err
	}
	if a := snd.Accepted(); a != int64(n) {
		return fmt.Errorf("%d of %d sends accepted", a, n)
	}
	return nil
}

// profile fetches /debug/pprof/<which> from the gateway's admin API at
// admin into path: a CPU profile of -profile-for from the run's start (a
// run of -n 100000 or so lasts longer), or the allocations at its end.
func profile(ctx context.Context, admin, which, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+admin+"/debug/pprof/"+which, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", req.URL, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// clientProfile writes this program's CPU profile (the clients: the
// senders and receivers) for d, or until stop, to path.
func clientProfile(path string, d time.Duration) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			pprof.StopCPUProfile()
			f.Close()
		})
	}
	time.AfterFunc(d, stop)
	return stop, nil
}

// selfCPU is the CPU time this program has used, all its threads: the
// clients' share of the box, which they take from the server under test.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// syscalls is the read and write system calls process pid has made, all
// its threads (/proc/<pid>/io syscr + syscw: socket reads and writes, and
// the store's pwrites). Less at the mercy of a shared box than CPU time:
// what batching saves shows here first.
func syscalls(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return 0, err
	}
	var n int64
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ": ")
		if ok && (k == "syscr" || k == "syscw") {
			x, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/%d/io: %q: %w", pid, line, err)
			}
			n += x
		}
	}
	return n, nil
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "queueload:", err)
	os.Exit(1)
}
