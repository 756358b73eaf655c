package amqp

import (
	"errors"
	"slices"
	"testing"

	"github.com/tolsey/tolsey/amqp/internal/frames"
	"github.com/tolsey/tolsey/core"
)

// holdingSub holds the acknowledgement of every delivery
// (core.Delivery.Acks), as a durable queue or a bridge buffer does, and
// hands it to the test, which answers when it likes.
type holdingSub struct{ held chan *core.Acks }

func (h *holdingSub) Deliver(_ *core.Message, d core.Delivery) error {
	if d.Acks == nil {
		return errors.New("nobody waits for this one")
	}
	d.Acks.Hold()
	h.held <- d.Acks
	return nil
}

func holdAll(t *testing.T, e *env, filter string) *holdingSub {
	h := &holdingSub{held: make(chan *core.Acks, 100)}
	sub, err := e.router.Subscribe(filter, h, core.SubOptions{QoS: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.router.Unsubscribe(sub) })
	return h
}

// TestHeldOutcomes: while a subscriber holds the outcomes of unsettled
// deliveries, the connection goes on reading (more deliveries, a flow
// echo), and each outcome is sent when its holder answers, in whatever
// order; a refusal is rejected with amqp:resource-limit-exceeded.
func TestHeldOutcomes(t *testing.T) {
	e := startServer(t)
	h := holdAll(t, e, "held/#")
	c, _ := rawSender(t, e, "held/t")
	const n = 5
	payload := encodeMessage(t, &frames.Message{Data: [][]byte{[]byte("x")}})
	for i := range uint32(n) {
		c.send(0, &frames.Transfer{Handle: 0, DeliveryID: ptr(i), DeliveryTag: []byte{byte(i)}, MessageFormat: ptr(uint32(0))}, payload)
	}
	acks := make([]*core.Acks, n)
	for i := range acks {
		acks[i] = <-h.held // every delivery reached the router: the reader did not wait
	}
	// Nothing answered yet: the next frame is the echo of this flow.
	c.send(0, &frames.Flow{NextIncomingID: ptr(uint32(0)), IncomingWindow: 100, OutgoingWindow: 100, Echo: true}, nil)
	if f := expectFrame[*frames.Flow](c); f.Handle != nil {
		t.Fatalf("flow %+v, want the session echo", f)
	}
	refused := errors.New("queue full")
	for i := n - 1; i >= 0; i-- { // answers in reverse order
		var err error
		if i == 2 {
			err = refused
		}
		go acks[i].Done(err) // on the holder's goroutine
	}
	outcomes := map[uint32]frames.DeliveryState{}
	for len(outcomes) < n {
		d := expectFrame[*frames.Disposition](c)
		last := d.First
		if d.Last != nil {
			last = *d.Last
		}
		if !d.Settled {
			t.Fatalf("disposition %+v not settled", d)
		}
		for id := d.First; id <= last; id++ {
			outcomes[id] = d.State
		}
	}
	for id, st := range outcomes {
		switch id {
		case 2:
			rej, ok := st.(*frames.Rejected)
			if !ok || rej.Error == nil || rej.Error.Condition != frames.ErrCondResourceLimitExceeded {
				t.Fatalf("delivery 2: %#v, want rejected resource-limit-exceeded", st)
			}
		default:
			if _, ok := st.(*frames.Accepted); !ok {
				t.Fatalf("delivery %d: %#v, want accepted", id, st)
			}
		}
	}
}

