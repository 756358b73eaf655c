package amqp

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tolsey/tolsey/amqp/internal/encoding"
	"github.com/tolsey/tolsey/amqp/internal/frames"
	"github.com/tolsey/tolsey/core"
	"github.com/tolsey/tolsey/core/queue"
)

// Local transactions (txn.go) with raw frames, as Qpid JMS sends them for
// a transacted session: go-amqp (v1.x) has no transaction support.

// txnClient is a raw connection with one session, a coordinator link on
// handle 0 and the delivery-ids it has used.
type txnClient struct {
	*rawConn
	t        testing.TB
	sent     uint32             // transfers sent: next-outgoing-id and the next delivery-id
	received []*frames.Transfer // transfers the gateway sent, not yet taken
	payloads map[uint32][]byte  // their payloads by delivery-id
	outcomes map[uint32]frames.DeliveryState
}

func txnDial(t testing.TB, e *env, mods ...func(*frames.Attach)) *txnClient {
	t.Helper()
	c := &txnClient{rawConn: rawDial(t, e.addr), t: t, payloads: map[uint32][]byte{}, outcomes: map[uint32]frames.DeliveryState{}}
	c.open(nil)
	c.begin(0)
	a := &frames.Attach{Name: "txn", Handle: 0, Role: frames.RoleSender, Source: &frames.Source{},
		Target:               &frames.Target{Coordinator: true, Capabilities: []encoding.Symbol{frames.TxnCapLocal}},
		InitialDeliveryCount: ptr(uint32(0))}
	for _, m := range mods {
		m(a)
	}
	c.send(0, a, nil)
	reply := expectFrame[*frames.Attach](c.rawConn)
	if reply.Target == nil || !reply.Target.Coordinator {
		t.Fatalf("coordinator attach answered with target %+v, want a coordinator", reply.Target)
	}
	expectFrame[*frames.Flow](c.rawConn)
	return c
}

// sender attaches a sending link on handle h to target.
func (c *txnClient) sender(h uint32, target string) {
	c.t.Helper()
	c.send(0, attachSender("s"+target, h, target), nil)
	expectFrame[*frames.Attach](c.rawConn)
	expectFrame[*frames.Flow](c.rawConn)
}

// receiver attaches a receiving link on handle h to source with credit.
func (c *txnClient) receiver(h uint32, source string, credit uint32) {
	c.t.Helper()
	c.send(0, &frames.Attach{Name: "r" + source, Handle: h, Role: frames.RoleReceiver,
		Source: &frames.Source{Address: source}, Target: &frames.Target{}}, nil)
	expectFrame[*frames.Attach](c.rawConn)
	c.send(0, &frames.Flow{IncomingWindow: 1000, NextOutgoingID: c.sent, OutgoingWindow: 1000,
		Handle: ptr(h), DeliveryCount: ptr(uint32(0)), LinkCredit: ptr(credit)}, nil)
}

// transfer sends one message on handle h, in transaction txn unless nil,
// and returns the gateway's outcome.
func (c *txnClient) transfer(h uint32, m *frames.Message, txn []byte) frames.DeliveryState {
	c.t.Helper()
	id := c.sent
	c.sent++
	tr := &frames.Transfer{Handle: h, DeliveryID: ptr(id), DeliveryTag: []byte{byte(id), byte(id >> 8)}, MessageFormat: ptr(uint32(0))}
	if txn != nil {
		tr.State = &frames.TransactionalState{TxnID: txn}
	}
	c.send(0, tr, encodeMessage(c.t, m))
	for {
		if st, ok := c.outcomes[id]; ok {
			delete(c.outcomes, id)
			return st
		}
		c.read()
	}
}

// read takes the next frame: outcomes and transfers are kept.
func (c *txnClient) read() {
	c.t.Helper()
	_, p, payload := c.next()
	switch p := p.(type) {
	case *frames.Disposition:
		if p.Role == frames.RoleSender {
			return // the gateway settling deliveries it sent
		}
		if !p.Settled {
			c.t.Fatalf("disposition %+v, want the gateway's settled outcome", p)
		}
		last := p.First
		if p.Last != nil {
			last = *p.Last
		}
		for id := p.First; id <= last; id++ {
			c.outcomes[id] = p.State
		}
	case *frames.Transfer:
		c.received = append(c.received, p)
		c.payloads[*p.DeliveryID] = payload
	case *frames.Flow:
	default:
		c.t.Fatalf("unexpected %T %+v", p, p)
	}
}

