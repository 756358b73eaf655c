package mqtt

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/tolsey/tolsey/core"
	"github.com/tolsey/tolsey/core/metrics"
	"github.com/tolsey/tolsey/core/queue"
)

// Queues over MQTT (docs/queues.md, "MQTT"). The engine (core/queue) does
// the queueing; this file maps MQTT onto it:
//
//   - a SUBSCRIBE to $queue/<name> (granted QoS 1) makes the session a
//     consumer of queue <name> while a connection carries it. mochi keeps
//     the subscription in the session like any other (so a persistent
//     session resumes it), but no PUBLISH reaches it through mochi's
//     fan-out: a per-client worker pulls from the queue.Consumer as the
//     client's window allows (its Receive Maximum and mqtt.maxInflight) and
//     writes each message as a QoS 1 PUBLISH on $queue/<name>, DUP=1 when
//     it was delivered before. The PUBACK acknowledges it (queue.Consumer
//     Ack); the connection's end, or an UNSUBSCRIBE, closes the consumer,
//     and what was not acknowledged goes to the next consumer.
//   - a PUBLISH to $queue/<name> goes straight into the queue (Engine.Put),
//     never into the topic space, and is acknowledged once the queue holds
//     it durably, through the deferred ack of acks.go.

const (
	// queuePrefix starts a queue's MQTT topic: $queue/<name>. A "$" topic,
	// so no wildcard subscription of the topic space matches it
	// [MQTT-4.7.2-1]; the AMQP front-end gives a message put straight into
	// a queue the same topic (amqp/queues.go, queueTopic).
	queuePrefix = "$queue/"
	// topicProperty is the user property that carries, on a queue
	// delivery, the topic a message was published on when it reached the
	// queue through one of the queue's topic subscriptions: the PUBLISH
	// itself carries $queue/<name>, which is what the subscriber
	// subscribed to and matches its deliveries against.
	topicProperty = "tolsey-topic"
)

// Values of Options.V311Full.
const (
	V311FullDisconnect = "disconnect"
	V311FullDrop       = "drop"
)

// queueName returns the queue a topic or filter names, if it is one.
func queueName(topic string) (string, bool) {
	if name, ok := strings.CutPrefix(topic, queuePrefix); ok {
		return name, true
	}
	return "", false
}

// queues is the MQTT side of the queue engine: a record per client that
// consumes queues.
//
// Goroutines: the client's reader runs subscribe/subscribed/attachPending
// (SUBSCRIBE), unsubscribed, acked (a PUBACK read) and forget (as it
// leaves); mochi's establishClient runs resume (OnSessionEstablished); one
// worker goroutine per client with consumers writes its deliveries; the
// engine calls a consumer's Notify and Deleted on any goroutine; close runs
// on Shutdown's goroutine once the clients are gone. mu guards clients,
// closing, and the clientQueues fields marked so.
type queues struct {
	s   *Server
	eng *queue.Engine   // nil: every $queue/ topic names an unknown queue
	out *metrics.Outlet // deliveries written

	autoMu sync.Mutex // serialises queue creation (AutoCreateQueues)

	mu      sync.Mutex
	clients map[*mochi.Client]*clientQueues
	closing bool

	// active counts the clients with a record: PUBACKs and freed slots of
	// a gateway without queue consumers cost one atomic load.
	active  atomic.Int32
	workers sync.WaitGroup
}

// clientQueues is one client's queue consumers.
type clientQueues struct {
	// Guarded by queues.mu.
	cons    map[string]*queue.Consumer // by filter, $queue/<name>
	pending []string                   // filters granted by the SUBSCRIBE being processed
	sent    map[uint16]sentDelivery    // by packet id: written, not acknowledged
	running bool                       // a worker runs
	left    bool                       // the client has left: gone is closed

	// Made with the record; then used without the lock.
	wake chan struct{} // cap 1: a consumer may have messages, or a slot freed
	gone chan struct{} // closed when the client has left
}

// sentDelivery is a queue message in flight to the client.
type sentDelivery struct {
	c  *queue.Consumer
	id uint64
}

func newQueues(s *Server) *queues {
	return &queues{s: s, eng: s.opts.Queues, out: s.opts.Metrics.Outlet("mqtt"), clients: map[*mochi.Client]*clientQueues{}}
}

