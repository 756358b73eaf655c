package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tolsey/tolsey/test/bench/internal/rig"
)

// Streams the benchmark creates, each on subjects of its own so that a
// phase's count is its stream's count.
const (
	streamBridge = "BRIDGEJS" // jsout.>: the gateway's JetStream rule
	streamBare   = "BAREJS"   // barejs.>: the bare nats.go JetStream publishers
	streamDrain  = "DRAIN"    // drain.>: the gateway's rule drained after the outage
)

// natsServer is the nats-server child: the same binary, port and store
// directory across the outage of the drain phase.
type natsServer struct {
	r     *rig.Rig
	bin   string
	port  int
	dir   string
	child *rig.Child
}

var natsReady = regexp.MustCompile(`Server is ready`)

func (s *natsServer) url() string { return fmt.Sprintf("nats://127.0.0.1:%d", s.port) }

// start runs nats-server with JetStream in s.dir on s.port.
func (s *natsServer) start() error {
	c, err := s.r.Start("nats-server", nil, natsReady, s.bin,
		"-a", "127.0.0.1", "-p", strconv.Itoa(s.port), "-js", "-sd", s.dir)
	if err != nil {
		return err
	}
	s.child = c
	return nil
}

// stop shuts nats-server down the way an operator does (SIGTERM: JetStream
// flushes its store), and waits until the process is gone.
func (s *natsServer) stop() error {
	pid := s.child.PID
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); errors.Is(err, os.ErrNotExist) {
			break
		}
		if time.Now().After(deadline) {
			break // Kill below forces it
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.child.Kill()
	return nil
}

func newNATSServer(r *rig.Rig, bin string) (*natsServer, error) {
	port, err := rig.FreePort()
	if err != nil {
		return nil, err
	}
	s := &natsServer{r: r, bin: bin, port: port, dir: filepath.Join(r.Dir, "nats-store")}
	return s, s.start()
}

// createStreams makes the three file streams (JetStream's defaults: a
// 2-minute duplicate window, so Nats-Msg-Id de-duplication is on for all).
func createStreams(url string) error {
	nc, err := nats.Connect(url)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for name, subj := range map[string]string{streamBridge: "jsout.>", streamBare: "barejs.>", streamDrain: "drain.>"} {
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{subj}, Storage: jetstream.FileStorage}); err != nil {
			return fmt.Errorf("stream %s: %w", name, err)
		}
	}
	return nil
}

// streamMsgs is the number of messages stream holds.
func streamMsgs(ctx context.Context, js jetstream.JetStream, stream string) (uint64, error) {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return 0, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return 0, err
	}
	return info.State.Msgs, nil
}

// rulesFlag is the gateway's --bridge.nats.rules for the four flows.
func rulesFlag() string {
	rules := []map[string]any{
		{"direction": "out", "local": "q0out/#", "remote": "q0out.>", "qos": 0},
		{"direction": "in", "local": "q0in/#", "remote": "q0in.>", "qos": 0},
		{"direction": "out", "local": "jsout/#", "remote": "jsout.>", "qos": 1, "jetstream": true},
		{"direction": "out", "local": "drain/#", "remote": "drain.>", "qos": 1, "jetstream": true},
	}
	b, _ := json.Marshal(rules)
	return "--bridge.nats.rules=" + string(b)
}

// gwMetric sums the gateway's /metrics samples of name whose labels
// contain every one of labels (`rule="3:drain/#"`); rig.Metrics keeps
// unlabelled samples only.
func gwMetric(admin, name string, labels ...string) (float64, error) {
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var sum float64
	found := false
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) || (len(line) > len(name) && line[len(name)] != '{' && line[len(name)] != ' ') {
			continue
		}
		ok := true
		for _, l := range labels {
			ok = ok && strings.Contains(line, l)
		}
		if !ok {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		sum += v
		found = true
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	if !found {
		return 0, fmt.Errorf("%s%v not in /metrics", name, labels)
	}
	return sum, nil
}

// waitFor polls cond every step until it holds or timeout passes, and
// returns when it first held.
func waitFor(what string, timeout, step time.Duration, cond func() (bool, error)) (time.Time, error) {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		now := time.Now()
		if err == nil && ok {
			return now, nil
		}
		if now.After(deadline) {
			if err == nil {
				err = errors.New("timed out")
			}
			return now, fmt.Errorf("waiting for %s: %w", what, err)
		}
		time.Sleep(step)
	}
}
