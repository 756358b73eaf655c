package core

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// holder answers every delivery later: it holds the publisher's
// acknowledgement in Deliver and hands the Acks to the test.
type holder struct{ held chan *Acks }

func (h *holder) Deliver(m *Message, d Delivery) error {
	if d.Acks == nil {
		return errors.New("no Acks to hold")
	}
	d.Acks.Hold()
	h.held <- d.Acks
	return nil
}

func TestPublishAsyncWaitsForHolders(t *testing.T) {
	r := NewRouter(RouterOptions{})
	h1, h2 := &holder{held: make(chan *Acks, 1)}, &holder{held: make(chan *Acks, 1)}
	plain := &recorder{name: "plain"}
	for _, s := range []Subscriber{h1, h2, plain} {
		if _, err := r.Subscribe("a/#", s, SubOptions{QoS: 1}); err != nil {
			t.Fatal(err)
		}
	}
	var calls atomic.Int32
	got := make(chan PublishResult, 2)
	r.PublishAsync(context.Background(), &Message{Topic: "a/b", QoS: 1}, func(res PublishResult) {
		calls.Add(1)
		got <- res
	})
	a1, a2 := <-h1.held, <-h2.held
	select {
	case res := <-got:
		t.Fatalf("acknowledged before the holders answered: %+v", res)
	default:
	}
	a1.Done(nil)
	select {
	case res := <-got:
		t.Fatalf("acknowledged with one holder still out: %+v", res)
	default:
	}
	refusal := errors.New("buffer full")
	go a2.Done(refusal) // any goroutine
	res := <-got
	if res.Matched != 3 || res.Failed != 1 || !errors.Is(res.Err, refusal) {
		t.Fatalf("result %+v", res)
	}
	if _, delivered := r.Counts(); delivered != 2 {
		t.Fatalf("delivered %d, want 2 (the refused one is not)", delivered)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("done called %d times", n)
	}
}

func TestPublishAsyncWithoutHoldersAnswersAtOnce(t *testing.T) {
	r := NewRouter(RouterOptions{})
	bad := &recorder{name: "bad", err: errors.New("closed")}
	if _, err := r.Subscribe("a", bad, SubOptions{QoS: 1}); err != nil {
		t.Fatal(err)
	}
	var res PublishResult
	called := false
	r.PublishAsync(context.Background(), &Message{Topic: "a"}, func(x PublishResult) { res, called = x, true })
	if !called {
		t.Fatal("done not called before PublishAsync returned")
	}
	if res.Matched != 1 || res.Failed != 1 || res.Err == nil {
		t.Fatalf("result %+v", res)
	}
	// A QoS 0 message through PublishAsync still offers Acks: its caller waits.
	if d := bad.deliveries(); len(d) != 1 || d[0].Acks == nil {
		t.Fatalf("deliveries %+v", d)
	}
}

func TestPublishWaitsForHoldersOnlyAboveQoS0(t *testing.T) {
	r := NewRouter(RouterOptions{})
	h := &holder{held: make(chan *Acks, 1)}
	if _, err := r.Subscribe("q/#", h, SubOptions{QoS: 1}); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{name: "rec"}
	if _, err := r.Subscribe("z", rec, SubOptions{}); err != nil {
		t.Fatal(err)
	}
	// QoS 0: nobody waits, so no Acks (holder refuses without one).
	if res := r.Publish(context.Background(), &Message{Topic: "q/0"}); res.Failed != 1 {
		t.Fatalf("QoS 0 result %+v, want the holder's refusal (no Acks)", res)
	}
	r.Publish(context.Background(), &Message{Topic: "z"})
	if d := rec.deliveries(); len(d) != 1 || d[0].Acks != nil {
		t.Fatalf("QoS 0 deliveries %+v", d)
	}
	done := make(chan PublishResult)
	go func() { done <- r.Publish(context.Background(), &Message{Topic: "q/1", QoS: 1}) }()
	a := <-h.held
	select {
	case res := <-done:
		t.Fatalf("Publish returned before the holder answered: %+v", res)
	case <-time.After(50 * time.Millisecond):
	}
	a.Done(nil)
	if res := <-done; res.Matched != 1 || res.Failed != 0 {
		t.Fatalf("QoS 1 result %+v", res)
	}
}

func TestAcksDoneTooOftenPanics(t *testing.T) {
	r := NewRouter(RouterOptions{})
	h := &holder{held: make(chan *Acks, 1)}
	if _, err := r.Subscribe("a", h, SubOptions{QoS: 1}); err != nil {
		t.Fatal(err)
	}
	r.PublishAsync(context.Background(), &Message{Topic: "a"}, func(PublishResult) {})
	a := <-h.held
	a.Done(nil)
	defer func() {
		if recover() == nil {
			t.Fatal("a second Done did not panic")
		}
	}()
	a.Done(nil)
}

func (s *recorder) deliveries() []Delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Delivery(nil), s.dels...)
}
