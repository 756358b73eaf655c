// Command storm is drill 4 of docs/reliability.md, the reconnect storm: N
// MQTT clients with persistent sessions (clean session 0, each subscribed
// at QoS 1 to a topic of its own) are connected, the gateway is stopped
// (SIGTERM) and started again on the same data.dir and port, M QoS 1
// messages per client are published to the now offline sessions right
// after the restart, and every client reconnects at its own moment within
// -window (spread evenly, as devices with a random backoff would after a
// power cut). It prints how many reconnected (with their session), how long
// that took, how many queued messages were delivered, and the gateway's
// peak RSS (VmHWM). Exit status 1 when a client did not reconnect or a
// message was not delivered.
//
//	go run ./test/bench/storm [-n 18000] [-procs 4] [-msgs 1] [-window 8s]
//
// The clients are split over -procs worker processes (this program run
// again with -worker), each below the open-file limit; RLIMIT_NOFILE is
// raised to its hard limit first (the children inherit it). The gateway
// holds one descriptor per client, so on a machine whose limit is 20,000
// per process about 18,000 clients fit. Each client connects from one of
// -sources loopback addresses (127.0.0.2, .3, …), each with its own
// ephemeral port range. The clients speak MQTT 3.1.1 through
// test/internal/mqttlean: one socket and one goroutine each.
//
// The last line, "storm-figures: {json}", is for test/fault's short run.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tolsey/tolsey/test/bench/internal/rig"
	"github.com/tolsey/tolsey/test/internal/mqttlean"
)

// figures is the drill's outcome.
type figures struct {
	Clients          int     `json:"clients"`
	Procs            int     `json:"procs"`
	ConnectSeconds   float64 `json:"connectSeconds"`   // first connect of every client
	TermExit         int     `json:"termExit"`         // the gateway's exit code after SIGTERM
	TermSeconds      float64 `json:"termSeconds"`      // SIGTERM to exit
	RestartSeconds   float64 `json:"restartSeconds"`   // process start to "gateway ready"
	Published        int     `json:"published"`        // acknowledged QoS 1 publishes to offline sessions
	PublishSeconds   float64 `json:"publishSeconds"`   // from ready to the last PUBACK
	Reconnected      int     `json:"reconnected"`      // clients with a CONNACK after the restart
	SessionPresent   int     `json:"sessionPresent"`   // of which the CONNACK said session present
	Retries          int     `json:"retries"`          // failed connect attempts, tried again
	ReconnectSeconds float64 `json:"reconnectSeconds"` // window start to the last CONNACK
	Delivered        int     `json:"delivered"`        // distinct queued messages received
	Duplicates       int     `json:"duplicates"`
	DeliverSeconds   float64 `json:"deliverSeconds"` // window start to the last queued message
	Missing          []int   `json:"missing,omitempty"`
	StormCPUSeconds  float64 `json:"stormCPUSeconds"` // the gateway's CPU time (user+system) from the window's start to the last client's result
	PeakRSS1         int64   `json:"peakRSSBefore"`   // VmHWM of the first gateway process, bytes
	PeakRSS2         int64   `json:"peakRSSAfter"`    // VmHWM of the restarted one, over the storm
}

func main() {
	n := flag.Int("n", 18000, "clients")
	procs := flag.Int("procs", 4, "client processes")
	msgs := flag.Int("msgs", 1, "QoS 1 messages published to each offline session (at most 64)")
	window := flag.Duration("window", 8*time.Second, "the reconnects are spread over this long")
	sources := flag.Int("sources", 8, "client source addresses 127.0.0.2 … (each has its own ephemeral ports)")
	deliverWait := flag.Duration("deliverWait", 60*time.Second, "how long after the window to wait for the queued messages")
	gateway := flag.String("gateway", "", "gateway binary (default: build ./cmd/gateway)")
	profile := flag.String("cpuprofile", "", "write the restarted gateway's CPU profile over the reconnect window to this file")
	isWorker := flag.Bool("worker", false, "internal: run as a client process")
	addr := flag.String("addr", "", "internal: the gateway's MQTT address (-worker)")
	from := flag.Int("from", 0, "internal: first client (-worker)")
	to := flag.Int("to", 0, "internal: past the last client (-worker)")
	flag.Parse()
	if *msgs < 1 || *msgs > 64 || *procs < 1 || *n < *procs || *sources < 1 || *sources > 250 {
		fmt.Fprintln(os.Stderr, "storm: need 1 ≤ msgs ≤ 64, 1 ≤ procs ≤ n, 1 ≤ sources ≤ 250")
		os.Exit(2)
	}
	if *isWorker {
		if err := worker(*addr, *from, *to, *msgs, *sources, *deliverWait); err != nil {
			fmt.Fprintln(os.Stderr, "storm worker:", err)
			os.Exit(1)
		}
		return
	}
	f, err := run(*n, *procs, *msgs, *sources, *window, *deliverWait, *gateway, *profile)
	if f != nil {
		report(f)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "storm:", err)
		os.Exit(1)
	}
	if f.Reconnected < f.Clients || f.Delivered < f.Clients**msgs || f.Published < f.Clients**msgs {
		os.Exit(1)
	}
}

