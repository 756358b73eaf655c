// Package mqtt is the gateway's MQTT front-end (MQTT 3.1, 3.1.1 and 5 over
// TCP and WebSocket) on mochi-mqtt. mochi owns sessions, QoS flows, wills and
// keepalive, and fans MQTT→MQTT messages out itself; a hook feeds every MQTT
// publish into core.Router (for AMQP, NATS and queues), keeps retained
// messages out of mochi's own index (the retained store holds them, see
// docs/mqtt-frontend.md) and delivers stored retained copies to late subscribers.
// Messages from other front-ends reach MQTT sessions through mochi's inline
// client.
//
// This package must not know about AMQP or NATS: it speaks core.Message.
package mqtt

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"sync/atomic"
	"time"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/mochi-mqtt/server/v2/system"

	"github.com/tolsey/tolsey/core"
	"github.com/tolsey/tolsey/core/accept"
	"github.com/tolsey/tolsey/core/auth"
	"github.com/tolsey/tolsey/core/limits"
	"github.com/tolsey/tolsey/core/metrics"
	"github.com/tolsey/tolsey/core/queue"
	"github.com/tolsey/tolsey/mqtt/session"
	"github.com/tolsey/tolsey/retain"
)

// Options configure the MQTT front-end. Zero values take the documented
// defaults.
type Options struct {
	Listen   string // TCP address; required
	WSListen string // WebSocket address; empty disables
	// TLSListen is the MQTT over TLS address (8883 by custom); empty
	// disables. It needs TLS.
	TLSListen string
	// WSSListen is the WebSocket over TLS address; empty disables. It
	// needs TLS.
	WSSListen string
	// TLS is what the TLS and WSS listeners serve with; each handshake
	// calls its GetConfigForClient, so certificates reloaded behind it
	// (core/tlsconf) serve new connections only.
	TLS *tls.Config

	Router  *core.Router   // required
	Store   retain.Matcher // required: late subscribers are served from it
	Metrics *metrics.Metrics
	Logger  *slog.Logger
	Node    string

	// MaxPendingWrites is the per-client outgoing queue (default 8192, as
	// mochi; in our copy the queue takes memory only while packets wait).
	MaxPendingWrites int
	MaxInflight      int // default 8192, as mochi
	ReceiveMaximum   int // default 1024
	MaxPacketSize    int64
	// MaxUserProperties is the most user properties one packet may carry
	// (0: no limit). mochi's packet layer holds it process-wide
	// (packets.SetMaxUserProperties, mochi patch 44): New sets it.
	MaxUserProperties int
	// MaxMessageExpiry caps queued session messages; 0 = no cap. mochi's
	// default of 24 h would silently purge them.
	MaxMessageExpiry time.Duration
	MaxSessionExpiry time.Duration // 0 = no cap
	// MaxKeepAlive caps an MQTT 5 client's keep alive (none counts as
	// longer); the cap is announced as Server Keep Alive [MQTT-3.2.2-21].
	// 0 = the client's choice. MQTT 3 clients cannot be told, so they keep
	// theirs.
	MaxKeepAlive time.Duration
	// WriteTimeout is how long a write to a client may wait for it to
	// read before it is disconnected (default 30 s; negative: no limit).
	// A subscriber that stops reading then holds only its own session
	// queues, bounded by MaxPendingWrites and MaxInflight, for that long.
	WriteTimeout time.Duration
	// SlowSubscriberStall is how long a publisher's QoS 0 message may wait
	// for room in a subscriber's full write queue (MaxPendingWrites) before
	// it is dropped and counted (default 5 ms; negative: dropped at once).
	// A subscriber that stopped reading holds each publisher once at most
	// that long, until its queue has emptied (mochi patch 22).
	SlowSubscriberStall time.Duration
	// ConnectTimeout bounds the wait for a new connection's whole CONNECT
	// packet, however slowly its bytes arrive (default 10 s).
	ConnectTimeout time.Duration

	// Auth is the users file in force (docs/security.md, "MQTT"): who may
	// connect, publish and subscribe; swapped whole on reload. nil, or one
	// holding no file: every client is let in and may do anything.
	Auth *auth.Live

	// Admission applies the connection limits (limits.maxConnections,
	// maxConnectionsPerAddress, connectRate: admission.go); one shared
	// with the AMQP front-end makes the total one number. nil: none.
	Admission *limits.Admission

	// SendBuffer is SO_SNDBUF of each client connection (limits.sendBuffer;
	// 0: the kernel's autotuning): what a client that stops reading holds
	// in the kernel before WriteTimeout runs (core/accept.SetSendBuffer).
	SendBuffer int
	// MaxSubscriptions bounds the subscriptions one client holds
	// (mqtt.maxSubscriptions: subquota.go); 0: no limit.
	MaxSubscriptions int

	// Queues is the queue engine clients consume and fill through
	// $queue/<name> (docs/queues.md, "MQTT"); nil: every $queue/ topic
	// names an unknown queue.
	Queues *queue.Engine
	// AutoCreateQueues (queues.autoCreate): a SUBSCRIBE or PUBLISH naming
	// an unknown queue creates it, durable, with the defaults.
	AutoCreateQueues bool
	// V311Full (queues.v311Full) is what an MQTT 3.1.1 QoS 1/2 publish
	// that a full queue refuses gets: V311FullDisconnect (the default: no
	// PUBACK, the connection closed) or V311FullDrop (acknowledged, the
	// drop counted).
	V311Full string

	// Sessions is where persistent sessions are kept (sessions.go); nil:
	// in memory only, lost at restart. The server closes it at Shutdown.
	Sessions session.Backend

	// Cluster makes a client id unique across the gateways of a cluster
	// (cluster.go); nil: this gateway is alone.
	Cluster Cluster
}

