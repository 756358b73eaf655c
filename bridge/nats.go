package bridge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tolsey/tolsey/core"
	"github.com/tolsey/tolsey/core/auth"
	"github.com/tolsey/tolsey/retain"
)

// NATSOptions configure the NATS bridge. Zero values take the defaults
// documented on each field.
type NATSOptions struct {
	URLs []string // servers of one cluster
	Name string   // connection name NATS shows

	// Authentication: any of NATS's own methods.
	User, Password string
	Token          string
	NKeyFile       string // NKey seed file
	CredsFile      string // JWT + seed
	TLSCA          string // PEM CAs; any TLS field turns TLS on
	TLSCert        string
	TLSKey         string

	Rules []Rule
	// RetainedRequests, when set, is the subject prefix on which a NATS
	// request for <prefix>.<subject> is answered with the retained message
	// of the mapped topic.
	RetainedRequests string

	Router *core.Router
	Store  retain.Getter // retained requests read it
	Node   string        // node.id: Origin.Node and the hop path
	// Identity is who the rules act as (bridge.identity): inbound
	// messages need publish on their topic, outbound ones subscribe;
	// refused ones are dropped and counted (reason denied).
	Identity Identity
	Logger   *slog.Logger
	// Registerer receives the tolsey_bridge_* collectors; nil registers
	// none.
	Registerer prometheus.Registerer

	// Buffer is where outbound JetStream rules keep messages until
	// JetStream acknowledged them: DrainRate paces the senders; Dir,
	// MaxBytes and the policy are used only without Shared.
	Buffer BufferOptions
	// Shared is the buffer every bridge of the gateway appends to (see
	// AMQPOptions.Shared); the bridge does not close it. Nil: the bridge
	// opens its own in Buffer.Dir and closes it on Stop.
	Shared *SharedBuffer

	// QueueGroup, when set (a cluster: docs/cluster.md), makes every
	// inbound core NATS rule a member of the NATS queue group
	// QueueGroup.<rule name>: the gateways of a cluster, configured alike,
	// take each NATS message once between them, not once each.
	QueueGroup string

	// ReconnectMax caps the reconnect backoff; 10 s when zero.
	ReconnectMax time.Duration
	// QueueLen bounds the core NATS (QoS 0) messages waiting to be written
	// to the connection; beyond it new ones are dropped and counted
	// (reason queue_full). 65536 when zero.
	QueueLen int
	// WriterStall is how long a publisher's core NATS message may wait for
	// room when the queue is full before it is dropped and counted
	// (bridge.nats.writerStall): a writer that keeps up loses nothing to a
	// burst, and one that is stuck holds each publisher at most this long
	// once (docs/bridge.md, "Failure behaviour"). 5 ms when zero; negative:
	// no wait, dropped at once.
	WriterStall time.Duration
}

// BufferOptions configure the on-disk store-and-forward buffer.
type BufferOptions struct {
	Dir        string // one file per outbound JetStream rule
	MaxBytes   int64
	DropOldest bool // else reject new messages when full
	DrainRate  int  // messages/s per rule; 0 = as fast as JetStream acks
}

// DefaultWriterStall is NATSOptions.WriterStall's default, the same bound as
// the MQTT front-end's mqtt.slowSubscriberStall.
const DefaultWriterStall = 5 * time.Millisecond

// bridgeName is the bridge label of the NATS bridge's metrics and status.
const bridgeName = "nats"

// clientID is the Origin.Client of messages the bridge brings in.
const clientID = "bridge:nats"

