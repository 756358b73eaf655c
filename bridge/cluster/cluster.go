// Package cluster makes several gateways one (docs/cluster.md): every
// message that enters a gateway (MQTT, AMQP, an inbound bridge) is sent
// over core NATS, encoded with core/codec, to the other gateways of the
// cluster, which publish it into their routers with its Origin kept. It
// shares the NATS bridge's connection (bridge.nats) and speaks to the core
// only, like a front-end: it imports nothing of ours but core.
//
// Goroutines: Deliver runs on publishers' goroutines and never touches the
// network (queue to the writer); one writer goroutine publishes and, for
// a batch holding a QoS ≥ 1 acknowledgement, flushes; nats.go's
// subscription goroutine runs inbound, in the order NATS delivers.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tolsey/tolsey/core"
	"github.com/tolsey/tolsey/core/codec"
)

// Options configure a Cluster.
type Options struct {
	Conn   *nats.Conn   // the bridge's connection (NoEcho)
	Router *core.Router // this gateway's
	Node   string       // node.id: unique in the cluster, a NATS token
	Prefix string       // cluster.prefix: the subject space; "gw" when empty
	Logger *slog.Logger
	// QueueLen bounds the messages waiting for the writer; beyond it a
	// QoS 0 message is dropped and counted, a QoS ≥ 1 one refused to its
	// publisher. 65536 when zero.
	QueueLen int
	// FlushTimeout bounds the round trip that confirms NATS received a
	// batch holding QoS ≥ 1 messages; 5 s when zero.
	FlushTimeout time.Duration
	// InterestPeriod is how often the interest summary is sent in full
	// (interest.go); a gateway silent for three is forgotten. 5 s when
	// zero.
	InterestPeriod time.Duration
	// Heartbeat is how often this gateway announces itself
	// (membership.go); a gateway silent for three is removed. 2 s when
	// zero.
	Heartbeat time.Duration
	// TakeoverTimeout bounds a claim's wait for the other gateways to
	// let go of a client id (takeover.go). 1 s when zero.
	TakeoverTimeout time.Duration
	// QueueChanged, when set, is called with a queue's name when another
	// gateway announces that it stored, changed or dropped that queue's
	// declaration in the store they share (queues.go), on the goroutine
	// of that subscription: it reads the declaration again.
	QueueChanged func(name string)
	// Reconnected, when set, is called after each NATS reconnect, on
	// nats.go's callback goroutine: news sent meanwhile was lost.
	Reconnected func()
}

// Stats are the cluster's counters (GET /api/v1/cluster).
type Stats struct {
	Out     uint64 `json:"out"`     // messages sent to the cluster
	In      uint64 `json:"in"`      // messages from other gateways published here
	Dropped uint64 `json:"dropped"` // QoS 0 dropped: queue full, NATS down, undecodable
	Refused uint64 `json:"refused"` // QoS ≥ 1 refused to the publisher: queue full, NATS down
	Skipped uint64 `json:"skipped"` // not sent: no other gateway's interest matched
	// SharedOut and SharedIn count shared groups' copies sent to NATS and
	// taken here for a local member (shared.go).
	SharedOut uint64 `json:"sharedOut"`
	SharedIn  uint64 `json:"sharedIn"`
	// SharedBounced counts copies this gateway had no member for and
	// handed on to another gateway of the group (shared.go).
	SharedBounced uint64 `json:"sharedBounced"`
	// RemoteGroups is how many shared groups other gateways hold.
	RemoteGroups int `json:"remoteGroups"`
	// Filtering is false for one InterestPeriod after start and after a
	// NATS reconnect, while every message is sent.
	Filtering bool `json:"filtering"`
}

