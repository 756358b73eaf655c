package bridge

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goamqp "github.com/Azure/go-amqp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tolsey/tolsey/bridge/buffer"
	"github.com/tolsey/tolsey/core"
	"github.com/tolsey/tolsey/core/auth"
	"github.com/tolsey/tolsey/retain"
)

// AMQPNodeProperty is the connection property (in the open frame) in which
// a Tolsey gateway's AMQP server names its node.id. A bridge connected to
// one learns the remote's node id from it, for loop prevention: a message
// whose path holds the remote is not sent back to it.
const AMQPNodeProperty = "tolsey:node"

// amqpWindow is how many buffered QoS 1 messages a sender has in flight
// (sent, outcome not yet known) before it waits for their outcomes.
const amqpWindow = 64

// AMQPOptions configure one remote AMQP 1.0 bridge.
type AMQPOptions struct {
	Bridge     AMQPBridge
	Router     *core.Router
	Node       string // node.id: the hop path
	Logger     *slog.Logger
	Registerer prometheus.Registerer // nil registers nothing
	// Buffer configures the on-disk buffer that holds outbound QoS 1
	// messages until the remote accepted them: DrainRate paces the
	// senders; Dir, MaxBytes and the policy are used only without Shared.
	Buffer BufferOptions
	// Shared is the buffer every bridge of the gateway appends to, so
	// that bridge.buffer.maxBytes is one budget for all of them; the
	// bridge does not close it. Nil: the bridge opens its own in
	// Buffer.Dir and closes it on Stop.
	Shared *SharedBuffer
	// ReconnectMax caps the reconnect backoff; 10 s when zero.
	ReconnectMax time.Duration
	// QueueLen bounds the QoS 0 messages waiting for a rule's sender;
	// 4096 when zero.
	QueueLen int
	// Identity is who the rules act as (bridge.identity), as for the NATS
	// bridge; an inbound message it may not publish is rejected.
	Identity Identity
}

// AMQP links the topic space to a remote AMQP 1.0 broker, with go-amqp as
// the client. Like the NATS bridge it speaks to the core only.
//
// Goroutines: Deliver runs on publishers' goroutines and never waits on
// the network (QoS 0 goes through a bounded queue, a full one holding a
// publisher at most Bridge.WriterStall; QoS 1 to the on-disk buffer); one connection goroutine (run) dials, keeps and redials the
// connection; one goroutine per rule owns that rule's link.
type AMQP struct {
	opts   AMQPOptions
	log    *slog.Logger
	m      *amqpMetrics
	client string // Origin.Client of what the bridge brings in
	rules  []*amqpRule
	buf    *buffer.Buffer // nil without QoS 1 outbound rules
	epoch  string         // buf's epoch: the message-id's rule part is epoch/queue
	ownBuf bool           // buf is ours to close (no Shared buffer)

	done chan struct{}
	wg   sync.WaitGroup

	connected atomic.Bool
	mu        sync.Mutex // guards the fields below; written by run, read by rules and Status
	sess      *goamqp.Session
	gen       uint64        // connection generation: a rule whose link failed on an old one waits for the next
	up        chan struct{} // closed when a connection is up; replaced when it goes down
	remote    string        // remote node id, when the remote is a Tolsey gateway
	state     string
	lastErr   string
	lastErrAt time.Time
}

// amqpRule is one rule at run time.
type amqpRule struct {
	b     *AMQP
	idx   int
	rule  AMQPRule
	name  string
	sub   *core.Subscription
	queue *writeQueue[*core.Message] // QoS 0 out
	bq    string                     // QoS 1 out: the rule's queue in the buffer

	out, in, dropped atomic.Uint64

	// Owned by the rule's goroutine (sendQoS1): how many times in a row
	// the remote released or modified record retrySeq.
	retrySeq uint64
	retries  int
	// Owned by the rule's goroutine (sendQoS0): the burst taken from
	// queue, and how much of it was sent (or dropped); what a failed link
	// left of it goes out on the next link first.
	burst []*core.Message
	sent  int
}