// NATS links the topic space to a NATS system (core NATS and JetStream).
// It speaks to the core only: outbound rules are router subscribers,
// inbound ones publish into the router.
//
// Goroutines: Deliver runs on publishers' goroutines (router contract: it
// must not block on the network, so core NATS messages go through queue
// to the writer goroutine, a full queue holding a publisher at most
// WriterStall, and JetStream ones to the on-disk buffer);
// inbound handlers run on nats.go's subscription goroutines; nats.go's
// callback goroutine runs the connection handlers; one writer goroutine
// and one sender goroutine per outbound JetStream rule.
type NATS struct {
	opts NATSOptions
	log  *slog.Logger
	m    *natsMetrics
	nc   *nats.Conn

	rules []*ruleLink
	jsShared

	queue *writeQueue[queued] // core NATS messages for the writer goroutine
	done  chan struct{}
	wg    sync.WaitGroup
	path  []string // {Node}: the Tolsey-Path of what we send; read-only

	// Owned by the writer goroutine: what it reuses from one core NATS
	// publish to the next (nats.go's PublishMsg has serialized the message
	// into its buffer when it returns).
	wmsg     nats.Msg
	headers  headerCache
	subjects mapCache[outKey]

	dialer abortDialer // every connection nats.go makes, so Stop can cut it

	// Connection state, written by nats.go's callbacks.
	connected atomic.Bool
	// state is Status's State, kept here rather than asked of nats.go:
	// nc.Status takes the connection's lock, which a flush blocked on a
	// stuck socket holds for up to nats.go's one-minute write timeout.
	state     atomic.Int32 // a connState
	mu        sync.Mutex   // guards lastErr, lastErrAt
	lastErr   string
	lastErrAt time.Time
	closed    chan struct{} // closed by nats.go's ClosedHandler

	unmappable sync.Map // topics already logged as unmappable (logged once each)
	unmapCount atomic.Int64
}

// queued is one core NATS message on its way to the writer.
type queued struct {
	rule *ruleLink
	msg  *core.Message
}

// ruleLink is one rule at run time.
type ruleLink struct {
	b     *NATS
	idx   int
	rule  Rule
	name  string
	mapng *Mapping
	sub   *core.Subscription
	js    *jsOut // outbound JetStream: buffer and sender; nil for core NATS

	out, in, dropped atomic.Uint64 // for the admin API
}

