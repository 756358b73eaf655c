package amqp

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"

	"github.com/tolsey/tolsey/amqp/internal/encoding"
	"github.com/tolsey/tolsey/amqp/internal/frames"
	"github.com/tolsey/tolsey/core/queue"
)

// Durable subscriptions in the queue engine (docs/jms.md, "Durable
// subscriptions"). A JMS durable subscription, shared or not, is a durable
// queue of the engine, as in ActiveMQ Artemis: named from its key
// (subQueueName), subscribed to the link's topic filter with the except
// filter's exceptions, the selector and no-local kept in its configuration
// (queue.Config Selector, NoLocal), so that the backend (embedded file or
// Redis) keeps the subscription and what it holds across a restart or a
// crash. The links of the subscription are the queue's consumers: the
// engine gives acknowledgement, redelivery and the bound.
//
//   - The bound is the queue's (queues.maxMessages, queues.maxBytes). A
//     full subscription drops what it cannot hold (queue.OverflowDrop,
//     counted in the queue's refused counter): a subscriber that is away
//     never refuses, nor slows, the devices publishing.
//   - A durable subscription attached again with another topic, selector,
//     exceptions or no-local is replaced (JMS), unless a link consumes it
//     (amqp:resource-locked). A non-shared one takes one link at a time.
//   - A detach with closed=true (JMS unsubscribe) deletes the queue once
//     no other link consumes it.
//   - A filter whose meaning differs in the queue grammar (a level ending
//     in `*`, a last level `>`, a leading `!`) keeps the in-memory
//     subscription (subscription.go), which a restart forgets; so does a
//     gateway without queue engine. Non-durable shared subscriptions are
//     in memory too: they end with their last link anyway.

// subQueuePrefix starts the name of a durable subscription's queue: a "$"
// name, as temporary queues', out of the way of the names users choose.
const subQueuePrefix = "$sub/"

// subQueueName names the queue of the durable subscription key
// (subscriptionKey: container-id, NUL, name): $sub/<container>/<name>,
// each part with '%', '/', '~', wildcards and control characters written
// %XX so that no two keys share a name; a name longer than a queue name may
// be is $sub/~<sha-256 of the key>, which no escaped name can be.
func subQueueName(key string) string {
	c, n, _ := strings.Cut(key, "\x00")
	name := subQueuePrefix + escapeSubPart(c) + "/" + escapeSubPart(n)
	if len(name) > 255 {
		sum := sha256.Sum256([]byte(key))
		return subQueuePrefix + "~" + hex.EncodeToString(sum[:])
	}
	return name
}

func escapeSubPart(s string) string {
	const hexDigits = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch ch := s[i]; {
		case ch < 0x20 || ch == 0x7f || strings.IndexByte("%/~#+*>", ch) >= 0:
			b.WriteByte('%')
			b.WriteByte(hexDigits[ch>>4])
			b.WriteByte(hexDigits[ch&15])
		default:
			b.WriteByte(ch)
		}
	}
	return b.String()
}

// IsSubscriptionQueue reports whether a queue is a durable subscription's
// (for the admin API, which marks them).
func IsSubscriptionQueue(name string) bool { return strings.HasPrefix(name, subQueuePrefix) }

// durableInQueue reports whether a durable subscription on filter lives in
// the queue engine: one is configured, and filter means the same in the
// queue grammar (core/queue/match) as in MQTT's.
func (s *Server) durableInQueue(filter string) bool {
	if s.opts.Queues == nil || strings.HasPrefix(filter, "!") {
		return false
	}
	levels := strings.Split(filter, "/")
	for _, lv := range levels {
		if strings.HasSuffix(lv, "*") {
			return false
		}
	}
	return levels[len(levels)-1] != ">"
}

// subQueueConfig is the queue configuration of a durable subscription.
// A non-shared one is exclusive: the front-end lets one link consume it
// at a time (the engine's standby order never comes into play), and the
// access records which kind it is across a restart.
func subQueueConfig(name string, l *outLink, noLocal, shared bool, container string) queue.Config {
	cfg := queue.Config{Name: name, Subscriptions: []string{l.filter}, Selector: l.sel.String(), Overflow: queue.OverflowDrop,
		Access: queue.Exclusive}
	if shared {
		cfg.Access = queue.NonExclusive
	}
	for _, x := range l.except {
		cfg.Subscriptions = append(cfg.Subscriptions, "!"+x.String())
	}
	if noLocal {
		cfg.NoLocal = container
	}
	return cfg
}

// sameSubscription reports whether a stored subscription is the one an
// attach asks for.
func sameSubscription(a, b queue.Config) bool {
	return slices.Equal(a.Subscriptions, b.Subscriptions) && a.Selector == b.Selector && a.NoLocal == b.NoLocal &&
		a.Access == b.Access
}

