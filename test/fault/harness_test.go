// Package fault holds the drills of issue 13 (docs/reliability.md): the
// gateway binary runs as a child process on free ports, with real clients
// and a real redis-server, and each drill breaks something under load
// (Redis away, SIGTERM, a full disk), prints its figures with t.Logf and
// asserts the promises. The short versions run in `go test ./...`; -long
// runs the long ones (`go test -v ./test/fault -args -long`).
package fault

import (
	"bufio"
	"context"
	"flag"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"go.uber.org/goleak"
)

var long = flag.Bool("long", false, "run the long versions of the drills (docs/reliability.md)")

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var (
	binOnce sync.Once
	binPath string
	binErr  error
	binOut  []byte
)

// gatewayBinary compiles ./cmd/gateway once per test binary.
func gatewayBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "fault-gateway")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "gateway")
		cmd := exec.Command("go", "build", "-o", binPath, "./cmd/gateway")
		cmd.Dir = "../.."
		binOut, binErr = cmd.CombinedOutput()
	})
	if binErr != nil {
		t.Fatalf("go build ./cmd/gateway: %v\n%s", binErr, binOut)
	}
	return binPath
}

// proc is one run of the gateway binary.
type proc struct {
	cmd   *exec.Cmd
	done  chan struct{} // closed once it has exited and its output is read
	mqtt  string
	admin string
	amqp  string

	mu  sync.Mutex
	log []string
}

var (
	reMQTT  = regexp.MustCompile(`msg="mqtt listening".* addr=(\S+) transport=tcp`)
	reAdmin = regexp.MustCompile(`msg="admin API listening".* addr=(\S+)`)
	reAMQP  = regexp.MustCompile(`msg="amqp listening".* addr=(\S+)`)
	reReady = regexp.MustCompile(`msg="gateway ready"`)
)

// start runs the gateway with args on free ports (AMQP off unless args
// turn it on) and waits until it logs "gateway ready".
func start(t *testing.T, args ...string) *proc {
	t.Helper()
	all := append([]string{"--mqtt.listen=127.0.0.1:0", "--admin.listen=127.0.0.1:0", "--amqp.listen=",
		"--mqtt.ws.listen=", "--log.format=text"}, args...)
	p := &proc{cmd: exec.Command(gatewayBinary(t), all...), done: make(chan struct{})}
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Stderr = p.cmd.Stdout
	if err := p.cmd.Start(); err != nil {
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
			if m := reMQTT.FindStringSubmatch(line); m != nil && p.mqtt == "" {
				p.mqtt = m[1]
			}
			if m := reAdmin.FindStringSubmatch(line); m != nil && p.admin == "" {
				p.admin = m[1]
			}
			if m := reAMQP.FindStringSubmatch(line); m != nil && p.amqp == "" {
				p.amqp = m[1]
			}
			if reReady.MatchString(line) && !once {
				once = true
				close(ready)
			}
			p.mu.Unlock()
		}
		_, _ = io.Copy(io.Discard, out)
		_ = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(p.kill)
	select {
	case <-ready:
	case <-p.done:
		t.Fatalf("gateway exited before it was ready:\n%s", p.output())
	case <-time.After(30 * time.Second):
		p.kill()
		t.Fatalf("gateway not ready within 30s:\n%s", p.output())
	}
	return p
}

func (p *proc) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// term sends SIGTERM and waits up to limit for the exit; it returns the
// exit code (-1: still running at limit, then killed) and the time taken.
func (p *proc) term(limit time.Duration) (int, time.Duration) {
	t0 := time.Now()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode(), time.Since(t0)
	case <-time.After(limit):
		p.kill()
		return -1, time.Since(t0)
	}
}

func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.log, "\n")
}

