package amqp

import (
	"bytes"
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"

	"github.com/tolsey/tolsey/amqp/internal/buffer"
	"github.com/tolsey/tolsey/amqp/internal/encoding"
	"github.com/tolsey/tolsey/amqp/internal/frames"
	"github.com/tolsey/tolsey/core"
	"github.com/tolsey/tolsey/core/queue"
)

// TestDispositionBeforeBlockedPublish: a client that consumes and
// publishes on one connection settles a delivery and, in the same burst,
// publishes to the link it settled on, whose buffer is full
// (amqp.linkOverflow=block). The publish waits (on the reader) for room
// that only the settlement makes: the disposition must reach the writer
// before the reader waits, or the wait runs out and the message is
// dropped.
func TestDispositionBeforeBlockedPublish(t *testing.T) {
	e := startServer(t, func(o *Options) {
		o.LinkBuffer = 2
		o.BlockOnOverflow = true
		o.OverflowWait = 10 * time.Second // longer than the client waits: the settlement must end the wait
	})
	c := rawDial(t, e.addr)
	c.open(nil)
	c.begin(0)
	unsettled := frames.SenderSettleModeUnsettled
	c.send(0, &frames.Attach{Name: "r", Handle: 0, Role: frames.RoleReceiver, SndSettleMode: &unsettled,
		Source: &frames.Source{Address: "loop"}, Target: &frames.Target{}}, nil)
	expectFrame[*frames.Attach](c)
	c.send(0, &frames.Flow{NextIncomingID: ptr(uint32(0)), IncomingWindow: 1000, OutgoingWindow: 1000,
		Handle: ptr(uint32(0)), DeliveryCount: ptr(uint32(0)), LinkCredit: ptr(uint32(100))}, nil)
	c.send(0, attachSender("s", 1, "loop"), nil)
	expectFrame[*frames.Attach](c)
	expectFrame[*frames.Flow](c)

	// Two sent, unsettled (the link's bound), two in its buffer (full).
	for range 4 {
		e.router.Publish(context.Background(), &core.Message{Topic: "loop", Payload: []byte("x"), QoS: 1})
	}
	nextTransfer := func() *frames.Transfer {
		t.Helper()
		for {
			_, p, _ := c.next()
			if tr, ok := p.(*frames.Transfer); ok {
				return tr
			}
		}
	}
	for want := range uint32(2) {
		if tr := nextTransfer(); tr.Handle != 0 || *tr.DeliveryID != want {
			t.Fatalf("transfer %+v, want delivery %d on the receiving link", tr, want)
		}
	}
	// One write: the settlement of delivery 0, then a presettled publish
	// to the full link.
	var b buffer.Buffer
	accept := func(id uint32) {
		t.Helper()
		d := &frames.Disposition{Role: frames.RoleReceiver, First: id, Settled: true, State: &frames.Accepted{}}
		if err := frames.AppendFrame(&b, frames.TypeAMQP, 0, d, nil); err != nil {
			t.Fatal(err)
		}
	}
	accept(0)
	tr := &frames.Transfer{Handle: 1, DeliveryID: ptr(uint32(0)), DeliveryTag: []byte{0}, MessageFormat: ptr(uint32(0)), Settled: true}
	if err := frames.AppendFrame(&b, frames.TypeAMQP, 0, tr, encodeMessage(t, &frames.Message{Data: [][]byte{[]byte("mine")}})); err != nil {
		t.Fatal(err)
	}
	c.writeRaw(b.Written())
	b.Reset()

	// Every message arrives: the four, then the client's own.
	accept(1)
	c.writeRaw(b.Written())
	for want := uint32(2); want < 5; want++ {
		tr := nextTransfer()
		if tr.Handle != 0 || *tr.DeliveryID != want {
			t.Fatalf("transfer %+v, want delivery %d on the receiving link", tr, want)
		}
		b.Reset()
		accept(want)
		c.writeRaw(b.Written())
	}
	if d := e.dropped("slow_consumer"); d != 0 {
		t.Fatalf("%v dropped", d)
	}
}

// heldWriter holds the writers of the server's connections in the next
// encode of a delivery once armed (encodeHook): a test then has the
// reader read on while the writer has yet to apply what it was handed.
type heldWriter struct {
	armed            atomic.Bool
	entered, release chan struct{}
}

func holdWriters(t *testing.T) *heldWriter {
	h := &heldWriter{entered: make(chan struct{}), release: make(chan struct{})}
	encodeHook = func() {
		if h.armed.CompareAndSwap(true, false) {
			h.entered <- struct{}{}
			<-h.release
		}
	}
	t.Cleanup(func() { encodeHook = nil })
	return h
}