// Cluster sends what enters this gateway to the others and publishes what
// they send here.
type Cluster struct {
	opts     Options
	log      *slog.Logger
	subject  string // <prefix>.msg.<node>: what this gateway publishes
	all      string // <prefix>.msg.>: what it subscribes to
	isubject string // <prefix>.interest.<node>: its interest summary
	in_      *interest
	isub     *nats.Subscription
	mem      *membership        // membership.go
	tk       *takeover          // takeover.go
	ct       *containers        // container.go
	sh       *shares            // shared groups across gateways (shared.go)
	qsub     *nats.Subscription // queue declarations' news (queues.go)

	sub   *core.Subscription
	nsub  *nats.Subscription
	queue chan queued
	done  chan struct{}
	wg    sync.WaitGroup
	stop  sync.Once

	out, in, dropped, refused, skipped atomic.Uint64
}

// queued is one message on its way to the writer; acks is non-nil when
// its publisher waits (QoS ≥ 1).
type queued struct {
	m     *core.Message
	acks  *core.Acks
	share *remoteGroup // a shared group's copy (shared.go), nil for the stream
}

// ValidNode reports why node cannot name a gateway of the cluster: it is
// one token of the NATS subjects the cluster uses.
func ValidNode(node string) error {
	if node == "" {
		return errors.New("empty")
	}
	if strings.ContainsAny(node, ".*> \t\r\n") {
		return fmt.Errorf("%q has a character a NATS subject token cannot hold (. * > or a space)", node)
	}
	return nil
}

