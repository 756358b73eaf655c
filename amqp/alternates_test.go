package amqp

import (
	"errors"
	"fmt"
	"testing"

	goamqp "github.com/Azure/go-amqp"

	"github.com/tolsey/tolsey/core/queue"
)

// Alternate destinations over AMQP (queues.go, docs/queues.md "Alternate
// destinations"), with go-amqp over real sockets and the real engine.

// parking starts a server whose alternate for "orders/" is the queue
// "parked".
func parking(t *testing.T) (*env, *queue.Queue) {
	t.Helper()
	e := startServer(t)
	q := e.declare(t, queue.Config{Name: "parked"})
	if err := e.queues.SetAlternates([]queue.Alternate{{Prefix: "orders/", Queue: "parked"}}); err != nil {
		t.Fatal(err)
	}
	return e, q
}

func sendTopic(t *testing.T, snd *goamqp.Sender, body string) {
	t.Helper()
	send(t, snd, goamqp.NewMessage([]byte(body)))
}

// TestAlternateCollectsAndDrains: sends to a topic nobody listens to are
// accepted once the alternate holds them; a receiver that arrives on a
// filter covering them gets them, and later sends go straight to it, not
// to the alternate.
func TestAlternateCollectsAndDrains(t *testing.T) {
	e, parked := parking(t)
	s := e.session(t)
	eu := newSender(t, s, "orders/eu/1", nil)
	us := newSender(t, s, "orders/us/1", nil)
	sendTopic(t, eu, "eu0")
	sendTopic(t, us, "us0")
	sendTopic(t, eu, "eu1")
	// Unsettled sends are answered once stored: no waiting needed.
	if n := messages(parked); n != 3 {
		t.Fatalf("the alternate holds %d after three accepted sends nobody received, want 3", n)
	}
	r := newReceiver(t, s, "orders/eu/#", &goamqp.ReceiverOptions{Credit: 10})
	got := map[string]bool{}
	for range 2 {
		m := receive(t, r)
		got[body(m)] = true
	}
	if !got["eu0"] || !got["eu1"] {
		t.Fatalf("the receiver got %v from the alternate, want eu0 and eu1", got)
	}
	eventually(t, "the drained messages acknowledged", func() bool { return messages(parked) == 1 })
	// Now someone listens: sends go to it, not to the alternate.
	sendTopic(t, eu, "eu2")
	if b := body(receive(t, r)); b != "eu2" {
		t.Fatalf("got %q, want eu2 live", b)
	}
	if in := parked.Info().Counters.In; in != 3 {
		t.Fatalf("the alternate took %d messages, want the 3 sent while nobody listened", in)
	}
	// us0 is not for this receiver's filter: it stays parked.
	if n := messages(parked); n != 1 {
		t.Fatalf("the alternate holds %d, want us0 only", n)
	}
}

// TestFallbackLinkOnlyWithoutOrdinaryConsumer: a qd.fallback receiver
// gets what nobody else receives, and nothing while an ordinary receiver
// is attached.
func TestFallbackLinkOnlyWithoutOrdinaryConsumer(t *testing.T) {
	e, parked := parking(t)
	s := e.session(t)
	snd := newSender(t, s, "orders/eu", nil)
	fb := newReceiver(t, s, "orders/eu", &goamqp.ReceiverOptions{SourceCapabilities: []string{"qd.fallback"}, Credit: 10})

	sendTopic(t, snd, "m0")
	if b := body(receive(t, fb)); b != "m0" {
		t.Fatalf("the fallback got %q, want m0", b)
	}

	ordinary := newReceiver(t, s, "orders/eu", &goamqp.ReceiverOptions{Credit: 10})
	sendTopic(t, snd, "m1")
	if b := body(receive(t, ordinary)); b != "m1" {
		t.Fatalf("the ordinary receiver got %q, want m1", b)
	}
	// m1 was never parked, so the fallback, which reads only the
	// alternate, cannot have had it.
	if in := parked.Info().Counters.In; in != 1 {
		t.Fatalf("the alternate took %d messages, want m0 only", in)
	}
	if err := ordinary.Close(ctx5(t)); err != nil {
		t.Fatal(err)
	}
	sendTopic(t, snd, "m2")
	if b := body(receive(t, fb)); b != "m2" {
		t.Fatalf("the fallback got %q, want m2 once the ordinary receiver left", b)
	}
	eventually(t, "the alternate empty", func() bool { return messages(parked) == 0 })
}

// TestFallbackLinkUncoveredRefused: a qd.fallback receiver on an address
// no alternate covers would never receive: refused with amqp:not-found.
func TestFallbackLinkUncoveredRefused(t *testing.T) {
	e, _ := parking(t)
	s := e.session(t)
	_, err := s.NewReceiver(ctx5(t), "invoices/1", &goamqp.ReceiverOptions{SourceCapabilities: []string{"qd.fallback"}})
	var ae *goamqp.Error
	if !errors.As(err, &ae) || ae.Condition != goamqp.ErrCondNotFound {
		t.Fatalf("attach: %v, want amqp:not-found", err)
	}
}

// TestAlternateNotUsedWithSubscriber: a topic send that a subscriber
// receives is not parked, although the alternate covers it.
func TestAlternateNotUsedWithSubscriber(t *testing.T) {
	e, parked := parking(t)
	s := e.session(t)
	r := newReceiver(t, s, "orders/+", &goamqp.ReceiverOptions{Credit: 10})
	snd := newSender(t, s, "orders/1", nil)
	for i := range 3 {
		sendTopic(t, snd, fmt.Sprint(i))
	}
	for i := range 3 {
		if b := body(receive(t, r)); b != fmt.Sprint(i) {
			t.Fatalf("got %q, want %d", b, i)
		}
	}
	if in := parked.Info().Counters.In; in != 0 {
		t.Fatalf("the alternate took %d messages with a subscriber present", in)
	}
}

// TestAlternateDrainAppliesExceptions: a topic receiver with an except
// filter drains from the alternate only what it would have received live:
// the parked message its exception matches stays for other consumers.
func TestAlternateDrainAppliesExceptions(t *testing.T) {
	e, parked := parking(t)
	s := e.session(t)
	for _, topic := range []string{"orders/eu/1", "orders/eu/fox", "orders/eu/2"} {
		sendTopic(t, newSender(t, s, topic, nil), topic)
	}
	if n := messages(parked); n != 3 {
		t.Fatalf("the alternate holds %d, want 3", n)
	}
	opts := exceptOpts("drain", "orders/eu/fox")
	opts.SourceCapabilities = []string{"topic"}
	r, err := s.NewReceiver(ctx5(t), "orders/eu/#", opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close(ctx5(t)) })
	// In ID order, the fox would be second: the first two are the others.
	for _, want := range []string{"orders/eu/1", "orders/eu/2"} {
		if b := body(receive(t, r)); b != want {
			t.Fatalf("drained %q, want %q (orders/eu/fox is excepted)", b, want)
		}
	}
	eventually(t, "the fox alone left parked, delivered to nobody", func() bool {
		i := parked.Info()
		return i.Messages == 1 && i.InFlight == 0
	})
	if m := receive(t, newReceiver(t, s, "queue://parked", nil)); body(m) != "orders/eu/fox" {
		t.Fatalf("the alternate kept %q, want orders/eu/fox", body(m))
	}
}