// NewAMQP checks opts and builds the bridge; Start connects it.
func NewAMQP(opts AMQPOptions) (*AMQP, error) {
	if opts.Router == nil {
		return nil, errors.New("bridge amqp: no router")
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.ReconnectMax == 0 {
		opts.ReconnectMax = 10 * time.Second
	}
	if opts.QueueLen == 0 {
		opts.QueueLen = 4096
	}
	if opts.Bridge.WriterStall == 0 {
		opts.Bridge.WriterStall = DefaultWriterStall
	}
	name := opts.Bridge.Name
	b := &AMQP{
		opts:   opts,
		log:    opts.Logger.With("part", "bridge.amqp", "bridge", name),
		client: "bridge:amqp:" + name,
		done:   make(chan struct{}),
		up:     make(chan struct{}),
		state:  "connecting",
	}
	needBuf := false
	for i, r := range opts.Bridge.Rules {
		ar := &amqpRule{b: b, idx: i, rule: r, name: r.Name(i)}
		if r.Direction == Out {
			if r.QoS == 0 {
				ar.queue = newWriteQueue[*core.Message](opts.QueueLen)
			} else {
				// Named by what the rule connects, so reordering rules
				// keeps each one's messages.
				ar.bq = "amqp:" + name + ":" + r.Local + ">" + r.Remote
				needBuf = true
			}
		}
		b.rules = append(b.rules, ar)
	}
	switch {
	case needBuf && opts.Shared != nil:
		b.buf, b.epoch = opts.Shared.buf, opts.Shared.epoch
	case needBuf:
		ab, err := OpenSharedBuffer(opts.Buffer)
		if err != nil {
			return nil, fmt.Errorf("bridge amqp %s: %w", name, err)
		}
		b.buf, b.epoch, b.ownBuf = ab.buf, ab.epoch, true
	}
	b.m = newAMQPMetrics(opts.Registerer, b)
	return b, nil
}

// Start starts the connection goroutine and the rules. An unreachable
// remote does not fail it: the connection is retried for ever.
func (b *AMQP) Start(context.Context) error {
	for _, r := range b.rules {
		if r.rule.Direction == Out {
			sub, err := b.opts.Router.Subscribe(r.rule.Local, r, core.SubOptions{
				QoS: r.rule.QoS,
				// What came in over this bridge never goes back out over
				// it: the first loop guard (docs/bridge.md).
				NoLocal: true, Client: b.client,
				// What another gateway of the cluster took in, that
				// gateway's bridges send (docs/cluster.md).
				LocalOnly: true,
			})
			if err != nil {
				_ = b.Stop(context.Background())
				return fmt.Errorf("bridge amqp %s: rule %s: %w", b.opts.Bridge.Name, r.name, err)
			}
			r.sub = sub
		}
		b.wg.Add(1)
		go r.run()
	}
	b.wg.Add(1)
	go b.run()
	b.log.Info("AMQP bridge started", "url", redactURL(b.opts.Bridge.URL), "rules", len(b.rules))
	return nil
}

// Stop unsubscribes the rules, closes the links and the connection and
// the buffer.
func (b *AMQP) Stop(context.Context) error {
	for _, r := range b.rules {
		if r.sub != nil {
			b.opts.Router.Unsubscribe(r.sub)
		}
	}
	select {
	case <-b.done:
		return nil
	default:
	}
	close(b.done)
	b.wg.Wait()
	if b.ownBuf {
		return b.buf.Close()
	}
	return nil
}

// NeedsBuffer reports whether a bridge has a QoS 1 outbound rule, which
// needs the buffer.
func (br *AMQPBridge) NeedsBuffer() bool {
	for _, r := range br.Rules {
		if r.Direction == Out && r.QoS > 0 {
			return true
		}
	}
	return false
}

func (b *AMQP) connOptions() (*goamqp.ConnOptions, error) {
	br := b.opts.Bridge
	o := &goamqp.ConnOptions{
		// Ours, so a remote Tolsey gateway's logs and NoLocal name the
		// bridge that published.
		ContainerID: "tolsey-bridge:" + b.opts.Node + ":" + br.Name,
		Properties:  map[string]any{AMQPNodeProperty: b.opts.Node},
	}
	if br.SASL == "plain" {
		o.SASLType = goamqp.SASLTypePlain(br.User, br.Password)
	} else {
		o.SASLType = goamqp.SASLTypeAnonymous()
	}
	if br.TLSCA != "" || br.TLSCert != "" {
		tc := &tls.Config{MinVersion: tls.VersionTLS12}
		if br.TLSCA != "" {
			pem, err := os.ReadFile(br.TLSCA)
			if err != nil {
				return nil, err
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("%s: no PEM certificate", br.TLSCA)
			}
			tc.RootCAs = pool
		}
		if br.TLSCert != "" {
			c, err := tls.LoadX509KeyPair(br.TLSCert, br.TLSKey)
			if err != nil {
				return nil, err
			}
			tc.Certificates = []tls.Certificate{c}
		}
		o.TLSConfig = tc
	}
	return o, nil
}

// backoff is backoff with ReconnectMax.
func (b *AMQP) backoff(attempt int) time.Duration {
	return backoff(attempt, b.opts.ReconnectMax)
}

// wait waits d, or until Stop; false on Stop.
func (b *AMQP) wait(d time.Duration) bool { return sleep(d, b.done) }

// run is the connection goroutine: dial, open one session, let the rules
// attach, wait for the connection to end, back off, again.
func (b *AMQP) run() {
	defer b.wg.Done()
	attempt := 0
	for {
		opts, err := b.connOptions()
		var conn *goamqp.Conn
		var sess *goamqp.Session
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			conn, err = goamqp.Dial(ctx, b.opts.Bridge.URL, opts)
			if err == nil {
				sess, err = conn.NewSession(ctx, nil)
				if err != nil {
					_ = conn.Close()
				}
			}
			cancel()
		}
		if err != nil {
			b.fail("connect failed", b.explain(err))
			if !b.wait(b.backoff(attempt)) {
				return
			}
			attempt++
			continue
		}
		attempt = 0
		remote, _ := conn.Properties()[AMQPNodeProperty].(string)
		b.mu.Lock()
		b.sess, b.remote, b.state = sess, remote, "connected"
		b.gen++
		close(b.up)
		b.mu.Unlock()
		b.connected.Store(true)
		b.log.Info("AMQP bridge connected", "url", redactURL(b.opts.Bridge.URL), "remoteNode", remote)
		select {
		case <-conn.Done():
			err = conn.Err()
			if err == nil {
				err = errors.New("connection closed")
			}
		case <-b.done:
		}
		b.connected.Store(false)
		b.mu.Lock()
		b.sess, b.state = nil, "reconnecting"
		b.up = make(chan struct{})
		b.mu.Unlock()
		select {
		case <-b.done:
			b.mu.Lock()
			b.state = "closed"
			b.mu.Unlock()
			_ = conn.Close()
			return
		default:
		}
		_ = conn.Close()
		b.fail("disconnected", err)
		if !b.wait(b.backoff(0)) {
			return
		}
	}
}