// delivery waits for the next transfer the gateway sends and decodes it.
func (c *txnClient) delivery() (uint32, *frames.Message) {
	c.t.Helper()
	for len(c.received) == 0 {
		c.read()
	}
	tr := c.received[0]
	c.received = c.received[1:]
	var m frames.Message
	if err := m.Decode(c.payloads[*tr.DeliveryID]); err != nil {
		c.t.Fatal(err)
	}
	return *tr.DeliveryID, &m
}

func (c *txnClient) declare() []byte {
	c.t.Helper()
	st := c.transfer(0, &frames.Message{Value: encoding.Described{Descriptor: uint64(frames.CodeDeclare), Value: []any{}}}, nil)
	d, ok := st.(*frames.Declared)
	if !ok || len(d.TxnID) == 0 {
		c.t.Fatalf("declare answered with %#v, want declared with a txn-id", st)
	}
	return bytes.Clone(d.TxnID) // d aliases the reader's buffer
}

func (c *txnClient) discharge(id []byte, fail bool) frames.DeliveryState {
	c.t.Helper()
	return c.transfer(0, &frames.Message{Value: encoding.Described{Descriptor: uint64(frames.CodeDischarge), Value: []any{id, fail}}}, nil)
}

// ack gives deliveries first..last the outcome accepted in transaction
// txn, settled as Qpid JMS does.
func (c *txnClient) ack(first, last uint32, txn []byte) { c.ackSettled(first, last, txn, true) }

// ackSettled is ack, unsettled when settled is false (Proton's
// Transaction.accept: the delivery is settled after the discharge).
func (c *txnClient) ackSettled(first, last uint32, txn []byte, settled bool) {
	c.send(0, &frames.Disposition{Role: frames.RoleReceiver, First: first, Last: ptr(last), Settled: settled,
		State: &frames.TransactionalState{TxnID: txn, Outcome: &frames.Accepted{}}}, nil)
}

func text(s string) *frames.Message { return &frames.Message{Data: [][]byte{[]byte(s)}} }

func wantTxnAccepted(t *testing.T, st frames.DeliveryState, txn []byte) {
	t.Helper()
	ts, ok := st.(*frames.TransactionalState)
	if !ok || !bytes.Equal(ts.TxnID, txn) {
		t.Fatalf("outcome %#v, want transactional-state of txn %x", st, txn)
	}
	if _, ok := ts.Outcome.(*frames.Accepted); !ok {
		t.Fatalf("transactional outcome %#v, want accepted", ts.Outcome)
	}
}

func wantAccepted(t *testing.T, st frames.DeliveryState, what string) {
	t.Helper()
	if _, ok := st.(*frames.Accepted); !ok {
		t.Fatalf("%s answered with %#v, want accepted", what, st)
	}
}

func wantRejected(t *testing.T, st frames.DeliveryState, cond encoding.Symbol, what string) {
	t.Helper()
	if ts, ok := st.(*frames.TransactionalState); ok {
		st = ts.Outcome
	}
	rj, ok := st.(*frames.Rejected)
	if !ok || rj.Error == nil || rj.Error.Condition != cond {
		t.Fatalf("%s answered with %#v, want rejected %s", what, st, cond)
	}
}

// TestTxnSends: messages sent in a transaction, to a topic and to a
// queue, are seen by nobody before the commit, are all stored when the
// commit is answered, and are dropped by a rollback. A plain message sent
// after the transactional ones overtakes them: the receiver's first
// message is the marker.
func TestTxnSends(t *testing.T) {
	e := startServer(t)
	q := e.declare(t, queue.Config{Name: "tq"})
	recv := newReceiver(t, e.session(t), "txn/t", nil)

	c := txnDial(t, e)
	c.sender(1, "txn/t")
	c.sender(2, "queue://tq")
	c.sender(3, "txn/t")

	id := c.declare()
	wantTxnAccepted(t, c.transfer(1, text("a1"), id), id)
	wantTxnAccepted(t, c.transfer(2, text("q1"), id), id)
	wantAccepted(t, c.transfer(3, text("marker1"), nil), "a plain send")
	if got := body(receive(t, recv)); got != "marker1" {
		t.Fatalf("first message %q, want marker1: the transaction's message was published before its commit", got)
	}
	if n := messages(q); n != 0 {
		t.Fatalf("queue holds %d before the commit, want 0", n)
	}
	wantAccepted(t, c.discharge(id, false), "commit")
	if n := messages(q); n != 1 { // the commit is answered once the queue holds it
		t.Fatalf("queue holds %d once the commit is answered, want 1", n)
	}
	if got := body(receive(t, recv)); got != "a1" {
		t.Fatalf("after the commit got %q, want a1", got)
	}
	wantRejected(t, c.discharge(id, false), frames.ErrCondTxnUnknownID, "a second discharge")
	wantRejected(t, c.transfer(1, text("late"), id), frames.ErrCondTxnUnknownID, "a send in a discharged transaction")

	id2 := c.declare()
	if bytes.Equal(id, id2) {
		t.Fatal("two transactions with one txn-id")
	}
	wantTxnAccepted(t, c.transfer(1, text("a2"), id2), id2)
	wantTxnAccepted(t, c.transfer(2, text("q2"), id2), id2)
	wantAccepted(t, c.discharge(id2, true), "rollback")
	wantAccepted(t, c.transfer(3, text("marker2"), nil), "a plain send")
	if got := body(receive(t, recv)); got != "marker2" {
		t.Fatalf("after the rollback got %q, want marker2", got)
	}
	if n := messages(q); n != 1 {
		t.Fatalf("queue holds %d after the rollback, want 1", n)
	}
}

