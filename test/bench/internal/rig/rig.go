// Package rig is the benchmark programs' test rig: it builds the gateway and
// baremochi into a temporary directory, runs them (and redis-server) as
// child processes on free ports, reads their memory, and connects MQTT 5
// clients to them. Children are killed when the rig closes, on SIGINT/SIGTERM,
// and by the kernel (Pdeathsig) if the benchmark itself dies.
//
// It is for the programs under test/bench only.
package rig

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tolsey/tolsey/test/internal/gwproc"
)

// Rig owns a temporary directory and the child processes started in it.
type Rig struct {
	Dir string

	mu       sync.Mutex
	children []*Child
	closed   bool
}

// New makes a rig and arranges for Close on SIGINT/SIGTERM.
func New() (*Rig, error) {
	dir, err := os.MkdirTemp("", "gateway-bench-")
	if err != nil {
		return nil, err
	}
	r := &Rig{Dir: dir}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		s := <-sig
		fmt.Fprintf(os.Stderr, "\n%v: stopping children\n", s)
		r.Close()
		os.Exit(1)
	}()
	return r, nil
}

// Close kills every child and removes the directory.
func (r *Rig) Close() {
	r.mu.Lock()
	children := r.children
	r.children = nil
	r.closed = true
	r.mu.Unlock()
	for _, c := range children {
		c.Kill()
	}
	_ = os.RemoveAll(r.Dir)
}

// Fatal prints err and the children's last output lines, closes the rig
// and exits 1.
func (r *Rig) Fatal(err error) {
	r.mu.Lock()
	children := slices.Clone(r.children)
	r.mu.Unlock()
	for _, c := range children {
		if c.killed.Load() {
			continue // stopped after its part was done
		}
		if out := c.Output(); out != "" {
			fmt.Fprintf(os.Stderr, "--- %s (pid %d), last output:\n%s\n", c.Name, c.PID, out)
		}
	}
	r.Close()
	fmt.Fprintln(os.Stderr, "error:", err)
	os.Exit(1)
}

// Build compiles pkg (like "./cmd/gateway") into the rig directory. A
// package with a go.mod of its own is built in its own module.
func (r *Rig) Build(name, pkg string) (string, error) {
	root, err := gwproc.ModuleRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(r.Dir, name)
	dir := root
	if _, err := os.Stat(filepath.Join(root, pkg, "go.mod")); err == nil {
		dir, pkg = filepath.Join(root, pkg), "." // a module of its own (baremochi)
	}
	cmd := exec.Command("go", "build", "-o", bin, pkg)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
	}
	return bin, nil
}

// Child is one running child process.
type Child struct {
	Name  string
	PID   int
	Addr  string // MQTT (or Redis) address
	WS    string // gateway MQTT-over-WebSocket address, if it listens
	Admin string // gateway admin API address, if any

	cmd    *exec.Cmd
	done   chan struct{}
	killed atomic.Bool
	mu     sync.Mutex
	tail   []string // last output lines, for error messages
}

// Kill stops the child (SIGKILL: nothing of its state matters) and waits.
func (c *Child) Kill() {
	c.killed.Store(true)
	if c.cmd.Process != nil {
		_ = c.cmd.Process.Kill()
	}
	<-c.done
}

// Output is the last lines the child wrote.
func (c *Child) Output() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Join(c.tail, "\n")
}