// session waits for a connection newer than gen and returns its session
// and generation; ok is false on Stop.
func (b *AMQP) session(gen uint64) (*goamqp.Session, uint64, bool) {
	for {
		b.mu.Lock()
		s, g, up := b.sess, b.gen, b.up
		b.mu.Unlock()
		if s != nil && g > gen {
			return s, g, true
		}
		if s != nil {
			// The link failed on a live connection (the remote closed it,
			// the address is missing): retry on it after a pause.
			return s, g, true
		}
		select {
		case <-up:
		case <-b.done:
			return nil, 0, false
		}
	}
}

// explain says what a TLS or SASL failure means, for the log and
// lastError. go-amqp (v1.7.0, conn.go negotiateSASL) reports the remote's
// SASL outcome as an untyped error with the outcome's code only ("SASL
// PLAIN auth failed with code 0x1:"), so it is recognised by its text; a
// typed error upstream would let this use errors.As. Code 1 is sasl-code
// auth (AMQP 1.0 §5.3.3.6): credentials refused.
func (b *AMQP) explain(err error) error {
	var unknownCA x509.UnknownAuthorityError
	var badHost x509.HostnameError
	switch {
	case errors.As(err, &unknownCA) && b.opts.Bridge.TLSCA != "":
		return fmt.Errorf("TLS: the remote's certificate is not signed by the CA in tls.ca %s: %w", b.opts.Bridge.TLSCA, err)
	case errors.As(err, &unknownCA):
		return fmt.Errorf("TLS: the remote's certificate is not signed by a CA the system trusts (set tls.ca): %w", err)
	case errors.As(err, &badHost):
		return fmt.Errorf("TLS: the remote's certificate is not for the URL's host: %w", err)
	}
	msg := err.Error()
	switch {
	case strings.Contains(msg, "auth failed with code 0x1"):
		return fmt.Errorf("authentication failed: the remote refused user %q's credentials (SASL PLAIN): %w", b.opts.Bridge.User, err)
	case strings.Contains(msg, "auth failed with code"):
		return fmt.Errorf("authentication failed: the remote's SASL outcome was not ok: %w", err)
	case strings.Contains(msg, "no supported auth mechanism"):
		return fmt.Errorf("authentication failed: the remote offers no SASL mechanism the bridge is set for (sasl: %s): %w", b.opts.Bridge.SASL, err)
	}
	return err
}

func (b *AMQP) remoteNode() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.remote
}