// attachDurable makes l a consumer of the durable subscription key's
// queue, declaring it or replacing a changed one. The queue applies every
// filter of f at intake: all echoed in the answer, none left to the
// consumer (whose selector would only test again).
func (s *session) attachDurable(l *outLink, reply *frames.Attach, sc *frames.Source, f *sourceFilters, key string, shared bool) error {
	c := s.c
	srv := c.s
	cfg := subQueueConfig(subQueueName(key), l, f.noLocal, shared, c.containerID)
	// One attach at a time decides on a subscription and consumes it; the
	// answer goes out after, not under the lock.
	srv.subsMu.Lock()
	qc, le := srv.consumeDurable(l, cfg, shared)
	srv.subsMu.Unlock()
	if le != nil {
		return s.refuse(l, reply, le)
	}
	l.subQueue = cfg.Name
	sc.Filter = f.kept
	return s.consumeQueue(l, reply, sc, qc)
}

// consumeDurable makes l a consumer of the queue for cfg (durableQueue).
// srv.subsMu is held.
func (srv *Server) consumeDurable(l *outLink, cfg queue.Config, shared bool) (*queue.Consumer, *LinkError) {
	q, le := srv.durableQueue(cfg, shared)
	if le != nil {
		return nil, le
	}
	qc, err := q.Consume(queue.ConsumerOptions{Notify: l.wake, Deleted: l.queueDeleted})
	if err != nil {
		return nil, linkErr(queueCond(err), "%v", err)
	}
	return qc, nil
}

// durableQueue returns the queue for cfg: the stored one when it is the
// same subscription and free to consume, else a new one. srv.subsMu is held.
func (srv *Server) durableQueue(cfg queue.Config, shared bool) (*queue.Queue, *LinkError) {
	e := srv.opts.Queues
	if q, ok := e.Queue(cfg.Name); ok {
		info := q.Info()
		busy := info.Consumers > 0
		same := sameSubscription(info.Config, cfg)
		switch {
		case same && (shared || !busy):
			return q, nil
		case busy:
			return nil, linkErr(frames.ErrCondResourceLocked, "subscription %q is in use", cfg.Name)
		}
		// Changed while idle: JMS replaces it, messages and all.
		if err := e.Delete(context.Background(), cfg.Name); err != nil {
			return nil, linkErr(queueCond(err), "replacing subscription %q: %v", cfg.Name, err)
		}
		srv.log.Info("amqp: durable subscription replaced", "queue", cfg.Name)
	}
	q, err := e.Declare(context.Background(), cfg)
	if err != nil {
		return nil, linkErr(queueCond(err), "durable subscription: %v", err)
	}
	return q, nil
}

// lookupDurable attaches l, whose attach has a null source (Qpid JMS
// unsubscribe), to the stored durable subscription its name refers to.
// found is false when there is none.
func (s *session) lookupDurable(l *outLink, reply *frames.Attach) (found bool, err error) {
	c := s.c
	srv := c.s
	if srv.opts.Queues == nil {
		return false, nil
	}
	name, _, _ := strings.Cut(l.name, "|")
	for _, key := range []string{c.containerID + "\x00" + l.name, c.containerID + "\x00" + name, "\x00" + name} {
		q, ok := srv.opts.Queues.Queue(subQueueName(key))
		if !ok {
			continue
		}
		info := q.Info()
		cfg := info.Config
		if len(cfg.Subscriptions) == 0 {
			continue // not one of ours
		}
		if cfg.Access == queue.Exclusive && info.Consumers > 0 {
			return true, s.refuse(l, reply, linkErr(frames.ErrCondResourceLocked, "subscription %q is in use", cfg.Name))
		}
		qc, err := q.Consume(queue.ConsumerOptions{Notify: l.wake, Deleted: l.queueDeleted})
		if err != nil {
			continue // deleted meanwhile
		}
		l.filter, l.subQueue = cfg.Subscriptions[0], cfg.Name
		sc := &frames.Source{Address: l.filter, Durable: frames.DurabilityUnsettledState, ExpiryPolicy: frames.ExpiryNever,
			Capabilities: []encoding.Symbol{capTopic}}
		if cfg.Access == queue.NonExclusive {
			sc.Capabilities = append(sc.Capabilities, capShared)
		}
		if key[0] == 0 {
			sc.Capabilities = append(sc.Capabilities, capGlobal)
		}
		return true, s.consumeQueue(l, reply, sc, qc)
	}
	return false, nil
}

// unsubscribe ends l's durable subscription (a detach with closed=true):
// its consumer closes now, and the queue is deleted unless another link
// consumes it. Called by the reader.
func (c *conn) unsubscribe(l *outLink) {
	if l.subQueue == "" {
		return
	}
	c.closeLinkConsumers(l) // its unsettled deliveries go with the queue
	s := c.s
	s.subsMu.Lock()
	defer s.subsMu.Unlock()
	q, ok := s.opts.Queues.Queue(l.subQueue)
	if ok && q.Info().Consumers == 0 {
		_ = s.opts.Queues.Delete(context.Background(), l.subQueue) // deleted meanwhile: fine
		s.log.Info("amqp: durable subscription ended", "queue", l.subQueue)
	}
	l.subQueue = ""
}

// skipUnreadable acknowledges, unsent, a subscription queue's delivery
// that l's identity may not read (an ACL that allows its filter only
// partly, authz.go), as an in-memory subscription skips it.
func (l *outLink) skipUnreadable(qc *queue.Consumer, d queue.Delivery) bool {
	if !l.aclPartial.Load() || l.mayRead(d.Msg.Topic) {
		return false
	}
	qc.Ack(d.ID)
	return true
}
