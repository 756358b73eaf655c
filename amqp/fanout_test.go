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

// TestFanOutEncodesOnce: a publish that reaches several AMQP receivers (on
// several connections, each with its own writer) is encoded twice (the
// first link's writer, then one encoding shared by the others), not once
// per receiver; every receiver gets the message whole. A message with an
// expiry is still encoded per delivery: its TTL counts from sending.
func TestFanOutEncodesOnce(t *testing.T) {
	var encodes atomic.Int64
	encodeHook = func() { encodes.Add(1) }
	t.Cleanup(func() { encodeHook = nil })
	e := startServer(t)
	const links, n = 4, 50
	var rs []*goamqp.Receiver
	for range links {
		rs = append(rs, newReceiver(t, e.session(t), "fan/x", &goamqp.ReceiverOptions{Credit: 2 * n}))
	}
	publish := func(i int, expiry time.Time) {
		m := &core.Message{Topic: "fan/x", Payload: []byte(fmt.Sprint(i)), ContentType: "text/plain", Expiry: expiry}
		if res := e.router.Publish(context.Background(), m); res.Matched != links {
			t.Fatalf("publish %d matched %d", i, res.Matched)
		}
	}
	for i := range n {
		publish(i, time.Time{})
	}
	for _, r := range rs {
		for i := range n {
			if got := body(receive(t, r)); got != fmt.Sprint(i) {
				t.Fatalf("message %d: %q", i, got)
			}
		}
	}
	if got := encodes.Load(); got > 2*n {
		t.Fatalf("%d publishes to %d receivers took %d encodings, want at most %d", n, links, got, 2*n)
	}
	encodes.Store(0)
	publish(n, time.Now().Add(time.Hour))
	for _, r := range rs {
		m := receive(t, r)
		if m.Header == nil || m.Header.TTL <= 0 {
			t.Fatalf("no TTL on a message with an expiry: %+v", m.Header)
		}
	}
	if got := encodes.Load(); got != links {
		t.Fatalf("a message with an expiry took %d encodings for %d receivers, want one each", got, links)
	}
}