// NewNATS checks opts and builds the bridge; Start connects it.
func NewNATS(opts NATSOptions) (*NATS, error) {
	if len(opts.URLs) == 0 {
		return nil, errors.New("bridge: no NATS URL")
	}
	if opts.Router == nil {
		return nil, errors.New("bridge: no router")
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.ReconnectMax == 0 {
		opts.ReconnectMax = 10 * time.Second
	}
	if opts.QueueLen == 0 {
		opts.QueueLen = 1 << 16
	}
	if opts.WriterStall == 0 {
		opts.WriterStall = DefaultWriterStall
	}
	b := &NATS{
		opts:   opts,
		log:    opts.Logger.With("part", "bridge.nats"),
		queue:  newWriteQueue[queued](opts.QueueLen),
		done:   make(chan struct{}),
		closed: make(chan struct{}),
		path:   []string{opts.Node},
	}
	for i, r := range opts.Rules {
		mp, err := NewMapping(r.Local, r.Remote)
		if err != nil {
			return nil, fmt.Errorf("bridge nats: rule %s: %w", r.Name(i), err)
		}
		b.rules = append(b.rules, &ruleLink{b: b, idx: i, rule: r, name: r.Name(i), mapng: mp})
	}
	// The buffer opens here, before the metrics that read it are
	// registered; Stop closes it.
	if err := b.openJS(); err != nil {
		return nil, err
	}
	b.m = newNATSMetrics(opts.Registerer, b)
	return b, nil
}

// Start connects to NATS and starts every rule. An unreachable NATS does not
// fail it: the connection is retried for ever with backoff and jitter while
// outbound JetStream messages wait in the buffer, and Status says why.
func (b *NATS) Start(ctx context.Context) error {
	nopts, err := b.natsOptions()
	if err != nil {
		return err
	}
	nc, err := nats.Connect(joinURLs(b.opts.URLs), nopts...)
	if err != nil {
		// With RetryOnFailedConnect only a bad option gets here.
		return fmt.Errorf("bridge nats: %w", err)
	}
	b.nc = nc
	if nc.IsConnected() {
		b.connected.Store(true)
		b.setState(stateConnected, stateConnecting)
	} else {
		// RetryOnFailedConnect: nats.go goes on trying.
		b.setState(stateReconnecting, stateConnecting)
	}
	b.wg.Add(1)
	go b.writer()
	for _, r := range b.rules {
		if err := r.start(ctx); err != nil {
			_ = b.Stop(ctx)
			return err
		}
	}
	if p := b.opts.RetainedRequests; p != "" && b.opts.Store != nil {
		if _, err := nc.Subscribe(p+".>", b.answerRetained); err != nil {
			_ = b.Stop(ctx)
			return fmt.Errorf("bridge nats: retained requests on %s: %w", p, err)
		}
	}
	if nc.IsConnected() {
		// Start returns once NATS has the inbound rules' subscriptions (a
		// round trip after them), so that a message published on NATS
		// after Start is not missed (TestInCountedBeforeDelivery missed
		// its one message now and then under -race). A NATS that does not
		// answer in time fails nothing: the rules are subscribed, and are
		// again on every reconnect.
		fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := nc.FlushWithContext(fctx)
		cancel()
		if err != nil {
			b.log.Warn("NATS bridge: no answer from NATS after subscribing", "error", err)
		}
	}
	b.log.Info("NATS bridge started", "urls", redactURLs(b.opts.URLs), "rules", len(b.rules), "connected", nc.IsConnected())
	return nil
}

func (b *NATS) natsOptions() ([]nats.Option, error) {
	o := b.opts
	opts := []nats.Option{
		nats.Name(o.Name),
		nats.SetCustomDialer(&b.dialer),
		// Our own publishes never come back on our subscriptions: the
		// first of the three loop guards (docs/bridge.md, "Loops").
		nats.NoEcho(),
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		// nats.go otherwise closes the connection for good once a server
		// refused the same credentials twice: a password fixed at the
		// NATS side (or an account restored) would then need a gateway
		// restart. Reconnecting for ever includes auth failures.
		nats.IgnoreAuthErrorAbort(),
		nats.CustomReconnectDelay(b.reconnectDelay),
		// No publishing into a buffer while disconnected: a JetStream
		// window would otherwise see its first message lost with the old
		// socket and the next ones sent on the new one, out of order, and
		// core NATS is at most once anyway.
		nats.ReconnectBufSize(-1),
		nats.ConnectHandler(func(nc *nats.Conn) { b.up(nc, "connected") }),
		nats.ReconnectHandler(func(nc *nats.Conn) { b.up(nc, "reconnected") }),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			b.connected.Store(false)
			b.setState(stateReconnecting, stateConnecting, stateConnected)
			if err == nil {
				err = errors.New("disconnected")
			}
			b.fail("disconnected", err)
		}),
		nats.ReconnectErrHandler(func(_ *nats.Conn, err error) { b.fail("connect failed", err) }),
		nats.ErrorHandler(func(_ *nats.Conn, s *nats.Subscription, err error) {
			if errors.Is(err, nats.ErrSlowConsumer) {
				b.m.drop("slow_consumer")
				return
			}
			b.fail("error", err)
		}),
		nats.ClosedHandler(func(*nats.Conn) {
			b.connected.Store(false)
			b.state.Store(int32(stateClosed))
			close(b.closed)
		}),
	}
	if o.User != "" {
		opts = append(opts, nats.UserInfo(o.User, o.Password))
	}
	if o.Token != "" {
		opts = append(opts, nats.Token(o.Token))
	}
	if o.NKeyFile != "" {
		opt, err := nats.NkeyOptionFromSeed(o.NKeyFile)
		if err != nil {
			return nil, fmt.Errorf("bridge nats: nkey %s: %w", o.NKeyFile, err)
		}
		opts = append(opts, opt)
	}
	if o.CredsFile != "" {
		opts = append(opts, nats.UserCredentials(o.CredsFile))
	}
	if o.TLSCA != "" {
		opts = append(opts, nats.RootCAs(o.TLSCA))
	}
	if o.TLSCert != "" {
		opts = append(opts, nats.ClientCert(o.TLSCert, o.TLSKey))
	}
	return opts, nil
}

