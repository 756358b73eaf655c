package mqtt

import (
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
	"github.com/mochi-mqtt/server/v2/listeners"

	"github.com/tolsey/tolsey/core/accept"
)

// tcpListener serves MQTT on a net.Listener the gateway bound itself, so the
// actual address (port 0) is known before mochi starts serving. It replaces
// mochi's listeners.Net, whose accept loop shares an error variable between
// goroutines (a data race under -race).
//
// With tls set it serves MQTT over TLS: the handshake runs on the
// connection's goroutine, within the CONNECT deadline (connectTimeout), at
// mochi's first read, so a client that stalls it holds nothing but its own
// goroutine; drainConn sits under the TLS layer, so the close_notify alert
// goes out before the drain.
type tcpListener struct {
	connServer
	once    sync.Once
	closing atomic.Bool // set by Close: connections close at once, no drain
	tls     *tls.Config // nil: plain TCP
}

// connServer is what the TCP and WebSocket listeners share: the listening
// socket, and the goroutines of the connections it accepted.
type connServer struct {
	// closeClients disconnects this listener's clients on Close, and
	// returns the connections mochi closes itself (disconnectListener).
	closeClients func(id string) map[net.Conn]bool
	id           string
	// ln retries temporary accept errors (out of file descriptors) and
	// records the one that stops it (Server.Listeners, for /readyz).
	ln    *accept.Listener
	log   *slog.Logger
	wg    sync.WaitGroup // connection goroutines (TCP: and their closing drains)
	conns openConns
	// connectTimeout bounds the wait for a new connection's CONNECT
	// (Options.ConnectTimeout): the deadline is absolute, so a CONNECT
	// that trickles in is cut off too; mochi sets the keep-alive
	// deadline once it has one.
	connectTimeout time.Duration
	adm            *admission // the connection limits, shared by every listener
}

func (l *connServer) ID() string                  { return l.id }
func (l *connServer) Address() string             { return l.ln.Addr().String() }
func (l *connServer) Init(log *slog.Logger) error { l.log = log; return nil }

// wait blocks until every connection goroutine has returned.
//
// Each listener's Close ends with it, for a race in mochi:
// attachClient counts the connection in Listeners.ClientsWg (Add) on the
// connection's own goroutine, while Server.Close, through
// Listeners.CloseAll, waits on that WaitGroup right after closing the
// listeners. A connection accepted just before shutdown could call Add
// while Wait was running: a data race under -race (seen when shutting down
// during a burst of connections), and Wait could return before that client
// was counted. With Close waiting for its connection goroutines, every Add
// and its Done are over before CloseAll reaches Wait. Upstream, attachClient
// would Add before the connection's goroutine starts (in the listener's
// EstablishFn caller) or CloseAll would refuse new clients first.
func (l *connServer) wait() { l.wg.Wait() }

// stopAccepting closes the listening socket at once (Close does the rest).
func (l *connServer) stopAccepting() { _ = l.ln.Close() }

func (l *connServer) acceptor() *accept.Listener { return l.ln }

// ourListener is what Server does with each of its listeners (TCP,
// WebSocket, their TLS twins) besides what mochi does.
type ourListener interface {
	stopAccepting()
	wait()
	acceptor() *accept.Listener
}

// serveConn runs one connection on its own goroutine, counted in l.wg by
// l.conns.add. While the connection is idle, this frame and mochi's under
// it stay on that goroutine's stack, so each is kept small (no defers,
// logging in a function of its own): the runtime then shrinks an idle
// connection's stack to 4 KiB (TestIdleConnectionStackBudget).
// timeout is how long it has for its CONNECT (admission.admit).
func (l *connServer) serveConn(establish listeners.EstablishFn, conn net.Conn, timeout time.Duration) {
	_ = conn.SetReadDeadline(time.Now().Add(timeout))
	l.ended(establish(l.id, conn))
	l.conns.remove(conn)
	l.adm.done(conn)
	l.wg.Done()
}

// start serves conn, accepted as raw (the socket under any TLS and
// WebSocket layer), on a goroutine of its own, unless the connection
// limits refuse it unanswered or the listener is closing.
func (l *connServer) start(establish listeners.EstablishFn, conn, raw net.Conn) {
	timeout := l.adm.admit(conn, l.id, l.connectTimeout)
	if timeout == 0 {
		_ = raw.Close() // refused, and too many refusals wait already
		return
	}
	if !l.conns.add(conn, &l.wg) {
		l.adm.done(conn)
		_ = conn.Close() // closing
		return
	}
	go l.serveConn(establish, conn, timeout)
}

//go:noinline
func (l *connServer) ended(err error) {
	if err != nil && !errors.Is(err, io.EOF) {
		l.log.Debug("mqtt connection ended", "listener", l.id, "error", err)
	}
}

// openConns are a listener's connections being served, so that Close can
// also end those mochi knows nothing of yet (no CONNECT read), which would
// otherwise hold mochi's Close, and so Shutdown, for ever.
type openConns struct {
	mu     sync.Mutex
	m      map[net.Conn]struct{}
	closed bool
}