// Server is the running MQTT front-end.
type Server struct {
	opts  Options
	mochi *mochi.Server
	hook  *hook
	tcp   *tcpListener
	ws    *wsListener
	tls   *tcpListener // nil unless TLSListen
	wss   *wsListener  // nil unless WSSListen
	sub   *core.Subscription
	log   *slog.Logger
	adm   *admission

	sessions *sessions // nil unless Options.Sessions

	ids clusterIDs // client ids in a cluster (cluster.go)
}

// noExpiryCap stands for "no cap" in mochi, which reads 0 as "expire now"
// for acknowledgements it holds in flight (buildAck sets Expiry = now + cap).
const noExpiryCap = 100 * 365 * 24 * 3600

// New builds the front-end; Start binds and serves.
func New(opts Options) (*Server, error) {
	if opts.Router == nil || opts.Store == nil {
		return nil, errors.New("mqtt: Router and Store are required")
	}
	if (opts.TLSListen != "" || opts.WSSListen != "") && opts.TLS == nil {
		return nil, errors.New("mqtt: TLSListen and WSSListen need TLS")
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	// mochi's log lines and ours carry packets and topics: keep payloads
	// out and long strings short (logredact.go).
	opts.Logger = newRedactedLogger(opts.Logger)
	if opts.MaxPendingWrites <= 0 {
		opts.MaxPendingWrites = 8192
	}
	if opts.MaxInflight <= 0 {
		opts.MaxInflight = 8192
	}
	if opts.ReceiveMaximum <= 0 {
		opts.ReceiveMaximum = 1024
	}
	if opts.WriteTimeout == 0 {
		opts.WriteTimeout = 30 * time.Second
	}
	if opts.SlowSubscriberStall == 0 {
		opts.SlowSubscriberStall = 5 * time.Millisecond
	}
	if opts.ConnectTimeout <= 0 {
		opts.ConnectTimeout = 10 * time.Second
	}
	caps := mochi.NewDefaultServerCapabilities()
	caps.MaximumClientWritesPending = int32(opts.MaxPendingWrites)
	caps.MaximumInflight = uint16(min(opts.MaxInflight, math.MaxUint16))
	caps.ReceiveMaximum = uint16(min(opts.ReceiveMaximum, math.MaxUint16))
	caps.MaximumPacketSize = uint32(min(opts.MaxPacketSize, math.MaxUint32))
	packets.SetMaxUserProperties(opts.MaxUserProperties)
	caps.MaximumMessageExpiryInterval = noExpiryCap
	if opts.MaxMessageExpiry > 0 {
		caps.MaximumMessageExpiryInterval = int64(opts.MaxMessageExpiry / time.Second)
	}
	if opts.MaxSessionExpiry > 0 {
		caps.MaximumSessionExpiryInterval = uint32(min(int64(opts.MaxSessionExpiry/time.Second), math.MaxUint32))
	}
	// Acknowledgements carry only what the spec calls for: mochi would
	// otherwise copy the PUBLISH properties onto PUBACK/PUBREC.
	caps.Compatibilities.NoInheritedPropertiesOnAck = true

	ms := mochi.New(&mochi.Options{
		Capabilities: caps,
		InlineClient: true,
		Logger:       opts.Logger.With("part", "mochi"),
		// The read buffer lives as long as the connection (256 B of each
		// idle connection's cost); bigger reads than it bypass it.
		// Writes are batched up to the write size only while more are
		// queued, in a buffer that exists only then.
		ClientNetWriteBufferSize: 2048,
		ClientNetReadBufferSize:  256,
		SysTopicResendInterval:   0,
		WriteTimeout:             max(opts.WriteTimeout, 0),
		SlowSubscriberStall:      max(opts.SlowSubscriberStall, 0),
		// The retained store is the only place retained messages live
		// (mochi would cost ~4.8 KiB per message, and would purge them):
		// mochi does not index them (patch 40).
		RetainedElsewhere: true,
	})
	s := &Server{opts: opts, mochi: ms, log: opts.Logger.With("part", "mqtt")}
	s.adm = newAdmission(s)
	s.hook = newHook(s)
	if err := ms.AddHook(s.hook, nil); err != nil {
		return nil, fmt.Errorf("mqtt: add hook: %w", err)
	}
	if opts.Sessions != nil {
		s.sessions = newSessions(s, opts.Sessions)
		if err := ms.AddHook(s.sessions, nil); err != nil { // after the gateway's: its OnPublish sees the packet ours returned
			return nil, fmt.Errorf("mqtt: add hook: %w", err)
		}
	}
	return s, nil
}

// Start binds the listeners, subscribes the front-end to the router and
// starts serving. Bound addresses are logged and available from Addr,
// WSAddr, TLSAddr and WSSAddr.
func (s *Server) Start() (err error) {
	var bound []net.Listener
	defer func() {
		if err != nil {
			for _, ln := range bound {
				ln.Close()
			}
		}
	}()
	// bind listens on addr for cs, the listener named id; key names the
	// address in errors.
	bind := func(cs *connServer, key, addr, id string) error {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("%s %s: %w", key, addr, err)
		}
		bound = append(bound, ln)
		cs.id, cs.ln = id, accept.New(ln, id, s.log)
		cs.ln.SetSendBuffer(s.opts.SendBuffer)
		cs.closeClients, cs.connectTimeout, cs.adm = s.disconnectListener, s.opts.ConnectTimeout, s.adm
		return nil
	}
	if ss := s.sessions; ss != nil {
		if err := ss.restore(); err != nil {
			return err
		}
		ss.log = session.NewLog(ss.b, s.log.With("part", "mqtt.sessions"))
		defer func() {
			if err != nil {
				ss.log.Close()
			}
		}()
	}
	tcpl := &tcpListener{}
	if err := bind(&tcpl.connServer, "mqtt.listen", s.opts.Listen, "mqtt-tcp"); err != nil {
		return err
	}
	s.tcp = tcpl
	if err := s.mochi.AddListener(tcpl); err != nil {
		return fmt.Errorf("mqtt: %w", err)
	}
	if s.opts.WSListen != "" {
		wsl := &wsListener{}
		if err := bind(&wsl.connServer, "mqtt.ws.listen", s.opts.WSListen, "mqtt-ws"); err != nil {
			return err
		}
		s.ws = wsl
		if err := s.mochi.AddListener(wsl); err != nil {
			return fmt.Errorf("mqtt: %w", err)
		}
	}
	if s.opts.TLSListen != "" {
		tlsl := &tcpListener{tls: s.opts.TLS}
		if err := bind(&tlsl.connServer, "mqtt.tls.listen", s.opts.TLSListen, "mqtt-tls"); err != nil {
			return err
		}
		s.tls = tlsl
		if err := s.mochi.AddListener(tlsl); err != nil {
			return fmt.Errorf("mqtt: %w", err)
		}
	}
	if s.opts.WSSListen != "" {
		wssl := &wsListener{tls: s.opts.TLS}
		if err := bind(&wssl.connServer, "mqtt.wss.listen", s.opts.WSSListen, "mqtt-wss"); err != nil {
			return err
		}
		s.wss = wssl
		if err := s.mochi.AddListener(wssl); err != nil {
			return fmt.Errorf("mqtt: %w", err)
		}
	}
	// Everything published by other front-ends reaches MQTT sessions
	// through mochi, which matches it against MQTT subscriptions itself.
	// "#" does not match "$" topics [MQTT-4.7.2-1]; those stay MQTT-local.
	s.sub, err = s.opts.Router.Subscribe("#", s.hook, core.SubOptions{QoS: 2, SkipOrigin: core.ProtocolMQTT})
	if err != nil {
		return err
	}
	if err := s.mochi.Serve(); err != nil {
		return fmt.Errorf("mqtt: serve: %w", err)
	}
	s.log.Info("mqtt listening", "addr", s.Addr(), "transport", "tcp")
	if s.ws != nil {
		s.log.Info("mqtt listening", "addr", s.WSAddr(), "transport", "websocket")
	}
	if s.tls != nil {
		s.log.Info("mqtt listening", "addr", s.TLSAddr(), "transport", "tls")
	}
	if s.wss != nil {
		s.log.Info("mqtt listening", "addr", s.WSSAddr(), "transport", "websocket+tls")
	}
	s.hook.auth.watch()
	return nil
}