// reconnectDelay is backoff with ReconnectMax, for nats.go.
func (b *NATS) reconnectDelay(attempts int) time.Duration {
	return backoff(attempts, b.opts.ReconnectMax)
}

func (b *NATS) up(nc *nats.Conn, what string) {
	b.connected.Store(true)
	b.setState(stateConnected, stateConnecting, stateReconnecting)
	b.log.Info("NATS bridge "+what, "url", redactURL(nc.ConnectedUrl()))
	for _, r := range b.rules {
		if r.js != nil {
			r.js.linkUp()
		}
	}
}

func (b *NATS) fail(what string, err error) {
	b.mu.Lock()
	repeat := b.lastErr == err.Error()
	b.lastErr, b.lastErrAt = err.Error(), time.Now()
	b.mu.Unlock()
	// A down NATS fails every reconnect the same way: log the change, not
	// each attempt.
	if !repeat {
		b.log.Warn("NATS bridge "+what, "error", err)
	} else {
		b.log.Debug("NATS bridge "+what, "error", err)
	}
}

// Stop unsubscribes the rules (no new message is taken), stops the
// senders, drains the connection and closes the buffers. When ctx ends
// first, the connection's socket is cut (dialer.abort): a write blocked
// on a NATS peer that stopped reading, which holds nats.go's connection
// lock for up to its one-minute write timeout, returns at once, and so
// does everything waiting for that lock.
func (b *NATS) Stop(ctx context.Context) error {
	for _, r := range b.rules {
		b.opts.Router.Unsubscribe(r.sub)
	}
	select {
	case <-b.done:
		return nil
	default:
	}
	close(b.done)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		for _, r := range b.rules {
			r.stop()
		}
		b.wg.Wait()
		if b.nc == nil {
			return
		}
		// Asked of our own state, not of nats.go: nc.IsConnected takes
		// the lock a stuck write holds.
		if b.connected.Load() {
			b.setState(stateDraining, stateConnected)
			_ = b.nc.Drain()
		} else {
			b.nc.Close()
		}
		<-b.closed
	}()
	select {
	case <-stopped:
	case <-ctx.Done():
		b.dialer.abort()
		if b.nc != nil {
			b.nc.Close()
		}
		<-stopped
	}
	return b.closeJS()
}

// start subscribes the rule in the directions it has.
func (r *ruleLink) start(ctx context.Context) error {
	b := r.b
	if r.rule.Direction.Inbound() {
		if r.rule.JetStream.Enabled {
			if err := r.startJSIn(ctx); err != nil {
				return err
			}
		} else {
			// A filter ending in "#" maps to two subjects: its parent
			// level and everything below [MQTT-4.7.1-2].
			for _, subj := range r.mapng.Subjects() {
				var err error
				if g := b.opts.QueueGroup; g != "" {
					_, err = b.nc.QueueSubscribe(subj, g+"."+r.name, r.inbound())
				} else {
					_, err = b.nc.Subscribe(subj, r.inbound())
				}
				if err != nil {
					return fmt.Errorf("bridge nats: rule %s: subscribe %s: %w", r.name, subj, err)
				}
			}
		}
	}
	if r.rule.Direction.Outbound() {
		if r.js != nil {
			r.js.start()
		}
		sub, err := b.opts.Router.Subscribe(r.rule.Local, r, core.SubOptions{
			QoS: r.rule.QoS,
			// What came in over NATS never goes back out to it: the
			// second loop guard.
			SkipOrigin: core.ProtocolNATS,
			// What another gateway of the cluster took in, that
			// gateway's bridges send: sent from here too, it would
			// reach NATS twice (docs/cluster.md, "Exactly once").
			LocalOnly: true,
		})
		if err != nil {
			return fmt.Errorf("bridge nats: rule %s: %w", r.name, err)
		}
		r.sub = sub
	}
	return nil
}

func (r *ruleLink) stop() {
	if r.js != nil {
		r.js.stop()
	}
}

