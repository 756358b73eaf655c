package amqp

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"

	"github.com/tolsey/tolsey/core"
)

// publishPresettled sends n presettled messages on topic from another
// connection, in the background, and returns a channel closed when every
// send has returned.
func publishPresettled(t *testing.T, e *env, topic string, n int) <-chan struct{} {
	t.Helper()
	snd := newSender(t, e.session(t), topic, &goamqp.SenderOptions{SettlementMode: goamqp.SenderSettleModeSettled.Ptr()})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range n {
			if err := snd.Send(context.Background(), goamqp.NewMessage([]byte(fmt.Sprint(i))), nil); err != nil {
				t.Errorf("send %d: %v", i, err)
				return
			}
		}
	}()
	return done
}

// receiveAll takes n messages in order, one credit at a time: a consumer
// slower than its publisher, which keeps up in the end.
func receiveAll(t *testing.T, r *goamqp.Receiver, n int) {
	t.Helper()
	for i := range n {
		if got := body(receive(t, r)); got != fmt.Sprint(i) {
			t.Fatalf("message %d: got %q: messages were dropped", i, got)
		}
	}
}

// TestLinkOverflowBlockLosesNothing: with amqp.linkOverflow=block, a
// presettled consumer that falls behind a burst holds its publisher back
// instead of losing messages: all arrive, in order, none is dropped.
// Before, the messages beyond LinkBuffer were dropped.
func TestLinkOverflowBlockLosesNothing(t *testing.T) {
	e := startServer(t, func(o *Options) {
		o.LinkBuffer = 10
		o.BlockOnOverflow = true
		o.OverflowWait = 10 * time.Second // longer than any test step: never the reason it passes
	})
	r := newReceiver(t, e.session(t), "burst", &goamqp.ReceiverOptions{Credit: 1, SettlementMode: goamqp.ReceiverSettleModeFirst.Ptr()})
	burstArrivesWhole(t, e, r)
}

// burstArrivesWhole publishes a burst of presettled messages to "burst"
// and checks that r, slower than the publisher, gets them all, in order,
// with nothing dropped.
func burstArrivesWhole(t *testing.T, e *env, r *goamqp.Receiver) {
	t.Helper()
	const n = 300
	done := publishPresettled(t, e, "burst", n)
	receiveAll(t, r, n)
	<-done
	if d := e.dropped("slow_consumer"); d != 0 {
		t.Fatalf("%v dropped", d)
	}
}

// TestLinkOverflowPerLink: a client chooses for one link with the attach
// property tolsey:link-overflow, whatever the server's default.
func TestLinkOverflowPerLink(t *testing.T) {
	e := startServer(t, func(o *Options) {
		o.LinkBuffer = 10
		o.OverflowWait = 10 * time.Second
	})
	s := e.session(t)
	r := newReceiver(t, s, "burst", &goamqp.ReceiverOptions{Credit: 1, Properties: map[string]any{"tolsey:link-overflow": "block"}})
	burstArrivesWhole(t, e, r)
	// The server's default (drop) still applies to a link that asks
	// nothing: a stuck consumer's messages beyond its buffer go.
	newReceiver(t, s, "other", &goamqp.ReceiverOptions{Credit: 1})
	for range 50 {
		e.router.Publish(context.Background(), &core.Message{Topic: "other", Payload: []byte("x")})
	}
	eventually(t, "drops on the default link", func() bool { return e.dropped("slow_consumer") >= 50-10-1 })
}

// TestLinkOverflowBlockIsBounded: a consumer that takes nothing holds a
// publisher at most OverflowWait, once: then its link drops (counted)
// without waiting, so publishes go on.
func TestLinkOverflowBlockIsBounded(t *testing.T) {
	e := startServer(t, func(o *Options) {
		o.LinkBuffer = 10
		o.BlockOnOverflow = true
		o.OverflowWait = 20 * time.Millisecond
	})
	newReceiver(t, e.session(t), "stuck", &goamqp.ReceiverOptions{Credit: 1})
	const n = 1000
	published := make(chan struct{})
	go func() {
		defer close(published)
		for range n {
			e.router.Publish(context.Background(), &core.Message{Topic: "stuck", Payload: []byte("x")})
		}
	}()
	select {
	case <-published:
	case <-ctx5(t).Done():
		t.Fatal("publisher held by a stuck consumer")
	}
	// The buffer holds 10, and credit 1 took one unless it came after
	// the last publish: the rest are counted.
	if d := e.dropped("slow_consumer"); d < n-11 || d > n-10 {
		t.Fatalf("dropped %v, want %d or %d", d, n-11, n-10)
	}
}