// New checks opts; Start subscribes.
func New(opts Options) (*Cluster, error) {
	if opts.Conn == nil || opts.Router == nil {
		return nil, errors.New("cluster: needs the NATS connection and the router")
	}
	if err := ValidNode(opts.Node); err != nil {
		return nil, fmt.Errorf("cluster: node.id: %w", err)
	}
	if opts.Prefix == "" {
		opts.Prefix = "gw"
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.QueueLen == 0 {
		opts.QueueLen = 1 << 16
	}
	if opts.FlushTimeout == 0 {
		opts.FlushTimeout = 5 * time.Second
	}
	if opts.InterestPeriod == 0 {
		opts.InterestPeriod = 5 * time.Second
	}
	if opts.Heartbeat == 0 {
		opts.Heartbeat = 2 * time.Second
	}
	if opts.TakeoverTimeout == 0 {
		opts.TakeoverTimeout = time.Second
	}
	c := &Cluster{
		opts:     opts,
		log:      opts.Logger.With("part", "cluster"),
		subject:  opts.Prefix + ".msg." + opts.Node,
		all:      opts.Prefix + ".msg.>",
		isubject: opts.Prefix + ".interest." + opts.Node,
		in_:      newInterest(),
		mem:      newMembership(),
		tk:       &takeover{},
		ct:       &containers{},
		queue:    make(chan queued, opts.QueueLen),
		done:     make(chan struct{}),
	}
	c.sh = newShares(c)
	return c, nil
}

// Start subscribes to the other gateways' messages on NATS and to this
// gateway's on the router.
func (c *Cluster) Start(context.Context) error {
	ns, err := c.opts.Conn.Subscribe(c.all, c.inbound)
	if err != nil {
		return fmt.Errorf("cluster: subscribe %s: %w", c.all, err)
	}
	// A NATS subscriber's pending limits default to 64k messages; a
	// burst beyond is a slow consumer, dropped by nats.go and counted by
	// the bridge's error handler.
	c.nsub = ns
	if err := c.sh.start(); err != nil {
		_ = ns.Unsubscribe()
		return fmt.Errorf("cluster: shared subscriptions connection: %w", err)
	}
	// Before the router subscription: the first message sent already
	// knows whether to (it sends everything for one period anyway).
	if err := c.startInterest(); err != nil {
		c.sh.stop()
		_ = ns.Unsubscribe()
		return fmt.Errorf("cluster: interest: %w", err)
	}
	if err := c.startTakeover(); err != nil {
		c.stopInterest()
		c.sh.stop()
		_ = ns.Unsubscribe()
		return fmt.Errorf("cluster: takeover: %w", err)
	}
	if err := c.startQueues(); err != nil {
		c.stopTakeover()
		c.stopInterest()
		c.sh.stop()
		_ = ns.Unsubscribe()
		return fmt.Errorf("cluster: queues: %w", err)
	}
	if err := c.startMembership(); err != nil {
		c.stopQueues()
		c.stopTakeover()
		c.stopInterest()
		c.sh.stop()
		_ = ns.Unsubscribe()
		return fmt.Errorf("cluster: membership: %w", err)
	}
	// "#" at QoS 2, so that a message keeps its own QoS; LocalOnly: what
	// another gateway took in, that gateway sent (docs/cluster.md). "#"
	// does not match "$" topics [MQTT-4.7.2-1]: they stay on their gateway.
	sub, err := c.opts.Router.Subscribe("#", c, core.SubOptions{QoS: 2, LocalOnly: true})
	if err != nil {
		c.stopMembership()
		c.stopQueues()
		c.stopTakeover()
		c.stopInterest()
		c.sh.stop()
		_ = ns.Unsubscribe()
		return fmt.Errorf("cluster: %w", err)
	}
	c.sub = sub
	c.wg.Add(1)
	go c.writer()
	// NATS has the subscriptions when Start returns: what another
	// gateway sends from then on reaches this one. Bounded; NATS may be
	// down (nats.go makes them again when it reconnects).
	if err := c.opts.Conn.FlushTimeout(c.opts.FlushTimeout); err != nil {
		c.log.Warn("cluster subscriptions not confirmed by NATS", "error", err)
	}
	c.log.Info("cluster started", "node", c.opts.Node, "subject", c.subject)
	return nil
}

// Stop takes no new message, unsubscribes and sends what is queued (each
// batch's flush bounded by FlushTimeout). The connection is the bridge's:
// it stops after.
func (c *Cluster) Stop(ctx context.Context) error {
	c.opts.Router.Unsubscribe(c.sub)
	if c.nsub != nil {
		_ = c.nsub.Unsubscribe()
	}
	c.stopMembership()
	c.stopQueues()
	c.stopTakeover()
	c.stopInterest()
	c.wg.Wait()
	c.sh.stop()
	// Whatever the writer left behind is answered: a publisher waiting
	// on it must not wait for ever.
	for {
		select {
		case q := <-c.queue:
			c.fail(q, errors.New("cluster: stopped"))
		default:
			return ctx.Err()
		}
	}
}

// Stats returns the counters.
func (c *Cluster) Stats() Stats {
	return Stats{Out: c.out.Load(), In: c.in.Load(), Dropped: c.dropped.Load(), Refused: c.refused.Load(),
		Skipped: c.skipped.Load(), SharedOut: c.sh.out.Load(), SharedIn: c.sh.in.Load(),
		SharedBounced: c.sh.bounced.Load(),
		RemoteGroups:  len(c.sh.view.Load().set), Filtering: time.Now().UnixNano() >= c.in_.openTill.Load()}
}

// ErrFull is the refusal of a QoS ≥ 1 message while the queue to NATS is
// full.
var ErrFull = errors.New("cluster: queue to NATS full")

// Deliver implements core.Subscriber: it queues m for the writer. A QoS ≥
// 1 message's acknowledgement is held until NATS confirmed it received the
// message (docs/cluster.md, "QoS 1").
func (c *Cluster) Deliver(m *core.Message, d core.Delivery) error {
	c.deliverShares(m, d) // shared.go
	if !c.wanted(m.Topic) {
		c.skipped.Add(1)
		return nil
	}
	c.enqueue(queued{m: m}, d)
	return nil
}

// Reaches implements core.Interest for the alternates' "no live consumer
// at all" (docs/queues.md, "Alternate destinations"): a message that
// entered this gateway reaches a consumer through the cluster when another
// gateway's interest matches its topic. A message from another gateway is
// not sent on (LocalOnly): its own gateway decided. The summaries as
// known, even while the cluster still sends everything (the first
// interest period): a message then parked here may also reach a consumer
// elsewhere, rather than be parked nowhere.
func (c *Cluster) Reaches(m *core.Message) bool {
	return m.Origin.Node == c.opts.Node && c.in_.index.Wants(m.Topic, "")
}

var _ core.Interest = (*Cluster)(nil)

// enqueue hands q to the writer, holding its publisher's acknowledgement.
func (c *Cluster) enqueue(q queued, d core.Delivery) {
	if d.QoS > 0 && d.Acks != nil {
		q.acks = d.Acks
		// Before the send: the writer may answer before Deliver returns.
		q.acks.Hold()
	}
	select {
	case c.queue <- q:
	default:
		c.fail(q, ErrFull)
	}
}

// fail answers a message that did not reach NATS: a refusal to a waiting
// publisher, a counted drop otherwise.
func (c *Cluster) fail(q queued, err error) {
	if q.acks != nil {
		c.refused.Add(1)
		q.acks.Done(err)
		return
	}
	c.dropped.Add(1)
}

// maxBatch bounds the messages the writer publishes before one flush.
const maxBatch = 256

// writer publishes queued messages in order. A batch that holds a QoS ≥ 1
// message ends with a flush, a PING/PONG round trip: its PONG says the
// NATS server has read every message before it, and only then are their
// publishers acknowledged. Core NATS promises no more (docs/cluster.md).
func (c *Cluster) writer() {
	defer c.wg.Done()
	batch := make([]queued, 0, maxBatch)
	var buf []byte
	msg := &nats.Msg{Subject: c.subject}
	for {
		batch = batch[:0]
		select {
		case q := <-c.queue:
			batch = append(batch, q)
		case <-c.done:
			// The front-ends stopped before the cluster (stops run in
			// reverse): what they queued is sent before the writer ends.
			select {
			case q := <-c.queue:
				batch = append(batch, q)
			default:
				return
			}
		}
	fill:
		for len(batch) < maxBatch {
			select {
			case q := <-c.queue:
				batch = append(batch, q)
			default:
				break fill
			}
		}
		held, heldShare := false, false
		var sent []queued // the held ones nats.go took
		for _, q := range batch {
			conn := c.opts.Conn
			if q.share != nil {
				conn = c.sh.conn
				buf = append(append(append(buf[:0], 0), q.share.share...), 0) // no hop yet
				buf = codec.Append(buf, q.m)
				msg.Subject = q.share.subject
			} else {
				buf = codec.Append(buf[:0], q.m)
				msg.Subject = c.subject
			}
			msg.Data = buf
			// nats.go copies the data into its write buffer before
			// PublishMsg returns, so buf is reused.
			if err := conn.PublishMsg(msg); err != nil {
				c.fail(q, err)
				continue
			}
			if q.share != nil {
				c.sh.out.Add(1)
			} else {
				c.out.Add(1)
			}
			if q.acks != nil {
				held = held || q.share == nil
				heldShare = heldShare || q.share != nil
				sent = append(sent, q)
			}
		}
		msg.Data = nil
		if !held && !heldShare {
			continue
		}
		var err error
		if held {
			err = c.opts.Conn.FlushTimeout(c.opts.FlushTimeout)
		}
		if heldShare && err == nil {
			err = c.sh.conn.FlushTimeout(c.opts.FlushTimeout)
		}
		for _, q := range sent {
			if err != nil {
				c.refused.Add(1)
				q.acks.Done(fmt.Errorf("cluster: NATS did not confirm: %w", err))
				continue
			}
			q.acks.Done(nil)
		}
	}
}

// inbound publishes a message from another gateway into the router, with
// its Origin kept: its Origin.Node names that gateway, so LocalOnly
// subscriptions (this cluster, the bridges' outbound rules) skip it and
// the router does not store it again if retained.
func (c *Cluster) inbound(msg *nats.Msg) {
	m, err := codec.Decode(msg.Data)
	if err != nil {
		c.dropped.Add(1)
		c.log.Debug("cluster message not decoded", "subject", msg.Subject, "error", err)
		return
	}
	if m.Origin.Node == c.opts.Node || m.Origin.Node == "" {
		// Ours (NoEcho should have kept it away), or a node.id used
		// twice in the cluster: never published back where it began.
		c.dropped.Add(1)
		return
	}
	c.in.Add(1)
	// Publish waits for this gateway's own holders of a QoS ≥ 1 message
	// (a queue's durable write), which keeps the cluster's messages in
	// order; the origin gateway's publisher was answered already.
	c.opts.Router.Publish(context.Background(), m)
}
