package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
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

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// buildGateway builds the real binary once per test run.
func buildGateway(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "gateway-bin")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "gateway")
		if out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" {
		os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

func TestBadConfigExits2NamingTheKey(t *testing.T) {
	bin := buildGateway(t)
	cases := []struct {
		args []string
		env  []string
		key  string
	}{
		{args: []string{"--retain.backend=nope"}, key: "retain.backend"},
		{args: []string{"--mqtt.listen=localhost"}, key: "mqtt.listen"},
		{env: []string{"TOLSEY_LOG_LEVEL=loud"}, key: "log.level"},
		{env: []string{"GATEWAY_LOG_LEVEL=loud"}, key: "log.level"},
		{args: []string{"--bogus=1"}, key: "bogus"},
	}
	for _, c := range cases {
		cmd := exec.Command(bin, c.args...)
		cmd.Env = append(os.Environ(), c.env...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 {
			t.Errorf("%v %v: exit %v, want 2", c.args, c.env, err)
		}
		msg := strings.TrimSpace(stderr.String())
		if strings.Count(msg, "\n") != 0 || !strings.Contains(msg, c.key) {
			t.Errorf("%v %v: stderr %q, want one line naming %s", c.args, c.env, msg, c.key)
		}
	}
}

func TestHelpExits0(t *testing.T) {
	out, err := exec.Command(buildGateway(t), "--help").Output()
	if err != nil || !strings.Contains(string(out), "--retain.backend") {
		t.Fatalf("--help: %v\n%s", err, out)
	}
}

// SIGTERM drains and exits 0, after the listeners logged their addresses.
func TestSIGTERMExits0(t *testing.T) {
	bin := buildGateway(t)
	dir := t.TempDir()
	cmd := exec.Command(bin, "--mqtt.listen=127.0.0.1:0", "--admin.listen=127.0.0.1:0", "--amqp.listen=",
		"--data.dir="+dir, "--log.format=json")
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	ready := make(chan string, 1)
	var logs bytes.Buffer
	go func() {
		sc := bufio.NewScanner(stderr)
		addr := regexp.MustCompile(`"msg":"mqtt listening".*"addr":"(127\.0\.0\.1:\d+)"`)
		for sc.Scan() {
			logs.WriteString(sc.Text() + "\n")
			if m := addr.FindStringSubmatch(sc.Text()); m != nil {
				ready <- m[1]
			}
		}
	}()
	select {
	case a := <-ready:
		if strings.HasSuffix(a, ":0") {
			t.Fatalf("logged the requested port, not the bound one: %s", a)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("no 'mqtt listening' log line")
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v\n%s", err, logs.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("did not exit within 20s of SIGTERM")
	}
	if _, err := os.Stat(filepath.Join(dir)); err != nil {
		t.Fatal(err)
	}
}
