package amqp

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	goamqp "github.com/Azure/go-amqp"

	"github.com/tolsey/tolsey/amqp/internal/encoding"
	"github.com/tolsey/tolsey/amqp/internal/frames"
	"github.com/tolsey/tolsey/core/queue"
)

// Queues over AMQP (queues.go, docs/queues.md "AMQP"), with go-amqp over
// real sockets and the real engine (memory backend).

func (e *env) declare(t testing.TB, cfg queue.Config) *queue.Queue {
	t.Helper()
	q, err := e.queues.Declare(context.Background(), cfg)
	if err != nil {
		t.Fatalf("declare %q: %v", cfg.Name, err)
	}
	return q
}

// sendN sends n messages "<prefix>0".."<prefix>n-1", unsettled: each send
// returns once the queue holds it.
func sendN(t testing.TB, snd *goamqp.Sender, prefix string, n int) {
	t.Helper()
	for i := range n {
		send(t, snd, goamqp.NewMessage([]byte(fmt.Sprintf("%s%d", prefix, i))))
	}
}

// filled starts a server with queue cfg holding n messages ("m0"…),
// sent over a session it returns.
func filled(t testing.TB, cfg queue.Config, n int) (*env, *queue.Queue, *goamqp.Session) {
	t.Helper()
	e := startServer(t)
	q := e.declare(t, cfg)
	s := e.session(t)
	sendN(t, newSender(t, s, "queue://"+cfg.Name, nil), "m", n)
	return e, q, s
}

// next receives one message without settling it.
func next(t testing.TB, r *goamqp.Receiver) *goamqp.Message {
	t.Helper()
	m, err := r.Receive(ctx5(t), nil)
	if err != nil {
		t.Fatalf("receive: %v", err)
	}
	return m
}

func hdr(m *goamqp.Message) (count uint32, first bool) {
	if m.Header == nil {
		return 0, false
	}
	return m.Header.DeliveryCount, m.Header.FirstAcquirer
}

func messages(q *queue.Queue) int { return q.Info().Messages }

// TestQueueSendConsumeAck: a sender to queue://name puts into the queue
// (accepted once stored), a receiver on queue://name (or on name with
// capability queue) consumes it, first-acquirer set and delivery-count 0,
// and accepting removes it.
func TestQueueSendConsumeAck(t *testing.T) {
	e := startServer(t)
	q := e.declare(t, queue.Config{Name: "orders"})
	s := e.session(t)
	snd := newSender(t, s, "queue://orders", nil)
	sendN(t, snd, "m", 2)
	if n := messages(q); n != 2 {
		t.Fatalf("queue holds %d after two accepted sends, want 2", n)
	}
	r := newReceiver(t, s, "queue://orders", nil)
	m := receive(t, r)
	if body(m) != "m0" {
		t.Fatalf("got %q, want m0", body(m))
	}
	if c, first := hdr(m); c != 0 || !first {
		t.Fatalf("header delivery-count %d first-acquirer %v, want 0 true", c, first)
	}
	if to := m.Properties.To; to == nil || *to != "queue://orders" {
		t.Fatalf("to %v, want queue://orders", to)
	}
	if d, ok := m.Annotations["x-opt-jms-dest"].(int8); !ok || d != jmsQueue {
		t.Fatalf("x-opt-jms-dest %v, want 0 (queue)", m.Annotations["x-opt-jms-dest"])
	}
	if err := r.Close(ctx5(t)); err != nil { // it may hold m1 already: given back
		t.Fatal(err)
	}
	r2 := newReceiver(t, s, "orders", &goamqp.ReceiverOptions{SourceCapabilities: []string{"queue"}})
	if body(receive(t, r2)) != "m1" {
		t.Fatal("capability queue: want m1")
	}
	eventually(t, "the queue empty after both accepted", func() bool { return messages(q) == 0 })
	if c := q.Info().Counters; c.Acked != 2 {
		t.Fatalf("acked %d, want 2", c.Acked)
	}
}