// listeners are the listeners Start added, in start order.
func (s *Server) listeners() []ourListener {
	var ls []ourListener
	if s.tcp != nil {
		ls = append(ls, s.tcp)
	}
	if s.ws != nil {
		ls = append(ls, s.ws)
	}
	if s.tls != nil {
		ls = append(ls, s.tls)
	}
	if s.wss != nil {
		ls = append(ls, s.wss)
	}
	return ls
}

// Addr is the bound TCP address.
func (s *Server) Addr() string {
	if s.tcp == nil {
		return ""
	}
	return s.tcp.Address()
}

// WSAddr is the bound WebSocket address, or "" when disabled.
func (s *Server) WSAddr() string {
	if s.ws == nil {
		return ""
	}
	return s.ws.Address()
}

// TLSAddr is the bound MQTT over TLS address, or "" when disabled.
func (s *Server) TLSAddr() string {
	if s.tls == nil {
		return ""
	}
	return s.tls.Address()
}

// WSSAddr is the bound WebSocket over TLS address, or "" when disabled.
func (s *Server) WSSAddr() string {
	if s.wss == nil {
		return ""
	}
	return s.wss.Address()
}

// Clients is the number of connected MQTT clients.
func (s *Server) Clients() int64 { return atomic.LoadInt64(&s.mochi.Info.ClientsConnected) }