// newConnOf runs dial and returns the server's side of the one connection
// it opened.
func newConnOf(t *testing.T, e *env, dial func()) *conn {
	t.Helper()
	before := map[*conn]bool{}
	e.srv.mu.Lock()
	for sc := range e.srv.conns {
		before[sc] = true
	}
	e.srv.mu.Unlock()
	dial()
	var sc *conn
	e.srv.mu.Lock()
	for x := range e.srv.conns {
		if !before[x] {
			sc = x
		}
	}
	e.srv.mu.Unlock()
	if sc == nil {
		t.Fatal("the client's connection not found")
	}
	return sc
}

// heartbeats sends n bytes of empty frames on c and waits until sc has
// read them: more than its read buffer holds goes round all of it.
func heartbeats(t *testing.T, c *rawConn, sc *conn, n int) {
	t.Helper()
	b := bytes.Repeat([]byte{0, 0, 0, 8, 2, 0, 0, 0}, n/8)
	in := sc.stats.bytesIn.Load()
	c.writeRaw(b)
	eventually(t, "the heartbeats read", func() bool { return sc.stats.bytesIn.Load() >= in+int64(len(b)) })
}

// TestTxnAckOutlivesReadBuffer: the txn-id of a transactional
// disposition is read by the writer, after the reader has handed it on
// and read further frames into the same buffer. Here the writer is held
// (in an encode) while the reader reads the disposition and then enough
// heartbeats to go round its whole read buffer: the acknowledgement must
// still count in its transaction, and the commit remove the message.
func TestTxnAckOutlivesReadBuffer(t *testing.T) {
	h := holdWriters(t)
	e, q, _ := filled(t, queue.Config{Name: "txbuf"}, 1)
	var c *txnClient
	sc := newConnOf(t, e, func() { c = txnDial(t, e) })
	c.receiver(1, "queue://txbuf", 10)
	d0, _ := c.delivery()
	id := c.declare()
	heartbeats(t, c.rawConn, sc, 256<<10) // the reader's buffer grows to its most

	// Hold the writer in the encode of a delivery on another link.
	c.receiver(2, "held/t", 10)
	eventually(t, "the held receiver's subscription", func() bool { return e.router.Len() == 1 })
	h.armed.Store(true)
	e.router.Publish(context.Background(), &core.Message{Topic: "held/t", Payload: []byte("x")})
	<-h.entered
	c.ack(d0, d0, id)
	heartbeats(t, c.rawConn, sc, 256<<10) // round the read buffer, over the disposition's bytes
	close(h.release)

	wantAccepted(t, c.discharge(id, false), "commit")
	if n := messages(q); n != 0 {
		t.Fatalf("queue holds %d once the commit is answered, want 0", n)
	}
}

// TestSettleBackOutlivesReadBuffer: a receiver in rcv-settle-mode second
// rejects a delivery with error info holding binary; the gateway settles
// it back with the receiver's state. The writer sends that state after
// the reader has read round its buffer: it goes back as it came.
func TestSettleBackOutlivesReadBuffer(t *testing.T) {
	h := holdWriters(t)
	e := startServer(t)
	var c *rawConn
	sc := newConnOf(t, e, func() {
		c = rawDial(t, e.addr)
		c.open(nil)
	})
	c.begin(0)
	second := frames.ReceiverSettleModeSecond
	a := attachReceiver("r", 0, "back/t")
	a.RcvSettleMode = &second
	c.send(0, a, nil)
	expectFrame[*frames.Attach](c)
	c.send(0, attachReceiver("h", 1, "held/t"), nil)
	expectFrame[*frames.Attach](c)
	for h := range uint32(2) {
		c.send(0, &frames.Flow{NextIncomingID: ptr(uint32(0)), IncomingWindow: 1000, OutgoingWindow: 1000,
			Handle: ptr(h), DeliveryCount: ptr(uint32(0)), LinkCredit: ptr(uint32(10))}, nil)
	}
	eventually(t, "both subscriptions", func() bool { return e.router.Len() == 2 })
	e.router.Publish(context.Background(), &core.Message{Topic: "back/t", Payload: []byte("x"), QoS: 1})
	tr := expectFrame[*frames.Transfer](c)
	heartbeats(t, c, sc, 256<<10) // the reader's buffer grows to its most

	h.armed.Store(true)
	e.router.Publish(context.Background(), &core.Message{Topic: "held/t", Payload: []byte("x")})
	<-h.entered
	info := []byte("the consumer's own bytes")
	c.send(0, &frames.Disposition{Role: frames.RoleReceiver, First: *tr.DeliveryID, State: &frames.Rejected{Error: &frames.Error{
		Condition: "app:bad", Info: encoding.Fields{{Key: "raw", Value: info}}}}}, nil)
	heartbeats(t, c, sc, 256<<10) // round the read buffer, over the disposition's bytes
	close(h.release)

	for {
		_, p, _ := c.next()
		d, ok := p.(*frames.Disposition)
		if !ok {
			continue
		}
		rj, ok := d.State.(*frames.Rejected)
		if d.Role != frames.RoleSender || !d.Settled || !ok || rj.Error == nil || len(rj.Error.Info) != 1 {
			t.Fatalf("settled back with %+v (state %+v), want the rejected state", d, d.State)
		}
		if got, _ := rj.Error.Info[0].Value.([]byte); !bytes.Equal(got, info) {
			t.Fatalf("error info settled back %q, want %q", got, info)
		}
		return
	}
}

