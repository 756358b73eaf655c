package amqp

import (
	"strings"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"

	"github.com/tolsey/tolsey/amqp/internal/frames"
	"github.com/tolsey/tolsey/core/auth/httpauth"
	"github.com/tolsey/tolsey/core/auth/httpauth/httpauthtest"
)

// identityService is a real identity service for auth.http.url that lets
// dave (password dave-pw) in, in group devices.
func identityService(t *testing.T) *httpauthtest.Service {
	svc := httpauthtest.New(t)
	svc.Allow("dave", "dave-pw", "devices")
	return svc
}

// hookEnv is authEnv with the HTTP hook at url.
func hookEnv(t *testing.T, url string, ttl time.Duration) *env {
	t.Helper()
	hook, err := httpauth.New(httpauth.Options{URL: url, Timeout: 2 * time.Second, CacheTTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(hook.Close)
	return authEnv(t, false, aclRules, func(o *Options) { o.Auth.External = hook })
}

// TestHTTPAuthHook: SASL PLAIN for a user the file does not name asks the
// identity service; dave is let in and his groups from the service drive
// the file's ACL (devices/%u/#); a user it refuses fails with sasl-outcome
// auth, counted as denied; file users never reach it.
func TestHTTPAuthHook(t *testing.T) {
	svc := identityService(t)
	e := hookEnv(t, svc.URL, 0)
	ctx := ctx5(t)

	c := e.dial(t, &goamqp.ConnOptions{SASLType: goamqp.SASLTypePlain("dave", "dave-pw")})
	s, err := c.NewSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r := svc.Last(); r.Protocol != "amqp" || r.RemoteAddr == "" || r.ClientID != "" {
		t.Errorf("the service was asked %+v", r)
	}
	r := newReceiver(t, s, "devices/dave/#", nil)
	snd := newSender(t, s, "devices/dave/t", nil)
	if _, err := s.NewSender(ctx, "devices/alice/t", nil); amqpCond(err) != string(frames.ErrCondUnauthorizedAccess) {
		t.Fatalf("dave's sender to devices/alice/t: %v, want amqp:unauthorized-access", err)
	}
	send(t, snd, &goamqp.Message{Data: [][]byte{[]byte("hello")}})
	if got := body(receive(t, r)); got != "hello" {
		t.Errorf("dave received %q, want hello", got)
	}

	if c, err := goamqp.Dial(ctx, "amqp://"+e.addr, &goamqp.ConnOptions{SASLType: goamqp.SASLTypePlain("erin", "erin-pw")}); err == nil {
		c.Close()
		t.Fatal("erin: connected, want refused")
	} else if !strings.Contains(err.Error(), "code 0x1") {
		t.Errorf("erin: %v, want sasl-outcome auth (1)", err)
	}
	if got := e.authFailures("denied"); got != 1 {
		t.Errorf("tolsey_auth_failures_total{reason=denied} = %v, want 1", got)
	}

	before := svc.Calls()
	e.dial(t, &goamqp.ConnOptions{SASLType: goamqp.SASLTypePlain("alice", "secret")})
	if c, err := goamqp.Dial(ctx, "amqp://"+e.addr, &goamqp.ConnOptions{SASLType: goamqp.SASLTypePlain("alice", "dave-pw")}); err == nil {
		c.Close()
		t.Error("alice with a wrong password: connected")
	}
	if n := svc.Calls() - before; n != 0 {
		t.Errorf("file users reached the identity service %d times, want 0", n)
	}
}

// TestHTTPAuthHookDown: with the identity service down dave is refused
// with sasl-outcome sys-temp (a transient system error, not bad
// credentials), never let in, and the outage is counted.
func TestHTTPAuthHookDown(t *testing.T) {
	svc := identityService(t)
	url := svc.URL
	svc.Close()
	e := hookEnv(t, url, time.Hour)
	c, err := goamqp.Dial(ctx5(t), "amqp://"+e.addr, &goamqp.ConnOptions{SASLType: goamqp.SASLTypePlain("dave", "dave-pw")})
	if err == nil {
		c.Close()
		t.Fatal("connected while the identity service is down")
	}
	if !strings.Contains(err.Error(), "code 0x4") {
		t.Errorf("%v, want sasl-outcome sys-temp (4)", err)
	}
	if got := e.authFailures("unavailable"); got != 1 {
		t.Errorf("tolsey_auth_failures_total{reason=unavailable} = %v, want 1", got)
	}
}

// TestHTTPAuthHookCache: with a cache TTL the service answers once for two
// connections with the same credentials.
func TestHTTPAuthHookCache(t *testing.T) {
	svc := identityService(t)
	e := hookEnv(t, svc.URL, time.Hour)
	for range 2 {
		c := e.dial(t, &goamqp.ConnOptions{SASLType: goamqp.SASLTypePlain("dave", "dave-pw")})
		c.Close()
	}
	if n := svc.Calls(); n != 1 {
		t.Errorf("the service saw %d calls for two connections, want 1", n)
	}
}