// Shutdown stops accepting, disconnects clients (their in-flight QoS 1/2
// state stays in their sessions for the next connection, as MQTT defines)
// and waits for connection goroutines until ctx ends.
func (s *Server) Shutdown(ctx context.Context) error {
	s.hook.auth.unwatch()
	s.opts.Router.Unsubscribe(s.sub)
	// No new connections from here on, even if ctx ends before mochi's
	// Close (which disconnects the clients and waits for them) returns.
	for _, l := range s.listeners() {
		l.stopAccepting()
	}
	var err error
	done := make(chan struct{})
	go func() {
		err = s.mochi.Close() // waits for every client goroutine: bounded by ctx too
		for _, l := range s.listeners() {
			l.wait()
		}
		s.hook.replay.close()
		s.hook.backlog.close()
		s.hook.queues.close()
		if s.sessions != nil && s.sessions.log != nil { // nil: Start did not get that far
			if cerr := s.sessions.log.Close(); cerr != nil && err == nil {
				err = cerr
			}
		}
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		return ctx.Err()
	}
	return err
}

// disconnectListener disconnects the clients of one listener at shutdown, as
// mochi's own closeListenerClients does, minus its deadlock: mochi's
// Clients.GetByListener takes the clients' read lock and then takes it again
// (through Len), so a client disconnecting at that moment (Clients.Delete
// waiting for the write lock) blocks both for ever. Seen in the e2e tests as
// a gateway that never stopped.
//
// It returns the connections of the clients it ended, and of those already
// ending: mochi closes each of them itself once its DISCONNECT is out and
// what the client still sends is read, within about a second (mochi patch
// 18), so the listener must not close them first.
func (s *Server) disconnectListener(id string) map[net.Conn]bool {
	ending := map[net.Conn]bool{}
	for _, cl := range s.mochi.Clients.GetAll() {
		if cl.Net.Listener != id || cl.Net.Conn == nil {
			continue
		}
		if !cl.Closed() {
			// Not waiting behind a write to a client that stopped reading.
			_ = s.mochi.DisconnectClientNoWait(cl, packets.ErrServerShuttingDown)
		}
		ending[cl.Net.Conn] = true
	}
	return ending
}

