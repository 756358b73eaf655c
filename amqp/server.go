package amqp

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tolsey/tolsey/core"
	"github.com/tolsey/tolsey/core/accept"
	"github.com/tolsey/tolsey/core/auth"
	"github.com/tolsey/tolsey/core/limits"
	"github.com/tolsey/tolsey/core/metrics"
	"github.com/tolsey/tolsey/core/queue"
	"github.com/tolsey/tolsey/retain"
)

// Options configure the AMQP front-end. Zero values take the documented
// defaults.
type Options struct {
	Listen string // TCP address; required
	// TLSListen is the AMQP over TLS address (amqps, 5671 by custom);
	// empty disables. It needs TLS. SASL runs inside TLS as on Listen.
	TLSListen string
	// TLS is what TLSListen serves with; each handshake calls its
	// GetConfigForClient, so certificates reloaded behind it
	// (core/tlsconf) serve new connections only. When set, a client on
	// Listen may also upgrade to TLS with the TLS protocol header
	// (AMQP 1.0 §5.2.1, starttls.go).
	TLS *tls.Config

	Router *core.Router // required
	// Containers, in a cluster, makes a container id that asks for it
	// unique across gateways (container.go); nil: on this gateway only.
	Containers Containers
	Store      retain.Matcher // required: late subscribers are served from it
	Metrics    *metrics.Metrics
	Logger     *slog.Logger
	Node       string // node.id, stamped on messages and used to skip duplicate retained copies

	// MaxMessageSize is the largest message accepted, announced as the
	// receiving links' max-message-size; 0 = no limit.
	MaxMessageSize uint64
	// MaxFrameSize is the max-frame-size announced in open (default 65536,
	// at least 512).
	MaxFrameSize uint32
	// IdleTimeout is announced in open; a peer silent for longer is
	// disconnected with amqp:resource-limit-exceeded. 0 disables it.
	IdleTimeout time.Duration
	// Auth is the users file and ACL in force (core/auth), read at every
	// login and check so that a reload applies to what comes next. When
	// set it replaces AllowAnonymous and Users: SASL offers SCRAM-SHA-256,
	// PLAIN, EXTERNAL (TLS client certificate) and ANONYMOUS (only when
	// Auth.AllowAnonymous), and links and messages are checked against the
	// ACL (authz.go). nil: AllowAnonymous and Users, and no ACL.
	Auth *auth.Live
	// AllowAnonymous accepts SASL ANONYMOUS and clients that skip SASL
	// (without Auth).
	AllowAnonymous bool
	// Users are the SASL PLAIN credentials, user → password (without
	// Auth).
	Users map[string]string
	// LinkBuffer bounds the messages queued for one receiving client link
	// (default 1000). Beyond it new messages for that link are dropped and
	// counted (tolsey_messages_dropped_total{reason="slow_consumer"}).
	LinkBuffer int
	// BlockOnOverflow makes a receiving link whose LinkBuffer is full
	// hold the publisher (Deliver waits) for up to OverflowWait for room,
	// instead of dropping at once: a consumer that keeps up with bursts
	// loses nothing, as NATS stalls a producer. A link that made a
	// publisher wait in vain drops (counted) without waiting until it has
	// drained to half its buffer, so a stuck consumer costs each
	// publisher at most one wait. A client chooses per link with the
	// attach property "tolsey:link-overflow" = "drop" or "block".
	BlockOnOverflow bool
	// OverflowWait bounds one wait for room without a sign of life from
	// the link: the writer taking a message, its consumer settling a
	// delivery (default 100 ms).
	OverflowWait time.Duration
	// MaxSessions bounds the sessions of one connection (default 256, at
	// most 65536): announced as channel-max = MaxSessions-1 in open, and a
	// begin on a higher channel closes the connection with
	// amqp:connection:framing-error [2.7.1].
	MaxSessions int
	// MaxLinksPerConnection bounds the links of one connection, over all
	// its sessions, senders and receivers alike (default 1000). Each
	// receiving link is a router subscription, so this also bounds what one
	// published message costs one connection. An attach beyond it is
	// refused with amqp:resource-limit-exceeded. The handle-max announced
	// in begin is 2*MaxLinksPerConnection-1 (room for the links and for
	// refused ones awaiting the client's detach).
	MaxLinksPerConnection int
	// MaxSelectorLength bounds a JMS selector's length in bytes (default
	// 4096; selectors.go): a longer one refuses the link with
	// amqp:invalid-field.
	MaxSelectorLength int
	// MaxTxnMessages (amqp.maxTransactionMessages) bounds the messages,
	// and the acknowledgements, one transaction holds until it is
	// discharged (default 1000; txn.go): a send beyond it is rejected with
	// amqp:resource-limit-exceeded, and the transaction rolls back at
	// discharge.
	MaxTxnMessages int
	// WriteTimeout bounds each write to a client's socket: a client that
	// stops reading for that long (while the gateway has frames for it,
	// heartbeats included) is disconnected. 0 disables it.
	WriteTimeout time.Duration

	// Admission applies the connection limits (limits.maxConnections,
	// maxConnectionsPerAddress, connectRate: limits.go); one shared with
	// the MQTT front-end makes the total one number. nil: none.
	Admission *limits.Admission

	// SendBuffer is SO_SNDBUF of each client connection (limits.sendBuffer;
	// 0: the kernel's autotuning): what a client that stops reading holds
	// in the kernel before WriteTimeout runs (core/accept.SetSendBuffer).
	SendBuffer int

	// Queues is the queue engine (docs/queues.md, "AMQP"); nil: no queues,
	// and a queue address is refused with amqp:not-found.
	Queues *queue.Engine
	// AutoCreateQueues (queues.autoCreate): an attach to a queue that does
	// not exist creates a durable one with the defaults, instead of being
	// refused with amqp:not-found.
	AutoCreateQueues bool
	// BareAddressQueue (amqp.bareAddress = queue): an address with neither
	// prefix nor capability names a queue even when none of that name
	// exists yet (created with AutoCreateQueues, else amqp:not-found), as
	// Artemis, RabbitMQ 4 and Qpid Broker-J read it. An address with MQTT
	// wildcards stays a topic filter: no queue can have that name.
	BareAddressQueue bool
}