// TestTxnAcks: a queue delivery accepted in a transaction stays in flight
// until the discharge: a rollback gives it back (delivery-count 1), a
// commit removes it by the time the commit is answered. The discharge
// right behind the disposition must see it (the writer applies
// dispositions; the discharge waits behind them).
func TestTxnAcks(t *testing.T) {
	e, q, _ := filled(t, queue.Config{Name: "acks"}, 2)
	c := txnDial(t, e)
	c.receiver(1, "queue://acks", 10)
	d0, m0 := c.delivery()
	d1, _ := c.delivery()
	if m0.Header == nil || m0.Header.DeliveryCount != 0 {
		t.Fatalf("first delivery header %+v, want delivery-count 0", m0.Header)
	}

	id := c.declare()
	c.ack(d0, d1, id)
	wantAccepted(t, c.discharge(id, true), "rollback")
	if n := messages(q); n != 2 {
		t.Fatalf("queue holds %d after a rolled-back acknowledgement, want 2", n)
	}
	// Given back as failed deliveries: sent again on the link, counted.
	r0, m := c.delivery()
	r1, _ := c.delivery()
	if m.Header == nil || m.Header.DeliveryCount != 1 || string(m.Data[0]) != "m0" {
		t.Fatalf("redelivered %q header %+v, want m0 with delivery-count 1", m.Data, m.Header)
	}

	id2 := c.declare()
	c.ackSettled(r0, r1, id2, false)
	if n := messages(q); n != 2 {
		t.Fatalf("queue holds %d before the commit, want 2", n)
	}
	wantAccepted(t, c.discharge(id2, false), "commit")
	if n := messages(q); n != 0 {
		t.Fatalf("queue holds %d once the commit is answered, want 0", n)
	}
	if a := q.Info().Counters.Acked; a != 2 {
		t.Fatalf("acked %d, want 2", a)
	}
}

// TestTxnConnectionEnd: a client that declares a transaction, sends and
// acknowledges in it and vanishes: the transaction is rolled back, the
// message it sent never appears and the one it acknowledged is delivered
// again, counted as a failed delivery.
func TestTxnConnectionEnd(t *testing.T) {
	e, q, s := filled(t, queue.Config{Name: "gone"}, 1)
	c := txnDial(t, e)
	c.sender(1, "queue://gone")
	c.receiver(2, "queue://gone", 10)
	d, _ := c.delivery()
	id := c.declare()
	wantTxnAccepted(t, c.transfer(1, text("never"), id), id)
	c.ack(d, d, id)
	// A frame after the disposition, answered: the gateway has read it.
	wantTxnAccepted(t, c.transfer(1, text("never2"), id), id)
	c.nc.Close()

	eventually(t, "the vanished client's consumer gone", func() bool { return q.Info().Consumers == 0 })
	r := newReceiver(t, s, "queue://gone", nil)
	m := next(t, r)
	if body(m) != "m0" {
		t.Fatalf("got %q, want m0 again", body(m))
	}
	if n, _ := hdr(m); n != 1 {
		t.Fatalf("delivery-count %d, want 1", n)
	}
	if n := messages(q); n != 1 {
		t.Fatalf("queue holds %d, want 1: a message of the rolled-back transaction was stored", n)
	}
}