func (b *AMQP) fail(what string, err error) {
	b.mu.Lock()
	repeat := b.lastErr == err.Error()
	b.lastErr, b.lastErrAt = err.Error(), time.Now()
	b.mu.Unlock()
	// A down remote fails every reconnect the same way: log the change.
	if !repeat {
		b.log.Warn("AMQP bridge "+what, "error", err)
	} else {
		b.log.Debug("AMQP bridge "+what, "error", err)
	}
}

// run is a rule's goroutine: attach its link on the current connection,
// work it until it fails, again (with backoff) until Stop.
func (r *amqpRule) run() {
	b := r.b
	defer b.wg.Done()
	var gen uint64
	attempt := 0
	for {
		sess, g, ok := b.session(gen)
		if !ok {
			return
		}
		gen = g
		before := r.progress()
		var err error
		switch {
		case r.rule.Direction == In:
			err = r.receive(sess)
		case r.queue != nil:
			err = r.sendQoS0(sess)
		default:
			err = r.sendQoS1(sess)
		}
		select {
		case <-b.done:
			return
		default:
		}
		if r.progress() != before {
			// The link carried messages: a failure now is a new one, not
			// the n-th in a row, and gets the short backoff again.
			attempt = 0
		}
		if err != nil {
			b.fail("rule "+r.name, err)
			attempt++
		}
		if !b.wait(b.backoff(attempt)) {
			return
		}
	}
}

// progress is what the rule has carried or dropped so far.
func (r *amqpRule) progress() uint64 { return r.out.Load() + r.in.Load() + r.dropped.Load() }

// receive reads the rule's remote address with credit and publishes each
// message into the router, settling it after Publish returned.
func (r *amqpRule) receive(sess *goamqp.Session) error {
	b := r.b
	mode := goamqp.SenderSettleModeUnsettled
	if r.rule.QoS == 0 {
		mode = goamqp.SenderSettleModeSettled
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	rcv, err := sess.NewReceiver(ctx, r.rule.Remote, &goamqp.ReceiverOptions{Credit: 256, RequestedSenderSettleMode: mode.Ptr()})
	cancel()
	if err != nil {
		return fmt.Errorf("attach receiver to %s: %w", r.rule.Remote, err)
	}
	defer closeLink(rcv.Close)
	// Receive returns when a message comes, the link fails or Stop.
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-b.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	for {
		am, err := rcv.Receive(ctx, nil)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("receive from %s: %w", r.rule.Remote, err)
		}
		outcome, why := r.publishIn(am)
		if mode == goamqp.SenderSettleModeSettled {
			continue
		}
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		switch outcome {
		case "accept":
			err = rcv.AcceptMessage(sctx, am)
		case "reject":
			err = rcv.RejectMessage(sctx, am, &goamqp.Error{Condition: goamqp.ErrCondDecodeError, Description: why})
		default:
			err = rcv.ReleaseMessage(sctx, am)
		}
		scancel()
		if err != nil {
			return fmt.Errorf("settle on %s: %w", r.rule.Remote, err)
		}
	}
}

// publishIn maps am and publishes it: "accept" when done with (published,
// or dropped as a loop), "reject" when it cannot be mapped, "release" when
// the retained store failed (the remote gives it again).
func (r *amqpRule) publishIn(am *goamqp.Message) (string, string) {
	b := r.b
	now := time.Now()
	m := &core.Message{}
	topic, path, err := fromAMQP(am, m, now)
	if err != nil {
		r.dropped.Add(1)
		b.m.drop("unmappable")
		b.log.Debug("AMQP message not brought in", "rule", r.name, "error", err)
		return "reject", err.Error()
	}
	if len(path) >= MaxHops || slices.Contains(path, b.opts.Node) {
		// Our own message come back: the third loop guard.
		r.dropped.Add(1)
		b.m.drop("loop")
		return "accept", ""
	}
	topic, err = r.topicIn(topic, am)
	if err != nil {
		r.dropped.Add(1)
		b.m.drop("unmappable")
		b.log.Debug("AMQP message not brought in: no topic", "rule", r.name, "error", err)
		return "reject", err.Error()
	}
	// The remote is a hop of the path when it is a gateway that did not
	// write itself in (its own server delivered the message).
	if rn := b.remoteNode(); rn != "" && (len(path) == 0 || path[len(path)-1] != rn) {
		path = append(path, rn)
	}
	if len(path) > 0 {
		m.UserProperties = append(m.UserProperties, core.UserProperty{Key: AMQPPathProperty, Value: joinPath(path)})
	}
	if !b.opts.Identity.allowed(auth.Publish, b.client, topic) {
		r.dropped.Add(1)
		b.m.drop("denied")
		return "reject", "bridge.identity is not authorised to publish to " + core.ShortTopic(topic)
	}
	m.Topic = topic
	m.QoS = r.rule.QoS // as the NATS bridge: the rule says at which QoS our subscribers get it
	m.Created = now
	m.Origin = core.Origin{Protocol: core.ProtocolAMQP, Node: b.opts.Node, Client: b.client}
	res := b.opts.Router.Publish(context.Background(), m) // the store write is bounded by retain.WriteTimeout
	r.in.Add(1)
	b.m.message(r, "in")
	if res.RetainErr != nil && retain.Refused(res.RetainErr, nil, b.log, "topic", topic, "bridge", b.opts.Bridge.Name) == retain.StoreFailed {
		return "release", ""
	}
	return "accept", ""
}