// TestLinkOverflowBlockSlowsAMQPProducer: with amqp.linkOverflow=block, a
// go-amqp producer sending presettled (at most once: a JMS NON_PERSISTENT
// producer's kind of message) as fast as it can, and a consumer with
// little credit that reads slowly: nothing is lost, and the producer is
// held back: at every message the consumer takes, the producer is at most
// what the consumer's link holds, its credit and the credit the gateway
// gave the producer ahead (without the hold it sends them all at once and
// the link drops the rest).
func TestLinkOverflowBlockSlowsAMQPProducer(t *testing.T) {
	const buf, credit, n = 10, 2, 3 * creditBatch
	e := startServer(t, func(o *Options) {
		o.LinkBuffer = buf
		o.BlockOnOverflow = true
		o.OverflowWait = time.Minute // longer than the test: never the reason it passes
	})
	r := newReceiver(t, e.session(t), "slow", &goamqp.ReceiverOptions{Credit: credit})
	snd := newSender(t, e.session(t), "slow", &goamqp.SenderOptions{SettlementMode: goamqp.SenderSettleModeSettled.Ptr()})
	var sent atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range n {
			if err := snd.Send(context.Background(), goamqp.NewMessage([]byte(fmt.Sprint(i))), nil); err != nil {
				t.Errorf("send %d: %v", i, err)
				return
			}
			sent.Add(1)
		}
	}()
	// What may be ahead of the consumer: its link's buffer, its credit,
	// the gateway's credit to the producer (topped up at half: up to
	// creditBatch unread transfers) and the one the reader holds.
	const ahead = buf + credit + creditBatch + 1
	for i := range n {
		if got := body(receive(t, r)); got != fmt.Sprint(i) {
			t.Fatalf("message %d: got %q: messages were dropped", i, got)
		}
		if s := sent.Load(); s > int64(i+1+ahead) {
			t.Fatalf("the producer sent %d while the consumer had taken %d: not held back", s, i+1)
		}
		if i%100 == 0 {
			time.Sleep(20 * time.Millisecond) // a slow consumer, not a timing assertion
		}
	}
	<-done
	if d := e.dropped("slow_consumer"); d != 0 {
		t.Fatalf("%v dropped", d)
	}
}

// TestLinkOverflowStuckConsumerAMQPProducer: a consumer that takes
// nothing holds a go-amqp presettled producer at most OverflowWait: the
// producer sends all it has, and what the link could not hold is counted.
func TestLinkOverflowStuckConsumerAMQPProducer(t *testing.T) {
	const buf, n = 10, 2000
	e := startServer(t, func(o *Options) {
		o.LinkBuffer = buf
		o.BlockOnOverflow = true
		o.OverflowWait = 50 * time.Millisecond
	})
	newReceiver(t, e.session(t), "stuck", &goamqp.ReceiverOptions{Credit: 1})
	done := publishPresettled(t, e, "stuck", n)
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("the producer is held by a consumer that reads nothing")
	}
	// Presettled sends return before the gateway has read them: wait for
	// the count. The link holds buf, and credit 1 took one.
	eventually(t, "drops counted", func() bool { return e.dropped("slow_consumer") >= n-buf-1 })
	if d := e.dropped("slow_consumer"); d > n-buf {
		t.Fatalf("dropped %v of %d", d, n)
	}
}

