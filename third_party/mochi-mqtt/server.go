// SPDX-License-Identifier: MIT
// SPDX-FileCopyrightText: 2022 mochi-mqtt, mochi-co
// SPDX-FileContributor: mochi-co

// Package mqtt provides a high performance, fully compliant MQTT v5 broker server with v3.1.1 backward compatibility.
package mqtt

import (
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mochi-mqtt/server/v2/hooks/storage"
	"github.com/mochi-mqtt/server/v2/listeners"
	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/mochi-mqtt/server/v2/system"

	"log/slog"
)

const (
	Version                       = "2.7.9" // the current server version.
	defaultSysTopicInterval int64 = 1       // the interval between $SYS topic publishes
	LocalListener                 = "local"
	InlineClientId                = "inline"
)

var (
	// Deprecated: Use NewDefaultServerCapabilities to avoid data race issue.
	DefaultServerCapabilities = NewDefaultServerCapabilities()

	ErrListenerIDExists       = errors.New("listener id already exists")                               // a listener with the same id already exists
	ErrConnectionClosed       = errors.New("connection not open")                                      // connection is closed
	ErrInlineClientNotEnabled = errors.New("please set Options.InlineClient=true to use this feature") // inline client is not enabled by default
	ErrOptionsUnreadable      = errors.New("unable to read options from bytes")
)

// Capabilities indicates the capabilities and features provided by the server.
type Capabilities struct {
	MaximumClients               int64           `yaml:"maximum_clients" json:"maximum_clients"`                                 // maximum number of connected clients
	MaximumMessageExpiryInterval int64           `yaml:"maximum_message_expiry_interval" json:"maximum_message_expiry_interval"` // maximum message expiry if message expiry is 0 or over
	MaximumClientWritesPending   int32           `yaml:"maximum_client_writes_pending" json:"maximum_client_writes_pending"`     // maximum number of pending message writes for a client
	MaximumSessionExpiryInterval uint32          `yaml:"maximum_session_expiry_interval" json:"maximum_session_expiry_interval"` // maximum number of seconds to keep disconnected sessions
	MaximumPacketSize            uint32          `yaml:"maximum_packet_size" json:"maximum_packet_size"`                         // maximum packet size, no limit if 0
	maximumPacketID              uint32          // unexported, used for testing only
	ReceiveMaximum               uint16          `yaml:"receive_maximum" json:"receive_maximum"`                   // maximum number of concurrent qos messages per client
	MaximumInflight              uint16          `yaml:"maximum_inflight" json:"maximum_inflight"`                 // maximum number of qos > 0 messages can be stored, 0(=8192)-65535
	TopicAliasMaximum            uint16          `yaml:"topic_alias_maximum" json:"topic_alias_maximum"`           // maximum topic alias value
	SharedSubAvailable           byte            `yaml:"shared_sub_available" json:"shared_sub_available"`         // support of shared subscriptions
	MinimumProtocolVersion       byte            `yaml:"minimum_protocol_version" json:"minimum_protocol_version"` // minimum supported mqtt version
	Compatibilities              Compatibilities `yaml:"compatibilities" json:"compatibilities"`                   // version compatibilities the server provides
	MaximumQos                   byte            `yaml:"maximum_qos" json:"maximum_qos"`                           // maximum qos value available to clients
	RetainAvailable              byte            `yaml:"retain_available" json:"retain_available"`                 // support of retain messages
	WildcardSubAvailable         byte            `yaml:"wildcard_sub_available" json:"wildcard_sub_available"`     // support of wildcard subscriptions
	SubIDAvailable               byte            `yaml:"sub_id_available" json:"sub_id_available"`                 // support of subscription identifiers
}

// NewDefaultServerCapabilities defines the default features and capabilities provided by the server.
func NewDefaultServerCapabilities() *Capabilities {
	return &Capabilities{
		MaximumClients:               math.MaxInt64,  // maximum number of connected clients
		MaximumMessageExpiryInterval: 60 * 60 * 24,   // maximum message expiry if message expiry is 0 or over
		MaximumClientWritesPending:   1024 * 8,       // maximum number of pending message writes for a client
		MaximumSessionExpiryInterval: math.MaxUint32, // maximum number of seconds to keep disconnected sessions
		MaximumPacketSize:            0,              // no maximum packet size
		maximumPacketID:              math.MaxUint16,
		ReceiveMaximum:               1024,           // maximum number of concurrent qos messages per client
		MaximumInflight:              1024 * 8,       // maximum number of qos > 0 messages can be stored
		TopicAliasMaximum:            math.MaxUint16, // maximum topic alias value
		SharedSubAvailable:           1,              // shared subscriptions are available
		MinimumProtocolVersion:       3,              // minimum supported mqtt version (3.0.0)
		MaximumQos:                   2,              // maximum qos value available to clients
		RetainAvailable:              1,              // retain messages is available
		WildcardSubAvailable:         1,              // wildcard subscriptions are available
		SubIDAvailable:               1,              // subscription identifiers are available
	}
}

// Compatibilities provides flags for using compatibility modes.
type Compatibilities struct {
	ObscureNotAuthorized       bool `yaml:"obscure_not_authorized" json:"obscure_not_authorized"`                 // return unspecified errors instead of not authorized
	PassiveClientDisconnect    bool `yaml:"passive_client_disconnect" json:"passive_client_disconnect"`           // don't disconnect the client forcefully after sending disconnect packet (paho - spec violation)
	AlwaysReturnResponseInfo   bool `yaml:"always_return_response_info" json:"always_return_response_info"`       // always return response info (useful for testing)
	RestoreSysInfoOnRestart    bool `yaml:"restore_sys_info_on_restart" json:"restore_sys_info_on_restart"`       // restore system info from store as if server never stopped
	NoInheritedPropertiesOnAck bool `yaml:"no_inherited_properties_on_ack" json:"no_inherited_properties_on_ack"` // don't allow inherited user properties on ack (paho - spec violation)
}

// Options contains configurable options for the server.
type Options struct {
	// Listeners specifies any listeners which should be dynamically added on serve. Used when setting listeners by config.
	Listeners []listeners.Config `yaml:"listeners" json:"listeners"`

	// Hooks specifies any hooks which should be dynamically added on serve. Used when setting hooks by config.
	Hooks []HookLoadConfig `yaml:"hooks" json:"hooks"`

	// Capabilities defines the server features and behaviour. If you only wish to modify
	// several of these values, set them explicitly - e.g.
	// 	server.Options.Capabilities.MaximumClientWritesPending = 16 * 1024
	Capabilities *Capabilities `yaml:"capabilities" json:"capabilities"`

	// ClientNetWriteBufferSize specifies the size of the client *bufio.Writer write buffer.
	ClientNetWriteBufferSize int `yaml:"client_net_write_buffer_size" json:"client_net_write_buffer_size"`

	// ClientNetReadBufferSize specifies the size of the client *bufio.Reader read buffer.
	ClientNetReadBufferSize int `yaml:"client_net_read_buffer_size" json:"client_net_read_buffer_size"`

	// Logger specifies a custom configured implementation of log/slog to override
	// the servers default logger configuration. If you wish to change the log level,
	// of the default logger, you can do so by setting:
	// server := mqtt.New(nil)
	// level := new(slog.LevelVar)
	// server.Slog = slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
	// 	Level: level,
	// }))
	// level.Set(slog.LevelDebug)
	Logger *slog.Logger `yaml:"-" json:"-"`

	// SysTopicResendInterval specifies the interval between $SYS topic updates in seconds.
	SysTopicResendInterval int64 `yaml:"sys_topic_resend_interval" json:"sys_topic_resend_interval"`

	// Enable Inline client to allow direct subscribing and publishing from the parent codebase,
	// with negligible performance difference (disabled by default to prevent confusion in statistics).
	InlineClient bool `yaml:"inline_client" json:"inline_client"`

	// WriteTimeout is how long a write to a client may wait for the
	// client to read before the client is disconnected; 0 = no limit
	// (writes then share the keep-alive deadline, as upstream). Gateway patch.
	WriteTimeout time.Duration `yaml:"write_timeout" json:"write_timeout"`

	// SlowSubscriberStall is how long a client's PUBLISH may wait for room
	// in a subscriber's full outbound queue before a QoS 0 copy is dropped
	// (gateway patch 22); 0 drops at once, as upstream. A stall that ran
	// out is not repeated for that subscriber until its queue has emptied,
	// so one that stopped reading costs each publisher one stall at most.
	// Messages the inline client injects never wait.
	SlowSubscriberStall time.Duration `yaml:"slow_subscriber_stall" json:"slow_subscriber_stall"`

	// RetainedElsewhere says retained messages are kept outside the
	// server (the gateway's retained store, through OnPublish): a
	// retained PUBLISH or will is neither copied into Topics.Retained nor
	// passed to OnRetainMessage, and late subscribers get nothing from
	// Topics (gateway patch 40). Retain stays available to clients.
	RetainedElsewhere bool `yaml:"retained_elsewhere" json:"retained_elsewhere"`
}

// Server is an MQTT broker server. It should be created with server.New()
// in order to ensure all the internal fields are correctly populated.
type Server struct {
	Options      *Options             // configurable server options
	Listeners    *listeners.Listeners // listeners are network interfaces which listen for new connections
	Clients      *Clients             // clients known to the broker
	Topics       *TopicsIndex         // an index of topic filter subscriptions and retained messages
	Info         *system.Info         // values about the server commonly known as $SYS topics
	loop         *loop                // loop contains tickers for the system event loop
	done         chan bool            // indicate that the server is ending
	Log          *slog.Logger         // minimal no-alloc logger
	hooks        *Hooks               // hooks contains hooks for extra functionality such as auth and persistent storage
	inlineClient *Client              // inlineClient is a special client used for inline subscriptions and inline Publish

	// sessionLocks serialise, per client id, what may change which
	// connection holds the id: a new connection taking the session over,
	// an old connection's cleanup, the expiry of a disconnected session
	// (gateway patch). Upstream cleaned up an old connection by client id
	// with no lock, so a connection ending just as its client reconnected
	// could delete the new session from Clients or its subscriptions from
	// Topics. A stripe is held only for map and index updates, never
	// across network I/O.
	sessionLocks [64]sync.Mutex

	// willOwners is the client whose delayed will waits in
	// loop.willDelayed, by id (gateway patch): when the delay ends, the id
	// may be held by a new connection, whose will is its own.
	willOwners sync.Map // string → *Client

	// handlers read and handle the clients' packets off the clients' own
	// goroutines (gateway patch 24, handlers.go); closed by Close once
	// every client has ended.
	handlers *handlerPool
}

// inSession runs fn, which changes cl's subscriptions in Topics (indexed by
// client id) and in its session, under the id's lock, unless a new
// connection has taken the session over; it reports whether fn ran
// (gateway patch 14). receivePacket skips the packets of a connection
// taken over, but a SUBSCRIBE it was processing as the takeover came went
// on: with clean start, its filters stayed in Topics under the id, and the
// new session, which had none, got their messages; without, an
// UNSUBSCRIBE took a filter out of Topics from the session carried on.
func (s *Server) inSession(cl *Client, fn func()) bool {
	mu := s.sessionLock(cl.ID)
	mu.Lock()
	defer mu.Unlock()
	if cl.State.takenOver.Load() || cl.State.isTakenOver.Load() {
		return false
	}
	fn()
	return true
}

// InSession is inSession for what the gateway itself puts into a session
// (its backlog of dropped QoS 1/2 messages, retained copies): added to a
// connection's inflight store after a takeover copied it, a message would
// be in neither store (gateway patch 32, as patch 25 for mochi's own).
func (s *Server) InSession(cl *Client, fn func()) bool { return s.inSession(cl, fn) }

// PublishToSuccessor delivers pk, meant for cl through sub, to the
// connection that took cl's session over, when that session has sub's
// filter (gateway patch 32; publishToSuccessor).
func (s *Server) PublishToSuccessor(cl *Client, sub packets.Subscription, pk packets.Packet) error {
	_, err := s.publishToSuccessor(cl, sub, pk, false)
	return err
}

// WithSessionLock runs fn under id's session lock, the one the takeover
// of a session and the end of a connection's session hold (gateway patch
// 30): a hook that ends a session itself (a gateway of a cluster letting
// it go to another) then cannot interleave with a connection of id taking
// it over here. fn must not take the lock again.
func (s *Server) WithSessionLock(id string, fn func()) {
	mu := s.sessionLock(id)
	mu.Lock()
	defer mu.Unlock()
	fn()
}

