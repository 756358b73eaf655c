// Package accept keeps a listening socket accepting through the errors that
// pass (out of file descriptors, a connection aborted in the queue, a
// timeout), the way net/http's Server.Serve does, and reports the one error
// that does not pass. Every listener of the gateway (MQTT over TCP and
// WebSocket, AMQP, the admin API) accepts through it, so they retry, log and
// fail alike.
//
// It sits under core/ for the reason core/metrics does
// (docs/architecture.md, "Why core/metrics sits in core/"): the front-ends
// that use it may not import each other (mqtt, amqp) nor reach up into
// gateway, and the project's top-level folders are fixed. Like core/metrics
// it is a leaf: it imports only the standard library, and the core proper
// (Router, Message, topics) never imports it.
package accept

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Backoff between failed accepts, as net/http's Server.Serve: 5 ms, doubling
// up to 1 s, back to the start after a success.
const (
	minDelay = 5 * time.Millisecond
	maxDelay = time.Second
)

// logEvery is the shortest interval between two log lines about failed
// accepts of one listener: out of file descriptors under a connection flood,
// every accept fails, or one in two succeeds, and a line each time would
// bury the log (and cost the disk the flood is already short of). The
// failures in between are counted in the next line and in Failures.
const logEvery = 10 * time.Second

// Listener is a net.Listener whose Accept waits out temporary errors
// instead of returning them. Accept returns an error only when the listener
// was closed (Close) or failed for good; in the second case the failure is
// logged at error level once and Err reports it until the process ends.
//
// Accept must be called from one goroutine at a time (each server runs one
// accept loop); Close, Err and Failures may be called from any.
type Listener struct {
	net.Listener
	name string // names the listener in logs and in Err: "mqtt-tcp", "admin"
	log  *slog.Logger

	closeOnce sync.Once
	closed    chan struct{} // closed by Close: shutting down, no error to report

	// Owned by the goroutine in Accept.
	delay    time.Duration // the next wait after a failure; 0 after a success
	lastLog  time.Time     // when a failure was last logged
	unlogged int           // failures since that line
	logged   bool          // a failure was logged and no accept succeeded since

	failures atomic.Uint64 // temporary failures, ever (a metric)

	// Set by SetSendBuffer before the accept loop starts; read by Accept.
	sendBuffer int

	mu  sync.Mutex
	err error // why it stopped accepting while not closed
}

// New wraps ln, a listening socket the caller bound; name names it in logs
// and errors.
func New(ln net.Listener, name string, log *slog.Logger) *Listener {
	if log == nil {
		log = slog.Default()
	}
	return &Listener{Listener: ln, name: name, log: log, closed: make(chan struct{})}
}

// SetSendBuffer sets SO_SNDBUF to n bytes on every connection accepted from
// now on (0: the kernel's autotuning, as before). Linux grows an
// autotuned send buffer up to net.ipv4.tcp_wmem's maximum (4 MiB by
// default) for a client that does not read, and that memory is the
// kernel's, outside the gateway's RSS and its limits: a thousand stuck
// subscribers took the whole machine past net.ipv4.tcp_mem's pressure
// mark, and every TCP connection on it crawled (drill 5,
// docs/reliability.md). Call it before the accept loop starts.
func (l *Listener) SetSendBuffer(n int) { l.sendBuffer = n }

// Name is the name given to New.
func (l *Listener) Name() string { return l.name }

// Accept returns the next connection. It retries temporary errors with
// backoff, logging them at most once every logEvery; any other error ends
// the accept loop: when Close was called it is returned as is, otherwise it
// is also recorded (Err) and logged at error level.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err == nil {
			l.accepted()
			if tc, ok := c.(*net.TCPConn); ok && l.sendBuffer > 0 {
				_ = tc.SetWriteBuffer(l.sendBuffer) // a failure leaves the kernel's default: nothing to refuse the client for
			}
			return c, nil
		}
		if l.isClosed() {
			return nil, err
		}
		if !Temporary(err) {
			l.Fail(err)
			return nil, err
		}
		l.failed(err)
		// A timer rather than a sleep, so that Close need not wait for
		// up to a second of backoff to end the loop.
		t := time.NewTimer(l.delay)
		select {
		case <-t.C:
		case <-l.closed:
			t.Stop() // the next Accept returns the closed socket's error
		}
	}
}

// Close stops Accept, also in the middle of a backoff, and closes the
// socket. What Accept returns from then on is no failure.
func (l *Listener) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return l.Listener.Close()
}

func (l *Listener) isClosed() bool {
	select {
	case <-l.closed:
		return true
	default:
		return false
	}
}

// Fail records that the listener has stopped accepting for good, unless it
// was closed: Accept calls it on an error that is not temporary, and a
// server whose Serve returns for a reason of its own (an http.Server) calls
// it with that reason. The first failure is kept and logged at error level;
// later ones are ignored.
func (l *Listener) Fail(err error) {
	if l.isClosed() {
		return
	}
	if err == nil {
		err = errors.New("accept loop ended")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return
	}
	// Logged before Err reports it (both under mu, once): whoever sees
	// /readyz fail finds the line in the log already.
	l.log.Error("listener stopped accepting connections", "listener", l.name, "addr", l.Addr().String(), "error", err)
	l.err = fmt.Errorf("listener %s on %s stopped accepting: %w", l.name, l.Addr(), err)
}

// Err says why the listener stopped accepting while nobody closed it, or
// returns nil. It names the listener and its address.
func (l *Listener) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// Failures is the number of temporary accept failures so far, each of them
// retried.
func (l *Listener) Failures() uint64 { return l.failures.Load() }

func (l *Listener) failed(err error) {
	l.failures.Add(1)
	l.delay = min(max(2*l.delay, minDelay), maxDelay)
	now := time.Now()
	if !l.lastLog.IsZero() && now.Sub(l.lastLog) < logEvery {
		l.unlogged++
		return
	}
	args := []any{"listener", l.name, "error", err, "retry", l.delay}
	if l.unlogged > 0 {
		args = append(args, "failures_since_last_line", l.unlogged)
	}
	l.log.Warn("accept failed, retrying", args...)
	l.lastLog, l.unlogged, l.logged = now, 0, true
}

func (l *Listener) accepted() {
	l.delay = 0
	if !l.logged {
		return
	}
	// One line for each logged failure at most, so this is rate-limited
	// by failed's limit.
	l.log.Info("accepting again", "listener", l.name, "failures_since_last_line", l.unlogged)
	l.logged, l.unlogged = false, 0
}

// Temporary reports whether an Accept error passes: the process or the
// system is out of file descriptors (EMFILE, ENFILE) or of memory for a
// socket (ENOBUFS, ENOMEM), a connection was aborted or reset while it
// waited in the queue (ECONNABORTED, ECONNRESET; net/http counts these as
// temporary, issue golang/go#6163), or a deadline passed. Anything else
// (the socket closed, or shut down under the listener: EINVAL) will fail
// again the same way.
func Temporary(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	for _, e := range [...]syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM,
		syscall.ECONNABORTED, syscall.ECONNRESET, syscall.EINTR} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