// lookup returns the queue named name, created with the defaults when
// AutoCreateQueues allows and there is none.
func (qs *queues) lookup(name string) (*queue.Queue, error) {
	if qs.eng == nil {
		return nil, fmt.Errorf("%w: %q (no queue engine)", queue.ErrNotFound, name)
	}
	if q, ok := qs.eng.Queue(name); ok {
		return q, nil
	}
	if !qs.s.opts.AutoCreateQueues {
		return nil, fmt.Errorf("%w: %q", queue.ErrNotFound, name)
	}
	// Declare changes an existing queue's configuration: two clients
	// creating the same queue must not reset each other's settings.
	qs.autoMu.Lock()
	defer qs.autoMu.Unlock()
	if q, ok := qs.eng.Queue(name); ok {
		return q, nil
	}
	// Ensure: another gateway of a cluster may have created it already.
	q, err := qs.eng.Ensure(context.Background(), queue.Config{Name: name})
	if err != nil {
		return nil, err
	}
	qs.s.log.Info("mqtt: queue created by a client (queues.autoCreate)", "queue", name)
	return q, nil
}

// subscribe checks a SUBSCRIBE's $queue/ filters, on the reader before
// mochi adds them: it returns filters (a copy when it changes any) with
// each one it refuses emptied, which mochi answers with 0x8F Topic Filter
// invalid (0x80 for MQTT 3.1.1), and each one it grants set to QoS 1. A
// queue is consumed at least once, so a QoS 0 subscription, which has no
// acknowledgement, is refused; QoS 2 is granted as 1 [MQTT-3.8.4-7].
func (qs *queues) subscribe(cl *mochi.Client, filters packets.Subscriptions) packets.Subscriptions {
	var out packets.Subscriptions
	for i, f := range filters {
		name, ok := queueName(f.Filter)
		if !ok {
			continue
		}
		if out == nil {
			out = slices.Clone(filters) // mochi passes the packet it read on to OnPacketProcessed
		}
		var err error
		switch {
		case f.Qos == 0:
			err = errors.New("a queue is consumed with QoS 1")
		default:
			_, err = qs.lookup(name)
		}
		if err != nil {
			qs.s.log.Debug("queue subscription refused", "client", cl.ID, "filter", f.Filter, "error", err)
			out[i].Filter = ""
			continue
		}
		out[i].Qos = 1
	}
	if out == nil {
		return filters
	}
	return out
}

// subscribed notes the $queue/ filters mochi granted; attachPending
// attaches them once the SUBACK is written.
func (qs *queues) subscribed(cl *mochi.Client, pk packets.Packet, codes []byte) {
	var granted []string
	for i, f := range pk.Filters {
		if _, ok := queueName(f.Filter); ok && i < len(codes) && codes[i] < packets.ErrUnspecifiedError.Code {
			granted = append(granted, f.Filter)
		}
	}
	if len(granted) == 0 {
		return
	}
	qs.mu.Lock()
	c := qs.recordLocked(cl)
	if c != nil {
		c.pending = append(c.pending, granted...)
	}
	qs.mu.Unlock()
}

// attachPending attaches the consumers of the SUBSCRIBE just answered.
func (qs *queues) attachPending(cl *mochi.Client) {
	qs.mu.Lock()
	c := qs.clients[cl]
	var filters []string
	if c != nil {
		filters, c.pending = c.pending, nil
	}
	qs.mu.Unlock()
	for _, f := range filters {
		qs.attach(cl, f)
	}
}

// resume attaches the consumers of the $queue/ subscriptions a session
// carried on from an earlier connection holds (clean start false): the
// consumers of a session live as long as its connections, not longer
// (docs/queues.md, "MQTT").
func (qs *queues) resume(cl *mochi.Client) {
	for _, sub := range cl.State.Subscriptions.GetAll() {
		if _, ok := queueName(sub.Filter); ok {
			qs.attach(cl, sub.Filter)
		}
	}
}