// sessionLock is the lock of id's stripe (gateway patch).
func (s *Server) sessionLock(id string) *sync.Mutex {
	h := uint32(2166136261) // FNV-1a
	for i := 0; i < len(id); i++ {
		h = (h ^ uint32(id[i])) * 16777619
	}
	return &s.sessionLocks[h%uint32(len(s.sessionLocks))]
}

// loop contains interval tickers for the system events loop.
type loop struct {
	sysTopics      *time.Ticker     // interval ticker for sending updating $SYS topics
	clientExpiry   *time.Ticker     // interval ticker for cleaning expired clients
	inflightExpiry *time.Ticker     // interval ticker for cleaning up expired inflight messages
	retainedExpiry *time.Ticker     // interval ticker for cleaning retained messages
	willDelaySend  *time.Ticker     // interval ticker for sending Will Messages with a delay
	willDelayed    *packets.Packets // activate LWT packets which will be sent after a delay
}

// ops contains server values which can be propagated to other structs.
type ops struct {
	options *Options     // a pointer to the server options and capabilities, for referencing in clients
	info    *system.Info // pointers to server system info
	hooks   *Hooks       // pointer to the server hooks
	log     *slog.Logger // a structured logger for the client
	// handlers read and handle the client's packets (gateway patch 24);
	// nil: on the client's own goroutine.
	handlers *handlerPool
}

// New returns a new instance of mochi mqtt broker. Optional parameters
// can be specified to override some default settings (see Options).
func New(opts *Options) *Server {
	if opts == nil {
		opts = new(Options)
	}

	opts.ensureDefaults()

	s := &Server{
		done:      make(chan bool),
		Clients:   NewClients(),
		Topics:    NewTopicsIndex(),
		Listeners: listeners.New(),
		loop: &loop{
			sysTopics:      time.NewTicker(time.Second * time.Duration(opts.SysTopicResendInterval)),
			clientExpiry:   time.NewTicker(time.Second),
			inflightExpiry: time.NewTicker(time.Second),
			retainedExpiry: time.NewTicker(time.Second),
			willDelaySend:  time.NewTicker(time.Second),
			willDelayed:    packets.NewPackets(),
		},
		Options: opts,
		Info: &system.Info{
			Version: Version,
			Started: time.Now().Unix(),
		},
		Log: opts.Logger,
		hooks: &Hooks{
			Log: opts.Logger,
		},
		handlers: newHandlerPool(),
	}

	if s.Options.InlineClient {
		s.inlineClient = s.NewClient(nil, LocalListener, InlineClientId, true)
		s.Clients.Add(s.inlineClient)
	}

	return s
}

// ensureDefaults ensures that the server starts with sane default values, if none are provided.
func (o *Options) ensureDefaults() {
	if o.Capabilities == nil {
		o.Capabilities = NewDefaultServerCapabilities()
	}

	o.Capabilities.maximumPacketID = math.MaxUint16 // spec maximum is 65535

	if o.Capabilities.MaximumInflight == 0 {
		o.Capabilities.MaximumInflight = 1024 * 8
	}

	if o.SysTopicResendInterval == 0 {
		o.SysTopicResendInterval = defaultSysTopicInterval
	}

	if o.ClientNetWriteBufferSize == 0 {
		o.ClientNetWriteBufferSize = 1024 * 2
	}

	if o.ClientNetReadBufferSize == 0 {
		o.ClientNetReadBufferSize = 1024 * 2
	}

	if o.Logger == nil {
		log := slog.New(slog.NewTextHandler(os.Stdout, nil))
		o.Logger = log
	}
}

// NewClient returns a new Client instance, populated with all the required values and
// references to be used with the server. If you are using this client to directly publish
// messages from the embedding application, set the inline flag to true to bypass ACL and
// topic validation checks.
func (s *Server) NewClient(c net.Conn, listener string, id string, inline bool) *Client {
	cl := newClient(c, &ops{ // [MQTT-3.1.2-6] implicit
		options:  s.Options,
		info:     s.Info,
		hooks:    s.hooks,
		log:      s.Log,
		handlers: s.handlers,
	})

	cl.ID = id
	cl.Net.Listener = listener

	if inline { // inline clients bypass acl and some validity checks.
		cl.Net.Inline = true
		// By default, we don't want to restrict developer publishes,
		// but if you do, reset this after creating inline client.
		cl.State.Inflight.ResetReceiveQuota(math.MaxInt32)
	}

	return cl
}

// AddHook attaches a new Hook to the server. Ideally, this should be called
// before the server is started with s.Serve().
func (s *Server) AddHook(hook Hook, config any) error {
	nl := s.Log.With("hook", hook.ID())
	hook.SetOpts(nl, &HookOptions{
		Capabilities: s.Options.Capabilities,
	})

	s.Log.Info("added hook", "hook", hook.ID())
	return s.hooks.Add(hook, config)
}

// AddHooksFromConfig adds hooks to the server which were specified in the hooks config (usually from a config file).
// New built-in hooks should be added to this list.
func (s *Server) AddHooksFromConfig(hooks []HookLoadConfig) error {
	for _, h := range hooks {
		if err := s.AddHook(h.Hook, h.Config); err != nil {
			return err
		}
	}
	return nil
}

// AddListener adds a new network listener to the server, for receiving incoming client connections.
func (s *Server) AddListener(l listeners.Listener) error {
	if _, ok := s.Listeners.Get(l.ID()); ok {
		return ErrListenerIDExists
	}

	nl := s.Log.With(slog.String("listener", l.ID()))
	err := l.Init(nl)
	if err != nil {
		return err
	}

	s.Listeners.Add(l)

	s.Log.Info("attached listener", "id", l.ID(), "protocol", l.Protocol(), "address", l.Address())
	return nil
}

// AddListenersFromConfig adds listeners to the server which were specified in the listeners config (usually from a config file).
// New built-in listeners should be added to this list.
func (s *Server) AddListenersFromConfig(configs []listeners.Config) error {
	for _, conf := range configs {
		var l listeners.Listener
		switch strings.ToLower(conf.Type) {
		case listeners.TypeTCP:
			l = listeners.NewTCP(conf)
		case listeners.TypeWS:
			l = listeners.NewWebsocket(conf)
		case listeners.TypeUnix:
			l = listeners.NewUnixSock(conf)
		case listeners.TypeHealthCheck:
			l = listeners.NewHTTPHealthCheck(conf)
		case listeners.TypeSysInfo:
			l = listeners.NewHTTPStats(conf, s.Info)
		case listeners.TypeMock:
			l = listeners.NewMockListener(conf.ID, conf.Address)
		default:
			s.Log.Error("listener type unavailable by config", "listener", conf.Type)
			continue
		}
		if err := s.AddListener(l); err != nil {
			return err
		}
	}
	return nil
}

// Serve starts the event loops responsible for establishing client connections
// on all attached listeners, publishing the system topics, and starting all hooks.
func (s *Server) Serve() error {
	s.Log.Info("mochi mqtt starting", "version", Version)
	defer s.Log.Info("mochi mqtt server started")

	if len(s.Options.Listeners) > 0 {
		err := s.AddListenersFromConfig(s.Options.Listeners)
		if err != nil {
			return err
		}
	}

	if len(s.Options.Hooks) > 0 {
		err := s.AddHooksFromConfig(s.Options.Hooks)
		if err != nil {
			return err
		}
	}

	if s.hooks.Provides(
		StoredClients,
		StoredInflightMessages,
		StoredRetainedMessages,
		StoredSubscriptions,
		StoredSysInfo,
	) {
		err := s.readStore()
		if err != nil {
			return err
		}
	}

	go s.eventLoop()                            // spin up event loop for issuing $SYS values and closing server.
	s.Listeners.ServeAll(s.EstablishConnection) // start listening on all listeners.
	s.publishSysTopics()                        // begin publishing $SYS system values.
	s.hooks.OnStarted()

	return nil
}

// eventLoop loops forever, running various server housekeeping methods at different intervals.
func (s *Server) eventLoop() {
	s.Log.Debug("system event loop started")
	defer s.Log.Debug("system event loop halted")

	for {
		select {
		case <-s.done:
			s.loop.sysTopics.Stop()
			return
		case <-s.loop.sysTopics.C:
			s.publishSysTopics()
		case <-s.loop.clientExpiry.C:
			s.clearExpiredClients(time.Now().Unix())
		case <-s.loop.retainedExpiry.C:
			s.clearExpiredRetainedMessages(time.Now().Unix())
		case <-s.loop.willDelaySend.C:
			s.sendDelayedLWT(time.Now().Unix())
		case <-s.loop.inflightExpiry.C:
			s.clearExpiredInflights(time.Now().Unix())
		}
	}
}

// EstablishConnection establishes a new client when a listener accepts a new connection.
func (s *Server) EstablishConnection(listener string, c net.Conn) error {
	cl := s.NewClient(c, listener, "", false)
	return s.attachClient(cl, listener)
}

// attachClient validates an incoming client connection and if viable, attaches the client
// to the server, performs session housekeeping, and reads incoming packets.
func (s *Server) attachClient(cl *Client, listener string) error {
	s.Listeners.ClientsWg.Add(1)
	if cl.Net.Conn != nil {
		cl.Net.closeRefs.Add(1) // gateway patch 20: the reader's half of the close (drainConn)
	}

	// The client's writer runs only while packets are queued (see
	// outboundQueue). The handshake and the cleanup run in functions of their
	// own, and this one has no defers, so that the frames on this goroutine's
	// stack while it waits for the client's next packet stay small: an idle
	// connection's stack can then shrink (gateway patch).
	// gateway patch 24: the handshake runs on a handler once the CONNECT
	// starts to arrive, so it does not grow this goroutine's stack.
	var counted bool
	err := cl.awaitInput()
	if err == nil {
		err = s.handlers.runOnce(func() (err error) {
			counted, err = s.establishClient(cl, listener)
			return err
		})
	} else {
		err = fmt.Errorf("read connection: %w", err)
	}
	if err == nil {
		err = cl.Read(s.receivePacket)
		s.detachClient(cl, listener, err)
	}
	s.endClient(cl, counted)
	return err
}

// endClient is what attachClient deferred before the gateway patch.
//
//go:noinline
func (s *Server) endClient(cl *Client, counted bool) {
	if counted {
		atomic.AddInt64(&s.Info.ClientsConnected, -1)
	}
	cl.Stop(nil)
	cl.drainConn() // gateway patch 20
	s.Listeners.ClientsWg.Done()
}

// establishClient reads and answers a client's CONNECT. counted reports
// whether the client was added to Info.ClientsConnected.
//
//go:noinline
func (s *Server) establishClient(cl *Client, listener string) (counted bool, err error) {
	pk, err := s.readConnectionPacket(cl)
	if err != nil {
		return false, fmt.Errorf("read connection: %w", err)
	}

	cl.ParseConnect(listener, pk)
	if atomic.LoadInt64(&s.Info.ClientsConnected) >= s.Options.Capabilities.MaximumClients {
		if cl.Properties.ProtocolVersion < 5 {
			s.SendConnack(cl, packets.ErrServerUnavailable, false, nil)
		} else {
			s.SendConnack(cl, packets.ErrServerBusy, false, nil)
		}

		return false, packets.ErrServerBusy
	}

	code := s.validateConnect(cl, pk) // [MQTT-3.1.4-1] [MQTT-3.1.4-2]
	if code != packets.CodeSuccess {
		if err := s.SendConnack(cl, code, false, nil); err != nil {
			return false, fmt.Errorf("invalid connection send ack: %w", err)
		}
		return false, code // [MQTT-3.2.2-7] [MQTT-3.1.4-6]
	}

	err = s.hooks.OnConnect(cl, pk)
	if err != nil {
		return false, err
	}

	cl.refreshDeadline(cl.State.Keepalive)
	if !s.hooks.OnConnectAuthenticate(cl, pk) { // [MQTT-3.1.4-2]
		err := s.SendConnack(cl, packets.ErrBadUsernameOrPassword, false, nil)
		if err != nil {
			return false, fmt.Errorf("invalid connection send ack: %w", err)
		}

		return false, packets.ErrBadUsernameOrPassword
	}

	atomic.AddInt64(&s.Info.ClientsConnected, 1)

	s.hooks.OnSessionEstablish(cl, pk)

	// gateway patch 13: the session inherited makes cl a subscriber at
	// once; what publishers route to it waits for the CONNACK and the
	// messages resent [MQTT-3.2.0-1] [MQTT-4.6.0-6] (upstream could write
	// a PUBLISH first).
	cl.HoldPublishes()

	// gateway patch: the session is taken and cl registered under the id's
	// lock (see sessionLocks); the old connection is told after the
	// CONNACK, which it must not delay.
	mu := s.sessionLock(cl.ID)
	mu.Lock()
	sessionPresent, old := s.inheritClientSession(pk, cl)
	s.Clients.Add(cl) // [MQTT-4.1.0-1]
	mu.Unlock()

	err = s.SendConnack(cl, code, sessionPresent, nil) // [MQTT-3.1.4-5] [MQTT-3.2.0-1] [MQTT-3.2.0-2] &[MQTT-3.14.0-1]
	if old != nil {
		s.takeOver(old)
	}
	if err != nil {
		// gateway patch: cl is registered but its reader never runs, so
		// detachClient never will: end its session here (upstream left a
		// clean session in Clients for ever, 2.5 KiB each).
		cl.ReleasePublishes() // gateway patch 13: else the session held them for ever
		s.expireSession(cl)
		return true, fmt.Errorf("ack connection packet: %w", err)
	}

	s.loop.willDelayed.Delete(cl.ID) // [MQTT-3.1.3-9]

	if sessionPresent {
		err = cl.ResendInflightMessages(true)
		if err != nil {
			cl.ReleasePublishes() // gateway patch 13
			return true, fmt.Errorf("resend inflight: %w", err)
		}
	}
	cl.ReleasePublishes() // gateway patch 13: what was held back goes, as the quota allows

	s.hooks.OnSessionEstablished(cl, pk)
	return true, nil
}

