// Package gwproc runs the gateway binary as a child process for tests, for
// what an in-process gateway cannot show: kill -9, SIGTERM, a process that
// must find its state again on disk. The e2e kill tests and the drills of
// test/fault share it; production code must not import it.
package gwproc

import (
	"bufio"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Build compiles ./cmd/gateway of the module rooted at root into a temp
// dir of the test and returns the binary's path.
func Build(t testing.TB, root string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "gateway")
	if err := BuildInto(root, bin); err != nil {
		t.Fatal(err)
	}
	return bin
}

// BuildInto compiles ./cmd/gateway of the module rooted at root into bin,
// for a package whose tests share one binary.
func BuildInto(root, bin string) error {
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/gateway")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./cmd/gateway: %w\n%s", err, out)
	}
	return nil
}

// Proc is one run of the gateway binary.
type Proc struct {
	Cmd  *exec.Cmd
	Done chan struct{} // closed once the process has exited and its output is read
	// Addresses read from its log; AMQP only when the args turn it on
	// (--amqp.listen=127.0.0.1:0).
	MQTT, Admin, AMQP string

	mu  sync.Mutex
	log []string // its output, for failure messages
}

var (
	procMQTT  = regexp.MustCompile(`msg="mqtt listening".* addr=(\S+) transport=tcp`)
	procAdmin = regexp.MustCompile(`msg="admin API listening".* addr=(\S+)`)
	procAMQP  = regexp.MustCompile(`msg="amqp listening".* addr=(\S+)`)
	procReady = regexp.MustCompile(`msg="gateway ready"`)
)

// Start runs bin with MQTT and the admin API on free loopback ports, AMQP
// and WebSocket off, text logs, then args (which may override any of
// these), and waits until it logs "gateway ready". The test's end kills
// it if it still runs.
func Start(t testing.TB, bin string, args ...string) *Proc {
	t.Helper()
	all := append([]string{"--mqtt.listen=127.0.0.1:0", "--admin.listen=127.0.0.1:0", "--amqp.listen=",
		"--mqtt.ws.listen=", "--log.format=text"}, args...)
	p := &Proc{Cmd: exec.Command(bin, all...), Done: make(chan struct{})}
	p.Cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := p.Cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.Cmd.Stderr = p.Cmd.Stdout
	if err := p.Cmd.Start(); err != nil {
		t.Fatalf("start gateway: %v", err)
	}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		once := false
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.log = append(p.log, line)
			if m := procMQTT.FindStringSubmatch(line); m != nil && p.MQTT == "" {
				p.MQTT = m[1]
			}
			if m := procAdmin.FindStringSubmatch(line); m != nil && p.Admin == "" {
				p.Admin = m[1]
			}
			if m := procAMQP.FindStringSubmatch(line); m != nil && p.AMQP == "" {
				p.AMQP = m[1]
			}
			if procReady.MatchString(line) && !once {
				once = true
				close(ready)
			}
			p.mu.Unlock()
		}
		_, _ = io.Copy(io.Discard, out)
		_ = p.Cmd.Wait()
		close(p.Done)
	}()
	t.Cleanup(p.Kill)
	select {
	case <-ready:
	case <-p.Done:
		t.Fatalf("gateway exited before it was ready:\n%s", p.Output())
	case <-time.After(30 * time.Second):
		p.Kill()
		t.Fatalf("gateway not ready within 30s:\n%s", p.Output())
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.MQTT == "" || p.Admin == "" {
		t.Fatalf("no MQTT or admin address in the gateway's log:\n%s", strings.Join(p.log, "\n"))
	}
	return p
}

// Kill sends SIGKILL (kill -9) and waits for the process to be gone.
func (p *Proc) Kill() {
	select {
	case <-p.Done:
		return
	default:
	}
	_ = p.Cmd.Process.Signal(syscall.SIGKILL)
	<-p.Done
}

// Term sends SIGTERM and waits up to limit for the exit; it returns the
// exit code (-1: still running at limit, then killed) and the time taken.
func (p *Proc) Term(limit time.Duration) (int, time.Duration) {
	t0 := time.Now()
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.Done:
		return p.Cmd.ProcessState.ExitCode(), time.Since(t0)
	case <-time.After(limit):
		p.Kill()
		return -1, time.Since(t0)
	}
}

// Output is everything it has logged so far.
func (p *Proc) Output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.log, "\n")
}

// Logged counts the log lines so far that contain s.
func (p *Proc) Logged(s string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, l := range p.log {
		if strings.Contains(l, s) {
			n++
		}
	}
	return n
}