// add records c and counts its goroutine in wg; false once closeAll ran.
func (o *openConns) add(c net.Conn, wg *sync.WaitGroup) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return false
	}
	if o.m == nil {
		o.m = map[net.Conn]struct{}{}
	}
	o.m[c] = struct{}{}
	wg.Add(1)
	return true
}

// hold counts one more goroutine of the listener's in wg (a closed
// connection's drain); false once closeAll ran, whose caller then waits on
// wg: an Add from 0 during that Wait would race it, and Wait could miss it.
func (o *openConns) hold(wg *sync.WaitGroup) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return false
	}
	wg.Add(1)
	return true
}

func (o *openConns) remove(c net.Conn) {
	o.mu.Lock()
	delete(o.m, c)
	o.mu.Unlock()
}

// closeAll closes every recorded connection but those mochi is ending
// (mochi patch 20: closed first, they lost the DISCONNECT of the
// shutdown); add refuses from now on.
func (o *openConns) closeAll(ending map[net.Conn]bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.closed = true
	for c := range o.m {
		if !ending[c] {
			_ = c.Close()
		}
	}
}

var _ listeners.Listener = (*tcpListener)(nil)

// Listeners are the listening sockets, TCP, WebSocket, TLS, WebSocket over
// TLS (those enabled), after Start: each says whether it has stopped
// accepting (Err, for /readyz) and how many accepts failed and were retried.
func (s *Server) Listeners() []*accept.Listener {
	var ls []*accept.Listener
	for _, l := range s.listeners() {
		ls = append(ls, l.acceptor())
	}
	return ls
}

func (l *tcpListener) Protocol() string { return "tcp" }

// Serve accepts until the listener is closed or fails for good: l.ln
// retries what passes (EMFILE under a connection flood), and logs and
// records what does not.
func (l *tcpListener) Serve(establish listeners.EstablishFn) {
	for {
		raw, err := l.ln.Accept()
		if err != nil {
			return
		}
		conn := raw
		if tc, ok := conn.(*net.TCPConn); ok {
			conn = newDrainConn(tc, l)
		}
		if l.tls != nil {
			conn = tls.Server(conn, l.tls)
		}
		l.start(establish, conn, raw)
	}
}

func (l *tcpListener) Close(listeners.CloseFn) {
	l.once.Do(func() {
		l.closing.Store(true)
		_ = l.ln.Close()
		l.conns.closeAll(l.closeClients(l.id))
		l.wait() // before mochi's ClientsWg.Wait: see wait
	})
}

// closeDrain bounds how long a closed connection keeps reading.
const closeDrain = time.Second

// drainConn closes gracefully. mochi writes a DISCONNECT with a reason code
// and closes at once [MQTT-4.13.2-1]; a client still sending then meets a
// closed socket, the kernel answers it with RST, and a client that sees the
// reset on a write (the Paho test client answering PUBRECs after Receive
// Maximum was exceeded) fails before it reads the DISCONNECT. So Close keeps
// reading and discarding until the client closes, for at most closeDrain,
// and only then closes. It sends no FIN early: a client that reads with two
// threads at once (the Paho test client again) spins on an end of stream
// in the middle of a packet, while it copes with silence until its timeout.
// mochi reads nothing after Close, as with a closed socket: a session taken
// over must not process packets from its old connection.
//
// It also reads ahead (readAhead) while bytes keep arriving.
type drainConn struct {
	*net.TCPConn
	l      *tcpListener
	once   sync.Once
	closed atomic.Bool
	rmu    sync.Mutex // held by every Read, and by the drain for good

	ahead   readAhead // guarded by rmu, as pending is
	pending []byte    // unread bytes from ahead
}

// newDrainConn wraps a TCP connection the listener accepted.
func newDrainConn(tc *net.TCPConn, l *tcpListener) *drainConn {
	c := &drainConn{TCPConn: tc, l: l}
	c.ahead.init(tc)
	return c
}

// Read serves p from the read-ahead buffer, refilled without waiting; when
// the socket has nothing, the buffer goes back to the pool and Read waits in
// a plain Read into p. It takes no defer and calls no helper on the waiting
// path: its frame is on every idle connection's stack (serveConn).
func (c *drainConn) Read(p []byte) (int, error) {
	c.rmu.Lock()
	if c.closed.Load() {
		c.rmu.Unlock()
		return 0, net.ErrClosed
	}
	if len(c.pending) == 0 && len(p) < readAheadSize { // a big read goes straight into p
		var err error
		if c.pending, err = c.ahead.fill(); err != nil {
			c.rmu.Unlock()
			return 0, err
		}
	}
	if len(c.pending) > 0 {
		n := copy(p, c.pending)
		c.pending = c.pending[n:]
		c.rmu.Unlock()
		return n, nil
	}
	n, err := c.TCPConn.Read(p)
	c.rmu.Unlock()
	return n, err
}