// Defaults and fixed limits.
const (
	defaultMaxFrameSize = 65536
	defaultLinkBuffer   = 1000
	defaultOverflowWait = 100 * time.Millisecond
	defaultMaxSessions  = 256  // channel-max 255
	defaultMaxLinks     = 1000 // per connection; handle-max 1999
	defaultMaxTxnMsgs   = 1000
	maxMaxSessions      = 1 << 16

	// sessionWindow is the incoming-window announced in begin, in
	// transfer frames; it is topped up when half is used.
	sessionWindow = 5000
	// outgoingWindow is announced and never enforced on ourselves: we send
	// as the peer's incoming window and link credit allow.
	outgoingWindow = 1 << 30

	// creditBatch is the credit granted to a client's sending link and
	// topped up when half is used.
	creditBatch = 500

	handshakeTimeout = 10 * time.Second // header, SASL and open must be done by then
	closeTimeout     = 2 * time.Second  // how long a closing connection lingers for the peer
)

// Server is the running AMQP front-end.
type Server struct {
	opts     Options
	log      *slog.Logger
	ln       *accept.Listener // retries temporary accept errors; Err says if it died
	tlsLn    *accept.Listener // the same for TLSListen; nil when disabled
	counters counters
	out      *metrics.Outlet // messages out and their latency, resolved once: counted per delivery
	fan      fanOut          // the publish being handed to receiving links (fanout.go)

	mu       sync.Mutex
	closing  bool          // Shutdown has begun: spawn refuses
	quit     chan struct{} // closed when Shutdown begins: waits end early
	conns    map[*conn]struct{}
	ctrs     containerIDs             // container.go
	wg       sync.WaitGroup           // every goroutine started by spawn
	connSeq  atomic.Uint64            // connection numbers (temporary addresses, logs)
	tmpMu    sync.Mutex               // guards tmp
	tmp      map[string]int8          // temporary address → x-opt-jms-dest kind
	subsMu   sync.Mutex               // guards subs
	subs     map[string]*subscription // durable and shared subscriptions by key
	autoMu   sync.Mutex               // serialises AutoCreateQueues: Declare changes an existing queue
	refusing atomic.Int32             // refused connections being answered (limits.go)

	stopWatch func() // ends the rechecks on reload (revoke.go); set by Start, called by Shutdown

	legacyFailures auth.Throttle // failed logins per host without Options.Auth (sasl.go)
}