// recordLocked returns cl's record, made if need be; nil once the front-end
// is closing. qs.mu is held.
func (qs *queues) recordLocked(cl *mochi.Client) *clientQueues {
	c := qs.clients[cl]
	if c == nil && !qs.closing {
		c = &clientQueues{cons: map[string]*queue.Consumer{}, sent: map[uint16]sentDelivery{},
			wake: make(chan struct{}, 1), gone: make(chan struct{})}
		qs.clients[cl] = c
		qs.active.Add(1)
	}
	return c
}

// attach makes cl a consumer of the queue filter names, unless it is one
// already, and starts its worker.
func (qs *queues) attach(cl *mochi.Client, filter string) {
	name, _ := queueName(filter)
	q, err := qs.lookup(name)
	if err != nil {
		// Deleted since the subscription was granted: the subscription
		// stays in the session, and receives nothing.
		qs.s.log.Info("mqtt: queue subscription not attached", "client", cl.ID, "queue", name, "error", err)
		return
	}
	qs.mu.Lock()
	c := qs.recordLocked(cl)
	if c == nil || c.left || c.cons[filter] != nil {
		qs.mu.Unlock()
		return
	}
	qs.mu.Unlock()
	qc, err := q.Consume(queue.ConsumerOptions{
		Notify:  c.signal,
		Deleted: func() { qs.deleted(cl, filter, q) },
	})
	if err != nil {
		qs.s.log.Info("mqtt: queue subscription not attached", "client", cl.ID, "queue", name, "error", err)
		return
	}
	qs.mu.Lock()
	if c.left || c.cons[filter] != nil {
		// Left meanwhile, or a concurrent attach (a SUBSCRIBE racing the
		// session's resumption) won.
		qs.mu.Unlock()
		qc.Close()
		return
	}
	c.cons[filter] = qc
	start := !c.running
	c.running = true
	if start {
		qs.workers.Add(1)
	}
	qs.mu.Unlock()
	if start {
		go qs.work(cl, c)
	}
	c.signal()
}

// signal wakes the client's worker; it never blocks (a consumer's Notify).
func (c *clientQueues) signal() {
	select {
	case c.wake <- struct{}{}:
	default: // already signalled
	}
}

// deleted is a consumer's Deleted: its queue is gone. The subscription
// stays in the session (MQTT has no way to end one from the server); it
// receives nothing unless a queue of that name is made again and the
// client subscribes again or reconnects.
func (qs *queues) deleted(cl *mochi.Client, filter string, q *queue.Queue) {
	qs.mu.Lock()
	if c := qs.clients[cl]; c != nil && c.cons[filter] != nil && c.cons[filter].Queue() == q {
		delete(c.cons, filter)
	}
	qs.mu.Unlock()
	qs.s.log.Info("mqtt: a consumed queue was deleted", "client", cl.ID, "filter", filter)
}

// unsubscribed closes the consumers of the $queue/ filters an UNSUBSCRIBE
// removed: what they were delivered and the client did not acknowledge
// goes to the next consumer (a late PUBACK for it is ignored).
func (qs *queues) unsubscribed(cl *mochi.Client, filters packets.Subscriptions) {
	var closing []*queue.Consumer
	qs.mu.Lock()
	if c := qs.clients[cl]; c != nil {
		for _, f := range filters {
			if qc := c.cons[f.Filter]; qc != nil {
				closing = append(closing, qc)
				delete(c.cons, f.Filter)
			}
		}
	}
	qs.mu.Unlock()
	for _, qc := range closing {
		qc.Close()
	}
}

// acked settles the queue delivery a PUBACK from cl acknowledges, if it is
// one. Called as the PUBACK is read, before mochi releases its packet id,
// so that the id cannot name another delivery meanwhile. A PUBACK with a
// reason code >= 0x80 (MQTT 5: the client does not accept the message)
// rejects it: to the queue's dead-letter queue, or dropped and counted.
func (qs *queues) acked(cl *mochi.Client, pk packets.Packet) {
	if qs.active.Load() == 0 {
		return
	}
	qs.mu.Lock()
	var d sentDelivery
	var ok bool
	if c := qs.clients[cl]; c != nil {
		if d, ok = c.sent[pk.PacketID]; ok {
			delete(c.sent, pk.PacketID)
		}
	}
	qs.mu.Unlock()
	switch {
	case !ok:
	case pk.ReasonCode >= packets.ErrUnspecifiedError.Code:
		d.c.Reject(d.id)
	default:
		d.c.Ack(d.id)
	}
}