// Deliver implements core.Subscriber for an outbound rule. It runs on the
// publisher's goroutine and never waits on the network longer than a
// bound: a core NATS message is queued for the writer (when the queue is
// full, the publisher waits up to WriterStall for the writer to free room,
// as NATS stalls a producer whose subscribers' buffers are full; then it
// is dropped and counted: at most once), a JetStream one is handed to the
// on-disk buffer,
// and the publisher's acknowledgement (MQTT PUBACK, AMQP accepted) is
// held (d.Acks) until the buffer's commit made it durable (jsOut.append).
// A full buffer under rejectNew is a refusal the publisher sees.
func (r *ruleLink) Deliver(m *core.Message, d core.Delivery) error {
	if !r.b.opts.Identity.allowed(auth.Subscribe, clientID, m.Topic) {
		r.dropped.Add(1)
		r.b.m.drop("denied")
		return nil
	}
	if r.js != nil {
		r.js.append(m, d.Acks)
		return nil
	}
	if !r.b.queue.putStall(queued{r, m}, r.b.opts.WriterStall, r.b.done) {
		r.dropped.Add(1)
		r.b.m.drop(fullOrStopping(r.b.done))
	}
	return nil
}

// fullOrStopping is the reason a QoS 0 message found no room in a
// writer's queue: queue_full, or stopping once the bridge stops (its
// writer takes nothing more).
func fullOrStopping(done <-chan struct{}) string {
	select {
	case <-done:
		return "stopping"
	default:
		return "queue_full"
	}
}

// writer publishes queued core NATS messages, a burst at a time. nats.go's
// publish may write to the socket when its buffer fills, so it runs here,
// not in Deliver. When the bridge stops (its rules are unsubscribed by
// then), it publishes what is still queued before it returns, so that a
// graceful stop loses no QoS 0 message a NATS that keeps up would take:
// Stop drains the connection after it. Behind a NATS that takes nothing,
// Stop's deadline cuts the socket and the rest fail at once
// (remote_error).
func (b *NATS) writer() {
	defer b.wg.Done()
	var burst []queued
	for {
		stopping := false
		select {
		case <-b.queue.ready:
		case <-b.done:
			stopping = true
		}
		for {
			if stopping {
				burst = b.queue.takeLast(burst) // nothing comes after: Deliver counts it stopping
			} else {
				burst = b.queue.take(burst)
			}
			if len(burst) == 0 {
				break
			}
			chunk := b.queue.chunk()
			for i := range burst {
				b.publishCore(burst[i].rule, burst[i].msg)
				if (i+1)%chunk == 0 {
					b.queue.release(chunk) // stalled publishers go on
				}
			}
			clear(burst) // the writer keeps no message alive
		}
		if stopping {
			return
		}
	}
}

func (b *NATS) publishCore(r *ruleLink, m *core.Message) {
	subj, err := b.subjectOut(r, m.Topic)
	if err != nil {
		r.unmappable(m.Topic, err)
		return
	}
	msg := &b.wmsg
	msg.Subject, msg.Data = subj, m.Payload
	if h := b.headers.get(m, b.path); h != nil {
		msg.Header = h
	} else {
		msg.Header = EncodeHeaders(m, Provenance{Origin: m.Origin, Path: b.path}, time.Now())
	}
	err = b.nc.PublishMsg(msg)
	msg.Data = nil // the writer keeps no payload alive
	if err != nil {
		r.dropped.Add(1)
		b.m.drop("remote_error")
		b.log.Debug("NATS publish failed", "subject", subj, "error", err)
		return
	}
	r.out.Add(1)
	b.m.message(r, "out")
}

// unmappable counts a topic that cannot be a NATS subject, and logs it the
// first time (up to a bound, so that a flood of new topics cannot grow the
// set without limit).
func (r *ruleLink) unmappable(topic string, err error) {
	b := r.b
	r.dropped.Add(1)
	b.m.drop("unmappable")
	if b.unmapCount.Load() >= 10000 {
		return
	}
	if _, seen := b.unmappable.Load(topic); seen {
		return
	}
	// A copy: the topic may point into the message's whole packet.
	if _, seen := b.unmappable.LoadOrStore(strings.Clone(topic), struct{}{}); !seen {
		b.unmapCount.Add(1)
		b.log.Warn("topic not sent to NATS: not expressible as a subject", "topic", topic, "rule", r.name, "error", err)
	}
}