// TestLinkOverflowBlockPrefetchingConsumer: a consumer that grants credit
// in batches and settles what it was sent one at a time in between (Qpid
// JMS: unsettled deliveries, a prefetch of 1000 topped up once most is
// used) grants nothing for longer than OverflowWait while it works
// through a batch; its settlements show it is alive, so the publisher
// waits on and nothing is lost. Before, the wait ended with the first
// OverflowWait without credit and the link dropped until half drained.
func TestLinkOverflowBlockPrefetchingConsumer(t *testing.T) {
	// The link's buffer (also the most deliveries it leaves unsettled) is
	// larger than a batch, as Qpid JMS's prefetch is the default
	// amqp.linkBuffer.
	const batch, batches = 200, 4
	e := startServer(t, func(o *Options) {
		o.LinkBuffer = 250
		o.BlockOnOverflow = true
		o.OverflowWait = 500 * time.Millisecond
	})
	r := newReceiver(t, e.session(t), "prefetch", &goamqp.ReceiverOptions{Credit: -1,
		RequestedSenderSettleMode: goamqp.SenderSettleModeUnsettled.Ptr()})
	done := publishPresettled(t, e, "prefetch", batch*batches)
	for b := range batches {
		held, err := grantAndReceive(t, r, batch, 15*time.Second)
		if err != nil {
			t.Fatalf("batch %d: %v (%v dropped)", b, err, e.dropped("slow_consumer"))
		}
		// Working through the batch takes longer than OverflowWait (not
		// a timing assertion: each settlement comes well within it).
		for i, m := range held {
			if got, want := body(m), fmt.Sprint(b*batch+i); got != want {
				t.Fatalf("got %q, want %q: messages were dropped", got, want)
			}
			time.Sleep(5 * time.Millisecond)
			if err := r.AcceptMessage(ctx5(t), m); err != nil {
				t.Fatal(err)
			}
		}
	}
	<-done
	if d := e.dropped("slow_consumer"); d != 0 {
		t.Fatalf("%v dropped", d)
	}
}

// TestLinkOverflowBlockSeveralPublishersWaitOn: with several publishers
// waiting on one full link, a settlement's token wakes only one of them;
// the others must still count it as the link's sign of life. Before,
// each waiter was renewed only every N settlements, so with two
// publishers and a settlement every 0.6 OverflowWait the second one's
// wait ran out (the link stalled and dropped) although the consumer
// showed life well within OverflowWait throughout.
func TestLinkOverflowBlockSeveralPublishersWaitOn(t *testing.T) {
	const pubs, perPub, batch = 2, 20, 10
	// A settlement every 350 ms against a wait of 600: each waiter sees
	// one every 700 ms at best before the fix, and the link's life well
	// within the wait after it (250 ms of margin for a loaded machine).
	const wait, every = 600 * time.Millisecond, 350 * time.Millisecond
	e := startServer(t, func(o *Options) {
		o.LinkBuffer = batch
		o.BlockOnOverflow = true
		o.OverflowWait = wait
	})
	r := newReceiver(t, e.session(t), "several", &goamqp.ReceiverOptions{Credit: -1,
		RequestedSenderSettleMode: goamqp.SenderSettleModeUnsettled.Ptr()})
	var dones []<-chan struct{}
	for range pubs {
		dones = append(dones, publishPresettled(t, e, "several", perPub))
	}
	const total = pubs * perPub
	got := 0
	for got < total {
		held, _ := grantAndReceive(t, r, batch, 5*time.Second) // what came: the count below says if any was lost
		if len(held) == 0 {
			break
		}
		for _, m := range held {
			time.Sleep(every)
			if err := r.AcceptMessage(ctx5(t), m); err != nil {
				t.Fatal(err)
			}
		}
		got += len(held)
	}
	for _, d := range dones {
		<-d
	}
	if d := e.dropped("slow_consumer"); d != 0 || got != total {
		t.Fatalf("%d publishers: received %d of %d, %v dropped", pubs, got, total, d)
	}
}

// grantAndReceive grants r n credit and receives up to n messages, each
// within wait; it returns what came before the first that did not, and
// that one's error.
func grantAndReceive(t *testing.T, r *goamqp.Receiver, n int, wait time.Duration) ([]*goamqp.Message, error) {
	t.Helper()
	if err := r.IssueCredit(uint32(n)); err != nil {
		t.Fatal(err)
	}
	var held []*goamqp.Message
	for range n {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		m, err := r.Receive(ctx, nil)
		cancel()
		if err != nil {
			return held, err
		}
		held = append(held, m)
	}
	return held, nil
}