// logged counts the log lines that contain s.
func (p *proc) logged(s string) int {
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

// readyz is the status of GET /readyz, or 0 when it cannot be asked.
func (p *proc) readyz() int {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + p.admin + "/readyz")
	if err != nil {
		return 0
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode
}

// client is an MQTT 5 client (paho) over a real socket.
type client struct {
	*paho.Client
	msgs chan *paho.Publish
	gone chan *paho.Disconnect // the server's DISCONNECT, if it sent one
}

func dial5(t *testing.T, addr, id string, clean bool, buf int) *client {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	c := &client{msgs: make(chan *paho.Publish, buf), gone: make(chan *paho.Disconnect, 1)}
	c.Client = paho.NewClient(paho.ClientConfig{
		ClientID: id,
		Conn:     conn,
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(pr paho.PublishReceived) (bool, error) {
			c.msgs <- pr.Packet
			return true, nil
		}},
		OnServerDisconnect: func(d *paho.Disconnect) {
			select {
			case c.gone <- d:
			default:
			}
		},
		OnClientError: func(error) {},
	})
	cp := &paho.Connect{ClientID: id, CleanStart: clean, KeepAlive: 30}
	if !clean {
		exp := uint32(3600)
		cp.Properties = &paho.ConnectProperties{SessionExpiryInterval: &exp}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ca, err := c.Connect(ctx, cp)
	if err != nil {
		t.Fatalf("connect %s: %v", id, err)
	}
	if ca.ReasonCode != 0 {
		t.Fatalf("connect %s: reason %#x", id, ca.ReasonCode)
	}
	t.Cleanup(func() {
		_ = c.Disconnect(&paho.Disconnect{})
		<-c.Done()
	})
	return c
}

func (c *client) subscribe(t *testing.T, filter string, qos byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sa, err := c.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: filter, QoS: qos}}})
	if err != nil {
		t.Fatalf("subscribe %s: %v", filter, err)
	}
	if sa.Reasons[0] >= 0x80 {
		t.Fatalf("subscribe %s refused: %#x", filter, sa.Reasons[0])
	}
}

// pub publishes at QoS 1 and returns the PUBACK's reason code, or an error
// when no PUBACK came.
func (c *client) pub(topic string, payload []byte, retain bool) (byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := c.Publish(ctx, &paho.Publish{Topic: topic, QoS: 1, Retain: retain, Payload: payload})
	if r != nil {
		return r.ReasonCode, nil
	}
	return 0, err
}

// retainedOf subscribes a fresh client to topic and returns the payload of
// the retained copy it gets, or "" when none arrives before a fence.
func retainedOf(t *testing.T, addr, topic string) string {
	t.Helper()
	c := dial5(t, addr, "probe-"+strings.ReplaceAll(topic, "/", "-"), true, 100)
	c.subscribe(t, topic, 1)
	c.subscribe(t, "fence/"+topic, 1)
	if code, err := c.pub("fence/"+topic, []byte("f"), false); err != nil || code != 0 {
		t.Fatalf("fence publish: %#x %v", code, err)
	}
	got := ""
	for {
		select {
		case m := <-c.msgs:
			if m.Topic == "fence/"+topic {
				return got
			}
			if m.Retain {
				got = string(m.Payload)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no fence within 10s on %s", topic)
		}
	}
}

// drainQueue reads the durable queue through MQTT ($queue/<name>) until a
// fence published on fenceTopic (a topic the queue subscribes to, so the
// fence is queued last) comes out; it returns how often each payload came.
func drainQueue(t *testing.T, addr, name, fenceTopic string) map[string]int {
	t.Helper()
	drain := dial5(t, addr, "drain-"+name, true, 1<<18)
	drain.subscribe(t, "$queue/"+name, 1)
	fence := dial5(t, addr, "fence-"+name, true, 1)
	if c, err := fence.pub(fenceTopic, []byte("fence"), false); err != nil || c != 0 {
		t.Fatalf("fence: %#x %v", c, err)
	}
	got := map[string]int{}
	for {
		select {
		case m := <-drain.msgs:
			if string(m.Payload) == "fence" {
				return got
			}
			got[string(m.Payload)]++
		case <-time.After(30 * time.Second):
			t.Fatalf("no fence from queue %s within 30s; %d drained", name, len(got))
		}
	}
}