// detachClient ends a client's session after its read loop returned err.
//
//go:noinline
func (s *Server) detachClient(cl *Client, listener string, err error) {
	if errors.Is(err, packets.ErrPacketTooLarge) && cl.Properties.ProtocolVersion == 5 {
		_ = s.DisconnectClient(cl, packets.ErrPacketTooLarge) // gateway patch [MQTT-3.1.2-24]
	} else if errors.Is(err, packets.ErrTooManyUserProperties) && cl.Properties.ProtocolVersion == 5 {
		_ = s.DisconnectClient(cl, packets.ErrTooManyUserProperties) // gateway patch 44
	}
	if err != nil {
		s.sendLWT(cl)
		cl.Stop(err)
	} else {
		cl.Properties.Will = Will{} // [MQTT-3.14.4-3] [MQTT-3.1.2-10]
	}
	s.Log.Debug("client disconnected", "error", err, "client", cl.ID, "remote", cl.Net.Remote, "listener", listener)

	s.hooks.OnDisconnect(cl, err, sessionEnds(cl))
	s.expireSession(cl)
}

// sessionEnds reports whether cl's session ends with its connection.
func sessionEnds(cl *Client) bool {
	return (cl.Properties.ProtocolVersion == 5 && cl.Properties.Props.SessionExpiryInterval == 0) || (cl.Properties.ProtocolVersion < 5 && cl.Properties.Clean)
}

// expireSession ends cl's session when it ends with the connection, only
// while cl still holds its id (gateway patch): a connection that took the
// session over has already cleaned cl up (inheritClientSession).
func (s *Server) expireSession(cl *Client) {
	if !sessionEnds(cl) {
		return
	}
	mu := s.sessionLock(cl.ID)
	mu.Lock()
	if !cl.IsTakenOver() && s.Clients.DeleteIf(cl.ID, cl) { // [MQTT-4.1.0-2] ![MQTT-3.1.2-23]
		cl.ClearInflights()
		s.UnsubscribeClient(cl)
	}
	mu.Unlock()
}

// readConnectionPacket reads the first incoming header for a connection, and if
// acceptable, returns the valid connection packet.
func (s *Server) readConnectionPacket(cl *Client) (pk packets.Packet, err error) {
	fh := new(packets.FixedHeader)
	err = cl.ReadFixedHeader(fh)
	if err != nil {
		return
	}

	if fh.Type != packets.Connect {
		return pk, packets.ErrProtocolViolationRequireFirstConnect // [MQTT-3.1.0-1]
	}

	pk, err = cl.ReadPacket(fh)
	if err != nil {
		return
	}

	return
}

// receivePacket processes an incoming packet for a client, and issues a disconnect to the client
// if an error has occurred (if mqtt v5).
func (s *Server) receivePacket(cl *Client, pk packets.Packet) error {
	if cl.State.draining.Load() && pk.FixedHeader.Type != packets.Disconnect {
		// gateway patch: what an ending connection (a session taken over,
		// a failed write) sent before is read only to find a DISCONNECT
		// of its own (takeOver, failWrites); the rest is not processed.
		return nil
	}
	err := s.processPacket(cl, pk)
	if err != nil && cl.State.writesDone.Load() {
		// gateway patch: the packet's answer could not be written; the
		// connection is ending (failWrites), and its reader goes on to
		// take a DISCONNECT the client may have sent after it.
		return nil
	}
	if err != nil {
		if code, ok := err.(packets.Code); ok &&
			cl.Properties.ProtocolVersion == 5 &&
			code.Code >= packets.ErrUnspecifiedError.Code {
			_ = s.DisconnectClient(cl, code)
		}

		s.Log.Warn("error processing packet", "error", err, "client", cl.ID, "listener", cl.Net.Listener, "pk", pk)

		return err
	}

	return nil
}

// validateConnect validates that a connect packet is compliant.
func (s *Server) validateConnect(cl *Client, pk packets.Packet) packets.Code {
	code := pk.ConnectValidate() // [MQTT-3.1.4-1] [MQTT-3.1.4-2]
	if code != packets.CodeSuccess {
		return code
	}

	if cl.Properties.ProtocolVersion < 5 && !pk.Connect.Clean && pk.Connect.ClientIdentifier == "" {
		return packets.ErrUnspecifiedError
	}

	if cl.Properties.ProtocolVersion < s.Options.Capabilities.MinimumProtocolVersion {
		return packets.ErrUnsupportedProtocolVersion // [MQTT-3.1.2-2]
	} else if cl.Properties.Will.Qos > s.Options.Capabilities.MaximumQos {
		return packets.ErrQosNotSupported // [MQTT-3.2.2-12]
	} else if cl.Properties.Will.Retain && s.Options.Capabilities.RetainAvailable == 0x00 {
		return packets.ErrRetainNotSupported // [MQTT-3.2.2-13]
	}

	return code
}

// inheritClientSession inherits the state of an existing client sharing the same
// connection ID. If clean is true, the state of any previously existing client
// session is abandoned. The caller holds the id's session lock and, when old
// is not nil, ends old's connection with takeOver (gateway patch: upstream
// disconnected it here, waiting on its writes with no lock).
func (s *Server) inheritClientSession(pk packets.Packet, cl *Client) (present bool, old *Client) {
	if existing, ok := s.Clients.Get(cl.ID); ok {
		if !existing.Closed() {
			existing.State.takenOver.Store(true) // its reader takes only a DISCONNECT from now on
			old = existing
		}
		if pk.Connect.Clean || (existing.Properties.Clean && existing.Properties.ProtocolVersion < 5) { // [MQTT-3.1.2-4] [MQTT-3.1.4-4]
			s.UnsubscribeClient(existing)
			existing.ClearInflights()
			existing.State.isTakenOver.Store(true) // only set isTakenOver after unsubscribe has occurred
			return false, old                      // [MQTT-3.2.2-3]
		}

		existing.State.isTakenOver.Store(true)
		existing.State.sessionTaken.Store(true) // no delayed will: the session goes on [MQTT-3.1.3-9]
		if existing.State.Inflight.Len() > 0 {
			cl.State.Inflight = existing.State.Inflight.Clone() // [MQTT-3.1.2-5]
			if cl.State.Inflight.maximumReceiveQuota == 0 && cl.ops.options.Capabilities.ReceiveMaximum != 0 {
				cl.State.Inflight.ResetReceiveQuota(int32(cl.ops.options.Capabilities.ReceiveMaximum)) // server receive max per client
				cl.State.Inflight.ResetSendQuota(int32(cl.Properties.Props.ReceiveMaximum))            // client receive max
			}
		}

		for _, sub := range existing.State.Subscriptions.GetAll() {
			existed := !s.Topics.Subscribe(cl.ID, sub) // [MQTT-3.8.4-3]
			if !existed {
				atomic.AddInt64(&s.Info.Subscriptions, 1)
			}
			cl.State.Subscriptions.Add(sub.Filter, sub)
		}

		// Clean the state of the existing client to prevent sequential take-overs
		// from increasing memory usage by inflights + subs * client-id.
		s.UnsubscribeClient(existing)
		existing.ClearInflights()

		s.Log.Debug("session taken over", "client", cl.ID, "old_remote", existing.Net.Remote, "new_remote", cl.Net.Remote)

		return true, old // [MQTT-3.2.2-3]
	}

	if atomic.LoadInt64(&s.Info.ClientsConnected) > atomic.LoadInt64(&s.Info.ClientsMaximum) {
		atomic.AddInt64(&s.Info.ClientsMaximum, 1)
	}

	return false, nil // [MQTT-3.2.2-2]
}

// takeOverDrain bounds how long the old connection of a session taken over
// is read for a DISCONNECT of its own (gateway patch).
const takeOverDrain = time.Second

// takeOver ends the connection of a session a new connection took over
// [MQTT-3.1.4-3] (gateway patch). It sends DISCONNECT 0x8E (Session taken
// over) and, where the connection can stop reading while keeping what has
// arrived (a TCP half-close), lets the old connection's reader take what
// the client sent before: a client that sent DISCONNECT and reconnected at
// once must not have its will published because the new connection was
// quicker than the old one's reader (upstream closed the socket at once,
// the reader failed, and the will went out). Everything else the old
// connection sent is ignored (receivePacket). Its end of stream, or
// takeOverDrain, which its reader no longer extends (Read), ends it with an
// error, which publishes its will as any connection ended by the server
// does.
func (s *Server) takeOver(cl *Client) {
	hc, ok := cl.Net.Conn.(interface{ CloseRead() error })
	if !ok || s.Options.Capabilities.Compatibilities.PassiveClientDisconnect {
		_ = s.DisconnectClientNoWait(cl, packets.ErrSessionTakenOver)
		return
	}
	cl.State.draining.Store(true)
	_ = cl.Net.Conn.SetReadDeadline(time.Now().Add(takeOverDrain))
	cl.State.acks.wake() // gateway patch 12: a reader held back by deferred acks reads on
	out := packets.Packet{
		FixedHeader: packets.FixedHeader{Type: packets.Disconnect},
		ReasonCode:  packets.ErrSessionTakenOver.Code,
		Properties:  packets.Properties{ReasonString: packets.ErrSessionTakenOver.Reason},
	}
	// The DISCONNECT goes first (written now, or after a write in progress:
	// writePending); a half-close first would end the reader, and the
	// connection, before it was out. A client that has already closed may
	// answer it with a reset, after which the half-close fails: its
	// reader still gets what had arrived, then the error, so that failure
	// is ignored.
	_ = cl.writePacket(out, false)
	_ = hc.CloseRead()
}

// SendConnack returns a Connack packet to a client.
func (s *Server) SendConnack(cl *Client, reason packets.Code, present bool, properties *packets.Properties) error {
	if properties == nil {
		properties = &packets.Properties{
			ReceiveMaximum: s.Options.Capabilities.ReceiveMaximum,
		}
	}

	properties.ReceiveMaximum = s.Options.Capabilities.ReceiveMaximum // 3.2.2.3.3 Receive Maximum
	if cl.State.ServerKeepalive {                                     // You can set this dynamically using the OnConnect hook.
		properties.ServerKeepAlive = cl.State.Keepalive // [MQTT-3.1.2-21]
		properties.ServerKeepAliveFlag = true
	}

	if reason.Code >= packets.ErrUnspecifiedError.Code {
		if cl.Properties.ProtocolVersion < 5 {
			if v3reason, ok := packets.V5CodesToV3[reason]; ok { // NB v3 3.2.2.3 Connack return codes
				reason = v3reason
			}
		}

		properties.ReasonString = reason.Reason
		ack := packets.Packet{
			FixedHeader: packets.FixedHeader{
				Type: packets.Connack,
			},
			SessionPresent: false,       // [MQTT-3.2.2-6]
			ReasonCode:     reason.Code, // [MQTT-3.2.2-8]
			Properties:     *properties,
		}
		return cl.WritePacket(ack)
	}

	// gateway patch: announced, so that a client does not send what
	// would end its connection (upstream enforced the limit unannounced).
	properties.MaximumPacketSize = s.Options.Capabilities.MaximumPacketSize // 3.2.2.3.6

	if s.Options.Capabilities.MaximumQos < 2 {
		properties.MaximumQos = s.Options.Capabilities.MaximumQos // [MQTT-3.2.2-9]
		properties.MaximumQosFlag = true
	}

	if cl.Properties.Props.AssignedClientID != "" {
		properties.AssignedClientID = cl.Properties.Props.AssignedClientID // [MQTT-3.1.3-7] [MQTT-3.2.2-16]
	}

	if cl.Properties.Props.SessionExpiryInterval > s.Options.Capabilities.MaximumSessionExpiryInterval {
		properties.SessionExpiryInterval = s.Options.Capabilities.MaximumSessionExpiryInterval
		properties.SessionExpiryIntervalFlag = true
		cl.Properties.Props.SessionExpiryInterval = properties.SessionExpiryInterval
		cl.Properties.Props.SessionExpiryIntervalFlag = true
	}

	ack := packets.Packet{
		FixedHeader: packets.FixedHeader{
			Type: packets.Connack,
		},
		SessionPresent: present,
		ReasonCode:     reason.Code, // [MQTT-3.2.2-8]
		Properties:     *properties,
	}
	return cl.WritePacket(ack)
}