// TestQueueBareAddress: a bare address without capability is a queue when
// one of that name exists, a topic otherwise.
func TestQueueBareAddress(t *testing.T) {
	e := startServer(t)
	q := e.declare(t, queue.Config{Name: "plain"})
	s := e.session(t)
	send(t, newSender(t, s, "plain", nil), goamqp.NewMessage([]byte("x")))
	if n := messages(q); n != 1 {
		t.Fatalf("queue holds %d, want 1", n)
	}
	topic := newReceiver(t, s, "plain", &goamqp.ReceiverOptions{SourceCapabilities: []string{"topic"}})
	send(t, newSender(t, s, "plain", &goamqp.SenderOptions{TargetCapabilities: []string{"topic"}}), goamqp.NewMessage([]byte("t")))
	if body(receive(t, topic)) != "t" || messages(q) != 1 {
		t.Fatal("capability topic: want the topic, not the queue")
	}
	if body(receive(t, newReceiver(t, s, "plain", nil))) != "x" {
		t.Fatal("bare receiver: want the queued message")
	}
}

// TestQueueRelease: released makes the message available again, without
// counting a failed delivery; it comes back with first-acquirer false.
func TestQueueRelease(t *testing.T) {
	_, _, s := filled(t, queue.Config{Name: "q"}, 1)
	r := newReceiver(t, s, "queue://q", nil)
	m := next(t, r)
	if err := r.ReleaseMessage(ctx5(t), m); err != nil {
		t.Fatal(err)
	}
	m = receive(t, r)
	if c, first := hdr(m); body(m) != "m0" || c != 0 || first {
		t.Fatalf("after release: %q delivery-count %d first-acquirer %v, want m0 0 false", body(m), c, first)
	}
}

// TestQueueModified: modified delivery-failed counts a failed delivery
// (delivery-count 1); undeliverable-here keeps it from that link.
func TestQueueModified(t *testing.T) {
	_, _, s := filled(t, queue.Config{Name: "q"}, 1)
	r := newReceiver(t, s, "queue://q", nil)
	if err := r.ModifyMessage(ctx5(t), next(t, r), &goamqp.ModifyMessageOptions{DeliveryFailed: true}); err != nil {
		t.Fatal(err)
	}
	m := next(t, r)
	if c, first := hdr(m); c != 1 || first {
		t.Fatalf("after modified delivery-failed: delivery-count %d first-acquirer %v, want 1 false", c, first)
	}
	if err := r.ModifyMessage(ctx5(t), m, &goamqp.ModifyMessageOptions{UndeliverableHere: true}); err != nil {
		t.Fatal(err)
	}
	other := newReceiver(t, s, "queue://q", nil)
	if m := receive(t, other); body(m) != "m0" {
		t.Fatalf("other receiver got %q", body(m))
	}
}

// TestQueueRejectDeadLetter: rejected moves the message to the queue's
// dead-letter queue.
func TestQueueRejectDeadLetter(t *testing.T) {
	e := startServer(t)
	e.declare(t, queue.Config{Name: "dlq"})
	q := e.declare(t, queue.Config{Name: "work", DeadLetter: "dlq"})
	s := e.session(t)
	sendN(t, newSender(t, s, "queue://work", nil), "m", 1)
	r := newReceiver(t, s, "queue://work", nil)
	if err := r.RejectMessage(ctx5(t), next(t, r), nil); err != nil {
		t.Fatal(err)
	}
	if m := receive(t, newReceiver(t, s, "queue://dlq", nil)); body(m) != "m0" {
		t.Fatalf("dead-letter queue got %q", body(m))
	}
	eventually(t, "the message gone from its queue", func() bool { return messages(q) == 0 })
}

