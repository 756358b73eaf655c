// Command secload measures what security costs the MQTT front-end, in one
// run: the same load against four gateways, side by side, and the rate of
// new connections with and without TLS.
//
//	go run ./test/bench/secload [-pubs 2 -subs 2 -n 20000 -rounds 2 -rules 1000 -qos 0,1 -conns 4 -conn-time 3s]
//
// It builds cmd/gateway into a temporary directory, makes a CA and a server
// certificate for 127.0.0.1 (test/internal/certgen; nothing is committed),
// hashes the load user's password with `gateway passwd` (bcrypt, cost 10),
// and starts four gateways (retain.backend=memory, no AMQP) on free ports:
//
//	off           no users file: every client may do anything
//	auth          a users file with the load user and no acl section (default allow)
//	auth+acl      the same and -rules ACL rules: one allows load/# to the
//	              user, the others name other groups, users and topics
//	              (site<i>/%u/#, denies on fleet/<i>/cmd, ...), so each check
//	              walks a trie of that size; -partly adds a deny inside
//	              the load's subscriptions, so every delivery is checked too
//	auth+acl+tls  the same file; the clients connect to mqtt.tls.listen
//	              (TLS 1.3, ECDSA P-256)
//
// The load is mqttload's (test/bench/internal/rig.RunLoad): P publishers, S
// subscribers on load/+/s<j>, payloads carrying the send time. Every
// client logs in as the load user, except on "off". Rounds alternate the
// order of the targets. The summary gives each target's throughput and
// latency and its ratio to "off" (the goal in docs/security.md: ACL ≤ 5% slower, TLS
// within 20%).
//
// The connection phase then opens and closes MQTT sessions from -conns
// workers for -conn-time each way against the auth+acl+tls gateway: on its
// plain port and on its TLS port without credentials (the users file lets
// anonymous clients in on loopback: what is measured is the TCP or TLS
// handshake and CONNECT), and on the TLS port with the password, where
// bcrypt's cost shows. Every TLS connection is a full handshake (no session
// resumption).
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/tolsey/tolsey/test/bench/internal/rig"
	"github.com/tolsey/tolsey/test/internal/certgen"
)

const (
	user     = "bench"
	password = "bench-password"
)

type config struct {
	load     rig.Load
	rounds   int
	qos      []byte
	rules    int
	partly   bool
	conns    int
	connTime time.Duration
}

// target is one gateway and how the load's clients reach it.
type target struct {
	name  string
	child *rig.Child
	addr  string
	login rig.Login
}

func (t target) dial(ctx context.Context, id string, onMsg func(*paho.Publish)) (*paho.Client, error) {
	return rig.ConnectWith(ctx, t.addr, id, t.login, onMsg)
}