// processPacket processes an inbound packet for a client. Since the method is
// typically called as a goroutine, errors are primarily for test checking purposes.
func (s *Server) processPacket(cl *Client, pk packets.Packet) error {
	var err error

	switch pk.FixedHeader.Type {
	case packets.Connect:
		err = s.processConnect(cl, pk)
	case packets.Disconnect:
		err = s.processDisconnect(cl, pk)
	case packets.Pingreq:
		err = s.processPingreq(cl, pk)
	case packets.Publish:
		code := pk.PublishValidate(s.Options.Capabilities.TopicAliasMaximum)
		if code != packets.CodeSuccess {
			return code
		}
		err = s.processPublish(cl, pk)
	case packets.Puback:
		err = s.processPuback(cl, pk)
	case packets.Pubrec:
		err = s.processPubrec(cl, pk)
	case packets.Pubrel:
		err = s.processPubrel(cl, pk)
	case packets.Pubcomp:
		err = s.processPubcomp(cl, pk)
	case packets.Subscribe:
		code := pk.SubscribeValidate()
		if code != packets.CodeSuccess {
			return code
		}
		err = s.processSubscribe(cl, pk)
	case packets.Unsubscribe:
		code := pk.UnsubscribeValidate()
		if code != packets.CodeSuccess {
			return code
		}
		err = s.processUnsubscribe(cl, pk)
	case packets.Auth:
		code := pk.AuthValidate()
		if code != packets.CodeSuccess {
			return code
		}
		err = s.processAuth(cl, pk)
	default:
		return fmt.Errorf("no valid packet available; %v", pk.FixedHeader.Type)
	}

	if s.hooks.packetProvided(OnPacketProcessed, pk.FixedHeader.Type) { // gateway patch 36: no packet copy for no hook
		s.hooks.OnPacketProcessed(cl, pk, err)
	}
	if err != nil {
		return err
	}

	// gateway patch: held-back messages are queued for the client's
	// writer, not written here: the reader must not block on a write. A
	// full queue leaves them held for the next packet. gateway patch 13:
	// as many as the quota allows, and each stays in the inflight store
	// until acknowledged (upstream took it out as it sent it, so its
	// PUBACK never gave the quota back).
	cl.sendHeld()

	return nil
}

// processConnect processes a Connect packet. The packet cannot be used to establish
// a new connection on an existing connection. See EstablishConnection instead.
func (s *Server) processConnect(cl *Client, _ packets.Packet) error {
	s.sendLWT(cl)
	return packets.ErrProtocolViolationSecondConnect // [MQTT-3.1.0-2]
}

// processPingreq processes a Pingreq packet.
func (s *Server) processPingreq(cl *Client, _ packets.Packet) error {
	return cl.WritePacket(packets.Packet{
		FixedHeader: packets.FixedHeader{
			Type: packets.Pingresp, // [MQTT-3.12.4-1]
		},
	})
}

// Publish publishes a publish packet into the broker as if it were sent from the specified client.
// This is a convenience function which wraps InjectPacket. As such, this method can publish packets
// to any topic (including $SYS) and bypass ACL checks. The qos byte is used for limiting the
// outbound qos (mqtt v5) rather than issuing to the broker (we assume qos 2 complete).
func (s *Server) Publish(topic string, payload []byte, retain bool, qos byte) error {
	if !s.Options.InlineClient {
		return ErrInlineClientNotEnabled
	}

	return s.InjectPacket(s.inlineClient, packets.Packet{
		FixedHeader: packets.FixedHeader{
			Type:   packets.Publish,
			Qos:    qos,
			Retain: retain,
		},
		TopicName: topic,
		Payload:   payload,
		PacketID:  uint16(qos), // we never process the inbound qos, but we need a packet id for validity checks.
	})
}

// Subscribe adds an inline subscription for the specified topic filter and subscription identifier
// with the provided handler function.
func (s *Server) Subscribe(filter string, subscriptionId int, handler InlineSubFn) error {
	if !s.Options.InlineClient {
		return ErrInlineClientNotEnabled
	}

	if handler == nil {
		return packets.ErrInlineSubscriptionHandlerInvalid
	}

	if !IsValidFilter(filter, false) {
		return packets.ErrTopicFilterInvalid
	}

	subscription := packets.Subscription{
		Identifier: subscriptionId,
		Filter:     filter,
	}

	pk := s.hooks.OnSubscribe(s.inlineClient, packets.Packet{ // subscribe like a normal client.
		Origin:      s.inlineClient.ID,
		FixedHeader: packets.FixedHeader{Type: packets.Subscribe},
		Filters:     packets.Subscriptions{subscription},
	})

	inlineSubscription := InlineSubscription{
		Subscription: subscription,
		Handler:      handler,
	}

	s.Topics.InlineSubscribe(inlineSubscription)
	s.hooks.OnSubscribed(s.inlineClient, pk, []byte{packets.CodeSuccess.Code})

	// Handling retained messages.
	for _, pkv := range s.Topics.Messages(filter) { // [MQTT-3.8.4-4]
		handler(s.inlineClient, inlineSubscription.Subscription, pkv)
	}
	return nil
}

// Unsubscribe removes an inline subscription for the specified subscription and topic filter.
// It allows you to unsubscribe a specific subscription from the internal subscription
// associated with the given topic filter.
func (s *Server) Unsubscribe(filter string, subscriptionId int) error {
	if !s.Options.InlineClient {
		return ErrInlineClientNotEnabled
	}

	if !IsValidFilter(filter, false) {
		return packets.ErrTopicFilterInvalid
	}

	pk := s.hooks.OnUnsubscribe(s.inlineClient, packets.Packet{
		Origin:      s.inlineClient.ID,
		FixedHeader: packets.FixedHeader{Type: packets.Unsubscribe},
		Filters: packets.Subscriptions{
			{
				Identifier: subscriptionId,
				Filter:     filter,
			},
		},
	})

	s.Topics.InlineUnsubscribe(subscriptionId, filter)
	s.hooks.OnUnsubscribed(s.inlineClient, pk)
	return nil
}

// InjectPacket injects a packet into the broker as if it were sent from the specified client.
// InlineClients using this method can publish packets to any topic (including $SYS) and bypass ACL checks.
func (s *Server) InjectPacket(cl *Client, pk packets.Packet) error {
	pk.ProtocolVersion = cl.Properties.ProtocolVersion

	err := s.processPacket(cl, pk)
	if err != nil && cl.State.writesDone.Load() {
		// gateway patch: the packet's answer could not be written; the
		// connection is ending (failWrites), and its reader goes on to
		// take a DISCONNECT the client may have sent after it.
		return nil
	}
	if err != nil {
		return err
	}

	atomic.AddInt64(&cl.ops.info.PacketsReceived, 1)
	if pk.FixedHeader.Type == packets.Publish {
		atomic.AddInt64(&cl.ops.info.MessagesReceived, 1)
	}

	return nil
}

// processPublish processes a Publish packet.
func (s *Server) processPublish(cl *Client, pk packets.Packet) error {
	if !cl.Net.Inline && !IsValidFilter(pk.TopicName, true) {
		return nil
	}

	if atomic.LoadInt32(&cl.State.Inflight.receiveQuota) == 0 {
		return s.DisconnectClient(cl, packets.ErrReceiveMaximum) // ~[MQTT-3.3.4-7] ~[MQTT-3.3.4-8]
	}

	if !cl.Net.Inline && !s.hooks.OnACLCheck(cl, pk.TopicName, true) {
		if pk.FixedHeader.Qos == 0 {
			return nil
		}

		if cl.Properties.ProtocolVersion != 5 {
			return s.DisconnectClient(cl, packets.ErrNotAuthorized)
		}

		ackType := packets.Puback
		if pk.FixedHeader.Qos == 2 {
			ackType = packets.Pubrec
		}

		ack := s.buildAck(pk.PacketID, ackType, 0, pk.Properties, packets.ErrNotAuthorized)
		return cl.writeAck(nil, ack, false) // gateway patch 12: behind deferred acks
	}

	pk.Origin = cl.ID
	pk.Created = time.Now().Unix()

	if expiry := minimum(s.Options.Capabilities.MaximumMessageExpiryInterval,
		int64(pk.Properties.MessageExpiryInterval)); expiry > 0 {
		pk.Expiry = pk.Created + expiry
	}

	// gateway patch 46: a QoS 0 PUBLISH has no packet id (PacketID 0, which
	// no inflight entry has [MQTT-2.2.1-3]), so there is nothing to look
	// up: Get's lock, map read and the empty packet it returns cost 4% of
	// the gateway's CPU per message from MQTT publishers.
	if !cl.Net.Inline && pk.FixedHeader.Qos > 0 {
		if pki, ok := cl.State.Inflight.Get(pk.PacketID); ok {
			if pki.FixedHeader.Type == packets.Pubrec { // [MQTT-4.3.3-10]
				// gateway patch 12: also while the first PUBREC is deferred,
				// so a re-sent PUBLISH is not published twice.
				ack := s.buildAck(pk.PacketID, packets.Pubrec, 0, pk.Properties, packets.ErrPacketIdentifierInUse)
				return cl.writeAck(nil, ack, false)
			}
			if ok := cl.State.Inflight.Delete(pk.PacketID); ok { // [MQTT-4.3.2-5]
				atomic.AddInt64(&s.Info.Inflight, -1)
			}
		}
	}

	if pk.Properties.TopicAliasFlag && pk.Properties.TopicAlias > 0 { // [MQTT-3.3.2-11]
		pk.TopicName = cl.State.TopicAliases.Inbound.Set(pk.Properties.TopicAlias, pk.TopicName)
	}

	if pk.FixedHeader.Qos > s.Options.Capabilities.MaximumQos {
		pk.FixedHeader.Qos = s.Options.Capabilities.MaximumQos // [MQTT-3.2.2-9] Reduce qos based on server max qos capability
	}

	var deferred *PendingAck
	// gateway patch 48: an injected PUBLISH that no hook takes
	// (InlinePublishHook) skips the hook chain and its copies.
	if !cl.Net.Inline || len(s.hooks.publishers(cl)) > 0 {
		pkx, err := s.hooks.OnPublish(cl, pk)
		deferred = cl.State.acks.takeDeferred() // gateway patch 12: the hook answers the ack later
		if deferred != nil && err != nil {
			cl.State.acks.drop(deferred) // refused after all: mochi's own answer below
			deferred = nil
		}
		if err == nil {
			pk = pkx
		} else if errors.Is(err, packets.ErrRejectPacket) {
			return nil
		} else if errors.Is(err, packets.CodeSuccessIgnore) {
			pk.Ignore = true
		} else if cl.Properties.ProtocolVersion == 5 && pk.FixedHeader.Qos > 0 && errors.As(err, new(packets.Code)) {
			err = cl.writeAck(nil, s.buildAck(pk.PacketID, packets.Puback, 0, pk.Properties, err.(packets.Code)), false) // gateway patch 12
			if err != nil {
				return err
			}
			return nil
		}
	}

	if pk.FixedHeader.Retain { // [MQTT-3.3.1-5] ![MQTT-3.3.1-8]
		s.retainMessage(cl, pk)
	}

	// If it's inlineClient, it can't handle PUBREC and PUBREL.
	// When it publishes a package with a qos > 0, the server treats
	// the package as qos=0, and the client receives it as qos=1 or 2.
	if pk.FixedHeader.Qos == 0 || cl.Net.Inline {
		if deferred != nil { // gateway patch 12: a hook that made it QoS 0 has no ack to give
			cl.State.acks.drop(deferred)
		}
		s.publishToSubscribersFrom(cl, pk)
		if s.hooks.provided(OnPublished) { // gateway patch 34: no packet copy for no hook
			s.hooks.OnPublished(cl, pk)
		}
		return nil
	}

	cl.State.Inflight.DecreaseReceiveQuota()
	ack := s.buildAck(pk.PacketID, packets.Puback, 0, pk.Properties, packets.QosCodes[pk.FixedHeader.Qos]) // [MQTT-4.3.2-4]
	if pk.FixedHeader.Qos == 2 {
		ack = s.buildAck(pk.PacketID, packets.Pubrec, 0, pk.Properties, packets.CodeSuccess) // [MQTT-3.3.4-1] [MQTT-4.3.3-8]
	}

	if deferred != nil || cl.State.acks.busy() {
		// gateway patch 12: the ack waits for the hook's answer, or behind
		// acks that do; MQTT subscribers get the message now, as upstream.
		// A QoS 2 PUBLISH's state is kept from now, so that a re-sent one
		// is not published twice; a QoS 1 one has none to keep (upstream
		// sets and deletes it around the write).
		if pk.FixedHeader.Qos == 2 && cl.State.Inflight.Set(ack) {
			atomic.AddInt64(&s.Info.Inflight, 1)
			s.hooks.OnQosPublish(cl, ack, ack.Created, 0)
		}
		if err := cl.writeAck(deferred, ack, true); err != nil {
			return err
		}
		s.publishToSubscribersFrom(cl, pk)
		if s.hooks.provided(OnPublished) { // gateway patch 34: no packet copy for no hook
			s.hooks.OnPublished(cl, pk)
		}
		return nil
	}

	// gateway patch 28: only a QoS 2 PUBLISH leaves state to keep (its
	// PUBREC, until the PUBREL). Upstream also put a QoS 1 one's PUBACK in
	// the inflight store and took it out again once written, with
	// OnQosPublish and OnQosComplete around it (a session store wrote it
	// and deleted it), and the map, emptied each time, was made again
	// for every message (patch 5): ~7 KB allocated per QoS 1 PUBLISH. No
	// other goroutine reads a client's inbound ids, so nothing could see
	// it there; patch 12's path (deferred acks) never kept it either.
	if pk.FixedHeader.Qos == 2 {
		if ok := cl.State.Inflight.Set(ack); ok {
			atomic.AddInt64(&s.Info.Inflight, 1)
			s.hooks.OnQosPublish(cl, ack, ack.Created, 0)
		}
	}

	err := cl.writeReaderAck(ack) // gateway patch 26: with the rest of the reader's burst
	if err != nil {
		return err
	}

	if pk.FixedHeader.Qos == 1 {
		cl.State.Inflight.IncreaseReceiveQuota()
	}

	s.publishToSubscribersFrom(cl, pk)
	if s.hooks.provided(OnPublished) { // gateway patch 34
		s.hooks.OnPublished(cl, pk)
	}

	return nil
}

