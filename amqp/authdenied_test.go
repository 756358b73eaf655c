package amqp

import (
	"context"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"

	"github.com/tolsey/tolsey/amqp/internal/frames"
	"github.com/tolsey/tolsey/core/auth"
)

// TestACLRefusalsCounted: refused attaches and rejected messages are
// counted as MQTT counts its refusals, in
// tolsey_auth_failures_total{protocol="amqp"}: publish_denied for a
// sending link refused and for each message rejected, subscribe_denied for
// a receiving link refused.
func TestACLRefusalsCounted(t *testing.T) {
	e := authEnv(t, false, aclRules)
	s := aliceSession(t, e)
	if _, err := s.NewSender(ctx5(t), "secret/x", nil); amqpCond(err) != string(frames.ErrCondUnauthorizedAccess) {
		t.Fatalf("sender to secret/x: %v", err)
	}
	if _, err := s.NewReceiver(ctx5(t), "secret/#", nil); amqpCond(err) != string(frames.ErrCondUnauthorizedAccess) {
		t.Fatalf("receiver on secret/#: %v", err)
	}
	relay := newSender(t, s, "", nil)
	to := "secret/x"
	if err := relay.Send(ctx5(t), &goamqp.Message{Data: [][]byte{[]byte("no")}, Properties: &goamqp.MessageProperties{To: &to}}, nil); amqpCond(err) != string(frames.ErrCondUnauthorizedAccess) {
		t.Fatalf("relay to secret/x: %v", err)
	}
	if pub, sub := e.authFailures("publish_denied"), e.authFailures("subscribe_denied"); pub != 2 || sub != 1 {
		t.Fatalf("publish_denied %v, subscribe_denied %v; want 2 and 1", pub, sub)
	}
}

// TestFailedLoginsThrottledPerHost: failed SASL logins count against their
// source host in the throttle the users file's Live holds (auth.Throttle,
// the one MQTT CONNECTs use too), across connections: after three failed
// connections from 127.0.0.1 the next failure from there waits four steps.
// Before, each AMQP connection waited a fixed 500 ms and nothing was
// shared.
func TestFailedLoginsThrottledPerHost(t *testing.T) {
	e := authEnv(t, false, "")
	for range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		c, err := goamqp.Dial(ctx, "amqp://"+e.addr, &goamqp.ConnOptions{SASLType: goamqp.SASLTypePlain("alice", "wrong")})
		cancel()
		if err == nil {
			c.Close()
			t.Fatal("a wrong password logged in")
		}
	}
	if d := e.srv.opts.Auth.Failures.Failed("127.0.0.1", time.Now()); d != 4*auth.ThrottleStep {
		t.Fatalf("the next failure from 127.0.0.1 waits %v, want %v: the three failed connections were not counted against the host", d, 4*auth.ThrottleStep)
	}
	if d := e.srv.opts.Auth.Failures.Failed("192.0.2.1", time.Now()); d != auth.ThrottleStep {
		t.Fatalf("another host waits %v, want %v", d, auth.ThrottleStep)
	}
}