// New builds the front-end; Start binds and serves.
func New(opts Options) (*Server, error) {
	if opts.Router == nil || opts.Store == nil {
		return nil, errors.New("amqp: Router and Store are required")
	}
	if opts.TLSListen != "" && opts.TLS == nil {
		return nil, errors.New("amqp: TLSListen needs TLS")
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.MaxFrameSize == 0 {
		opts.MaxFrameSize = defaultMaxFrameSize
	}
	if opts.MaxFrameSize < 512 {
		return nil, fmt.Errorf("amqp: MaxFrameSize %d is below 512 (AMQP 1.0 §2.7.1 MIN-MAX-FRAME-SIZE)", opts.MaxFrameSize)
	}
	if opts.LinkBuffer <= 0 {
		opts.LinkBuffer = defaultLinkBuffer
	}
	if opts.OverflowWait <= 0 {
		opts.OverflowWait = defaultOverflowWait
	}
	if opts.MaxSessions <= 0 {
		opts.MaxSessions = defaultMaxSessions
	}
	if opts.MaxSessions > maxMaxSessions {
		return nil, fmt.Errorf("amqp: MaxSessions %d is above %d (channel-max is a ushort, AMQP 1.0 §2.7.1)", opts.MaxSessions, maxMaxSessions)
	}
	if opts.MaxLinksPerConnection <= 0 {
		opts.MaxLinksPerConnection = defaultMaxLinks
	}
	if uint64(opts.MaxLinksPerConnection) > 1<<32 {
		return nil, fmt.Errorf("amqp: MaxLinksPerConnection %d is above 2^32 (handle-max is a uint, AMQP 1.0 §2.7.2)", opts.MaxLinksPerConnection)
	}
	if opts.MaxTxnMessages <= 0 {
		opts.MaxTxnMessages = defaultMaxTxnMsgs
	}
	if opts.WriteTimeout < 0 {
		opts.WriteTimeout = 0
	}
	return &Server{
		opts:     opts,
		log:      opts.Logger.With("part", "amqp"),
		counters: newCounters(opts.Metrics),
		out:      opts.Metrics.Outlet("amqp"),
		conns:    map[*conn]struct{}{},
		quit:     make(chan struct{}),
		tmp:      map[string]int8{},
		subs:     map[string]*subscription{},
	}, nil
}

// Start binds the listeners and starts accepting. The bound addresses are
// logged and available from Addr and TLSAddr.
func (s *Server) Start() error {
	ln, err := net.Listen("tcp", s.opts.Listen)
	if err != nil {
		return fmt.Errorf("amqp.listen %s: %w", s.opts.Listen, err)
	}
	var tln net.Listener
	if s.opts.TLSListen != "" {
		if tln, err = net.Listen("tcp", s.opts.TLSListen); err != nil {
			ln.Close()
			return fmt.Errorf("amqp.tls.listen %s: %w", s.opts.TLSListen, err)
		}
		s.tlsLn = accept.New(tln, "amqp-tls", s.log)
		s.tlsLn.SetSendBuffer(s.opts.SendBuffer)
	}
	s.ln = accept.New(ln, "amqp", s.log)
	s.ln.SetSendBuffer(s.opts.SendBuffer)
	if !s.spawn(func() { s.accept(s.ln, nil, s.opts.TLS != nil) }) {
		ln.Close()
		if tln != nil {
			tln.Close()
		}
		return errors.New("amqp: server is shut down")
	}
	s.log.Info("amqp listening", "addr", s.Addr())
	if tln != nil {
		if !s.spawn(func() { s.accept(s.tlsLn, s.opts.TLS, false) }) {
			tln.Close()
			return errors.New("amqp: server is shut down")
		}
		s.log.Info("amqp listening", "addr", s.TLSAddr(), "transport", "tls")
	}
	s.stopWatch = s.watch()
	return nil
}

// TLSAddr is the bound AMQP over TLS address, or "" when disabled.
func (s *Server) TLSAddr() string {
	if s.tlsLn == nil {
		return ""
	}
	return s.tlsLn.Addr().String()
}

// Addr is the bound address, or "" before Start.
func (s *Server) Addr() string {
	if s.ln == nil {
		return ""
	}
	return s.ln.Addr().String()
}

// spawn runs f on a tracked goroutine, unless Shutdown has begun. Every
// goroutine of this package starts here, so Shutdown can wait for all.
func (s *Server) spawn(f func()) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return false
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		f()
	}()
	return true
}