// retainMessage adds a message to a topic, and if a persistent store is provided,
// adds the message to the store to be reloaded if necessary.
func (s *Server) retainMessage(cl *Client, pk packets.Packet) {
	if s.Options.Capabilities.RetainAvailable == 0 || pk.Ignore {
		return
	}
	if s.Options.RetainedElsewhere {
		// Gateway patch 40: no copy, no index entry to take back out.
		return
	}

	out := pk.Copy(false)
	r := s.Topics.RetainMessage(out)
	s.hooks.OnRetainMessage(cl, pk, r)
	atomic.StoreInt64(&s.Info.Retained, int64(s.Topics.Retained.Len()))
}

// publishToSubscribers publishes a publish packet to all subscribers with matching topic filters.
func (s *Server) publishToSubscribers(pk packets.Packet) {
	s.publishToSubscribersStall(pk, false)
}

// publishToSubscribersFrom is publishToSubscribers for a PUBLISH client cl
// sent: its reader may wait SlowSubscriberStall for a subscriber's full
// queue (gateway patch 22), unless cl is the inline client, whose callers
// (the gateway's other front-ends) must never wait on an MQTT socket.
//
// Gateway patch 45: an injected PUBLISH whose caller set Mods.FixedPayload
// shares its payload with the subscribers' copies, as one read from a
// client does; other injected ones are copied per subscriber.
func (s *Server) publishToSubscribersFrom(cl *Client, pk packets.Packet) {
	s.publishToSubscribersShared(pk, !cl.Net.Inline && s.Options.SlowSubscriberStall > 0, !cl.Net.Inline || pk.Mods.FixedPayload)
}

func (s *Server) publishToSubscribersStall(pk packets.Packet, stall bool) {
	s.publishToSubscribersShared(pk, stall, false)
}

// publishToSubscribersShared is publishToSubscribersStall; with
// readPayload, pk's payload is a buffer read for it alone from a client
// (ReadPacket), which nothing changes, and the subscribers' copies share
// it (gateway patch 33), as does an injected one marked
// Mods.FixedPayload (patch 45). Anything else (the inline client's other
// payloads are its caller's, a will's, a retained message's) is copied
// per subscriber as upstream does.
func (s *Server) publishToSubscribersShared(pk packets.Packet, stall, readPayload bool) {
	if pk.Ignore {
		return
	}

	if pk.Created == 0 {
		pk.Created = time.Now().Unix()
	}

	if pk.Expiry == 0 {
		if expiry := minimum(s.Options.Capabilities.MaximumMessageExpiryInterval,
			int64(pk.Properties.MessageExpiryInterval)); expiry > 0 {
			pk.Expiry = pk.Created + expiry
		}
	}

	subscribers := s.Topics.SubscribersCached(pk.TopicName) // gateway patch 23; read only unless shared, then fresh
	if len(subscribers.Shared) > 0 {
		if subscribers.SharedSelected == nil { // gateway patch 21: made only when needed
			subscribers.SharedSelected = map[string]packets.Subscription{}
		}
		subscribers = s.hooks.OnSelectSubscribers(subscribers, pk)
		if len(subscribers.SharedSelected) == 0 {
			subscribers.SelectShared()
		}
		subscribers.MergeSharedSelected()
	} else if pk.Mods.SharedOnly {
		// gateway patch 30: a message for a shared group whose last member
		// here left since the caller looked: without the hook, which would
		// keep that group only, it reached every plain subscriber.
		return
	}

	for _, inlineSubscription := range subscribers.InlineSubscriptions {
		inlineSubscription.Handler(s.inlineClient, inlineSubscription.Subscription, pk)
	}

	f := fanout{sharePayload: readPayload} // gateway patch 27: QoS 0 copies encoded once per variant
	for id, subs := range subscribers.Subscriptions {
		if cl, ok := s.Clients.Get(id); ok {
			_, err := s.publishToClientShared(cl, subs, pk, stall, &f)
			if err != nil {
				s.Log.Debug("failed publishing packet", "error", err, "client", cl.ID, "packet", pk)
			}
		}
	}
	f.release()
}

func (s *Server) publishToClient(cl *Client, sub packets.Subscription, pk packets.Packet) (packets.Packet, error) {
	return s.publishToClientStall(cl, sub, pk, false)
}

// publishToClientStall is publishToClient; with stall, a QoS 0 copy waits
// for room in a full outbound queue (gateway patch 22, enqueueStall).
func (s *Server) publishToClientStall(cl *Client, sub packets.Subscription, pk packets.Packet, stall bool) (packets.Packet, error) {
	return s.publishToClientShared(cl, sub, pk, stall, nil)
}

// publishToClientShared is publishToClientStall; with f, a QoS 0 copy
// whose encoding does not depend on cl shares f's (gateway patch 27).
func (s *Server) publishToClientShared(cl *Client, sub packets.Subscription, pk packets.Packet, stall bool, f *fanout) (packets.Packet, error) {
	if sub.NoLocal && pk.Origin == cl.ID {
		return pk, nil // [MQTT-3.8.3-3]
	}

	var out packets.Packet
	if f != nil && f.sharePayload {
		out = pk.CopySharedPayload(false) // gateway patch 33: no payload copy per subscriber
	} else {
		out = pk.Copy(false)
	}
	if !s.hooks.OnACLCheck(cl, pk.TopicName, false) {
		return out, packets.ErrNotAuthorized
	}
	if !sub.FwdRetainedFlag && ((cl.Properties.ProtocolVersion == 5 && !sub.RetainAsPublished) || cl.Properties.ProtocolVersion < 5) { // ![MQTT-3.3.1-13] [v3 MQTT-3.3.1-9]
		out.FixedHeader.Retain = false // [MQTT-3.3.1-12]
	}

	if len(sub.Identifiers) > 0 { // [MQTT-3.3.4-3]
		out.Properties.SubscriptionIdentifier = nil // gateway patch 21: only ids > 0 (0 was never encoded), no slice without one
		for _, id := range sub.Identifiers {
			if id > 0 {
				out.Properties.SubscriptionIdentifier = append(out.Properties.SubscriptionIdentifier, id) // [MQTT-3.3.4-4] ![MQTT-3.3.4-5]
			}
		}
		sort.Ints(out.Properties.SubscriptionIdentifier)
	}

	if out.FixedHeader.Qos > sub.Qos {
		out.FixedHeader.Qos = sub.Qos
	}

	if out.FixedHeader.Qos > s.Options.Capabilities.MaximumQos {
		out.FixedHeader.Qos = s.Options.Capabilities.MaximumQos // [MQTT-3.2.2-9]
	}

	if cl.Properties.Props.TopicAliasMaximum > 0 {
		var aliasExists bool
		out.Properties.TopicAlias, aliasExists = cl.State.TopicAliases.Outbound.Set(pk.TopicName)
		if out.Properties.TopicAlias > 0 {
			out.Properties.TopicAliasFlag = true
			if aliasExists {
				out.TopicName = ""
			}
		}
	}

	if out.FixedHeader.Qos > 0 {
		held, added, moved, err := s.addInflight(cl, &out, pk)
		if testAfterAddInflight != nil {
			testAfterAddInflight(cl)
		}
		if moved {
			return s.publishToSuccessor(cl, sub, pk, stall)
		}
		if err != nil {
			return out, err
		}
		if added {
			atomic.AddInt64(&s.Info.Inflight, 1)
			s.hooks.OnQosPublish(cl, out, out.Created, 0)
		}
		if held && (cl.Net.Conn == nil || cl.Closed()) {
			return out, packets.CodeDisconnect // kept for the session, held until it reconnects
		}
		if held {
			return out, nil // [MQTT-3.3.4-9]
		}
	} else if held, kept := cl.holdQoS0(out); held { // gateway patch 13
		if !kept {
			atomic.AddInt64(&s.Info.MessagesDropped, 1)
			cl.ops.hooks.OnPublishDropped(cl, pk)
			return out, packets.ErrPendingClientWritesExceeded
		}
		return out, nil
	}

	if cl.Net.Conn == nil || cl.Closed() {
		return out, packets.CodeDisconnect
	}

	q := f.shared(cl, &out) // gateway patch 27: nil when cl needs an encoding of its own
	if q == nil {
		own := out // on the heap only in this branch
		q = &own
	}
	queued := false
	if stall && out.FixedHeader.Qos == 0 {
		queued = cl.enqueueStall(q, s.Options.SlowSubscriberStall)
	} else {
		queued = cl.enqueue(q)
	}
	if !queued {
		if sp := q.Mods.Shared; sp != nil {
			sp.Release()
		}
		atomic.AddInt64(&s.Info.MessagesDropped, 1)
		if out.FixedHeader.Qos > 0 {
			// gateway patch 32: the rollback comes first, under the id's
			// session lock. A reconnect that took the session over since
			// addInflight copied this entry with it: the new connection
			// sends it, and the hook (the gateway's backlog) must not make
			// a second copy. Otherwise the entry is gone before the hook
			// keeps the message, so a takeover that comes later copies one
			// of the two, never both.
			//
			// The hooks are told the entry is gone (OnQosDropped, after the
			// backlog kept its own copy: a crash between the two leaves a
			// duplicate, not a loss), and Info.Inflight counts it out;
			// upstream did neither, so a session store kept the entry, and
			// the message came again after a restart or a move.
			mu := s.sessionLock(cl.ID)
			mu.Lock()
			moved := cl.State.takenOver.Load() || cl.State.isTakenOver.Load()
			deleted := cl.State.Inflight.Delete(out.PacketID) // packet was dropped due to irregular circumstances, so rollback inflight.
			cl.State.Inflight.IncreaseSendQuota()
			mu.Unlock()
			cl.sendHeld() // gateway patch 13: one held meanwhile may take the unit
			if moved {
				// The entry, inherited, belongs to the new connection now.
				return out, packets.ErrPendingClientWritesExceeded
			}
			cl.ops.hooks.OnPublishDropped(cl, pk)
			if deleted {
				atomic.AddInt64(&s.Info.Inflight, -1)
				cl.ops.hooks.OnQosDropped(cl, out)
			}
			return out, packets.ErrPendingClientWritesExceeded
		}
		cl.ops.hooks.OnPublishDropped(cl, pk)
		return out, packets.ErrPendingClientWritesExceeded
	}

	return out, nil
}

