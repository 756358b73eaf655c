package amqp

import (
	"context"
	"testing"
	"time"

	"github.com/tolsey/tolsey/amqp/internal/buffer"
	"github.com/tolsey/tolsey/amqp/internal/frames"
	"github.com/tolsey/tolsey/core"
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