// TestTxnLimit: a transaction holds at most MaxTxnMessages sends;
// one more is rejected, and the commit then rolls back rather than apply
// part of what the client sent.
func TestTxnLimit(t *testing.T) {
	e := startServer(t, func(o *Options) { o.MaxTxnMessages = 2 })
	recv := newReceiver(t, e.session(t), "txn/lim", nil)
	c := txnDial(t, e)
	c.sender(1, "txn/lim")
	id := c.declare()
	wantTxnAccepted(t, c.transfer(1, text("a"), id), id)
	wantTxnAccepted(t, c.transfer(1, text("b"), id), id)
	wantRejected(t, c.transfer(1, text("c"), id), frames.ErrCondResourceLimitExceeded, "a third send")
	wantRejected(t, c.discharge(id, false), frames.ErrCondTxnRollback, "the commit")
	wantAccepted(t, c.transfer(1, text("marker"), nil), "a plain send")
	if got := body(receive(t, recv)); got != "marker" {
		t.Fatalf("got %q, want marker: part of a rolled-back transaction was published", got)
	}
}

// TestTxnControlErrors: what a coordinator refuses.
func TestTxnControlErrors(t *testing.T) {
	e := startServer(t)
	c := txnDial(t, e)
	wantRejected(t, c.discharge([]byte("nope"), false), frames.ErrCondTxnUnknownID, "discharge of an unknown txn-id")
	wantRejected(t, c.transfer(0, &frames.Message{Value: encoding.Described{Descriptor: uint64(frames.CodeDeclare), Value: []any{[]byte("global")}}}, nil),
		frames.ErrCondNotImplemented, "a declare with a global-id")
	wantRejected(t, c.transfer(0, text("hello"), nil), frames.ErrCondDecodeError, "a data message to the coordinator")
	c.declare() // the link still works

	// A connection holds at most MaxSessions open transactions.
	e1 := startServer(t, func(o *Options) { o.MaxSessions = 1 })
	c1 := txnDial(t, e1)
	id := c1.declare()
	wantRejected(t, c1.transfer(0, &frames.Message{Value: encoding.Described{Descriptor: uint64(frames.CodeDeclare), Value: []any{}}}, nil),
		frames.ErrCondResourceLimitExceeded, "a second open transaction")
	wantAccepted(t, c1.discharge(id, true), "rollback")
	c1.declare() // room again
}

// TestTxnTopicAcks: a topic message accepted in a transaction is settled;
// a rollback gives it back to the link (as Artemis, whose subscriptions
// are queues, would), a commit does not.
func TestTxnTopicAcks(t *testing.T) {
	e := startServer(t)
	c := txnDial(t, e)
	c.receiver(1, "txn/topic", 10)
	pub := func(s string) {
		t.Helper()
		m := &core.Message{Topic: "txn/topic", Payload: []byte(s), QoS: 1, Created: time.Now()}
		if res := e.router.Publish(context.Background(), m); res.Matched != 1 {
			t.Fatalf("publish %q matched %d subscribers, want 1", s, res.Matched)
		}
	}
	pub("m")
	d, m := c.delivery()
	id := c.declare()
	c.ack(d, d, id)
	wantAccepted(t, c.discharge(id, true), "rollback")
	d, m2 := c.delivery()
	if string(m2.Data[0]) != string(m.Data[0]) {
		t.Fatalf("after the rollback got %q, want %q again", m2.Data[0], m.Data[0])
	}
	id = c.declare()
	c.ack(d, d, id)
	wantAccepted(t, c.discharge(id, false), "commit")
	pub("marker")
	if _, m3 := c.delivery(); string(m3.Data[0]) != "marker" {
		t.Fatalf("after the commit got %q, want marker: a committed acknowledgement was delivered again", m3.Data[0])
	}
}

// TestTxnMultiFrame: a message sent in a transaction over two transfer
// frames, the transactional-state on the first only, is held in that
// transaction (the txn-id outlives the frame it came in).
func TestTxnMultiFrame(t *testing.T) {
	e := startServer(t)
	recv := newReceiver(t, e.session(t), "txn/multi", nil)
	c := txnDial(t, e)
	c.sender(1, "txn/multi")
	id := c.declare()
	big := strings.Repeat("x", 2000)
	payload := encodeMessage(t, text(big))
	did := c.sent
	c.sent++
	c.send(0, &frames.Transfer{Handle: 1, DeliveryID: ptr(did), DeliveryTag: []byte("multi"), MessageFormat: ptr(uint32(0)), More: true,
		State: &frames.TransactionalState{TxnID: id}}, payload[:4])
	// Empty frames (heartbeats) in between: the reader moves unread bytes
	// to the front of its buffer, over the first frame, many times.
	c.writeRaw(bytes.Repeat([]byte{0, 0, 0, 8, 2, 0, 0, 0}, 20000))
	c.send(0, &frames.Transfer{Handle: 1, More: false}, payload[4:])
	for c.outcomes[did] == nil {
		c.read()
	}
	wantTxnAccepted(t, c.outcomes[did], id)
	wantAccepted(t, c.discharge(id, false), "commit")
	if got := body(receive(t, recv)); got != big {
		t.Fatalf("got %d bytes, want the %d sent", len(got), len(big))
	}
}