// addInflight gives out a packet id of cl and puts it in cl's inflight
// store, under the lock of cl's id, unless a new connection has taken cl's
// session over: then moved is true and nothing was added (gateway patch
// 25). Without the lock, a publisher that found cl in Clients just before
// a takeover could add its message to cl's store after the new connection
// had copied it (inheritClientSession): the message was in neither, never
// sent, and lost for a persistent subscriber whose publisher had its
// PUBACK. With it, the message is either in the store when it is copied,
// or goes to the new connection (publishToSuccessor).
func (s *Server) addInflight(cl *Client, out *packets.Packet, pk packets.Packet) (held, added, moved bool, err error) {
	mu := s.sessionLock(cl.ID)
	mu.Lock()
	defer mu.Unlock()
	if cl.State.takenOver.Load() || cl.State.isTakenOver.Load() {
		return false, false, true, nil
	}
	if cl.State.Inflight.Len() >= int(s.Options.Capabilities.MaximumInflight) {
		// add hook?
		atomic.AddInt64(&s.Info.InflightDropped, 1)
		s.Log.Debug("client store quota reached", "client", cl.ID, "listener", cl.Net.Listener) // gateway patch: was Warn, a line per message (counted in Info.InflightDropped)
		return false, false, false, packets.ErrQuotaExceeded
	}

	i, err := cl.NextPacketID() // [MQTT-4.3.2-1] [MQTT-4.3.3-1]
	if err != nil {
		s.hooks.OnPacketIDExhausted(cl, pk)
		atomic.AddInt64(&s.Info.InflightDropped, 1)
		s.Log.Debug("packet ids exhausted", "error", err, "client", cl.ID, "listener", cl.Net.Listener) // gateway patch: was Warn, a line per message (counted in Info.InflightDropped)
		return false, false, false, packets.ErrQuotaExceeded
	}

	out.PacketID = uint16(i) // [MQTT-2.2.1-4]
	// gateway patch 13: held back (no quota left, earlier ones held,
	// or a hook holds the client's PUBLISHes) or the quota taken, in
	// one step (hold.go).
	held, added = cl.setInflight(out) // [MQTT-4.3.2-3] [MQTT-4.3.3-3]
	return held, added, false, nil
}

// testAfterAddInflight, set by tests only, runs after a publisher put a
// QoS 1/2 message into cl's inflight store and before it queues it: where
// a takeover can come in between (patch 32).
var testAfterAddInflight func(cl *Client)

// publishToSuccessor delivers a message meant for cl, whose session a new
// connection has taken over, to the connection that holds cl's id now,
// when its session has the subscription the message came through (a
// session carried on has them all; a clean start has none: the message
// went with the old session) (gateway patch 25).
func (s *Server) publishToSuccessor(cl *Client, sub packets.Subscription, pk packets.Packet, stall bool) (packets.Packet, error) {
	mu := s.sessionLock(cl.ID)
	mu.Lock()
	next, ok := s.Clients.Get(cl.ID)
	mu.Unlock()
	if !ok || next == cl {
		return pk, packets.CodeDisconnect
	}
	if _, ok := next.State.Subscriptions.Get(sub.Filter); !ok {
		return pk, nil
	}
	return s.publishToClientStall(next, sub, pk, stall)
}

func (s *Server) publishRetainedToClient(cl *Client, sub packets.Subscription, existed bool) {
	if IsSharedFilter(sub.Filter) {
		return // 4.8.2 Non-normative - Shared Subscriptions - No Retained Messages are sent to the Session when it first subscribes.
	}

	if sub.RetainHandling == 1 && existed || sub.RetainHandling == 2 { // [MQTT-3.3.1-10] [MQTT-3.3.1-11]
		return
	}

	sub.FwdRetainedFlag = true
	for _, pkv := range s.Topics.Messages(sub.Filter) { // [MQTT-3.8.4-4]
		_, err := s.publishToClient(cl, sub, pkv)
		if err != nil {
			s.Log.Debug("failed to publish retained message", "error", err, "client", cl.ID, "listener", cl.Net.Listener, "packet", pkv)
			continue
		}
		s.hooks.OnRetainPublished(cl, pkv)
	}
}

// buildAck builds a standardised ack message for Puback, Pubrec, Pubrel, Pubcomp packets.
func (s *Server) buildAck(packetID uint16, pkt, qos byte, properties packets.Properties, reason packets.Code) packets.Packet {
	if s.Options.Capabilities.Compatibilities.NoInheritedPropertiesOnAck {
		properties = packets.Properties{}
	}
	if reason.Code >= packets.ErrUnspecifiedError.Code {
		properties.ReasonString = reason.Reason
	}

	pk := packets.Packet{
		FixedHeader: packets.FixedHeader{
			Type: pkt,
			Qos:  qos,
		},
		PacketID:   packetID,    // [MQTT-2.2.1-5]
		ReasonCode: reason.Code, // [MQTT-3.4.2-1]
		Properties: properties,
		Created:    time.Now().Unix(),
		Expiry:     time.Now().Unix() + s.Options.Capabilities.MaximumMessageExpiryInterval,
	}

	return pk
}

// processPuback processes a Puback packet, denoting completion of a QOS 1 packet sent from the server.
func (s *Server) processPuback(cl *Client, pk packets.Packet) error {
	if _, ok := cl.State.Inflight.Get(pk.PacketID); !ok {
		return nil // omit, but would be packets.ErrPacketIdentifierNotFound
	}

	if ok := cl.State.Inflight.Delete(pk.PacketID); ok { // [MQTT-4.3.2-5]
		cl.State.Inflight.IncreaseSendQuota()
		atomic.AddInt64(&s.Info.Inflight, -1)
		s.hooks.OnQosComplete(cl, pk)
	}

	return nil
}

// processPubrec processes a Pubrec packet, denoting receipt of a QOS 2 packet sent from the server.
func (s *Server) processPubrec(cl *Client, pk packets.Packet) error {
	pki, ok := cl.State.Inflight.Get(pk.PacketID)
	if !ok { // [MQTT-4.3.3-7] [MQTT-4.3.3-13]
		return cl.WritePacket(s.buildAck(pk.PacketID, packets.Pubrel, 1, pk.Properties, packets.ErrPacketIdentifierNotFound))
	}

	if pk.ReasonCode >= packets.ErrUnspecifiedError.Code || !pk.ReasonCodeValid() { // [MQTT-4.3.3-4]
		if ok := cl.State.Inflight.Delete(pk.PacketID); ok {
			atomic.AddInt64(&s.Info.Inflight, -1)
			// gateway patch 13: the flow ends, and its unit of the
			// send quota comes back (MQTT 5 §4.9); upstream kept it, and
			// after Receive Maximum such PUBRECs nothing more was sent.
			// Not for a message held, never sent: it took none.
			if pki.FixedHeader.Type == packets.Publish && pki.Expiry >= 0 {
				cl.State.Inflight.IncreaseSendQuota()
			}
		}
		cl.ops.hooks.OnQosDropped(cl, pk)
		return nil // as per MQTT5 Section 4.13.2 paragraph 2
	}

	ack := s.buildAck(pk.PacketID, packets.Pubrel, 1, pk.Properties, packets.CodeSuccess) // [MQTT-4.3.3-4] ![MQTT-4.3.3-6]
	cl.State.Inflight.DecreaseReceiveQuota()                                              // -1 RECV QUOTA
	cl.State.Inflight.Set(ack)                                                            // [MQTT-4.3.3-5]
	return cl.WritePacket(ack)
}

// processPubrel processes a Pubrel packet, denoting completion of a QOS 2 packet sent from the client.
func (s *Server) processPubrel(cl *Client, pk packets.Packet) error {
	if _, ok := cl.State.Inflight.Get(pk.PacketID); !ok { // [MQTT-4.3.3-7] [MQTT-4.3.3-13]
		return cl.WritePacket(s.buildAck(pk.PacketID, packets.Pubcomp, 0, pk.Properties, packets.ErrPacketIdentifierNotFound))
	}

	if pk.ReasonCode >= packets.ErrUnspecifiedError.Code || !pk.ReasonCodeValid() { // [MQTT-4.3.3-9]
		if ok := cl.State.Inflight.Delete(pk.PacketID); ok {
			atomic.AddInt64(&s.Info.Inflight, -1)
		}
		cl.ops.hooks.OnQosDropped(cl, pk)
		return nil
	}

	ack := s.buildAck(pk.PacketID, packets.Pubcomp, 0, pk.Properties, packets.CodeSuccess) // [MQTT-4.3.3-11]
	cl.State.Inflight.Set(ack)

	err := cl.WritePacket(ack)
	if err != nil {
		return err
	}

	cl.State.Inflight.IncreaseReceiveQuota() // +1 RECV QUOTA
	// gateway patch 13: no +1 send quota here: a PUBREL ends an inbound
	// flow, which took none (upstream's let one more PUBLISH out to a
	// client at its Receive Maximum [MQTT-3.3.4-9]).
	if ok := cl.State.Inflight.Delete(pk.PacketID); ok { // [MQTT-4.3.3-12]
		atomic.AddInt64(&s.Info.Inflight, -1)
		s.hooks.OnQosComplete(cl, pk)
	}

	return nil
}

// processPubcomp processes a Pubcomp packet, denoting completion of a QOS 2 packet sent from the server.
func (s *Server) processPubcomp(cl *Client, pk packets.Packet) error {
	// regardless of whether the pubcomp is a success or failure, we end the qos flow, delete inflight, and restore the quotas.
	cl.State.Inflight.IncreaseReceiveQuota() // +1 RECV QUOTA
	if ok := cl.State.Inflight.Delete(pk.PacketID); ok {
		cl.State.Inflight.IncreaseSendQuota() // +1 SENT QUOTA; gateway patch 13: only for a flow that took it
		atomic.AddInt64(&s.Info.Inflight, -1)
		s.hooks.OnQosComplete(cl, pk)
	}

	return nil
}

// processSubscribe processes a Subscribe packet.
func (s *Server) processSubscribe(cl *Client, pk packets.Packet) error {
	pk = s.hooks.OnSubscribe(cl, pk)
	code := packets.CodeSuccess
	if _, ok := cl.State.Inflight.Get(pk.PacketID); ok {
		code = packets.ErrPacketIdentifierInUse
	}

	filterExisted := make([]bool, len(pk.Filters))
	reasonCodes := make([]byte, len(pk.Filters))
	for i, sub := range pk.Filters {
		if code != packets.CodeSuccess {
			reasonCodes[i] = code.Code // NB 3.9.3 Non-normative 0x91
			continue
		} else if !IsValidFilter(sub.Filter, false) {
			reasonCodes[i] = packets.ErrTopicFilterInvalid.Code
		} else if sub.NoLocal && IsSharedFilter(sub.Filter) {
			reasonCodes[i] = packets.ErrProtocolViolationInvalidSharedNoLocal.Code // [MQTT-3.8.3-4]
		} else if !s.hooks.OnACLCheck(cl, sub.Filter, false) {
			reasonCodes[i] = packets.ErrNotAuthorized.Code
			if s.Options.Capabilities.Compatibilities.ObscureNotAuthorized {
				reasonCodes[i] = packets.ErrUnspecifiedError.Code
			}
		} else {
			var isNew bool
			if !s.inSession(cl, func() {
				isNew = s.Topics.Subscribe(cl.ID, sub)      // [MQTT-3.8.4-3]
				cl.State.Subscriptions.Add(sub.Filter, sub) // [MQTT-3.2.2-10]
			}) {
				reasonCodes[i] = packets.ErrUnspecifiedError.Code // taken over: nobody reads the SUBACK
				continue
			}
			if isNew {
				atomic.AddInt64(&s.Info.Subscriptions, 1)
			}

			if sub.Qos > s.Options.Capabilities.MaximumQos {
				sub.Qos = s.Options.Capabilities.MaximumQos // [MQTT-3.2.2-9]
			}

			filterExisted[i] = !isNew
			reasonCodes[i] = sub.Qos // [MQTT-3.9.3-1] [MQTT-3.8.4-7]
		}

		if reasonCodes[i] > packets.CodeGrantedQos2.Code && cl.Properties.ProtocolVersion < 5 { // MQTT3
			reasonCodes[i] = packets.ErrUnspecifiedError.Code
		}
	}

	ack := packets.Packet{ // [MQTT-3.8.4-1] [MQTT-3.8.4-5]
		FixedHeader: packets.FixedHeader{
			Type: packets.Suback,
		},
		PacketID:    pk.PacketID, // [MQTT-2.2.1-6] [MQTT-3.8.4-2]
		ReasonCodes: reasonCodes, // [MQTT-3.8.4-6]
		Properties: packets.Properties{
			User: pk.Properties.User,
		},
	}

	if code.Code >= packets.ErrUnspecifiedError.Code {
		ack.Properties.ReasonString = code.Reason
	}

	s.hooks.OnSubscribed(cl, pk, reasonCodes)
	err := cl.WritePacket(ack)
	if err != nil {
		return err
	}

	for i, sub := range pk.Filters { // [MQTT-3.3.1-9]
		if reasonCodes[i] >= packets.ErrUnspecifiedError.Code {
			continue
		}

		s.publishRetainedToClient(cl, sub, filterExisted[i])
	}

	return nil
}