// InputReady reports whether the client's next bytes can be read without
// waiting: the read-ahead holds some, or a read that does not wait finds
// some. mochi's handler goes on with the next packet then, and otherwise
// hands the connection back to its own goroutine to wait (mochi patch 24):
// on a busy connection that saves two goroutine switches a packet. A read
// error counts as ready: the read that follows reports it. A connection
// being drained holds rmu for good: nothing is ready then.
func (c *drainConn) InputReady() bool {
	if !c.rmu.TryLock() {
		return false
	}
	ready := len(c.pending) > 0
	if !ready && !c.closed.Load() {
		var err error
		c.pending, err = c.ahead.fill()
		ready = err != nil || len(c.pending) > 0
	}
	c.rmu.Unlock()
	return ready
}

// Write refuses once mochi has closed the connection: the socket stays open
// for the drain, and nothing may follow the DISCONNECT [MQTT-3.14.4-1].
func (c *drainConn) Write(p []byte) (int, error) {
	if c.closed.Load() {
		return 0, net.ErrClosed
	}
	return c.TCPConn.Write(p)
}

func (c *drainConn) Close() error {
	if c.l.closing.Load() {
		return c.TCPConn.Close() // shutting down: do not hold Shutdown up
	}
	c.once.Do(func() {
		c.closed.Store(true)
		// Counted before the Read in progress ends (and with it serveConn's
		// own count), so the listener's wait never misses the drain; and
		// under the lock closeAll takes before that wait, so the count
		// never races the Wait (a listener closing meanwhile: no drain).
		if !c.l.conns.hold(&c.l.wg) {
			_ = c.TCPConn.Close()
			return
		}
		_ = c.TCPConn.SetReadDeadline(time.Unix(1, 0)) // ends a Read in progress
		go func() {
			defer c.l.wg.Done()
			c.rmu.Lock() // mochi's reader is out; it never gets in again
			defer c.rmu.Unlock()
			c.ahead.release()
			c.pending = nil
			_ = c.TCPConn.SetReadDeadline(time.Time{})
			t := time.AfterFunc(closeDrain, func() { _ = c.TCPConn.Close() })
			_, _ = io.Copy(io.Discard, c.TCPConn)
			t.Stop()
			_ = c.TCPConn.Close()
		}()
	})
	return nil
}

// wsListener serves MQTT over WebSocket (subprotocol "mqtt", binary
// messages) on paths / and /mqtt; with tls set, over TLS (wss://), the
// handshake done by net/http within ReadHeaderTimeout.
type wsListener struct {
	connServer
	tls      *tls.Config // nil: plain WebSocket
	srv      *http.Server
	once     sync.Once
	upgrader websocket.Upgrader
	est      listeners.EstablishFn
}

var _ listeners.Listener = (*wsListener)(nil)

func (l *wsListener) Protocol() string { return "ws" }

// Init runs in AddListener, before Serve and Close can run concurrently.
func (l *wsListener) Init(log *slog.Logger) error {
	_ = l.connServer.Init(log)
	l.upgrader = websocket.Upgrader{
		Subprotocols: []string{"mqtt", "mqttv3.1"},
		// Devices and browser dashboards connect from any origin; access
		// control is MQTT authentication, not the Origin header.
		CheckOrigin: func(*http.Request) bool { return true },
		// What an idle connection holds: gorilla's read buffer at its
		// smallest (wsConn reads frames itself; net/http's 4 KiB buffer
		// goes with the handshake) and no write buffer, which comes from
		// a pool for each message written.
		ReadBufferSize:  128,
		WriteBufferSize: 4096,
		WriteBufferPool: &sync.Pool{},
	}
	l.srv = &http.Server{Handler: http.HandlerFunc(l.handle), ReadHeaderTimeout: 10 * time.Second,
		// net/http logs failed TLS handshakes and bad requests on the
		// standard logger; they go to ours, at debug.
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}
	return nil
}

// Serve runs the HTTP server until Close. net/http would itself retry
// temporary accept errors, but l.ln does so first, as for TCP, so the
// server returns only when l.ln is closed or has failed for good, or for a
// reason of its own: anything but Close is reported as the listener's
// failure.
func (l *wsListener) Serve(establish listeners.EstablishFn) {
	l.est = establish // handle runs only on connections Serve accepts below
	var ln net.Listener = l.ln
	if l.tls != nil {
		ln = tls.NewListener(l.ln, l.tls)
	}
	if err := l.srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		l.ln.Fail(err)
	}
}

func (l *wsListener) handle(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/" && r.URL.Path != "/mqtt" {
		http.NotFound(w, r)
		return
	}
	c, err := l.upgrader.Upgrade(w, r, nil)
	if err != nil {
		return // Upgrade has answered the client
	}
	// The connection runs on a goroutine of its own, and net/http's
	// (whose deep frames would stay under every idle connection's
	// stack) returns.
	ws := newWSConn(c)
	l.start(l.est, ws, c.NetConn())
}

func (l *wsListener) Close(listeners.CloseFn) {
	l.once.Do(func() {
		_ = l.srv.Close()
		l.conns.closeAll(l.closeClients(l.id))
		l.wait() // before mochi's ClientsWg.Wait: see wait
	})
}