// TestTxnAckInDispositionBurst: in one burst of dispositions, plain
// acceptances (acknowledged together, queue.Consumer.AckAll), an
// acceptance in a transaction and a release: the transactional one
// waits for the discharge, and a rollback gives it back, counted as a
// failed delivery, while the plain ones stay acknowledged and the
// released one comes back uncounted.
func TestTxnAckInDispositionBurst(t *testing.T) {
	e, q, _ := filled(t, queue.Config{Name: "txburst"}, 4)
	c := txnDial(t, e)
	c.receiver(1, "queue://txburst", 10)
	var ds [4]uint32
	for i := range ds {
		ds[i], _ = c.delivery()
	}
	id := c.declare()
	var b buffer.Buffer
	add := func(d uint32, st frames.DeliveryState) {
		t.Helper()
		p := &frames.Disposition{Role: frames.RoleReceiver, First: d, Settled: true, State: st}
		if err := frames.AppendFrame(&b, frames.TypeAMQP, 0, p, nil); err != nil {
			t.Fatal(err)
		}
	}
	add(ds[0], &frames.Accepted{})
	add(ds[1], &frames.TransactionalState{TxnID: id, Outcome: &frames.Accepted{}})
	add(ds[2], &frames.Accepted{})
	add(ds[3], &frames.Released{})
	c.writeRaw(b.Written())
	wantAccepted(t, c.discharge(id, true), "rollback")
	// The released one is delivered again at once, the rolled-back one
	// after the discharge: either may come first.
	want := map[string]uint32{"m1": 1, "m3": 0}
	for range 2 {
		_, m := c.delivery()
		count := uint32(0)
		if m.Header != nil {
			count = m.Header.DeliveryCount
		}
		body := string(m.Data[0])
		if wc, ok := want[body]; !ok || count != wc {
			t.Fatalf("delivered %q with delivery-count %d, want m1 with 1 and m3 with 0, once each", body, count)
		}
		delete(want, body)
	}
	if n := messages(q); n != 2 {
		t.Fatalf("queue holds %d, want 2 (the rolled-back and the released one)", n)
	}
	if a := q.Info().Counters.Acked; a != 2 {
		t.Fatalf("acked %d, want 2", a)
	}
}

// TestUnsubscribeAfterAcceptInBurst: a link of a shared durable
// subscription accepts its delivery and detaches with closed (a JMS
// unsubscribe) in one burst, while another link of the subscription
// stays. The unsubscribe closes the link's consumer on the reader: it
// must come after the writer has applied the acceptance, or the accepted
// message goes back to the queue, counted as a failed delivery, and the
// other link gets it again.
func TestUnsubscribeAfterAcceptInBurst(t *testing.T) {
	e := startServer(t)
	c := rawDial(t, e.addr)
	c.open(&frames.Open{ContainerID: "jms-burst"})
	c.begin(0)
	shared := func(name string, h uint32) *frames.Attach {
		return &frames.Attach{Name: name, Handle: h, Role: frames.RoleReceiver, Target: &frames.Target{},
			Source: &frames.Source{Address: "shb/#", Durable: frames.DurabilityUnsettledState, ExpiryPolicy: "never",
				Capabilities: []encoding.Symbol{"shared"}}}
	}
	flow := func(h, credit uint32) {
		c.send(0, &frames.Flow{NextIncomingID: ptr(uint32(0)), IncomingWindow: 1000, OutgoingWindow: 1000,
			Handle: ptr(h), DeliveryCount: ptr(uint32(0)), LinkCredit: ptr(credit)}, nil)
	}
	c.send(0, shared("sub", 0), nil)
	expectFrame[*frames.Attach](c)
	c.send(0, shared("sub|2", 1), nil)
	expectFrame[*frames.Attach](c)
	q := e.subQueue(t, "jms-burst", "sub")
	flow(0, 1) // only the first link may take it
	e.router.Publish(context.Background(), &core.Message{Topic: "shb/x", Payload: []byte("once"), QoS: 1})
	tr := expectFrame[*frames.Transfer](c)
	if tr.Handle != 0 {
		t.Fatalf("transfer on handle %d, want 0", tr.Handle)
	}
	var b buffer.Buffer
	for _, p := range []frames.Performative{
		&frames.Disposition{Role: frames.RoleReceiver, First: *tr.DeliveryID, Settled: true, State: &frames.Accepted{}},
		&frames.Detach{Handle: 0, Closed: true},
	} {
		if err := frames.AppendFrame(&b, frames.TypeAMQP, 0, p, nil); err != nil {
			t.Fatal(err)
		}
	}
	c.writeRaw(b.Written())
	expectFrame[*frames.Detach](c)
	info := q.Info()
	if info.Messages != 0 || info.Counters.Acked != 1 || info.Consumers != 1 {
		t.Fatalf("after the unsubscribe the queue holds %d, acked %d, %d consumers; want 0, 1, 1",
			info.Messages, info.Counters.Acked, info.Consumers)
	}
}