// processUnsubscribe processes an unsubscribe packet.
func (s *Server) processUnsubscribe(cl *Client, pk packets.Packet) error {
	code := packets.CodeSuccess
	if _, ok := cl.State.Inflight.Get(pk.PacketID); ok {
		code = packets.ErrPacketIdentifierInUse
	}

	pk = s.hooks.OnUnsubscribe(cl, pk)
	reasonCodes := make([]byte, len(pk.Filters))
	for i, sub := range pk.Filters { // [MQTT-3.10.4-6] [MQTT-3.11.3-1]
		if code != packets.CodeSuccess {
			reasonCodes[i] = code.Code // NB 3.11.3 Non-normative 0x91
			continue
		}

		var q bool
		s.inSession(cl, func() {
			q = s.Topics.Unsubscribe(sub.Filter, cl.ID)
			cl.State.Subscriptions.Delete(sub.Filter) // [MQTT-3.10.4-2] [MQTT-3.10.4-2] ~[MQTT-3.10.4-3]
		})
		if q {
			atomic.AddInt64(&s.Info.Subscriptions, -1)
			reasonCodes[i] = packets.CodeSuccess.Code
		} else {
			reasonCodes[i] = packets.CodeNoSubscriptionExisted.Code
		}
	}

	ack := packets.Packet{ // [MQTT-3.10.4-4]
		FixedHeader: packets.FixedHeader{
			Type: packets.Unsuback,
		},
		PacketID:    pk.PacketID, // [MQTT-2.2.1-6]  [MQTT-3.10.4-5]
		ReasonCodes: reasonCodes, // [MQTT-3.11.3-2]
		Properties: packets.Properties{
			User: pk.Properties.User,
		},
	}

	if code.Code >= packets.ErrUnspecifiedError.Code {
		ack.Properties.ReasonString = code.Reason
	}

	s.hooks.OnUnsubscribed(cl, pk)
	return cl.WritePacket(ack)
}

// RemoveSubscriptions ends the client's subscriptions to filters as an
// UNSUBSCRIBE of them would, without an UNSUBACK (MQTT has no packet that
// tells a client its subscription was taken away), and calls
// OnUnsubscribed with those that existed. Safe on any goroutine: the
// session lock orders it against the client's own SUBSCRIBE, UNSUBSCRIBE
// and a takeover, as processUnsubscribe's changes are (gateway patch 17:
// the gateway removes the subscriptions a reloaded ACL denies).
func (s *Server) RemoveSubscriptions(cl *Client, filters []string) int {
	var gone []packets.Subscription
	s.inSession(cl, func() {
		for _, f := range filters {
			sub, ok := cl.State.Subscriptions.Get(f)
			if !ok {
				continue
			}
			if s.Topics.Unsubscribe(f, cl.ID) {
				atomic.AddInt64(&s.Info.Subscriptions, -1)
			}
			cl.State.Subscriptions.Delete(f)
			gone = append(gone, sub)
		}
	})
	if len(gone) > 0 {
		s.hooks.OnUnsubscribed(cl, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Unsubscribe}, Filters: gone})
	}
	return len(gone)
}

// UnsubscribeClient unsubscribes a client from all of their subscriptions.
func (s *Server) UnsubscribeClient(cl *Client) {
	i := 0
	filterMap := cl.State.Subscriptions.GetAll()
	filters := make([]packets.Subscription, len(filterMap))
	for k := range filterMap {
		cl.State.Subscriptions.Delete(k)
	}

	if cl.IsTakenOver() {
		return
	}

	for k, v := range filterMap {
		if s.Topics.Unsubscribe(k, cl.ID) {
			atomic.AddInt64(&s.Info.Subscriptions, -1)
		}
		filters[i] = v
		i++
	}
	s.hooks.OnUnsubscribed(cl, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Unsubscribe}, Filters: filters})
}

// processAuth processes an Auth packet.
func (s *Server) processAuth(cl *Client, pk packets.Packet) error {
	_, err := s.hooks.OnAuthPacket(cl, pk)
	if err != nil {
		return err
	}

	return nil
}

// processDisconnect processes a Disconnect packet.
func (s *Server) processDisconnect(cl *Client, pk packets.Packet) error {
	if pk.Properties.SessionExpiryIntervalFlag {
		if pk.Properties.SessionExpiryInterval > 0 && cl.Properties.Props.SessionExpiryInterval == 0 {
			return packets.ErrProtocolViolationZeroNonZeroExpiry
		}

		cl.Properties.Props.SessionExpiryInterval = pk.Properties.SessionExpiryInterval
		cl.Properties.Props.SessionExpiryIntervalFlag = true
	}

	if pk.ReasonCode == packets.CodeDisconnectWillMessage.Code { // [MQTT-3.1.2.5] Non-normative comment
		return packets.CodeDisconnectWillMessage
	}

	s.loop.willDelayed.Delete(cl.ID) // [MQTT-3.1.3-9] [MQTT-3.1.2-8]
	cl.Stop(packets.CodeDisconnect)  // [MQTT-3.14.4-2]

	return nil
}

// DisconnectClient sends a Disconnect packet to a client and then closes the client connection.
func (s *Server) DisconnectClient(cl *Client, code packets.Code) error {
	return s.disconnectClient(cl, code, true)
}

// DisconnectClientNoWait is DisconnectClient for a client some other
// client's goroutine is ending (a takeover, a shutdown): when a write to it
// is in progress, which a client that stopped reading holds for the write
// timeout, the connection is closed without the DISCONNECT (gateway patch).
func (s *Server) DisconnectClientNoWait(cl *Client, code packets.Code) error {
	return s.disconnectClient(cl, code, false)
}

func (s *Server) disconnectClient(cl *Client, code packets.Code, wait bool) error {
	out := packets.Packet{
		FixedHeader: packets.FixedHeader{
			Type: packets.Disconnect,
		},
		ReasonCode: code.Code,
		Properties: packets.Properties{},
	}

	if code.Code >= packets.ErrUnspecifiedError.Code {
		out.Properties.ReasonString = code.Reason //  // [MQTT-3.14.2-1]
	}

	// We already have a code we are using to disconnect the client, so we are not
	// interested if the write packet fails due to a closed connection (as we are closing it).
	err := cl.writePacket(out, wait)
	if !s.Options.Capabilities.Compatibilities.PassiveClientDisconnect {
		cl.Stop(code)
		if code.Code >= packets.ErrUnspecifiedError.Code {
			return code
		}
	}

	return err
}

// publishSysTopics publishes the current values to the server $SYS topics.
// Due to the int to string conversions this method is not as cheap as
// some of the others so the publishing interval should be set appropriately.
func (s *Server) publishSysTopics() {
	pk := packets.Packet{
		FixedHeader: packets.FixedHeader{
			Type:   packets.Publish,
			Retain: true,
		},
		Created: time.Now().Unix(),
	}

	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	atomic.StoreInt64(&s.Info.MemoryAlloc, int64(m.HeapInuse))
	atomic.StoreInt64(&s.Info.Threads, int64(runtime.NumGoroutine()))
	atomic.StoreInt64(&s.Info.Time, time.Now().Unix())
	atomic.StoreInt64(&s.Info.Uptime, time.Now().Unix()-atomic.LoadInt64(&s.Info.Started))
	atomic.StoreInt64(&s.Info.ClientsTotal, int64(s.Clients.Len()))
	atomic.StoreInt64(&s.Info.ClientsDisconnected, atomic.LoadInt64(&s.Info.ClientsTotal)-atomic.LoadInt64(&s.Info.ClientsConnected))

	info := s.Info.Clone()
	topics := map[string]string{
		SysPrefix + "/broker/version":              s.Info.Version,
		SysPrefix + "/broker/time":                 Int64toa(info.Time),
		SysPrefix + "/broker/uptime":               Int64toa(info.Uptime),
		SysPrefix + "/broker/started":              Int64toa(info.Started),
		SysPrefix + "/broker/load/bytes/received":  Int64toa(info.BytesReceived),
		SysPrefix + "/broker/load/bytes/sent":      Int64toa(info.BytesSent),
		SysPrefix + "/broker/clients/connected":    Int64toa(info.ClientsConnected),
		SysPrefix + "/broker/clients/disconnected": Int64toa(info.ClientsDisconnected),
		SysPrefix + "/broker/clients/maximum":      Int64toa(info.ClientsMaximum),
		SysPrefix + "/broker/clients/total":        Int64toa(info.ClientsTotal),
		SysPrefix + "/broker/packets/received":     Int64toa(info.PacketsReceived),
		SysPrefix + "/broker/packets/sent":         Int64toa(info.PacketsSent),
		SysPrefix + "/broker/messages/received":    Int64toa(info.MessagesReceived),
		SysPrefix + "/broker/messages/sent":        Int64toa(info.MessagesSent),
		SysPrefix + "/broker/messages/dropped":     Int64toa(info.MessagesDropped),
		SysPrefix + "/broker/messages/inflight":    Int64toa(info.Inflight),
		SysPrefix + "/broker/retained":             Int64toa(info.Retained),
		SysPrefix + "/broker/subscriptions":        Int64toa(info.Subscriptions),
		SysPrefix + "/broker/system/memory":        Int64toa(info.MemoryAlloc),
		SysPrefix + "/broker/system/threads":       Int64toa(info.Threads),
	}

	for topic, payload := range topics {
		pk.TopicName = topic
		pk.Payload = []byte(payload)
		s.Topics.RetainMessage(pk.Copy(false))
		s.publishToSubscribers(pk)
	}

	s.hooks.OnSysInfoTick(info)
}

// Close attempts to gracefully shut down the server, all listeners, clients, and stores.
func (s *Server) Close() error {
	close(s.done)
	s.Log.Info("gracefully stopping server")
	s.Listeners.CloseAll(s.closeListenerClients)
	s.handlers.close() // gateway patch 24: the clients have ended
	s.hooks.OnStopped()
	s.hooks.Stop()

	s.Log.Info("mochi mqtt server stopped")
	return nil
}

// closeListenerClients closes all clients on the specified listener.
func (s *Server) closeListenerClients(listener string) {
	clients := s.Clients.GetByListener(listener)
	for _, cl := range clients {
		_ = s.DisconnectClientNoWait(cl, packets.ErrServerShuttingDown) // gateway patch: was DisconnectClient
	}
}

// sendLWT issues an LWT message to a topic when a client disconnects.
// RestoreWill sends the will of cl, a session a storage hook restored
// while the connection that set the will had not ended cleanly (the
// process that held it stopped first): as when a connection ends without
// DISCONNECT, it is sent now, or scheduled for its Will Delay Interval,
// counted from now (gateway patch 19: mochi's own restore, loadClients,
// drops wills). Call it before the server serves.
func (s *Server) RestoreWill(cl *Client) { s.sendLWT(cl) }

