package amqp

import (
	"bytes"
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tolsey/tolsey/amqp/internal/buffer"
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

// TestTxnAckOutlivesReadBuffer: the txn-id of a transactional
// disposition is read by the writer, after the reader has handed it on
// and read further frames into the same buffer. Here the writer is held
// (in an encode) while the reader reads the disposition and then enough
// heartbeats to go round its whole read buffer: the acknowledgement must
// still count in its transaction, and the commit remove the message.
func TestTxnAckOutlivesReadBuffer(t *testing.T) {
	var armed atomic.Bool
	entered, release := make(chan struct{}), make(chan struct{})
	encodeHook = func() {
		if armed.CompareAndSwap(true, false) {
			entered <- struct{}{}
			<-release
		}
	}
	t.Cleanup(func() { encodeHook = nil })
	e, q, _ := filled(t, queue.Config{Name: "txbuf"}, 1)
	before := map[*conn]bool{}
	e.srv.mu.Lock()
	for sc := range e.srv.conns {
		before[sc] = true
	}
	e.srv.mu.Unlock()
	c := txnDial(t, e)
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
	c.receiver(1, "queue://txbuf", 10)
	d0, _ := c.delivery()
	id := c.declare()

	beats := func(n int) int {
		b := bytes.Repeat([]byte{0, 0, 0, 8, 2, 0, 0, 0}, n/8)
		in := sc.stats.bytesIn.Load()
		c.writeRaw(b)
		eventually(t, "the heartbeats read", func() bool { return sc.stats.bytesIn.Load() >= in+int64(len(b)) })
		return len(b)
	}
	beats(256 << 10) // the reader's buffer grows to its most

	// Hold the writer in the encode of a delivery on another link.
	c.receiver(2, "held/t", 10)
	eventually(t, "the held receiver's subscription", func() bool { return e.router.Len() == 1 })
	armed.Store(true)
	e.router.Publish(context.Background(), &core.Message{Topic: "held/t", Payload: []byte("x")})
	<-entered
	c.ack(d0, d0, id)
	beats(256 << 10) // round the read buffer, over the disposition's bytes
	close(release)

	wantAccepted(t, c.discharge(id, false), "commit")
	if n := messages(q); n != 0 {
		t.Fatalf("queue holds %d once the commit is answered, want 0", n)
	}
}