// TestQueueUngetSpreadsExactlyOnce: two consumers of one queue, one of
// them with a session window of two transfers and messages of three
// frames, so that the writer gives back most of what it takes
// (queue.Consumer.Unget) while the other consumer takes from the queue
// too: every message reaches exactly one of them, each in the queue's
// order, as a first delivery.
func TestQueueUngetSpreadsExactlyOnce(t *testing.T) {
	const n, each = 40, 20
	e := startDurableServer(t)
	e.declare(t, queue.Config{Name: "spread"})
	snd := newSender(t, e.session(t), "queue://spread", nil)
	for i := range n {
		send(t, snd, goamqp.NewMessage(append([]byte{byte(i)}, bytes.Repeat([]byte{'x'}, 1000)...)))
	}
	// The other consumer: exactly its share of credit, taken meanwhile.
	r := newReceiver(t, e.session(t), "queue://spread", &goamqp.ReceiverOptions{Credit: -1})
	got := make(chan []byte, n)
	errc := make(chan error, 1)
	go func() {
		for range each {
			m, err := r.Receive(ctx5(t), nil)
			if err != nil {
				errc <- err
				return
			}
			if m.Header != nil && (m.Header.DeliveryCount != 0 || !m.Header.FirstAcquirer) {
				errc <- fmt.Errorf("delivery-count %d, first-acquirer %v", m.Header.DeliveryCount, m.Header.FirstAcquirer)
				return
			}
			if err := r.AcceptMessage(context.Background(), m); err != nil {
				errc <- err
				return
			}
			got <- m.GetData()
		}
		errc <- nil
	}()

	c := rawWindow2Receiver(t, e.addr, "queue://spread", each)
	if err := r.IssueCredit(each); err != nil {
		t.Fatal(err)
	}
	received := uint32(0)
	var mine [][]byte
	var body []byte
	var id uint32 // of the delivery being received: on its first frame
	for len(mine) < each {
		if received%2 == 0 && received > 0 {
			c.send(0, &frames.Flow{NextIncomingID: ptr(received), IncomingWindow: 2, OutgoingWindow: 1000}, nil)
		}
		_, p, payload := c.next()
		tr, ok := p.(*frames.Transfer)
		if !ok {
			continue
		}
		received++
		if tr.DeliveryID != nil {
			id = *tr.DeliveryID
		}
		body = append(body, payload...)
		if tr.More {
			continue
		}
		var m frames.Message
		if err := m.Decode(body); err != nil {
			t.Fatal(err)
		}
		body = nil
		if m.Header == nil || m.Header.DeliveryCount != 0 || !m.Header.FirstAcquirer {
			t.Fatalf("header %+v, want a first delivery", m.Header)
		}
		mine = append(mine, m.Data[0])
		c.send(0, &frames.Disposition{Role: frames.RoleReceiver, First: id, Settled: true, State: &frames.Accepted{}}, nil)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	close(got)
	seen := map[byte]bool{}
	check := func(who string, bodies [][]byte) {
		last := -1
		for _, b := range bodies {
			i := int(b[0])
			if seen[b[0]] {
				t.Fatalf("message %d delivered twice", i)
			}
			seen[b[0]] = true
			if i <= last {
				t.Fatalf("%s got message %d after %d", who, i, last)
			}
			last = i
		}
	}
	check("the small window", mine)
	var theirs [][]byte
	for b := range got {
		theirs = append(theirs, b)
	}
	check("the other consumer", theirs)
	if len(seen) != n {
		t.Fatalf("%d messages delivered, want %d", len(seen), n)
	}
}