func (s *Server) sendLWT(cl *Client) {
	if atomic.LoadUint32(&cl.Properties.Will.Flag) == 0 {
		return
	}

	modifiedLWT := s.hooks.OnWill(cl, cl.Properties.Will)

	pk := packets.Packet{
		FixedHeader: packets.FixedHeader{
			Type:   packets.Publish,
			Retain: modifiedLWT.Retain, // [MQTT-3.1.2-14] [MQTT-3.1.2-15]
			Qos:    modifiedLWT.Qos,
		},
		TopicName:  modifiedLWT.TopicName,
		Payload:    modifiedLWT.Payload,
		Properties: modifiedLWT.PublishProperties(), // gateway patch: was User only
		Origin:     cl.ID,
		Created:    time.Now().Unix(),
		// gateway patch: the will's expiry applies to the copies queued for
		// offline subscribers, as to any MQTT 5 publish (expiry is enforced
		// only on packets of version 5); publishToSubscribers sets Expiry
		// from the interval, capped by MaximumMessageExpiryInterval.
		ProtocolVersion: cl.Properties.ProtocolVersion,
		Ignore:          modifiedLWT.Ignore, // gateway patch
	}

	if cl.Properties.Will.WillDelayInterval > 0 && cl.State.sessionTaken.Load() {
		// gateway patch: a connection carried the session on before the
		// delay passed: the will is not sent [MQTT-3.1.3-9] (upstream
		// scheduled it, and the new connection's establishment could
		// run before, so it went out while the session was live).
		atomic.StoreUint32(&cl.Properties.Will.Flag, 0)
		return
	}
	if cl.Properties.Will.WillDelayInterval > 0 && !cl.IsTakenOver() { // gateway patch: taken over with a clean start, the session has ended: no delay
		pk.Connect.WillProperties.WillDelayInterval = cl.Properties.Will.WillDelayInterval
		pk.Expiry = time.Now().Unix() + int64(pk.Connect.WillProperties.WillDelayInterval)
		s.willOwners.Store(cl.ID, cl)
		s.loop.willDelayed.Add(cl.ID, pk)
		return
	}

	if pk.FixedHeader.Retain {
		s.retainMessage(cl, pk)
	}

	s.publishToSubscribers(pk)                      // [MQTT-3.1.2-8]
	atomic.StoreUint32(&cl.Properties.Will.Flag, 0) // [MQTT-3.1.2-10]
	s.hooks.OnWillSent(cl, pk)
}

// readStore reads in any data from the persistent datastore (if applicable).
func (s *Server) readStore() error {
	if s.hooks.Provides(StoredClients) {
		clients, err := s.hooks.StoredClients()
		if err != nil {
			return fmt.Errorf("failed to load clients; %w", err)
		}
		s.loadClients(clients)
		s.Log.Debug("loaded clients from store", "len", len(clients))
	}

	if s.hooks.Provides(StoredSubscriptions) {
		subs, err := s.hooks.StoredSubscriptions()
		if err != nil {
			return fmt.Errorf("load subscriptions; %w", err)
		}
		s.loadSubscriptions(subs)
		s.Log.Debug("loaded subscriptions from store", "len", len(subs))
	}

	if s.hooks.Provides(StoredInflightMessages) {
		inflight, err := s.hooks.StoredInflightMessages()
		if err != nil {
			return fmt.Errorf("load inflight; %w", err)
		}
		s.loadInflight(inflight)
		s.Log.Debug("loaded inflights from store", "len", len(inflight))
	}

	if s.hooks.Provides(StoredRetainedMessages) {
		retained, err := s.hooks.StoredRetainedMessages()
		if err != nil {
			return fmt.Errorf("load retained; %w", err)
		}
		s.loadRetained(retained)
		s.Log.Debug("loaded retained messages from store", "len", len(retained))
	}

	if s.hooks.Provides(StoredSysInfo) {
		sysInfo, err := s.hooks.StoredSysInfo()
		if err != nil {
			return fmt.Errorf("load server info; %w", err)
		}
		s.loadServerInfo(sysInfo.Info)
		s.Log.Debug("loaded $SYS info from store")
	}

	return nil
}

// loadServerInfo restores server info from the datastore.
func (s *Server) loadServerInfo(v system.Info) {
	if s.Options.Capabilities.Compatibilities.RestoreSysInfoOnRestart {
		atomic.StoreInt64(&s.Info.BytesReceived, v.BytesReceived)
		atomic.StoreInt64(&s.Info.BytesSent, v.BytesSent)
		atomic.StoreInt64(&s.Info.ClientsMaximum, v.ClientsMaximum)
		atomic.StoreInt64(&s.Info.ClientsTotal, v.ClientsTotal)
		atomic.StoreInt64(&s.Info.ClientsDisconnected, v.ClientsDisconnected)
		atomic.StoreInt64(&s.Info.MessagesReceived, v.MessagesReceived)
		atomic.StoreInt64(&s.Info.MessagesSent, v.MessagesSent)
		atomic.StoreInt64(&s.Info.MessagesDropped, v.MessagesDropped)
		atomic.StoreInt64(&s.Info.PacketsReceived, v.PacketsReceived)
		atomic.StoreInt64(&s.Info.PacketsSent, v.PacketsSent)
		atomic.StoreInt64(&s.Info.InflightDropped, v.InflightDropped)
	}
	atomic.StoreInt64(&s.Info.Retained, v.Retained)
	atomic.StoreInt64(&s.Info.Inflight, v.Inflight)
	atomic.StoreInt64(&s.Info.Subscriptions, v.Subscriptions)
}

// loadSubscriptions restores subscriptions from the datastore.
func (s *Server) loadSubscriptions(v []storage.Subscription) {
	for _, sub := range v {
		sb := packets.Subscription{
			Filter:            sub.Filter,
			RetainHandling:    sub.RetainHandling,
			Qos:               sub.Qos,
			RetainAsPublished: sub.RetainAsPublished,
			NoLocal:           sub.NoLocal,
			Identifier:        sub.Identifier,
		}
		if s.Topics.Subscribe(sub.Client, sb) {
			if cl, ok := s.Clients.Get(sub.Client); ok {
				cl.State.Subscriptions.Add(sub.Filter, sb)
			}
		}
	}
}

// loadClients restores clients from the datastore.
func (s *Server) loadClients(v []storage.Client) {
	for _, c := range v {
		cl := s.NewClient(nil, c.Listener, c.ID, false)
		cl.Properties.Username = c.Username
		cl.Properties.Clean = c.Clean
		cl.Properties.ProtocolVersion = c.ProtocolVersion
		cl.Properties.Props = packets.Properties{
			SessionExpiryInterval:     c.Properties.SessionExpiryInterval,
			SessionExpiryIntervalFlag: c.Properties.SessionExpiryIntervalFlag,
			AuthenticationMethod:      c.Properties.AuthenticationMethod,
			AuthenticationData:        c.Properties.AuthenticationData,
			RequestProblemInfoFlag:    c.Properties.RequestProblemInfoFlag,
			RequestProblemInfo:        c.Properties.RequestProblemInfo,
			RequestResponseInfo:       c.Properties.RequestResponseInfo,
			ReceiveMaximum:            c.Properties.ReceiveMaximum,
			TopicAliasMaximum:         c.Properties.TopicAliasMaximum,
			User:                      c.Properties.User,
			MaximumPacketSize:         c.Properties.MaximumPacketSize,
		}
		cl.Properties.Will = Will(c.Will)

		// cancel the context, update cl.State such as disconnected time and stopCause.
		cl.Stop(packets.ErrServerShuttingDown)

		expire := (cl.Properties.ProtocolVersion == 5 && cl.Properties.Props.SessionExpiryInterval == 0) || (cl.Properties.ProtocolVersion < 5 && cl.Properties.Clean)
		s.hooks.OnDisconnect(cl, packets.ErrServerShuttingDown, expire)
		if expire {
			cl.ClearInflights()
			s.UnsubscribeClient(cl)
		} else {
			s.Clients.Add(cl)
		}
	}
}

// loadInflight restores inflight messages from the datastore.
func (s *Server) loadInflight(v []storage.Message) {
	for _, msg := range v {
		if client, ok := s.Clients.Get(msg.Client); ok {
			client.State.Inflight.Set(msg.ToPacket())
		}
	}
}

// loadRetained restores retained messages from the datastore.
func (s *Server) loadRetained(v []storage.Message) {
	for _, msg := range v {
		s.Topics.RetainMessage(msg.ToPacket())
	}
}

// clearExpiredClients deletes all clients which have been disconnected for longer
// than their given expiry intervals.
func (s *Server) clearExpiredClients(dt int64) {
	for id, client := range s.Clients.GetAll() {
		disconnected := client.StopTime()
		if disconnected == 0 {
			continue
		}

		expire := s.Options.Capabilities.MaximumSessionExpiryInterval
		if client.Properties.ProtocolVersion == 5 && client.Properties.Props.SessionExpiryIntervalFlag {
			expire = client.Properties.Props.SessionExpiryInterval
		}

		if disconnected+int64(expire) < dt {
			// gateway patch: only while it still holds the id (a
			// connection may just have taken the session), and its
			// subscriptions go with it (upstream left them in Topics).
			mu := s.sessionLock(id)
			mu.Lock()
			if s.Clients.DeleteIf(id, client) { // [MQTT-4.1.0-2]
				s.hooks.OnClientExpired(client)
				s.UnsubscribeClient(client)
			}
			mu.Unlock()
		}
	}
}

// clearExpiredRetainedMessage deletes retained messages from topics if they have expired.
func (s *Server) clearExpiredRetainedMessages(now int64) {
	for filter, pk := range s.Topics.Retained.GetAll() {
		expired := pk.ProtocolVersion == 5 && pk.Expiry > 0 && pk.Expiry < now // [MQTT-3.3.2-5]

		// If the maximum message expiry interval is set (greater than 0), and the message
		// retention period exceeds the maximum expiry, the message will be forcibly removed.
		enforced := s.Options.Capabilities.MaximumMessageExpiryInterval > 0 &&
			now-pk.Created > s.Options.Capabilities.MaximumMessageExpiryInterval

		if expired || enforced {
			s.Topics.Retained.Delete(filter)
			s.hooks.OnRetainedExpired(filter)
		}
	}
}

// clearExpiredInflights deletes any inflight messages which have expired.
func (s *Server) clearExpiredInflights(now int64) {
	for _, client := range s.Clients.GetAll() {
		if deleted := client.ClearExpiredInflights(now, s.Options.Capabilities.MaximumMessageExpiryInterval); len(deleted) > 0 {
			for _, id := range deleted {
				s.hooks.OnQosDropped(client, packets.Packet{PacketID: id})
			}
		}
	}
}

// sendDelayedLWT sends any LWT messages which have reached their issue time.
func (s *Server) sendDelayedLWT(dt int64) {
	for id, pk := range s.loop.willDelayed.GetAll() {
		if dt > pk.Expiry {
			// Expiry held the end of the delay; the message is published
			// now, and publishToSubscribers sets its expiry from now (gateway
			// patch: upstream sent the will with the delay's end as its
			// expiry, so with an interval of 1 s).
			pk.Expiry, pk.Created = 0, dt
			// gateway patch: the hooks hear of it before the fan-out,
			// so that a retained will is stored before a client that
			// subscribes in between looks for it (it got the will
			// neither live nor stored; TestWillCarriesItsProperties
			// failed now and then on a loaded machine).
			owner, _ := s.willOwners.LoadAndDelete(id)
			cl, ok := s.Clients.Get(id)
			if ok && cl != owner && !cl.Closed() {
				// gateway patch: the id is connected again, so the
				// session came back before the delay passed: no will
				// [MQTT-3.1.3-9], and the new connection's own will is
				// left alone (upstream cleared it).
				s.loop.willDelayed.Delete(id)
				continue
			}
			if ok {
				if pk.FixedHeader.Retain {
					s.retainMessage(cl, pk)
				}
				cl.Properties.Will = Will{} // [MQTT-3.1.2-10]
				s.hooks.OnWillSent(cl, pk)
			}
			s.publishToSubscribers(pk) // [MQTT-3.1.2-8]
			s.loop.willDelayed.Delete(id)
		}
	}
}

// Int64toa converts an int64 to a string.
func Int64toa(v int64) string {
	return strconv.FormatInt(v, 10)
}

// minimum differs from built-in min, it returns minimum of the non-zero value a and b.
// If both a and b are zero value, it reutrns 0.
func minimum(a, b int64) (m int64) {
	if a != 0 {
		m = a
		if b != 0 && b < a {
			m = b
		}
		return
	}

	if b != 0 {
		m = b
	}
	return
}