// inbound is the handler of one core NATS subscription of r: it brings a
// message in on the subscription's goroutine, which owns the handler's
// cache of subjects mapped.
func (r *ruleLink) inbound() nats.MsgHandler {
	var c mapCache[string]
	return func(msg *nats.Msg) { r.publishIn(msg, &c) }
}

// publishIn maps msg (through c, the calling goroutine's cache; nil: none)
// and publishes it into the router, and reports whether the message is
// done with (false: the router's retained store failed, so a JetStream
// message should be redelivered).
func (r *ruleLink) publishIn(msg *nats.Msg, c *mapCache[string]) bool {
	b := r.b
	now := time.Now()
	m := &core.Message{Payload: msg.Data}
	p, err := DecodeHeaders(msg.Header, m, now)
	if err != nil {
		r.dropped.Add(1)
		b.m.drop("bad_header")
		b.log.Debug("NATS message not brought in: bad header", "subject", msg.Subject, "error", err)
		return true
	}
	if p.Loops(b.opts.Node) {
		// Our own message come back by another way (a second
		// connection, a leaf node, another gateway's relay), or one
		// that passed MaxHops gateways: the third loop guard.
		r.dropped.Add(1)
		b.m.drop("loop")
		return true
	}
	topic, err := r.topicIn(c, msg.Subject) // a valid topic when err is nil
	if err != nil {
		r.dropped.Add(1)
		b.m.drop("unmappable")
		b.log.Debug("NATS message not brought in: subject has no topic", "subject", msg.Subject, "error", err)
		return true
	}
	if !b.opts.Identity.allowed(auth.Publish, clientID, topic) {
		r.dropped.Add(1)
		b.m.drop("denied")
		b.log.Debug("NATS message not brought in: bridge.identity may not publish there", "subject", msg.Subject, "topic", topic)
		return true
	}
	m.Topic = topic
	m.QoS = r.rule.QoS
	m.Created = now
	m.Origin = core.Origin{Protocol: core.ProtocolNATS, Node: b.opts.Node, Client: clientID}
	// Counted before the router delivers it: whoever received it then
	// reads a count that holds it (TestInCountedBeforeDelivery).
	r.in.Add(1)
	b.m.message(r, "in")
	res := b.opts.Router.Publish(context.Background(), m) // the store write is bounded by retain.WriteTimeout
	if res.RetainErr != nil {
		return retain.Refused(res.RetainErr, nil, b.log, "topic", topic, "bridge", bridgeName) != retain.StoreFailed
	}
	return true
}

// answerRetained answers a request on <prefix>.<subject> with the retained
// message of the subject's topic: its payload and headers, or an empty
// message with header Tolsey-Retained: none.
func (b *NATS) answerRetained(msg *nats.Msg) {
	if msg.Reply == "" {
		return
	}
	subj := msg.Subject[len(b.opts.RetainedRequests)+1:]
	reply := nats.NewMsg(msg.Reply)
	topic, err := SubjectToTopic(subj)
	var rm *core.Message
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), retain.WriteTimeout)
		rm, err = b.opts.Store.Get(ctx, topic)
		cancel()
	}
	switch {
	case err != nil:
		reply.Header.Set("Tolsey-Retained", "error")
		reply.Header.Set("Tolsey-Error", err.Error())
	case rm == nil:
		reply.Header.Set("Tolsey-Retained", "none")
	default:
		reply = b.toNATS(msg.Reply, rm, "", time.Now())
		reply.Header.Set("Tolsey-Topic", rm.Topic)
	}
	_ = msg.RespondMsg(reply)
}

// toNATS builds the NATS message of m for subject: its fields as headers
// (docs/bridge.md, "Headers"), its first origin, and a path that holds
// this gateway. m never came in over NATS (SkipOrigin), so the path starts
// here.
func (b *NATS) toNATS(subject string, m *core.Message, msgID string, now time.Time) *nats.Msg {
	p := Provenance{Origin: m.Origin, Path: b.path, MsgID: msgID}
	return &nats.Msg{Subject: subject, Data: m.Payload, Header: EncodeHeaders(m, p, now)}
}