func main() {
	c := config{load: rig.Load{Pubs: 2, Subs: 2, N: 20000, Size: 64, Idle: 3 * time.Second}}
	qos := c.load.Flags("0,1")
	flag.IntVar(&c.rounds, "rounds", 2, "rounds; the order of targets alternates")
	flag.IntVar(&c.rules, "rules", 1000, "ACL rules in the auth+acl and auth+acl+tls users files")
	flag.BoolVar(&c.partly, "partly", false, "add a deny inside the load's subscriptions, so every delivery is checked")
	flag.IntVar(&c.conns, "conns", 4, "concurrent workers in the connection phase (0 skips it)")
	flag.DurationVar(&c.connTime, "conn-time", 3*time.Second, "how long each connection measurement runs")
	flag.Parse()
	var err error
	if c.qos, err = rig.QoS(*qos); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if c.rules < 1 {
		fmt.Fprintln(os.Stderr, "-rules must be at least 1 (the rule that lets the load through)")
		os.Exit(2)
	}
	c.load.Size = max(c.load.Size, 8)

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

var tlsAddr = regexp.MustCompile(`msg="mqtt listening".* addr=(\S+) transport=tls`)

func run(r *rig.Rig, c *config) error {
	gwBin, err := r.Build("gateway", "./cmd/gateway")
	if err != nil {
		return err
	}
	files, err := writeFiles(r.Dir, gwBin, c)
	if err != nil {
		return err
	}
	start := func(name string, args ...string) (*rig.Child, error) {
		return r.StartGateway(name, gwBin, append([]string{"--retain.backend=memory"}, args...)...)
	}
	var targets []target
	off, err := start("off")
	if err != nil {
		return err
	}
	targets = append(targets, target{name: "off", child: off, addr: off.Addr})
	pw := rig.Login{User: user, Password: password}
	auth, err := start("auth", "--auth.file="+files.usersOnly)
	if err != nil {
		return err
	}
	targets = append(targets, target{name: "auth", child: auth, addr: auth.Addr, login: pw})
	acl, err := start("auth+acl", "--auth.file="+files.withACL)
	if err != nil {
		return err
	}
	targets = append(targets, target{name: "auth+acl", child: acl, addr: acl.Addr, login: pw})
	sec, err := start("auth+acl+tls", "--auth.file="+files.withACL, "--mqtt.tls.listen=127.0.0.1:0",
		"--mqtt.tls.cert="+files.cert, "--mqtt.tls.key="+files.key)
	if err != nil {
		return err
	}
	m := tlsAddr.FindStringSubmatch(sec.Output())
	if m == nil {
		return fmt.Errorf("auth+acl+tls: no TLS address in its log:\n%s", sec.Output())
	}
	tlsLogin := rig.Login{TLS: &tls.Config{RootCAs: files.pool, ServerName: "127.0.0.1"}, User: user, Password: password}
	targets = append(targets, target{name: "auth+acl+tls", child: sec, addr: m[1], login: tlsLogin})

	fmt.Printf("secload: %d publishers × %d subscribers, %d msgs/publisher/phase, %d B payload, %d ACL rules%s, %d round(s), 2 CPUs shared by clients and servers\n",
		c.load.Pubs, c.load.Subs, c.load.N, c.load.Size, c.rules, map[bool]string{true: " (a deny inside the subscriptions: every delivery checked)"}[c.partly], c.rounds)
	for _, t := range targets {
		fmt.Printf("  %-14s %s (pid %d)\n", t.name, t.addr, t.child.PID)
	}

	// Warm up each target once (connections, goroutine stacks, heap).
	for _, t := range targets {
		w := c.load
		w.N = max(c.load.N/10, 1000)
		if _, err := rig.RunLoad(t.child, t.dial, w, 0, "warm"); err != nil {
			return fmt.Errorf("%s warm-up: %w", t.name, err)
		}
	}
	results := map[string]map[byte][]rig.LoadResult{}
	for _, t := range targets {
		results[t.name] = map[byte][]rig.LoadResult{}
	}
	tw := tabwriter.NewWriter(os.Stdout, 2, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "round\tQoS\ttarget\tsent\tdelivered\tlost\tmsgs/s\tp50\tp99\tserver CPU/msg\t")
	for round := 0; round < c.rounds; round++ {
		for _, q := range c.qos {
			for i := range targets {
				t := targets[i]
				if round%2 == 1 {
					t = targets[len(targets)-1-i]
				}
				res, err := rig.RunLoad(t.child, t.dial, c.load, q, fmt.Sprintf("r%d", round))
				if err != nil {
					return fmt.Errorf("%s QoS %d: %w", t.name, q, err)
				}
				results[t.name][q] = append(results[t.name][q], res)
				fmt.Fprintf(os.Stderr, "  round %d QoS %d %-14s %8.0f msgs/s\n", round+1, q, t.name, res.Rate())
				fmt.Fprintf(tw, "%d\t%d\t%s\t%d\t%d\t%d\t%.0f\t%s\t%s\t%.1f µs\t\n", round+1, q, t.name,
					res.Sent, res.Got, res.Sent-res.Got, res.Rate(), rig.Ms(res.P50), rig.Ms(res.P99), float64(res.CPUPerMsg())/1e3)
			}
		}
	}
	tw.Flush()

	fmt.Printf("\nSummary (mean over %d round(s)); ratio = target / off (goals: auth+acl ≥ 0.95, auth+acl+tls ≥ 0.80)\n", c.rounds)
	tw = tabwriter.NewWriter(os.Stdout, 2, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "QoS\ttarget\tmsgs/s\tlost\tp50\tp99\tserver CPU/msg\tmsgs/s ratio\tCPU/msg ratio\t")
	for _, q := range c.qos {
		base := rig.MeanLoad(results["off"][q])
		for _, t := range targets {
			m := rig.MeanLoad(results[t.name][q])
			fmt.Fprintf(tw, "%d\t%s\t%.0f\t%d\t%s\t%s\t%.1f µs\t%.2f\t%.2f\t\n", q, t.name, m.Rate(), m.Sent-m.Got,
				rig.Ms(m.P50), rig.Ms(m.P99), float64(m.CPUPerMsg())/1e3, m.Rate()/base.Rate(),
				float64(m.CPUPerMsg())/float64(max(base.CPUPerMsg(), 1)))
		}
	}
	tw.Flush()

	if c.conns > 0 {
		return connPhase(c, sec, m[1], tlsLogin)
	}
	return nil
}

// connPhase measures new MQTT sessions per second against the auth+acl+tls
// gateway (sec, its TLS listener at tlsAt): plain, TLS, and TLS with a
// password. The address comes from the start: sec.Output() keeps only the
// last lines, and the load has pushed the listening lines out by now.
func connPhase(c *config, sec *rig.Child, tlsAt string, tlsLogin rig.Login) error {
	tlsAnon := tlsLogin
	tlsAnon.User, tlsAnon.Password = "", ""
	kinds := []struct {
		name, addr string
		login      rig.Login
	}{
		{"plain", sec.Addr, rig.Login{}},
		{"tls", tlsAt, tlsAnon},
		{"tls+password", tlsAt, tlsLogin},
	}
	fmt.Printf("\nNew connections against auth+acl+tls, %d workers × %s each: connect, CONNACK, DISCONNECT; TLS: full handshakes\n", c.conns, c.connTime)
	tw := tabwriter.NewWriter(os.Stdout, 2, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "kind\tconnects\tconnects/s\tp50\tp99\tserver CPU/connect\tratio to plain\t")
	var plainRate float64
	for _, k := range kinds {
		n, lat, cpu, err := connects(c, sec, k.addr, k.login, k.name)
		if err != nil {
			return fmt.Errorf("connections %s: %w", k.name, err)
		}
		rate := float64(n) / c.connTime.Seconds()
		if k.name == "plain" {
			plainRate = rate
		}
		lat = rig.Sorted(lat)
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%s\t%s\t%.0f µs\t%.2f\t\n", k.name, n, rate, rig.Ms(rig.Percentile(lat, 50)),
			rig.Ms(rig.Percentile(lat, 99)), float64(cpu)/1e3/float64(max(n, 1)), rate/plainRate)
	}
	tw.Flush()
	return nil
}

