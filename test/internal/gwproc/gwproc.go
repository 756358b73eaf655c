// Package gwproc runs the gateway binary as a child process for tests, for
// what an in-process gateway cannot show: kill -9, SIGTERM, a process that
// must find its state again on disk. The e2e kill tests and the drills of
// test/fault share it; production code must not import it.
package gwproc

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
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

// ModuleRoot is the directory of the gateway's go.mod, for a program run
// from inside the module (go run ./test/...).
func ModuleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("run from inside the gateway module")
	}
	return filepath.Dir(mod), nil
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
	p, err := Launch(bin, args...)
	if p != nil {
		t.Cleanup(p.Kill)
	}
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Launch is Start for a program rather than a test (the soak tool,
// test/fault/cmd/soak): the caller kills the process; it dies with its
// parent (Pdeathsig) in any case. On an error after the process started,
// the Proc is returned too, killed.
func Launch(bin string, args ...string) (*Proc, error) {
	all := append([]string{"--mqtt.listen=127.0.0.1:0", "--admin.listen=127.0.0.1:0", "--amqp.listen=",
		"--mqtt.ws.listen=", "--log.format=text"}, args...)
	p := &Proc{Cmd: exec.Command(bin, all...), Done: make(chan struct{})}
	p.Cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := p.Cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	p.Cmd.Stderr = p.Cmd.Stdout
	if err := p.Cmd.Start(); err != nil {
		return nil, fmt.Errorf("start gateway: %w", err)
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
	select {
	case <-ready:
	case <-p.Done:
		return p, fmt.Errorf("gateway exited before it was ready:\n%s", p.Output())
	case <-time.After(30 * time.Second):
		p.Kill()
		return p, fmt.Errorf("gateway not ready within 30s:\n%s", p.Output())
	}
	p.mu.Lock()
	found := p.MQTT != "" && p.Admin != ""
	p.mu.Unlock()
	if !found {
		p.Kill()
		return p, fmt.Errorf("no MQTT or admin address in the gateway's log:\n%s", p.Output())
	}
	return p, nil
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

// Lines is a copy of everything it has logged so far, one line each.
func (p *Proc) Lines() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.log...)
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