// Status is the bridge's state for the admin API and /readyz.
type Status struct {
	Name        string       `json:"name"`
	URLs        []string     `json:"urls"`
	State       string       `json:"state"` // connected, connecting, reconnecting, closed
	Connected   bool         `json:"connected"`
	LastError   string       `json:"lastError,omitempty"`
	LastErrorAt *time.Time   `json:"lastErrorAt,omitempty"`
	Rules       []RuleStatus `json:"rules"`
}

// RuleStatus is one rule's counts.
type RuleStatus struct {
	Name      string       `json:"name"`
	Direction Direction    `json:"direction"`
	Local     string       `json:"local"`
	Remote    string       `json:"remote"`
	QoS       byte         `json:"qos"`
	JetStream bool         `json:"jetstream"`
	Out       uint64       `json:"out"`
	In        uint64       `json:"in"`
	Dropped   uint64       `json:"dropped"`
	Buffer    *BufferStats `json:"buffer,omitempty"`
}

// BufferStats is what an outbound JetStream rule holds on disk.
type BufferStats struct {
	Messages int64  `json:"messages"`
	Bytes    int64  `json:"bytes"`
	MaxBytes int64  `json:"maxBytes"`
	Rejected uint64 `json:"rejected"`
	Dropped  uint64 `json:"droppedOldest"`
}

// connState is the connection's state as Status names it (stateNames).
type connState int32

const (
	stateConnecting connState = iota
	stateConnected
	stateReconnecting
	stateDraining
	stateClosed
)

var stateNames = [...]string{"connecting", "connected", "reconnecting", "draining", "closed"}

// setState moves the state to s if it is one of from: a callback that
// comes late (a disconnect during the drain) does not undo a later state.
func (b *NATS) setState(s connState, from ...connState) {
	for {
		cur := connState(b.state.Load())
		ok := false
		for _, f := range from {
			ok = ok || cur == f
		}
		if !ok || b.state.CompareAndSwap(int32(cur), int32(s)) {
			return
		}
	}
}

// Status reports the connection and every rule.
func (b *NATS) Status() Status {
	s := Status{Name: bridgeName, URLs: redactURLs(b.opts.URLs), Connected: b.connected.Load(), State: stateNames[b.state.Load()]}
	b.mu.Lock()
	s.LastError = b.lastErr
	if !b.lastErrAt.IsZero() {
		t := b.lastErrAt.UTC()
		s.LastErrorAt = &t
	}
	b.mu.Unlock()
	for _, r := range b.rules {
		rs := RuleStatus{Name: r.name, Direction: r.rule.Direction, Local: r.rule.Local, Remote: r.rule.Remote,
			QoS: r.rule.QoS, JetStream: r.rule.JetStream.Enabled, Out: r.out.Load(), In: r.in.Load(), Dropped: r.dropped.Load()}
		if r.js != nil {
			st := r.js.stats()
			rs.Buffer = &st
		}
		s.Rules = append(s.Rules, rs)
	}
	return s
}

// Conn is the bridge's NATS connection, which the cluster shares
// (docs/cluster.md): nil before Start. It is made with NoEcho, so a
// subscriber on it never receives what this gateway published.
func (b *NATS) Conn() *nats.Conn { return b.nc }

// Down returns why the bridge cannot reach NATS, or nil while it can.
func (b *NATS) Down() error {
	if b.connected.Load() {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.lastErr == "" {
		return errors.New("connecting")
	}
	return errors.New(b.lastErr)
}

func joinURLs(us []string) string {
	s := ""
	for i, u := range us {
		if i > 0 {
			s += ","
		}
		s += u
	}
	return s
}

// redactURL hides a password in a URL before it is logged or shown.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return s
	}
	return u.Redacted()
}

func redactURLs(us []string) []string {
	out := make([]string, len(us))
	for i, u := range us {
		out[i] = redactURL(u)
	}
	return out
}