// slotFreed wakes cl's worker after an acknowledgement: a place in its
// window may have freed.
func (qs *queues) slotFreed(cl *mochi.Client) {
	if qs.active.Load() == 0 {
		return
	}
	qs.mu.Lock()
	c := qs.clients[cl]
	qs.mu.Unlock()
	if c != nil {
		c.signal()
	}
}

// forget ends cl's part in the queues as its connection ends: its
// deliveries leave the session's inflight store (the queue delivers them
// again; a session carried on must not resend them: patch 15 keeps them
// out of its copy too) and its consumers close.
func (qs *queues) forget(cl *mochi.Client) {
	qs.mu.Lock()
	c := qs.clients[cl]
	if c == nil {
		qs.mu.Unlock()
		return
	}
	delete(qs.clients, cl)
	qs.active.Add(-1)
	c.left = true
	close(c.gone)
	cons, sent := c.cons, c.sent
	c.cons, c.sent, c.pending = nil, nil, nil
	qs.mu.Unlock()
	for id := range sent {
		if cl.State.Inflight.Delete(id) {
			atomic.AddInt64(&qs.s.mochi.Info.Inflight, -1)
		}
	}
	for _, qc := range cons {
		qc.Close()
	}
}

// close stops new records and waits for the workers, which end once their
// clients have left (mochi's Close has seen to that).
func (qs *queues) close() {
	qs.mu.Lock()
	qs.closing = true
	qs.mu.Unlock()
	qs.workers.Wait()
}

// work writes cl's queue deliveries while it has consumers: it takes a
// place in the client's window (takeSlot: its Receive Maximum
// [MQTT-3.3.4-9] and mqtt.maxInflight), then the next message of one of
// its consumers, in turn; it sleeps on c.wake when the window is full or
// no consumer has anything, and ends when the client leaves.
func (qs *queues) work(cl *mochi.Client, c *clientQueues) {
	defer qs.workers.Done()
	var turn int
	for {
		select { // a signal from here on is for what this round does not see
		case <-c.wake:
		default:
		}
		qs.mu.Lock()
		if c.left {
			qs.mu.Unlock()
			return
		}
		filters := make([]string, 0, len(c.cons))
		cons := make([]*queue.Consumer, 0, len(c.cons))
		for f, qc := range c.cons {
			filters = append(filters, f)
			cons = append(cons, qc)
		}
		qs.mu.Unlock()
		sent := 0
		for i := range cons {
			k := (turn + i) % len(cons)
			n, full := qs.deliver(cl, c, filters[k], cons[k])
			sent += n
			if full {
				break
			}
		}
		turn++
		if sent > 0 {
			continue // until every consumer is empty or the window full
		}
		select {
		case <-c.wake:
		case <-c.gone:
			return
		case <-cl.Done():
			return // stopped while its reader may never reach OnDisconnect
		}
	}
}

// deliver writes qc's ready messages to cl while its window has room, and
// says how many it wrote and whether it stopped for a full window.
func (qs *queues) deliver(cl *mochi.Client, c *clientQueues, filter string, qc *queue.Consumer) (n int, full bool) {
	for {
		if !qs.s.takeSlot(cl) {
			return n, true
		}
		d, ok := qc.Next()
		if !ok {
			cl.State.Inflight.IncreaseSendQuota()
			return n, false
		}
		if !qs.write(cl, c, filter, qc, d) {
			return n, true // the client left, or has no packet id free
		}
		n++
	}
}

