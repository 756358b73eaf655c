//go:build linux

package mqtt

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/tolsey/tolsey/core"
	"github.com/tolsey/tolsey/core/coretest"
	"github.com/tolsey/tolsey/retain"
	"github.com/tolsey/tolsey/retain/memory"
)

// emfileChildEnv makes TestListenerSurvivesEMFILE the server half: a process
// of its own, so that its low open-file limit touches no other test.
const emfileChildEnv = "TOLSEY_TEST_EMFILE_CHILD"

// emfileHeadroom is how many more files the server may open than it has
// open once it is serving.
const emfileHeadroom = 32

// TestListenerSurvivesEMFILE: a server out of file
// descriptors fails to accept (EMFILE) while idle connections hold them all;
// once they are gone, a new client gets its CONNACK. The accept loop used to
// return on the first error, silently: the listener was dead for good.
//
// This process dials; a copy of the test binary serves, with RLIMIT_NOFILE
// lowered to emfileHeadroom above what it uses, and logs JSON to stderr.
func TestListenerSurvivesEMFILE(t *testing.T) {
	if os.Getenv(emfileChildEnv) != "" {
		emfileServer(t)
		return
	}
	var stdout, stderr coretest.SyncBuffer
	cmd := exec.Command(os.Args[0], "-test.run=^TestListenerSurvivesEMFILE$", "-test.count=1")
	cmd.Env = append(os.Environ(), emfileChildEnv+"=1")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stopped := false
	stop := func() error { // closing stdin asks the server to shut down
		stopped = true
		_ = stdin.Close()
		select {
		case err := <-exited:
			return err
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
			return fmt.Errorf("the server did not stop; stderr:\n%s", stderr.String())
		}
	}
	defer func() {
		if !stopped {
			_ = stop()
		}
	}()

	var addr string
	waitUntil(t, "the server's address", func() bool {
		for _, line := range strings.Split(stdout.String(), "\n") {
			if a, ok := strings.CutPrefix(line, "addr="); ok {
				addr = a
				return true
			}
		}
		return false
	})
	start := time.Now()
	acceptFailed := func() bool { return strings.Contains(stderr.String(), `"msg":"accept failed, retrying"`) }

	// Idle connections until the server's accept fails: they stay open on
	// its side (no CONNECT yet: up to connectTimeout), one descriptor each.
	var idle []net.Conn
	for len(idle) < 10*emfileHeadroom && !acceptFailed() {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatalf("dial %d: %v", len(idle), err)
		}
		idle = append(idle, c)
	}
	// The server holds at most emfileHeadroom of them: an accept of the
	// others has failed, or will once the runtime wakes the accept loop.
	for deadline := time.Now().Add(10 * time.Second); !acceptFailed() && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if !acceptFailed() {
		t.Errorf("%d idle connections and no failed accept was logged", len(idle))
	}
	for _, c := range idle {
		_ = c.Close()
	}

	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c := paho.NewClient(paho.ClientConfig{Conn: conn})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ca, err := c.Connect(ctx, &paho.Connect{ClientID: "after-emfile", CleanStart: true})
	if err != nil || ca.ReasonCode != 0 {
		_ = conn.Close()
		t.Fatalf("no CONNACK once the idle connections were gone (the listener stopped accepting): %v %v\nserver log:\n%s",
			err, ca, stderr.String())
	}
	_ = c.Disconnect(&paho.Disconnect{})
	<-c.Done()

	waitUntil(t, "the server to log that it accepts again", func() bool {
		return strings.Contains(stderr.String(), `"msg":"accepting again"`)
	})
	log := stderr.String()
	t.Logf("%d idle connections; server log:\n%s", len(idle), log)
	if strings.Contains(log, `"level":"ERROR"`) {
		t.Errorf("a temporary failure was logged as an error:\n%s", log)
	}
	// Rate limited: not a line per failed accept.
	lines := strings.Count(log, `"msg":"accept failed, retrying"`)
	if limit := 1 + int(time.Since(start)/(10*time.Second)); lines > limit {
		t.Errorf("%d lines about failed accepts in %v, want at most %d:\n%s", lines, time.Since(start), limit, log)
	}
	if err := stop(); err != nil {
		t.Fatalf("server: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
}

// emfileServer is the child half of TestListenerSurvivesEMFILE: it serves
// with a low open-file limit until its stdin closes.
func emfileServer(t *testing.T) {
	store := memory.New(retain.Limits{})
	router := core.NewRouter(core.RouterOptions{Retainer: retain.Retainer{Store: store}, Node: "n"})
	s, err := New(Options{Listen: "127.0.0.1:0", Router: router, Store: store, Node: "n",
		Logger: slog.New(slog.NewJSONHandler(os.Stderr, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	// Lowered only now, with the server's own files open.
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	lim.Cur = uint64(len(fds) + emfileHeadroom)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("addr=%s\n", s.Addr())
	_, _ = io.Copy(io.Discard, os.Stdin)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}