func report(f *figures) {
	mib := func(b int64) string { return rig.MiB(b) }
	fmt.Printf("clients %d in %d processes, connected in %.1f s; gateway peak RSS %s\n", f.Clients, f.Procs, f.ConnectSeconds, mib(f.PeakRSS1))
	fmt.Printf("SIGTERM: exit %d after %.2f s; restart to ready %.2f s\n", f.TermExit, f.TermSeconds, f.RestartSeconds)
	fmt.Printf("published to offline sessions: %d acknowledged in %.2f s\n", f.Published, f.PublishSeconds)
	fmt.Printf("reconnected %d/%d (session present %d, retries %d), all within %.2f s of the window's start\n",
		f.Reconnected, f.Clients, f.SessionPresent, f.Retries, f.ReconnectSeconds)
	fmt.Printf("queued messages delivered %d/%d (duplicates %d), the last %.2f s after the window's start\n",
		f.Delivered, f.Published, f.Duplicates, f.DeliverSeconds)
	if len(f.Missing) > 0 {
		fmt.Printf("clients short of messages (first few): %v\n", f.Missing)
	}
	fmt.Printf("gateway CPU over the storm %.1f s (%.0f µs per client); peak RSS after the restart (VmHWM): %s\n",
		f.StormCPUSeconds, f.StormCPUSeconds*1e6/float64(f.Clients), mib(f.PeakRSS2))
	b, _ := json.Marshal(f)
	fmt.Printf("storm-figures: %s\n", b)
}

func run(n, procs, msgs, sources int, window, deliverWait time.Duration, bin, profile string) (*figures, error) {
	if _, err := rig.RaiseNoFile(); err != nil {
		return nil, err
	}
	r, err := rig.New()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	if bin == "" {
		if bin, err = r.Build("gateway", "./cmd/gateway"); err != nil {
			return nil, err
		}
	}
	port, err := rig.FreePort()
	if err != nil {
		return nil, err
	}
	args := []string{"--mqtt.listen=127.0.0.1:" + strconv.Itoa(port), "--mqtt.sessions.backend=embedded"}
	g, err := r.StartGateway("storm", bin, args...)
	if err != nil {
		return nil, err
	}
	f := &figures{Clients: n, Procs: procs}

	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	ws := make([]*workerProc, procs)
	t0 := time.Now()
	for k := range ws {
		lo, hi := n*k/procs, n*(k+1)/procs
		w, err := startWorker(self, g.Addr, lo, hi, msgs, sources, deliverWait)
		if err != nil {
			return nil, err
		}
		defer w.stop()
		ws[k] = w
	}
	for _, w := range ws {
		if err := w.expect("connected", 5*time.Minute); err != nil {
			return nil, err
		}
	}
	f.ConnectSeconds = time.Since(t0).Seconds()
	f.PeakRSS1, _ = g.HWM()

	t1 := time.Now()
	f.TermExit = g.Term(30 * time.Second)
	f.TermSeconds = time.Since(t1).Seconds()
	for _, w := range ws {
		if err := w.expect("dropped", time.Minute); err != nil {
			return nil, err
		}
	}

	t2 := time.Now()
	if g, err = r.StartGateway("storm", bin, args...); err != nil {
		return nil, err
	}
	defer g.Term(30 * time.Second)
	f.RestartSeconds = time.Since(t2).Seconds()
	t3 := time.Now()
	if f.Published, err = publish(g.Addr, n, msgs); err != nil {
		return f, err
	}
	f.PublishSeconds = time.Since(t3).Seconds()

	start := time.Now().Add(100 * time.Millisecond)
	cpu0, _ := g.CPU()
	if profile != "" {
		done := cpuProfile(g.Admin, profile, window+5*time.Second)
		defer func() { <-done }()
	}
	for _, w := range ws {
		if _, err := fmt.Fprintf(w.stdin, "reconnect %d %d\n", start.UnixNano(), window.Nanoseconds()); err != nil {
			return f, err
		}
	}
	for _, w := range ws {
		line, err := w.next(window + deliverWait + time.Minute)
		if err != nil {
			return f, err
		}
		var wr workerResult
		if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "result ")), &wr); err != nil {
			return f, fmt.Errorf("worker result %q: %w", line, err)
		}
		f.Reconnected += wr.Reconnected
		f.SessionPresent += wr.SessionPresent
		f.Retries += wr.Retries
		f.Delivered += wr.Received
		f.Duplicates += wr.Duplicates
		f.ReconnectSeconds = max(f.ReconnectSeconds, time.Unix(0, wr.LastConnack).Sub(start).Seconds())
		f.DeliverSeconds = max(f.DeliverSeconds, time.Unix(0, wr.LastMessage).Sub(start).Seconds())
		f.Missing = append(f.Missing, wr.Missing...)
	}
	f.PeakRSS2, _ = g.HWM()
	cpu1, _ := g.CPU()
	f.StormCPUSeconds = (cpu1 - cpu0).Seconds()
	return f, nil
}

