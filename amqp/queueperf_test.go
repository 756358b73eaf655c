package amqp

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"

	goamqp "github.com/Azure/go-amqp"

	"github.com/tolsey/tolsey/amqp/internal/buffer"
	"github.com/tolsey/tolsey/amqp/internal/frames"
	"github.com/tolsey/tolsey/core/queue"
	"github.com/tolsey/tolsey/core/queue/embedded"
)

// startDurableServer is startServer with an engine on the embedded
// backend (in a temporary directory), whose group commits answer Puts on
// their own goroutine: the held-outcome path a queue send takes in
// production, which the memory backend (answering inline) skips.
func startDurableServer(t *testing.T) *env {
	t.Helper()
	return startServer(t, func(o *Options) {
		b, err := embedded.Open(filepath.Join(t.TempDir(), embedded.FileName), embedded.Options{})
		if err != nil {
			t.Fatal(err)
		}
		eng, err := queue.New(context.Background(), queue.Options{Router: o.Router, Backend: b, Logger: testLogger()})
		if err != nil {
			t.Fatal(err)
		}
		o.Queues = eng
		t.Cleanup(func() { // after the server's shutdown (registered later)
			eng.Close()
			_ = b.Close()
		})
	})
}

// TestQueueSendDispositionRanges: unsettled sends to a durable queue,
// pipelined, are answered after their group commit with ranges of
// accepted deliveries, not one disposition each, and every delivery is
// answered exactly once.
func TestQueueSendDispositionRanges(t *testing.T) {
	e := startDurableServer(t)
	q := e.declare(t, queue.Config{Name: "ranges"})
	c, _ := rawSender(t, e, "queue://ranges")
	m := encodeMessage(t, &frames.Message{Data: [][]byte{[]byte("x")}})
	var b buffer.Buffer
	const n = 100
	for i := range n {
		if err := frames.AppendFrame(&b, frames.TypeAMQP, 0, transfer(uint32(i), false), m); err != nil {
			t.Fatal(err)
		}
	}
	c.writeRaw(b.Written())
	next, answers := uint32(0), 0
	for next < n {
		d := expectFrame[*frames.Disposition](c)
		last := d.First
		if d.Last != nil {
			last = *d.Last
		}
		if _, ok := d.State.(*frames.Accepted); d.First != next || last < d.First || !d.Settled || !ok {
			t.Fatalf("disposition %+v (state %T), want accepted from %d", d, d.State, next)
		}
		next = last + 1
		answers++
	}
	if next != n {
		t.Fatalf("dispositions up to %d, want %d", next-1, n-1)
	}
	// One commit answers many: the writer sends what has come in one pass.
	if answers > n/2 {
		t.Fatalf("%d pipelined queue sends answered in %d dispositions", n, answers)
	}
	if got := q.Info().Messages; got != n {
		t.Fatalf("queue holds %d messages, want %d", got, n)
	}
}

