package accept

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tolsey/tolsey/core/coretest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// recorder is a slog.Handler that keeps every record.
type recorder struct {
	mu sync.Mutex
	rs []slog.Record
}

func (h *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (h *recorder) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.rs = append(h.rs, r.Clone())
	h.mu.Unlock()
	return nil
}
func (h *recorder) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *recorder) WithGroup(string) slog.Handler      { return h }

// count is the number of records with this message at this level.
func (h *recorder) count(level slog.Level, msg string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, r := range h.rs {
		if r.Level == level && r.Message == msg {
			n++
		}
	}
	return n
}

// waitFor polls cond until it holds, failing the test after 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	coretest.Eventually(t, what, 10*time.Second, cond)
}

func listen(t *testing.T) (*net.TCPListener, *Listener, *recorder) {
	t.Helper()
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	l := New(raw, "test", slog.New(rec))
	t.Cleanup(func() { _ = l.Close() })
	return raw.(*net.TCPListener), l, rec
}

type accepted struct {
	c   net.Conn
	err error
}

// acceptOne runs one Accept on its own goroutine.
func acceptOne(l *Listener) <-chan accepted {
	ch := make(chan accepted, 1)
	go func() {
		c, err := l.Accept()
		ch <- accepted{c, err}
	}()
	return ch
}

// A deadline that has passed makes the real socket's accept fail with a
// timeout, as often as it is tried: Accept keeps retrying with backoff, logs
// the failures with a rate limit instead of once each, and hands out the
// next connection once accepting works again.
func TestTemporaryErrorsAreRetried(t *testing.T) {
	raw, l, rec := listen(t)
	start := time.Now()
	if err := raw.SetDeadline(time.Unix(1, 0)); err != nil {
		t.Fatal(err)
	}
	ch := acceptOne(l)
	waitFor(t, "six failed accepts", func() bool { return l.Failures() >= 6 })
	select {
	case a := <-ch:
		t.Fatalf("Accept returned during temporary failures: %v, %v", a.c, a.err)
	default:
	}
	// At most one line per logEvery, whatever the number of failures.
	lines := rec.count(slog.LevelWarn, "accept failed, retrying")
	if limit := 1 + int(time.Since(start)/logEvery); lines < 1 || lines > limit {
		t.Fatalf("%d failures logged in %d lines, want 1 to %d", l.Failures(), lines, limit)
	}

	if err := raw.SetDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
	d, err := net.Dial("tcp", raw.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	a := <-ch
	if a.err != nil {
		t.Fatalf("Accept after the deadline was cleared: %v", a.err)
	}
	a.c.Close()
	if n := rec.count(slog.LevelInfo, "accepting again"); n != 1 {
		t.Fatalf("%d 'accepting again' lines, want 1", n)
	}
	if err := l.Err(); err != nil {
		t.Fatalf("Err after temporary failures: %v", err)
	}
}

// A socket closed under the listener (not through Close) ends Accept with
// an error that Err reports, naming the listener, logged once at error
// level.
func TestSocketClosedUnderItIsAFailure(t *testing.T) {
	raw, l, rec := listen(t)
	ch := acceptOne(l)
	_ = raw.Close()
	a := <-ch
	if a.err == nil {
		t.Fatal("Accept on a closed socket succeeded")
	}
	err := l.Err()
	if err == nil || !strings.Contains(err.Error(), "listener test on "+raw.Addr().String()) || !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Err = %v, want it to name the listener and wrap net.ErrClosed", err)
	}
	if _, err := l.Accept(); err == nil {
		t.Fatal("second Accept on a closed socket succeeded")
	}
	if n := rec.count(slog.LevelError, "listener stopped accepting connections"); n != 1 {
		t.Fatalf("%d error lines, want 1", n)
	}
}

// Close is no failure, whether Accept is waiting for a connection or in the
// middle of a backoff.
func TestCloseIsNoFailure(t *testing.T) {
	for _, backoff := range []bool{false, true} {
		raw, l, rec := listen(t)
		if backoff {
			if err := raw.SetDeadline(time.Unix(1, 0)); err != nil {
				t.Fatal(err)
			}
		}
		ch := acceptOne(l)
		if backoff {
			waitFor(t, "a failed accept", func() bool { return l.Failures() >= 1 })
		}
		_ = l.Close()
		if a := <-ch; a.err == nil {
			t.Fatal("Accept succeeded after Close")
		}
		if err := l.Err(); err != nil {
			t.Fatalf("backoff=%v: Err after Close: %v", backoff, err)
		}
		l.Fail(errors.New("the server's Serve returned"))
		if err := l.Err(); err != nil {
			t.Fatalf("backoff=%v: Fail after Close recorded %v", backoff, err)
		}
		if n := rec.count(slog.LevelError, "listener stopped accepting connections"); n != 0 {
			t.Fatalf("backoff=%v: %d error lines after Close", backoff, n)
		}
	}
}

func TestTemporary(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_ = raw.(*net.TCPListener).SetDeadline(time.Unix(1, 0))
	_, timeout := raw.Accept()
	_ = raw.Close()
	_, closed := raw.Accept()
	if !Temporary(timeout) {
		t.Errorf("a deadline's %v is not temporary", timeout)
	}
	if Temporary(closed) {
		t.Errorf("a closed socket's %v is temporary", closed)
	}
	// Errors as the runtime wraps them; the real EMFILE is provoked in
	// mqtt's TestListenerSurvivesEMFILE.
	for errno, want := range map[syscall.Errno]bool{syscall.EMFILE: true, syscall.ENFILE: true,
		syscall.ECONNABORTED: true, syscall.EINVAL: false, syscall.EBADF: false} {
		err := &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", errno)}
		if Temporary(err) != want {
			t.Errorf("Temporary(%v) = %v", err, !want)
		}
	}
}