// Start runs bin with args and waits (up to 30 s) until a line of its output
// matches ready; the first submatch of ready, if any, becomes Addr.
func (r *Rig) Start(name string, env []string, ready *regexp.Regexp, bin string, args ...string) (*Child, error) {
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	c := &Child{Name: name, cmd: cmd, done: make(chan struct{})}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, errors.New("rig closed")
	}
	if err := cmd.Start(); err != nil {
		r.mu.Unlock()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	r.children = append(r.children, c)
	r.mu.Unlock()
	c.PID = cmd.Process.Pid
	go func() {
		_ = cmd.Wait()
		pw.Close()
		close(c.done)
	}()

	found := make(chan []string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			c.mu.Lock()
			c.tail = append(c.tail, line)
			if len(c.tail) > 30 {
				c.tail = c.tail[1:]
			}
			c.mu.Unlock()
			if m := ready.FindStringSubmatch(line); m != nil {
				select {
				case found <- m:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	select {
	case m := <-found:
		if len(m) > 1 {
			c.Addr = m[1]
		}
		return c, nil
	case <-c.done:
		return nil, fmt.Errorf("%s exited before it was ready:\n%s", name, c.Output())
	case <-time.After(30 * time.Second):
		c.Kill()
		return nil, fmt.Errorf("%s not ready within 30s:\n%s", name, c.Output())
	}
}

var (
	gatewayReady = regexp.MustCompile(`msg="gateway ready"`)
	gatewayMQTT  = regexp.MustCompile(`msg="mqtt listening".* addr=(\S+) transport=tcp`)
	gatewayWS    = regexp.MustCompile(`msg="mqtt listening".* addr=(\S+) transport=websocket`)
	gatewayAdmin = regexp.MustCompile(`msg="admin API listening".* addr=(\S+)`)
	mochiReady   = regexp.MustCompile(`mqtt listening addr=(\S+)`)
)

// StartGateway runs the gateway binary on free ports (MQTT, admin API; no
// AMQP) with extra --key=value args, and waits for "gateway ready".
func (r *Rig) StartGateway(name, bin string, args ...string) (*Child, error) {
	all := append([]string{"--mqtt.listen=127.0.0.1:0", "--admin.listen=127.0.0.1:0", "--amqp.listen=",
		"--data.dir=" + filepath.Join(r.Dir, name+"-data"), "--node.id=" + name}, args...)
	c, err := r.Start(name, nil, gatewayReady, bin, all...)
	if err != nil {
		return nil, err
	}
	out := c.Output()
	if m := gatewayMQTT.FindStringSubmatch(out); m != nil {
		c.Addr = m[1]
	}
	if m := gatewayAdmin.FindStringSubmatch(out); m != nil {
		c.Admin = m[1]
	}
	if m := gatewayWS.FindStringSubmatch(out); m != nil {
		c.WS = m[1]
	}
	if c.Addr == "" {
		c.Kill()
		return nil, fmt.Errorf("%s: no MQTT address in its log:\n%s", name, out)
	}
	return c, nil
}

// StartMochi runs the baremochi binary on a free port.
func (r *Rig) StartMochi(name, bin string, args ...string) (*Child, error) {
	return r.Start(name, nil, mochiReady, bin, append([]string{"--listen=127.0.0.1:0"}, args...)...)
}

// StartRedis runs /usr/bin/redis-server (or redis-server from PATH) without
// persistence on a free port and waits until it answers PING.
func (r *Rig) StartRedis(name string) (*Child, error) {
	bin := "/usr/bin/redis-server"
	if _, err := os.Stat(bin); err != nil {
		if bin, err = exec.LookPath("redis-server"); err != nil {
			return nil, errors.New("redis-server not found")
		}
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	c, err := r.Start(name, nil, regexp.MustCompile(`Ready to accept connections`), bin,
		"--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", r.Dir, "--protected-mode", "no")
	if err != nil {
		return nil, err
	}
	c.Addr = fmt.Sprintf("127.0.0.1:%d", port)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		if conn, err := net.Dial("tcp", c.Addr); err == nil {
			_, _ = conn.Write([]byte("PING\r\n"))
			buf := make([]byte, 7)
			_, err := io.ReadFull(conn, buf)
			conn.Close()
			if err == nil && string(buf) == "+PONG\r\n" {
				return c, nil
			}
		}
		select {
		case <-ctx.Done():
			c.Kill()
			return nil, fmt.Errorf("%s does not answer PING", name)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// FreePort asks the kernel for a free TCP port on 127.0.0.1.
func FreePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// RaiseNoFile lifts the soft RLIMIT_NOFILE to the hard limit (children
// inherit it) and returns the new soft limit.
func RaiseNoFile() (uint64, error) {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0, err
	}
	l.Cur = l.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0, err
	}
	return l.Cur, nil
}