// TestQueueDispositionBurstThenDetach: the peer's dispositions read in
// one burst go to the writer together (conn.sendDispositions), and a
// detach read after them in the same burst is applied after them: what
// the receiver accepted (one by one and as a range) is acknowledged, what
// it released goes back uncounted, and only what it left unsettled is
// delivered again with a failed delivery counted.
func TestQueueDispositionBurstThenDetach(t *testing.T) {
	e := startDurableServer(t)
	q := e.declare(t, queue.Config{Name: "burst"})
	sendN(t, newSender(t, e.session(t), "queue://burst", nil), "m", 10)
	c := rawDial(t, e.addr)
	c.open(nil)
	c.begin(0)
	c.send(0, attachReceiver("r", 0, "queue://burst"), nil)
	expectFrame[*frames.Attach](c)
	c.send(0, &frames.Flow{NextIncomingID: ptr(uint32(0)), IncomingWindow: 100, OutgoingWindow: 100,
		Handle: ptr(uint32(0)), DeliveryCount: ptr(uint32(0)), LinkCredit: ptr(uint32(10))}, nil)
	for i := range 10 {
		if tr := expectFrame[*frames.Transfer](c); tr.Settled || tr.DeliveryID == nil || *tr.DeliveryID != uint32(i) {
			t.Fatalf("transfer %d: %+v", i, tr)
		}
	}
	var b buffer.Buffer
	add := func(p frames.Performative) {
		if err := frames.AppendFrame(&b, frames.TypeAMQP, 0, p, nil); err != nil {
			t.Fatal(err)
		}
	}
	for i := range uint32(4) { // 0..3 one by one
		add(&frames.Disposition{Role: frames.RoleReceiver, First: i, Settled: true, State: &frames.Accepted{}})
	}
	add(&frames.Disposition{Role: frames.RoleReceiver, First: 4, Last: ptr(uint32(6)), Settled: true, State: &frames.Accepted{}})
	add(&frames.Disposition{Role: frames.RoleReceiver, First: 7, Settled: true, State: &frames.Released{}})
	add(&frames.Detach{Handle: 0, Closed: true})
	c.writeRaw(b.Written())
	expectFrame[*frames.Detach](c)
	info := q.Info()
	if info.Counters.Acked != 7 || info.Messages != 3 || info.Consumers != 0 {
		t.Fatalf("after the burst: %d acked, %d held, %d consumers; want 7, 3, 0", info.Counters.Acked, info.Messages, info.Consumers)
	}
	r := newReceiver(t, e.session(t), "queue://burst", nil)
	want := map[string]uint32{"m7": 0, "m8": 1, "m9": 1} // released: uncounted; left unsettled: one failure
	for range 3 {
		m := next(t, r)
		body := string(m.GetData())
		count, _ := hdr(m)
		if wc, ok := want[body]; !ok || wc != count {
			t.Fatalf("redelivered %q with delivery-count %d; want one of %v", body, count, want)
		}
		delete(want, body)
		if err := r.AcceptMessage(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
}

// TestQueueWindowClosesMidMessage: the writer takes several deliveries
// from a queue at once (queue.Consumer.NextN); when the peer's session
// window closes in the middle of one of them, those it took and did not
// start go back unchanged (Unget), and reach the peer once the window
// opens as first deliveries: delivery-count 0, first-acquirer, in order.
func TestQueueWindowClosesMidMessage(t *testing.T) {
	e := startDurableServer(t)
	e.declare(t, queue.Config{Name: "win"})
	snd := newSender(t, e.session(t), "queue://win", nil)
	for i := range 3 {
		send(t, snd, goamqp.NewMessage(bytes.Repeat([]byte{byte('a' + i)}, 1000)))
	}
	c := rawWindow2Receiver(t, e.addr, "queue://win", 10)
	received := uint32(0) // transfers, for our next-incoming-id
	var body []byte
	for want := range 3 {
		for {
			if received%2 == 0 && received > 0 {
				// The window used up: open it by two more transfers.
				c.send(0, &frames.Flow{NextIncomingID: ptr(received), IncomingWindow: 2, OutgoingWindow: 1000}, nil)
			}
			_, p, payload := c.next()
			tr, ok := p.(*frames.Transfer)
			if !ok {
				t.Fatalf("got %T %+v, want a transfer", p, p)
			}
			received++
			if tr.DeliveryID != nil && *tr.DeliveryID != uint32(want) {
				t.Fatalf("transfer of delivery %d, want %d", *tr.DeliveryID, want)
			}
			body = append(body, payload...)
			if !tr.More {
				break
			}
		}
		var m frames.Message
		if err := m.Decode(body); err != nil {
			t.Fatal(err)
		}
		body = body[:0]
		if len(m.Data) != 1 || !bytes.Equal(m.Data[0], bytes.Repeat([]byte{byte('a' + want)}, 1000)) {
			t.Fatalf("delivery %d: %d data sections, want 1000 × %q", want, len(m.Data), rune('a'+want))
		}
		if m.Header == nil || m.Header.DeliveryCount != 0 || !m.Header.FirstAcquirer {
			t.Fatalf("delivery %d header %+v, want delivery-count 0 and first-acquirer", want, m.Header)
		}
	}
}

// rawWindow2Receiver opens a raw connection (max frame 512) with a session
// whose incoming window is 2 transfers, attaches a receiver to source and
// gives it credit: the shape of a consumer whose session window closes in
// the middle of a multi-frame message.
func rawWindow2Receiver(t *testing.T, addr, source string, credit uint32) *rawConn {
	t.Helper()
	c := rawDial(t, addr)
	c.open(&frames.Open{ContainerID: "raw", MaxFrameSize: 512})
	c.send(0, &frames.Begin{NextOutgoingID: 0, IncomingWindow: 2, OutgoingWindow: 1000}, nil)
	expectFrame[*frames.Begin](c)
	c.send(0, attachReceiver("r", 0, source), nil)
	expectFrame[*frames.Attach](c)
	c.send(0, &frames.Flow{NextIncomingID: ptr(uint32(0)), IncomingWindow: 2, OutgoingWindow: 1000,
		Handle: ptr(uint32(0)), DeliveryCount: ptr(uint32(0)), LinkCredit: ptr(credit)}, nil)
	return c
}