// connects runs c.conns workers that connect and disconnect for c.connTime.
func connects(c *config, srv *rig.Child, addr string, login rig.Login, tag string) (int, []time.Duration, time.Duration, error) {
	cpu0, err := srv.CPU()
	if err != nil {
		return 0, nil, 0, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.connTime+30*time.Second)
	defer cancel()
	end := time.Now().Add(c.connTime)
	var mu sync.Mutex
	var lat []time.Duration
	var firstErr error
	var wg sync.WaitGroup
	for w := 0; w < c.conns; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(end); i++ {
				t0 := time.Now()
				cl, err := rig.ConnectWith(ctx, addr, fmt.Sprintf("conn-%s-%d-%d", tag, w, i), login, nil)
				d := time.Since(t0)
				mu.Lock()
				if err != nil {
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					return
				}
				lat = append(lat, d)
				mu.Unlock()
				_ = cl.Disconnect(&paho.Disconnect{})
			}
		}()
	}
	wg.Wait()
	cpu1, err := srv.CPU()
	if err != nil {
		return 0, nil, 0, err
	}
	return len(lat), lat, cpu1 - cpu0, firstErr
}

// files are what the gateways read.
type files struct {
	usersOnly, withACL string
	cert, key          string
	pool               *x509.CertPool
}

func writeFiles(dir, gwBin string, c *config) (files, error) {
	f := files{
		usersOnly: filepath.Join(dir, "users.yaml"),
		withACL:   filepath.Join(dir, "users-acl.yaml"),
		cert:      filepath.Join(dir, "server.pem"),
		key:       filepath.Join(dir, "server.key"),
	}
	ca, err := certgen.NewCA("secload CA")
	if err != nil {
		return f, err
	}
	srv, err := ca.Server()
	if err != nil {
		return f, err
	}
	if err := srv.Write(f.cert, f.key); err != nil {
		return f, err
	}
	f.pool = x509.NewCertPool()
	f.pool.AddCert(ca.Cert)

	cmd := exec.Command(gwBin, "passwd")
	cmd.Stdin = strings.NewReader(password + "\n")
	out, err := cmd.Output()
	if err != nil {
		return f, fmt.Errorf("gateway passwd: %w", err)
	}
	users := fmt.Sprintf("users:\n  - {name: %s, password: %q, groups: [load]}\n", user, strings.TrimSpace(string(out)))
	if err := os.WriteFile(f.usersOnly, []byte(users), 0o600); err != nil {
		return f, err
	}
	var b strings.Builder
	b.WriteString(users)
	b.WriteString("acl:\n  - {allow: [publish, subscribe], topic: \"load/#\", users: [" + user + "]}\n")
	if c.partly {
		// More specific than load/#, inside load/+/s0: every subscription
		// on load/+/s<j> overlaps such a deny and is checked per message.
		for j := 0; j < c.load.Subs; j++ {
			fmt.Fprintf(&b, "  - {deny: [subscribe], topic: \"load/none/s%d\"}\n", j)
		}
	}
	// The rest stand for a fleet's file: per-site group rules with %u,
	// per-device user rules, denies for everyone. None matches the load.
	for i := 1; i < c.rules; i++ {
		switch i % 4 {
		case 0:
			fmt.Fprintf(&b, "  - {allow: [publish, subscribe], topic: \"site%d/%%u/#\", groups: [site%d]}\n", i, i)
		case 1:
			fmt.Fprintf(&b, "  - {allow: [publish], topic: \"fleet/dev%d/telemetry/+\", users: [dev%d]}\n", i, i)
		case 2:
			fmt.Fprintf(&b, "  - {deny: [subscribe], topic: \"fleet/dev%d/cmd\"}\n", i)
		default:
			fmt.Fprintf(&b, "  - {allow: [subscribe], topic: \"public/%d/#\"}\n", i)
		}
	}
	b.WriteString("default: deny\n")
	return f, os.WriteFile(f.withACL, []byte(b.String()), 0o600)
}