// write sends one delivery as a QoS 1 PUBLISH on filter, tracked in the
// session's inflight store as bound to this connection (patch 15).
func (qs *queues) write(cl *mochi.Client, c *clientQueues, filter string, qc *queue.Consumer, d queue.Delivery) bool {
	now := time.Now()
	m := d.Msg
	pk := toPacket(m, false, now)
	pk.TopicName = filter
	pk.FixedHeader.Qos = 1
	pk.FixedHeader.Dup = d.Redelivered // [MQTT-3.3.1-1]: it may have reached a client before
	if m.Topic != filter {
		pk.Properties.User = append(pk.Properties.User, packets.UserProperty{Key: topicProperty, Val: m.Topic})
	}
	if err := qs.s.trackBound(cl, &pk); err != nil {
		cl.State.Inflight.IncreaseSendQuota()
		qc.Release(d.ID)
		return false
	}
	qs.mu.Lock()
	if c.left {
		qs.mu.Unlock()
		return false // forget closed qc, which takes d back
	}
	c.sent[pk.PacketID] = sentDelivery{c: qc, id: d.ID}
	qs.mu.Unlock()
	if err := cl.WritePacket(pk); err != nil {
		if errors.Is(err, mochi.ErrConnectionClosed) {
			return false // forget closes qc, which takes d back
		}
		// Not for this client (over its Maximum Packet Size): another
		// consumer may take it.
		qs.mu.Lock()
		_, mine := c.sent[pk.PacketID]
		delete(c.sent, pk.PacketID)
		qs.mu.Unlock()
		if cl.State.Inflight.Delete(pk.PacketID) {
			atomic.AddInt64(&qs.s.mochi.Info.Inflight, -1)
			cl.State.Inflight.IncreaseSendQuota()
		}
		if mine {
			qc.Modify(d.ID, true, true)
		}
		qs.s.log.Debug("queue message not written", "client", cl.ID, "filter", filter, "error", err)
		return true
	}
	qs.out.Out(m.Created)
	return true
}

// publish puts an MQTT PUBLISH to $queue/<name> into the queue and
// answers it (acks.go): mochi fans nothing out (pk.Ignore), the queue is
// its only destination. QoS 0 has no answer: a refusal is counted.
func (h *hook) publishQueue(cl *mochi.Client, pk *packets.Packet, name string) error {
	pk.Ignore = true
	m := toMessage(pk, cl.ID, h.s.opts.Node, time.Now())
	m.Retain = false // a queue keeps every message; retaining is a topic's
	put := func(done func(error)) {
		q, err := h.queues.lookup(name)
		if err != nil {
			done(err)
			return
		}
		q.Put(m, done)
	}
	if pk.FixedHeader.Qos == 0 {
		put(func(err error) {
			if err != nil {
				h.s.opts.Metrics.Drop("mqtt", "queue_refused")
				h.s.log.Debug("QoS 0 publish to a queue refused", "client", cl.ID, "topic", pk.TopicName, "error", err)
			}
		})
		return nil
	}
	return h.answerLater(cl, pk, func(done func(core.PublishResult)) {
		put(func(err error) { done(core.PublishResult{Err: err}) })
	})
}

// willQueue puts a will to $queue/<name> into the queue. A will has no
// acknowledgement: a refusal (unknown queue, full queue, store failure) is
// counted and logged, as a refused QoS 0 publish is.
func (h *hook) willQueue(cl *mochi.Client, m *core.Message, name string) {
	m.Retain = false // a queue keeps every message; retaining is a topic's
	q, err := h.queues.lookup(name)
	if err != nil {
		h.willRefused(cl, m.Topic, err)
		return
	}
	q.Put(m, func(err error) {
		if err != nil {
			h.willRefused(cl, m.Topic, err)
		}
	})
}

func (h *hook) willRefused(cl *mochi.Client, topic string, err error) {
	h.s.opts.Metrics.Drop("mqtt", "queue_refused")
	h.s.log.Warn("will to a queue refused", "client", cl.ID, "topic", topic, "error", err)
}

// onlyFull reports whether every refusal joined in err is a full queue's:
// what queues.v311Full may drop. A refusal of anything else (the bridge's
// buffer, a store that failed) still closes a 3.1.1 publisher.
func onlyFull(err error) bool {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			if !onlyFull(e) {
				return false
			}
		}
		return true
	}
	return errors.Is(err, queue.ErrFull)
}

// refusalCode is the MQTT 5 reason code of a refused QoS 1/2 publish, with
// the refusal as its reason string (it names the queue).
func refusalCode(err error) packets.Code {
	code := packets.ErrQuotaExceeded // full, or a subscriber's buffer full
	switch {
	case errors.Is(err, queue.ErrNotFound) && !errors.Is(err, queue.ErrFull):
		code = packets.ErrTopicNameInvalid
	case errors.Is(err, queue.ErrUnavailable):
		code = packets.ErrUnspecifiedError
	}
	code.Reason = err.Error()
	return code
}