// publish sends msgs QoS 1 messages to each client's topic, up to 1,000
// unacknowledged at a time, and returns how many were acknowledged.
func publish(addr string, n, msgs int) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := mqttlean.Dial(ctx, addr, mqttlean.Options{ClientID: "storm-publisher", Clean: true, KeepAlive: 600})
	if err != nil {
		return 0, err
	}
	defer c.Disconnect()
	window := make(chan struct{}, 1000)
	acked := make(chan int)
	go func() {
		got := 0
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Minute))
		for got < n*msgs {
			p, err := c.ReadPacket()
			if err != nil {
				break
			}
			if p.Type == mqttlean.PUBACK {
				got++
				<-window
			}
		}
		acked <- got
	}()
	id := uint16(0)
	for k := range msgs {
		for i := range n {
			window <- struct{}{}
			if id++; id == 0 {
				id = 1
			}
			if err := c.Publish(id, topic(i), []byte(fmt.Sprintf("%d:%d", i, k)), 1); err != nil {
				return 0, err
			}
		}
	}
	got := <-acked
	if got < n*msgs {
		return got, fmt.Errorf("publisher: %d of %d acknowledged", got, n*msgs)
	}
	return got, nil
}

// workerProc is one client process.
type workerProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
	mu    sync.Mutex
	tail  []string // its stderr, for errors
}

func startWorker(self, addr string, from, to, msgs, sources int, deliverWait time.Duration) (*workerProc, error) {
	cmd := exec.Command(self, "-worker", "-addr", addr, "-from", strconv.Itoa(from), "-to", strconv.Itoa(to),
		"-msgs", strconv.Itoa(msgs), "-sources", strconv.Itoa(sources), "-deliverWait", deliverWait.String(),
		"-n", strconv.Itoa(to-from), "-procs", "1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	w := &workerProc{cmd: cmd, lines: make(chan string, 16)}
	var err error
	if w.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	errs, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			w.lines <- sc.Text()
		}
		close(w.lines)
	}()
	go func() {
		sc := bufio.NewScanner(errs)
		for sc.Scan() {
			w.mu.Lock()
			w.tail = append(w.tail, sc.Text())
			w.mu.Unlock()
		}
	}()
	return w, nil
}

// next is the worker's next line of output.
func (w *workerProc) next(limit time.Duration) (string, error) {
	select {
	case l, ok := <-w.lines:
		if !ok {
			_ = w.cmd.Wait()
			w.mu.Lock()
			defer w.mu.Unlock()
			return "", fmt.Errorf("worker exited: %s", strings.Join(w.tail, "\n"))
		}
		return l, nil
	case <-time.After(limit):
		return "", errors.New("worker silent for " + limit.String())
	}
}

// expect waits for a line that starts with word.
func (w *workerProc) expect(word string, limit time.Duration) error {
	l, err := w.next(limit)
	if err != nil {
		return err
	}
	if !strings.HasPrefix(l, word) {
		return fmt.Errorf("worker said %q, want %s", l, word)
	}
	return nil
}

func (w *workerProc) stop() {
	_ = w.stdin.Close()
	_ = w.cmd.Process.Kill()
	_ = w.cmd.Wait()
}

// cpuProfile saves the gateway's CPU profile over d (its admin API's
// /debug/pprof/profile) to file; the channel closes when it is written.
func cpuProfile(admin, file string, d time.Duration) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		resp, err := http.Get(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", admin, int(d.Seconds())))
		if err != nil {
			fmt.Fprintln(os.Stderr, "storm: profile:", err)
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err == nil {
			err = os.WriteFile(file, b, 0o644)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "storm: profile:", err)
		}
	}()
	return done
}
