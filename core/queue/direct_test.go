package queue_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/tolsey/tolsey/core"
	"github.com/tolsey/tolsey/core/queue"
	"github.com/tolsey/tolsey/core/queue/embedded"
	"github.com/tolsey/tolsey/core/queue/queuetest"
)

// TestOrderedLogWindow: with the embedded backend (an OrderedLog) appended
// messages go straight into the window while it has read the whole Log,
// and are read back from the Log once the window has filled; across both,
// a consumer gets every message once, in order, alike whichever way it
// came (the Log keeps the Origin too), and the queue ends empty.
func TestOrderedLogWindow(t *testing.T) {
	ctx := context.Background()
	be, err := embedded.Open(filepath.Join(t.TempDir(), embedded.FileName), embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	e, err := queue.New(ctx, queue.Options{Backend: be, Window: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	q, err := e.Declare(ctx, queue.Config{Name: "w"})
	if err != nil {
		t.Fatal(err)
	}
	c, wake := queuetest.Consume(t, q)
	defer c.Close()
	origin := core.Origin{Protocol: core.ProtocolMQTT, Node: "n1", Client: "pub"}
	received := 0
	// recv takes and acknowledges messages up to the (want)th, checking
	// that each is the next in order and carries the publisher's Origin.
	recv := func(want int) {
		t.Helper()
		deadline := time.After(10 * time.Second)
		for received < want {
			d, ok := c.Next()
			if !ok {
				select {
				case <-wake:
				case <-deadline:
					t.Fatalf("message %d did not come", received)
				}
				continue
			}
			if w := fmt.Sprint(received); string(d.Msg.Payload) != w || d.Redelivered {
				t.Fatalf("got %q (redelivered %v), want %s", d.Msg.Payload, d.Redelivered, w)
			}
			if d.Msg.Origin != origin || d.Msg.Topic != "w" || d.Msg.QoS != 1 {
				t.Fatalf("message %d: %+v", received, d.Msg)
			}
			c.Ack(d.ID)
			received++
		}
	}
	put := func(i int) <-chan error {
		ch := make(chan error, 1)
		q.Put(&core.Message{Topic: "w", Payload: fmt.Appendf(nil, "%d", i), QoS: 1,
			Origin: origin}, func(err error) { ch <- err })
		return ch
	}
	wait := func(chs []<-chan error) {
		for _, ch := range chs {
			if err := <-ch; err != nil {
				t.Fatal(err)
			}
		}
	}
	// Bursts of 10 puts in flight overfill the window of 4 (the rest is
	// read back from the Log); then single puts, each taken at once, find
	// it caught up (straight in).
	const n = 200
	var pending []<-chan error
	for i := range n {
		pending = append(pending, put(i))
		if i%20 < 10 {
			continue
		}
		wait(pending)
		pending = pending[:0]
		recv(i + 1)
	}
	wait(pending)
	recv(n)
	if info := q.Info(); info.Messages != 0 || info.Counters.In != n || info.Counters.Acked != n {
		t.Fatalf("queue after: %+v", info)
	}
}

// TestBatchLogRefusal: a Put whose append the embedded backend (a
// BatchLog) refuses, once closed, is answered with the store's error and
// counted as refused, by the batch's end as an accepted one would be.
func TestBatchLogRefusal(t *testing.T) {
	ctx := context.Background()
	be, err := embedded.Open(filepath.Join(t.TempDir(), embedded.FileName), embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e, err := queue.New(ctx, queue.Options{Backend: be})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	q, err := e.Declare(ctx, queue.Config{Name: "r", MaxMessages: 1})
	if err != nil {
		t.Fatal(err)
	}
	put := func() error {
		ch := make(chan error, 1)
		q.Put(&core.Message{Topic: "r", Payload: []byte("x"), QoS: 1}, func(err error) { ch <- err })
		return <-ch
	}
	if err := be.Close(); err != nil {
		t.Fatal(err)
	}
	if err := put(); !errors.Is(err, queue.ErrUnavailable) {
		t.Fatalf("put to a closed store: %v, want ErrUnavailable", err)
	}
	// The refused append gave its reservation back: the queue of one
	// message is not full.
	if err := put(); !errors.Is(err, queue.ErrUnavailable) {
		t.Fatalf("second put: %v, want ErrUnavailable, not full", err)
	}
	if info := q.Info(); info.Counters.Refused != 2 || info.Messages != 0 {
		t.Fatalf("queue after: %+v", info)
	}
}