// inline returns mochi's inline client, through which messages from other
// front-ends are injected.
func (s *Server) inline() *mochi.Client {
	cl, _ := s.mochi.Clients.Get(mochi.InlineClientId)
	return cl
}

// toMessage maps a PUBLISH to a core Message. The payload is not copied:
// mochi allocates it per packet and never reuses it.
func toMessage(pk *packets.Packet, clientID, node string, now time.Time) *core.Message {
	m := &core.Message{
		Topic:           pk.TopicName,
		Payload:         pk.Payload,
		QoS:             pk.FixedHeader.Qos,
		Retain:          pk.FixedHeader.Retain,
		ContentType:     pk.Properties.ContentType,
		CorrelationData: pk.Properties.CorrelationData,
		ResponseTopic:   pk.Properties.ResponseTopic,
		Created:         now,
		Origin:          core.Origin{Protocol: core.ProtocolMQTT, Node: node, Client: clientID},
	}
	if pk.Properties.PayloadFormatFlag {
		m.PayloadFormat = pk.Properties.PayloadFormat
	}
	if n := len(pk.Properties.User); n > 0 {
		m.UserProperties = make([]core.UserProperty, n)
		for i, u := range pk.Properties.User {
			m.UserProperties[i] = core.UserProperty{Key: u.Key, Value: u.Val}
		}
	}
	if e := pk.Properties.MessageExpiryInterval; e > 0 {
		m.Expiry = now.Add(time.Duration(e) * time.Second)
	}
	return m
}

// toPacket maps a core Message to a PUBLISH. The remaining expiry interval
// is sent, not the original one [MQTT-3.3.2-6].
func toPacket(m *core.Message, retain bool, now time.Time) packets.Packet {
	pk := packets.Packet{
		FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: m.QoS, Retain: retain},
		TopicName:   m.Topic,
		Payload:     m.Payload,
		Created:     now.Unix(),
	}
	p := &pk.Properties
	p.ContentType = m.ContentType
	p.CorrelationData = m.CorrelationData
	p.ResponseTopic = m.ResponseTopic
	if m.PayloadFormat != 0 {
		p.PayloadFormat, p.PayloadFormatFlag = m.PayloadFormat, true
	}
	if n := len(m.UserProperties); n > 0 {
		p.User = make([]packets.UserProperty, n)
		for i, u := range m.UserProperties {
			p.User[i] = packets.UserProperty{Key: u.Key, Val: u.Value}
		}
	}
	if left, ok := m.RemainingExpiry(now); ok {
		p.MessageExpiryInterval = left
		pk.Expiry = now.Unix() + int64(left)
	}
	return pk
}

// Info is mochi's live counters (messages sent, dropped, inflight).
func (s *Server) Info() *system.Info { return s.mochi.Info }