// TestTxnAckLimit: acknowledgements count against MaxTxnMessages
// too; one beyond it makes the commit roll back, and every message the
// transaction acknowledged is delivered again.
func TestTxnAckLimit(t *testing.T) {
	e := startServer(t, func(o *Options) { o.MaxTxnMessages = 1 })
	q := e.declare(t, queue.Config{Name: "acklim"})
	sendN(t, newSender(t, e.session(t), "queue://acklim", nil), "m", 2)
	c := txnDial(t, e)
	c.receiver(1, "queue://acklim", 10)
	d0, _ := c.delivery()
	d1, _ := c.delivery()
	id := c.declare()
	c.ack(d0, d1, id)
	wantRejected(t, c.discharge(id, false), frames.ErrCondTxnRollback, "a commit over the limit")
	if n := messages(q); n != 2 {
		t.Fatalf("queue holds %d after the rolled-back commit, want 2", n)
	}
	// Both come back: m1 released when its acknowledgement was refused, m0
	// when the commit rolled back.
	got := map[string]bool{}
	for range 2 {
		_, m := c.delivery()
		got[string(m.Data[0])] = true
	}
	if !got["m0"] || !got["m1"] {
		t.Fatalf("delivered again: %v, want m0 and m1", got)
	}
}

// TestTxnSecondMode: a coordinator link in rcv-settle-mode second gets
// its outcomes unsettled, declare and discharge alike, and settles them.
func TestTxnSecondMode(t *testing.T) {
	e := startServer(t)
	c := txnDial(t, e, func(a *frames.Attach) { a.RcvSettleMode = ptr(frames.ReceiverSettleModeSecond) })
	ctl := func(id uint32, v encoding.Described) frames.DeliveryState {
		t.Helper()
		c.send(0, &frames.Transfer{Handle: 0, DeliveryID: ptr(id), DeliveryTag: []byte{byte(id)}, MessageFormat: ptr(uint32(0))},
			encodeMessage(t, &frames.Message{Value: v}))
		d := expectFrame[*frames.Disposition](c.rawConn)
		if d.First != id || d.Settled {
			t.Fatalf("disposition %+v, want delivery %d unsettled (rcv-settle-mode second)", d, id)
		}
		c.send(0, &frames.Disposition{Role: frames.RoleSender, First: id, Settled: true}, nil)
		return d.State
	}
	st := ctl(0, encoding.Described{Descriptor: uint64(frames.CodeDeclare), Value: []any{}})
	d, ok := st.(*frames.Declared)
	if !ok {
		t.Fatalf("declare answered with %#v", st)
	}
	wantAccepted(t, ctl(1, encoding.Described{Descriptor: uint64(frames.CodeDischarge), Value: []any{d.TxnID, false}}), "commit")
}

// BenchmarkTxn: messages sent to a topic in transactions of 100, committed,
// against the same messages sent plainly, over one raw connection that
// waits for each outcome (a JMS producer's synchronous send).
//
//	go test -run '^$' -bench Txn -benchtime 2000x ./amqp/
func BenchmarkTxn(b *testing.B) {
	const batch = 100
	for _, txn := range []bool{false, true} {
		name := "plain"
		if txn {
			name = "commit-every-100"
		}
		b.Run(name, func(b *testing.B) {
			e := startServer(b)
			c := txnDial(b, e)
			c.sender(1, "bench/txn")
			msg := text("payload of a benchmark message")
			b.ReportAllocs()
			b.ResetTimer()
			var id []byte
			for i := range b.N {
				if txn && i%batch == 0 {
					id = c.declare()
				}
				if _, ok := c.transfer(1, msg, id).(*frames.Rejected); ok {
					b.Fatal("rejected")
				}
				if txn && (i%batch == batch-1 || i == b.N-1) {
					if st, ok := c.discharge(id, false).(*frames.Accepted); !ok {
						b.Fatalf("commit answered %#v", st)
					}
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}