// TestHeldOutcomeAfterEnd: the session ends while an outcome is held; the
// late answer is not written on a channel that belongs to nobody (or to a
// new session), and the connection goes on.
func TestHeldOutcomeAfterEnd(t *testing.T) {
	e := startServer(t)
	h := holdAll(t, e, "held/#")
	c, _ := rawSender(t, e, "held/t")
	payload := encodeMessage(t, &frames.Message{Data: [][]byte{[]byte("x")}})
	c.send(0, &frames.Transfer{Handle: 0, DeliveryID: ptr(uint32(0)), DeliveryTag: []byte{0}, MessageFormat: ptr(uint32(0))}, payload)
	a := <-h.held
	c.send(0, &frames.End{}, nil)
	expectFrame[*frames.End](c)
	c.begin(0) // the same channel, a new session
	a.Done(nil)
	// The next frame is the new session's echo, not a stray disposition.
	c.send(0, &frames.Flow{NextIncomingID: ptr(uint32(0)), IncomingWindow: 100, OutgoingWindow: 100, Echo: true}, nil)
	if f := expectFrame[*frames.Flow](c); f.Handle != nil {
		t.Fatalf("flow %+v, want the session echo", f)
	}
	c.send(0, &frames.Close{}, nil)
	if cl := expectFrame[*frames.Close](c); cl.Error != nil {
		t.Fatalf("close %+v", cl.Error)
	}
}

// TestHeldOutcomesBounded: a connection has at most maxHeldOutcomes
// publishes held; then it stops reading until one is answered.
func TestHeldOutcomesBounded(t *testing.T) {
	e := startServer(t)
	h := &holdingSub{held: make(chan *core.Acks, maxHeldOutcomes+10)}
	if _, err := e.router.Subscribe("held/#", h, core.SubOptions{QoS: 1}); err != nil {
		t.Fatal(err)
	}
	c := rawDial(t, e.addr)
	c.open(nil)
	c.begin(0)
	payload := encodeMessage(t, &frames.Message{Data: [][]byte{[]byte("x")}})
	// Enough links that credit is no limit: half a credit batch each.
	links := maxHeldOutcomes/(creditBatch/2) + 1
	for k := range uint32(links) {
		c.send(0, attachSender("s"+string(rune('a'+k)), k, "held/t"), nil)
		expectFrame[*frames.Attach](c)
		expectFrame[*frames.Flow](c)
	}
	id := uint32(0)
	for k := range uint32(links) {
		for range creditBatch / 2 { // below the credit top-up
			c.send(0, &frames.Transfer{Handle: k, DeliveryID: ptr(id), DeliveryTag: []byte{byte(id), byte(id >> 8)}, MessageFormat: ptr(uint32(0))}, payload)
			id++
		}
	}
	var held []*core.Acks
	for range maxHeldOutcomes {
		held = append(held, <-h.held)
	}
	// The reader now waits for a slot: the echo is not answered.
	c.send(0, &frames.Flow{NextIncomingID: ptr(uint32(0)), IncomingWindow: 100, OutgoingWindow: 100, Echo: true}, nil)
	if id <= maxHeldOutcomes {
		t.Fatalf("sent %d deliveries, want more than %d", id, maxHeldOutcomes)
	}
	select {
	case a := <-h.held:
		t.Fatalf("more than %d held: %v", maxHeldOutcomes, a)
	default:
	}
	for _, a := range held {
		a.Done(nil)
	}
	// The rest are read, held and answered too, and the echo comes.
	for range int(id) - maxHeldOutcomes {
		(<-h.held).Done(nil)
	}
	var ids []uint32
	for len(ids) < int(id) {
		switch f := mustNext(c).(type) {
		case *frames.Disposition:
			last := f.First
			if f.Last != nil {
				last = *f.Last
			}
			for x := f.First; x <= last; x++ {
				ids = append(ids, x)
			}
		case *frames.Flow:
		default:
			t.Fatalf("unexpected %T %+v", f, f)
		}
	}
	slices.Sort(ids)
	for i, x := range ids {
		if x != uint32(i) {
			t.Fatalf("outcome ids %v…, want each of 0..%d once", ids[:i+1], id-1)
		}
	}
}

func mustNext(c *rawConn) frames.Performative {
	c.t.Helper()
	_, p, _ := c.next()
	return p
}