// TestQueueExclusiveTakeover: on an exclusive queue the first receiver
// gets everything; when it detaches, the standby takes over, and gets
// what the first left unsettled again.
func TestQueueExclusiveTakeover(t *testing.T) {
	e := startServer(t)
	e.declare(t, queue.Config{Name: "ex", Access: queue.Exclusive})
	s := e.session(t)
	first := newReceiver(t, s, "queue://ex", &goamqp.ReceiverOptions{Credit: 100})
	standby := newReceiver(t, e.session(t), "queue://ex", &goamqp.ReceiverOptions{Credit: 100})
	const n = 20
	sendN(t, newSender(t, s, "queue://ex", nil), "m", n)
	var last *goamqp.Message
	for i := range n { // every one: had the standby taken any, this would wait in vain
		last = next(t, first)
		if want := fmt.Sprintf("m%d", i); body(last) != want {
			t.Fatalf("got %q, want %q", body(last), want)
		}
		if i < n-1 {
			if err := first.AcceptMessage(ctx5(t), last); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := first.Close(ctx5(t)); err != nil { // m19 unsettled
		t.Fatal(err)
	}
	m := receive(t, standby)
	if c, f := hdr(m); body(m) != "m19" || f || c != 1 {
		t.Fatalf("standby got %q delivery-count %d first-acquirer %v, want m19 1 false", body(m), c, f)
	}
}

// TestQueueSpread: a non-exclusive queue spreads deliveries over its
// receivers by credit: a receiver holding its one credit's delivery
// unsettled leaves the next to the other.
func TestQueueSpread(t *testing.T) {
	e := startServer(t)
	e.declare(t, queue.Config{Name: "shared"})
	s := e.session(t)
	r1 := newReceiver(t, s, "queue://shared", &goamqp.ReceiverOptions{Credit: 1})
	r2 := newReceiver(t, e.session(t), "queue://shared", &goamqp.ReceiverOptions{Credit: 1})
	sendN(t, newSender(t, s, "queue://shared", nil), "m", 2)
	a, b := next(t, r1), next(t, r2)
	if got := []string{body(a), body(b)}; !(got[0] == "m0" && got[1] == "m1" || got[0] == "m1" && got[1] == "m0") {
		t.Fatalf("receivers got %v, want m0 and m1 between them", got)
	}
}

// TestQueueDetachRedelivers: a receiver that detaches (or whose
// connection goes) with deliveries unsettled gives them back; the next
// receiver gets them with delivery-count 1. What it accepted before
// detaching stays accepted.
func TestQueueDetachRedelivers(t *testing.T) {
	e, q, s := filled(t, queue.Config{Name: "q"}, 3)
	c := e.dial(t, nil)
	cs, err := c.NewSession(ctx5(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	r := newReceiver(t, cs, "queue://q", &goamqp.ReceiverOptions{Credit: 10})
	receive(t, r) // m0 accepted
	next(t, r)    // m1 unsettled
	if err := r.Close(ctx5(t)); err != nil {
		t.Fatal(err)
	}
	r2 := newReceiver(t, cs, "queue://q", &goamqp.ReceiverOptions{Credit: 1})
	m := next(t, r2)
	if c, f := hdr(m); body(m) != "m1" || c != 1 || f {
		t.Fatalf("after detach: %q delivery-count %d first-acquirer %v, want m1 1 false", body(m), c, f)
	}
	c.Close() // the connection goes with m1 unsettled again
	// The gateway answers the close before it lets go of the consumer.
	eventually(t, "the connection gone", func() bool { return e.srv.Connections() == 1 })
	r3 := newReceiver(t, s, "queue://q", nil)
	if m := receive(t, r3); body(m) != "m1" {
		t.Fatalf("after the connection closed: %q, want m1", body(m))
	}
	if m := receive(t, r3); body(m) != "m2" {
		t.Fatalf("then %q, want m2", body(m))
	}
	eventually(t, "the queue empty", func() bool { return messages(q) == 0 })
	if got := q.Info().Counters.Acked; got != 3 {
		t.Fatalf("acked %d, want 3 (m0 once)", got)
	}
}

// TestQueueSettledMode: a receiver asking snd-settle-mode settled gets
// each delivery settled; the queue lets it go as it is sent (at most once).
func TestQueueSettledMode(t *testing.T) {
	_, q, s := filled(t, queue.Config{Name: "q"}, 1)
	mode := goamqp.SenderSettleModeSettled
	r := newReceiver(t, s, "queue://q", &goamqp.ReceiverOptions{RequestedSenderSettleMode: &mode})
	if m := next(t, r); body(m) != "m0" {
		t.Fatalf("got %q", body(m))
	}
	eventually(t, "the queue empty without an outcome", func() bool { return messages(q) == 0 })
}

// TestQueueBrowse: a receiver with distribution-mode copy sees every
// message, settled, and takes none: a consumer gets them all afterwards.
func TestQueueBrowse(t *testing.T) {
	_, q, s := filled(t, queue.Config{Name: "q"}, 3)
	b := newReceiver(t, s, "queue://q", &goamqp.ReceiverOptions{Credit: 10, SourceDistributionMode: goamqp.SourceDistributionModeCopy})
	for i := range 3 {
		m := next(t, b)
		if want := fmt.Sprintf("m%d", i); body(m) != want {
			t.Fatalf("browsed %q, want %q", body(m), want)
		}
		if _, first := hdr(m); first {
			t.Fatal("a browsed message is not acquired: first-acquirer must be false")
		}
	}
	if n := messages(q); n != 3 {
		t.Fatalf("queue holds %d after browsing, want 3", n)
	}
	r := newReceiver(t, s, "queue://q", &goamqp.ReceiverOptions{Credit: 10})
	for i := range 3 {
		if m := receive(t, r); body(m) != fmt.Sprintf("m%d", i) {
			t.Fatalf("consumer got %q", body(m))
		}
	}
}

// TestQueueFull: a send to a full queue is rejected with
// amqp:resource-limit-exceeded, the description naming the queue and its
// limit; nothing is stored.
func TestQueueFull(t *testing.T) {
	e := startServer(t)
	q := e.declare(t, queue.Config{Name: "small", MaxMessages: 1})
	s := e.session(t)
	snd := newSender(t, s, "queue://small", nil)
	sendN(t, snd, "m", 1)
	err := snd.Send(ctx5(t), goamqp.NewMessage([]byte("over")), nil)
	if amqpCond(err) != "amqp:resource-limit-exceeded" || !strings.Contains(err.Error(), `"small"`) || !strings.Contains(err.Error(), "maxMessages") {
		t.Fatalf("send to a full queue: %v, want rejected amqp:resource-limit-exceeded naming the queue and limit", err)
	}
	if n := messages(q); n != 1 {
		t.Fatalf("queue holds %d, want 1", n)
	}
}

// TestQueueAnonymousRelay: the anonymous relay puts a message whose "to"
// is queue://name into the queue; an unknown queue is amqp:not-found.
func TestQueueAnonymousRelay(t *testing.T) {
	e := startServer(t)
	q := e.declare(t, queue.Config{Name: "q"})
	s := e.session(t)
	relay := newSender(t, s, "", nil)
	for _, tc := range []struct {
		to   string
		dest any
	}{{"queue://q", nil}, {"q", int8(jmsQueue)}, {"q", nil}} {
		to := tc.to
		m := goamqp.NewMessage([]byte(tc.to))
		m.Properties = &goamqp.MessageProperties{To: &to}
		if tc.dest != nil {
			m.Annotations = goamqp.Annotations{"x-opt-jms-dest": tc.dest}
		}
		send(t, relay, m)
	}
	if n := messages(q); n != 3 {
		t.Fatalf("queue holds %d, want 3", n)
	}
	to := "queue://nope"
	m := goamqp.NewMessage([]byte("x"))
	m.Properties = &goamqp.MessageProperties{To: &to}
	if err := relay.Send(ctx5(t), m, nil); amqpCond(err) != "amqp:not-found" {
		t.Fatalf("relay to an unknown queue: %v, want amqp:not-found", err)
	}
}

// TestQueueAutoCreate: with AutoCreateQueues an attach to an unknown
// queue creates a durable one; without it the attach is refused.
func TestQueueAutoCreate(t *testing.T) {
	e := startServer(t, func(o *Options) { o.AutoCreateQueues = true })
	s := e.session(t)
	r := newReceiver(t, s, "queue://made", nil)
	send(t, newSender(t, s, "queue://made2", nil), goamqp.NewMessage([]byte("x")))
	for _, name := range []string{"made", "made2"} {
		q, ok := e.queues.Queue(name)
		if !ok || q.Info().Config.Temporary {
			t.Fatalf("queue %q: %v, want a durable queue", name, ok)
		}
	}
	send(t, newSender(t, s, "queue://made", nil), goamqp.NewMessage([]byte("y")))
	if body(receive(t, r)) != "y" {
		t.Fatal("want y")
	}
	if _, err := s.NewReceiver(ctx5(t), "queue://bad#name", nil); amqpCond(err) != "amqp:invalid-field" {
		t.Fatalf("a queue name with a wildcard: %v, want amqp:invalid-field", err)
	}
}

// TestTemporaryQueue: a dynamic receiver with capability temporary-queue
// gets a temporary queue, which another connection can send to by the
// address in the attach answer, and which is deleted with its connection.
func TestTemporaryQueue(t *testing.T) {
	e := startServer(t)
	c := e.dial(t, nil)
	cs, err := c.NewSession(ctx5(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	r := newReceiver(t, cs, "", &goamqp.ReceiverOptions{DynamicAddress: true, SourceCapabilities: []string{"temporary-queue"}})
	addr := r.Address()
	name, ok := strings.CutPrefix(addr, "queue://")
	if !ok {
		t.Fatalf("temporary queue address %q, want queue://…", addr)
	}
	q, ok := e.queues.Queue(name)
	if !ok || !q.Info().Config.Temporary {
		t.Fatalf("no temporary queue %q", name)
	}
	other := e.session(t)
	snd := newSender(t, other, addr, &goamqp.SenderOptions{TargetCapabilities: []string{"temporary-queue"}})
	send(t, snd, goamqp.NewMessage([]byte("reply")))
	m := receive(t, r)
	if body(m) != "reply" {
		t.Fatalf("got %q", body(m))
	}
	if d, _ := m.Annotations["x-opt-jms-dest"].(int8); d != jmsTempQueue {
		t.Fatalf("x-opt-jms-dest %v, want 2 (temporary queue)", m.Annotations["x-opt-jms-dest"])
	}
	// A dynamic sender with the capability makes one too.
	ds := newSender(t, cs, "", &goamqp.SenderOptions{DynamicAddress: true, TargetCapabilities: []string{"temporary-queue"}})
	if !strings.HasPrefix(ds.Address(), "queue://"+tmpQueuePrefix) {
		t.Fatalf("dynamic sender address %q", ds.Address())
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "temporary queues deleted with their connection", func() bool {
		for _, q := range e.queues.Queues() {
			if q.Info().Config.Temporary {
				return false
			}
		}
		return true
	})
	if _, err := other.NewSender(ctx5(t), addr, nil); amqpCond(err) != "amqp:not-found" {
		t.Fatalf("sender to a gone temporary queue: %v, want amqp:not-found", err)
	}
}

// TestQueueDeletedDetaches: a queue deleted under a receiver detaches its
// link with amqp:resource-deleted, and the connection goes on.
func TestQueueDeletedDetaches(t *testing.T) {
	e := startServer(t)
	e.declare(t, queue.Config{Name: "doomed"})
	s := e.session(t)
	r := newReceiver(t, s, "queue://doomed", nil)
	if err := e.queues.Delete(context.Background(), "doomed"); err != nil {
		t.Fatal(err)
	}
	_, err := r.Receive(ctx5(t), nil)
	if amqpCond(err) != "amqp:resource-deleted" {
		t.Fatalf("receive on a deleted queue: %v, want amqp:resource-deleted", err)
	}
	var le *goamqp.LinkError
	if !errors.As(err, &le) {
		t.Fatalf("%T, want a link error", err)
	}
	// The session is still good.
	tr := newReceiver(t, s, "after/delete", nil)
	send(t, newSender(t, s, "after/delete", nil), goamqp.NewMessage([]byte("ok")))
	if body(receive(t, tr)) != "ok" {
		t.Fatal("session unusable after the detach")
	}
}

// TestQueueDrain: drain on a queue link with nothing to send gives the
// credit back at once.
func TestQueueDrain(t *testing.T) {
	e := startServer(t)
	e.declare(t, queue.Config{Name: "q"})
	s := e.session(t)
	r := newReceiver(t, s, "queue://q", &goamqp.ReceiverOptions{Credit: -1})
	if err := r.IssueCredit(5); err != nil {
		t.Fatal(err)
	}
	if err := r.DrainCredit(ctx5(t), nil); err != nil {
		t.Fatalf("drain: %v", err)
	}
	sendN(t, newSender(t, s, "queue://q", nil), "m", 1)
	if err := r.IssueCredit(1); err != nil {
		t.Fatal(err)
	}
	if m := receive(t, r); body(m) != "m0" {
		t.Fatalf("got %q", body(m))
	}
}

// TestTopicIntoFullQueue: an unsettled topic publish that matches a full
// queue is rejected with amqp:resource-limit-exceeded naming the queue,
// and still reaches the topic's subscribers.
func TestTopicIntoFullQueue(t *testing.T) {
	e := startServer(t)
	q := e.declare(t, queue.Config{Name: "fq", Subscriptions: []string{"alerts/#"}, MaxMessages: 1})
	s := e.session(t)
	sub := newReceiver(t, s, "alerts/fire", nil)
	snd := newSender(t, s, "alerts/fire", nil)
	send(t, snd, goamqp.NewMessage([]byte("first")))
	if n := messages(q); n != 1 {
		t.Fatalf("queue holds %d, want 1", n)
	}
	err := snd.Send(ctx5(t), goamqp.NewMessage([]byte("second")), nil)
	if amqpCond(err) != "amqp:resource-limit-exceeded" || !strings.Contains(err.Error(), `"fq"`) {
		t.Fatalf("topic send into a full queue: %v, want rejected amqp:resource-limit-exceeded naming fq", err)
	}
	if body(receive(t, sub)) != "first" || body(receive(t, sub)) != "second" {
		t.Fatal("topic subscriber must get both")
	}
}

// TestRawQueueBrowseAndDelete, at the frame level: the attach answer of a
// browser says distribution-mode copy and carries no filters; its
// deliveries are settled. A deleted queue detaches the link (closed, with
// amqp:resource-deleted); the peer's detach answers it, and the gateway
// does not detach a second time.
func TestRawQueueBrowseAndDelete(t *testing.T) {
	e := startServer(t)
	e.declare(t, queue.Config{Name: "rq"})
	s := e.session(t)
	sendN(t, newSender(t, s, "queue://rq", nil), "m", 1)
	c := rawDial(t, e.addr)
	c.open(nil)
	c.begin(0)
	a := attachReceiver("b", 0, "queue://rq")
	a.Source.DistributionMode = distCopy
	a.Source.Filter = encoding.Fields{{Key: noLocalFilterName, Value: encoding.Described{Descriptor: noLocalFilterName, Value: []any{}}}}
	c.send(0, a, nil)
	ans := expectFrame[*frames.Attach](c)
	if ans.Source == nil || ans.Source.DistributionMode != distCopy || ans.Source.Filter != nil {
		t.Fatalf("attach answer source %+v, want distribution-mode copy and no filter", ans.Source)
	}
	c.send(0, &frames.Flow{NextIncomingID: ptr(uint32(0)), IncomingWindow: 100, OutgoingWindow: 100,
		Handle: ptr(uint32(0)), DeliveryCount: ptr(uint32(0)), LinkCredit: ptr(uint32(5))}, nil)
	if tr := expectFrame[*frames.Transfer](c); !tr.Settled {
		t.Fatalf("browsed transfer %+v, want settled", tr)
	}
	if err := e.queues.Delete(context.Background(), "rq"); err != nil {
		t.Fatal(err)
	}
	d := expectFrame[*frames.Detach](c)
	if !d.Closed || d.Error == nil || d.Error.Condition != frames.ErrCondResourceDeleted {
		t.Fatalf("detach %+v, want closed with amqp:resource-deleted", d)
	}
	c.send(0, &frames.Detach{Handle: 0, Closed: true}, nil)
	// The next frame is the session echo, not a second detach.
	c.send(0, &frames.Flow{NextIncomingID: ptr(uint32(0)), IncomingWindow: 100, OutgoingWindow: 100, Echo: true}, nil)
	if f := expectFrame[*frames.Flow](c); f.Handle != nil {
		t.Fatalf("flow %+v, want the session echo", f)
	}
	// The handle is free again.
	c.send(0, attachReceiver("again", 0, "some/topic"), nil)
	if a := expectFrame[*frames.Attach](c); a.Source == nil {
		t.Fatalf("re-attach on the handle refused: %+v", a)
	}
}

// TestTemporaryQueueLinkClose: a temporary queue lives as long as the
// link that created it (delete-on-close, Qpid JMS TemporaryQueue.delete
// closes it); other links on it are detached with amqp:resource-deleted.
func TestTemporaryQueueLinkClose(t *testing.T) {
	e := startServer(t)
	s := e.session(t)
	creator := newSender(t, s, "", &goamqp.SenderOptions{DynamicAddress: true, TargetCapabilities: []string{"temporary-queue"}})
	name := strings.TrimPrefix(creator.Address(), "queue://")
	r := newReceiver(t, s, creator.Address(), &goamqp.ReceiverOptions{SourceCapabilities: []string{"temporary-queue"}})
	send(t, creator, goamqp.NewMessage([]byte("x")))
	if body(receive(t, r)) != "x" {
		t.Fatal("want x")
	}
	if err := creator.Close(ctx5(t)); err != nil {
		t.Fatal(err)
	}
	if _, ok := e.queues.Queue(name); ok {
		t.Fatalf("temporary queue %q still there after its link closed", name)
	}
	if _, err := r.Receive(ctx5(t), nil); amqpCond(err) != "amqp:resource-deleted" {
		t.Fatalf("receiver on the deleted temporary queue: %v, want amqp:resource-deleted", err)
	}
}

// TestBareAddressQueue: with BareAddressQueue (amqp.bareAddress: queue) an
// address with neither prefix nor capability names a queue, created on the
// first send, so a message sent before any receiver waits for it (Artemis,
// RabbitMQ 4, Qpid Broker-J); a wildcard address stays a topic filter, and
// "topic://" or capability topic still say topic. Without it the same send
// goes to a topic and no queue appears.
func TestBareAddressQueue(t *testing.T) {
	e := startServer(t, func(o *Options) { o.AutoCreateQueues, o.BareAddressQueue = true, true })
	s := e.session(t)
	send(t, newSender(t, s, "orders", nil), goamqp.NewMessage([]byte("early")))
	if _, ok := e.queues.Queue("orders"); !ok {
		t.Fatal("queue orders not created by the send")
	}
	if got := body(receive(t, newReceiver(t, s, "orders", nil))); got != "early" {
		t.Fatalf("got %q, want the message sent before the receiver", got)
	}
	w := newReceiver(t, s, "orders/#", nil) // a topic filter
	send(t, newSender(t, s, "topic://orders/x", nil), goamqp.NewMessage([]byte("t")))
	if got := body(receive(t, w)); got != "t" {
		t.Fatalf("wildcard receiver got %q", got)
	}
	if _, ok := e.queues.Queue("orders/#"); ok {
		t.Fatal("a wildcard address made a queue")
	}

	plain := startServer(t, func(o *Options) { o.AutoCreateQueues = true })
	send(t, newSender(t, plain.session(t), "orders", nil), goamqp.NewMessage([]byte("x")))
	if _, ok := plain.queues.Queue("orders"); ok {
		t.Fatal("amqp.bareAddress topic (the default) created a queue")
	}
}
