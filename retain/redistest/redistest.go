// Package redistest runs a real redis-server for tests: on a free loopback
// port, without persistence, killed when the test ends. It also offers a TCP
// Proxy that can cut one client off Redis while others stay connected, to
// test the outage of a single gateway. Any package's tests may use it;
// production code must not import it.
//
// A missing redis-server fails the test ("install redis-server"); it never
// skips, so that CI cannot pass by not testing.
package redistest

import (
	"bufio"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/tolsey/tolsey/core/coretest"
)

// Binary is the redis-server executable looked up in PATH.
const Binary = "redis-server"

// Server is one redis-server process on a fixed port.
type Server struct {
	Addr string // 127.0.0.1:port, the same across Restart

	t    testing.TB
	port int
	dir  string

	mu     sync.Mutex
	cmd    *exec.Cmd     // nil while stopped
	exited chan struct{} // closed when cmd has been reaped
	log    *coretest.SyncBuffer
}

// Start runs redis-server on a free 127.0.0.1 port with
// --save "" --appendonly no, waits until it answers PING, and kills it when
// the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	if _, err := exec.LookPath(Binary); err != nil {
		t.Fatalf("redistest: %s not found: install redis-server (apt-get install redis-server): %v", Binary, err)
	}
	s := &Server{t: t, dir: t.TempDir()}
	var err error
	for range 5 { // a port found free may be taken before redis binds it
		if s.port, err = freePort(); err != nil {
			t.Fatalf("redistest: %v", err)
		}
		s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
		if err = s.start(); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	t.Cleanup(s.Stop)
	return s
}

// URL is the redis:// URL of the server.
func (s *Server) URL() string { return "redis://" + s.Addr + "/0" }

// Stop kills the server (SIGKILL: an outage, not a shutdown) and waits for
// it to exit. Stopping a stopped server does nothing.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.exited
	s.cmd = nil
}

// Restart stops the server if it runs and starts a new, empty one on the
// same port (nothing is persisted), failing the test if it cannot.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := s.start()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("redistest: restart on %s: %v", s.Addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (s *Server) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	log := &coretest.SyncBuffer{}
	cmd := exec.Command(Binary,
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", s.dir,
	)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", Binary, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if Ping(s.Addr) == nil {
			s.cmd, s.exited, s.log = cmd, exited, log
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("%s exited at start:\n%s", Binary, log.String())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-exited
			return fmt.Errorf("%s did not answer PING on %s:\n%s", Binary, s.Addr, log.String())
		}
	}
}

// Ping sends PING to addr over a fresh connection and expects +PONG.
func Ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