// Listener is the accepting socket, for readiness (Err) and its count of
// retried accept failures; nil before Start.
func (s *Server) Listener() *accept.Listener { return s.ln }

// TLSListener is TLSListen's accepting socket, as Listener; nil when
// disabled.
func (s *Server) TLSListener() *accept.Listener { return s.tlsLn }

// accept runs until ln is closed or fails for good: ln retries temporary
// errors (out of file descriptors) itself, with backoff and a rate-limited
// log, and records a lasting one for /readyz. With cfg, each connection is
// wrapped in TLS; its handshake runs at the connection's first read, on its
// own goroutine and within handshakeTimeout, so a stalled handshake holds
// up no one else. With upgrade, each may turn to TLS at its start when
// the client asks (starttls.go).
func (s *Server) accept(ln *accept.Listener, cfg *tls.Config, upgrade bool) {
	for {
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		v, ok := s.admit(nc)
		if !ok {
			nc.Close() // refused, and too many refusals are being answered already
			continue
		}
		switch {
		case cfg != nil:
			nc = tls.Server(nc, cfg)
		case upgrade:
			nc = &upgradeConn{Conn: nc}
		}
		c := newConn(s, nc)
		c.ticket, c.refused = v.Ticket, v.Reason
		s.mu.Lock()
		if s.closing {
			s.mu.Unlock()
			c.dropped()
			continue
		}
		s.conns[c] = struct{}{}
		s.mu.Unlock()
		if !s.spawn(c.serve) {
			s.forget(c)
			c.dropped()
		}
	}
}

func (s *Server) forget(c *conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	s.dropContainer(c)
}

// Shutdown stops accepting, closes every connection with
// amqp:connection:forced and waits for every goroutine until ctx ends; then
// it drops the sockets that are still open and waits for the rest.
func (s *Server) Shutdown(ctx context.Context) error {
	if s.stopWatch != nil {
		s.stopWatch()
	}
	s.mu.Lock()
	if !s.closing {
		close(s.quit)
	}
	s.closing = true
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	if s.ln != nil {
		s.ln.Close()
	}
	if s.tlsLn != nil {
		s.tlsLn.Close()
	}
	for _, c := range conns {
		c.forceClose()
	}
	done := make(chan struct{})
	go func() { // not spawned: spawn refuses now, and this one ends with the others
		s.wg.Wait()
		close(done)
	}()
	defer s.dropSubscriptions()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
	}
	s.mu.Lock()
	for c := range s.conns {
		c.nc.Close()
	}
	s.mu.Unlock()
	<-done
	return ctx.Err()
}

// Connections is the number of open AMQP connections.
func (s *Server) Connections() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// Temporary addresses (dynamic nodes) live in one registry so that a
// delivery to one can say which JMS destination type it is.

// jmsKindFor is the x-opt-jms-dest / x-opt-jms-reply-to value of a topic
// or address: 0 queue (a message put straight into one, a queue:// reply
// address), 1 topic, 2 temporary queue, 3 temporary topic.
func (s *Server) jmsKindFor(topic string) int8 {
	if q, ok := strings.CutPrefix(topic, queueTopic); ok {
		return jmsQueueKind(q)
	}
	if q, ok := strings.CutPrefix(topic, prefixQueue); ok && !isTemp(q) {
		return jmsQueueKind(q)
	}
	if !isTemp(topic) {
		return jmsTopic
	}
	s.tmpMu.Lock()
	k, ok := s.tmp[topic]
	s.tmpMu.Unlock()
	if !ok {
		return jmsTempTopic
	}
	return k
}

func (s *Server) addTemp(addr string, kind int8) {
	s.tmpMu.Lock()
	s.tmp[addr] = kind
	s.tmpMu.Unlock()
}

func (s *Server) removeTemp(addrs []string) {
	if len(addrs) == 0 {
		return
	}
	s.tmpMu.Lock()
	for _, a := range addrs {
		delete(s.tmp, a)
	}
	s.tmpMu.Unlock()
}