// topicIn is the topic of an inbound message: the one it names (subject or
// Tolsey-Topic) when the rule's local filter matches it, or that topic
// under the filter's literal prefix; else its `to` address under the
// rule's remote prefix, moved to the local prefix; else the local filter
// itself when it is one topic.
func (r *amqpRule) topicIn(named string, am *goamqp.Message) (string, error) {
	local := r.rule.Local
	lp := literalPrefix(local)
	if named != "" {
		if core.ValidateTopic(named) == nil && core.Match(local, named) {
			return named, nil
		}
		if lp != "" {
			if t := lp + "/" + named; core.ValidateTopic(t) == nil && core.Match(local, t) {
				return t, nil
			}
		}
		return "", fmt.Errorf("topic %q is outside the rule's local filter %q", named, local)
	}
	if am.Properties != nil && am.Properties.To != nil {
		to := *am.Properties.To
		rp := literalPrefix(r.rule.Remote)
		if rest, ok := cutLevels(to, rp); ok {
			t := joinLevels(lp, rest)
			if core.ValidateTopic(t) == nil && core.Match(local, t) {
				return t, nil
			}
		}
	}
	if core.ValidateTopic(local) == nil {
		return local, nil
	}
	return "", fmt.Errorf("no subject, %s or to address under %q", AMQPTopicProperty, r.rule.Remote)
}

// literalPrefix is a filter's levels before its first wildcard.
func literalPrefix(f string) string {
	var out []string
	for _, l := range strings.Split(f, "/") {
		if l == "+" || l == "#" {
			break
		}
		out = append(out, l)
	}
	return strings.Join(out, "/")
}

func cutLevels(topic, prefix string) (string, bool) {
	if prefix == "" {
		return topic, true
	}
	if topic == prefix {
		return "", true
	}
	if len(topic) > len(prefix) && topic[:len(prefix)] == prefix && topic[len(prefix)] == '/' {
		return topic[len(prefix)+1:], true
	}
	return "", false
}

func joinLevels(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "/" + b
}

// Status is the bridge's state for /api/v1/bridges and /readyz.
func (b *AMQP) Status() Status {
	b.mu.Lock()
	s := Status{Name: b.opts.Bridge.Name, URLs: []string{redactURL(b.opts.Bridge.URL)}, State: b.state,
		Connected: b.connected.Load(), LastError: b.lastErr}
	if !b.lastErrAt.IsZero() {
		t := b.lastErrAt.UTC()
		s.LastErrorAt = &t
	}
	b.mu.Unlock()
	for _, r := range b.rules {
		rs := RuleStatus{Name: r.name, Direction: r.rule.Direction, Local: r.rule.Local, Remote: r.rule.Remote,
			QoS: r.rule.QoS, Out: r.out.Load(), In: r.in.Load(), Dropped: r.dropped.Load()}
		if r.bq != "" {
			st := r.bufferStats()
			rs.Buffer = &st
		}
		s.Rules = append(s.Rules, rs)
	}
	return s
}

func (r *amqpRule) bufferStats() BufferStats {
	if r.bq == "" || r.b.buf == nil {
		return BufferStats{}
	}
	q := r.b.buf.QueueStats(r.bq)
	return BufferStats{Messages: q.Records, Bytes: q.Bytes, MaxBytes: r.b.buf.Stats().MaxBytes, Rejected: q.Rejected, Dropped: q.Dropped}
}

// Name is the bridge's name (bridge.amqp[i].name).
func (b *AMQP) Name() string { return b.opts.Bridge.Name }

// Down returns why the bridge cannot reach its remote, or nil while it can.
func (b *AMQP) Down() error {
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
