package mqtt

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/tolsey/tolsey/core/auth"
	"github.com/tolsey/tolsey/core/auth/httpauth"
	"github.com/tolsey/tolsey/core/auth/httpauth/httpauthtest"
	"github.com/tolsey/tolsey/core/metrics"
	"github.com/tolsey/tolsey/retain"
	"github.com/tolsey/tolsey/retain/memory"
)

// identityService is a real identity service for auth.http.url that lets
// dave (password dave-pw) in, in group devices.
func identityService(t *testing.T) *httpauthtest.Service {
	svc := httpauthtest.New(t)
	svc.Allow("dave", "dave-pw", "devices")
	return svc
}

// startHookServer runs a front-end with the users file and the
// HTTP hook at url in force.
func startHookServer(t *testing.T, url string, ttl time.Duration) (*Server, *metrics.Metrics) {
	t.Helper()
	hook, err := httpauth.New(httpauth.Options{URL: url, Timeout: 2 * time.Second, CacheTTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(hook.Close)
	live := &auth.Live{External: hook} // set before Start, as gateway does
	live.Swap(usersFile(t))
	m := metrics.New()
	s := startTestServer(t, memory.New(retain.Limits{}), func(o *Options) {
		o.Auth = live
		o.Metrics = m
	})
	return s, m
}

// TestHTTPAuthHook: users the file does not name are asked of the
// identity service (auth.http.url): dave is let in, paho included, and the
// groups the service gives him drive the file's ACL (devices/%u/#); a user
// it refuses gets bad credentials (MQTT 5 0x86, 3.1.1 4); file users never
// reach the service, whatever their password.
func TestHTTPAuthHook(t *testing.T) {
	svc := identityService(t)
	s, m := startHookServer(t, svc.URL, 0)

	// paho: dialConnect fails the test unless the CONNACK is a success.
	dialConnect(t, s.Addr(), &paho.Connect{ClientID: "dave-paho", CleanStart: true, KeepAlive: 30,
		Username: "dave", UsernameFlag: true, Password: []byte("dave-pw"), PasswordFlag: true})

	c, code := rawConnectCode(t, s.Addr(), 5, "dave-raw", "dave", "dave-pw")
	if code != 0 {
		t.Fatalf("dave: CONNACK %#x, want 0", code)
	}
	if r := svc.Last(); r.Protocol != "mqtt" || r.ClientID != "dave-raw" || r.RemoteAddr == "" {
		t.Errorf("the service was asked %+v", r)
	}
	// Group devices, from the service: devices/dave/# is his, alice's not
	// (subscribed below what he publishes, so none comes back to him).
	if got := c.subscribeCodes(t, "devices/dave/in/#", 1); string(got) != "\x01" {
		t.Errorf("devices/dave/in/#: SUBACK % x, want 01", got)
	}
	if got := c.subscribeCodes(t, "devices/alice/#", 1); string(got) != "\x87" {
		t.Errorf("devices/alice/#: SUBACK % x, want 87", got)
	}
	c.publish(t, "devices/dave/x", 1, 1, false)
	c.expectAcks(t, packets.Puback, []uint16{1}, nil)
	c.publish(t, "devices/alice/x", 1, 2, false)
	c.expectAcks(t, packets.Puback, []uint16{2}, map[uint16]byte{2: 0x87})

	for _, v := range []struct{ version, want byte }{{5, 0x86}, {4, 4}} {
		if _, code := rawConnectCode(t, s.Addr(), v.version, fmt.Sprintf("erin-%d", v.version), "erin", "erin-pw"); code != v.want {
			t.Errorf("erin, version %d: CONNACK %#x, want %#x", v.version, code, v.want)
		}
	}
	if got := failures(t, m, "denied"); got != 2 {
		t.Errorf("tolsey_auth_failures_total{reason=denied} = %v, want 2", got)
	}

	before := svc.Calls()
	if _, code := rawConnectCode(t, s.Addr(), 5, "alice", "alice", "alice-pw"); code != 0 {
		t.Errorf("alice (file user): CONNACK %#x, want 0", code)
	}
	if _, code := rawConnectCode(t, s.Addr(), 5, "alice-bad", "alice", "dave-pw"); code != 0x86 {
		t.Errorf("alice, wrong password: CONNACK %#x, want 0x86", code)
	}
	if n := svc.Calls() - before; n != 0 {
		t.Errorf("file users reached the identity service %d times, want 0", n)
	}
}

// TestHTTPAuthHookDown: when the identity service does not answer, a
// client it would have let in is refused with "server unavailable"
// (MQTT 5 0x88, 3.1.1 return code 3), never let in, and the outage is
// counted.
func TestHTTPAuthHookDown(t *testing.T) {
	svc := identityService(t)
	url := svc.URL
	svc.Close()
	s, m := startHookServer(t, url, time.Hour)
	for _, v := range []struct{ version, want byte }{{5, 0x88}, {4, 3}} {
		if _, code := rawConnectCode(t, s.Addr(), v.version, fmt.Sprintf("dave-%d", v.version), "dave", "dave-pw"); code != v.want {
			t.Errorf("version %d: CONNACK %#x, want %#x", v.version, code, v.want)
		}
	}
	if got := failures(t, m, "unavailable"); got != 2 {
		t.Errorf("tolsey_auth_failures_total{reason=unavailable} = %v, want 2", got)
	}
}

// TestHTTPAuthHookCache: with auth.http.cacheTTL the service answers once
// for two connections with the same credentials.
func TestHTTPAuthHookCache(t *testing.T) {
	svc := identityService(t)
	s, _ := startHookServer(t, svc.URL, time.Hour)
	for i := range 2 {
		c, code := rawConnectCode(t, s.Addr(), 5, "dave", "dave", "dave-pw")
		if code != 0 {
			t.Fatalf("connect %d: CONNACK %#x", i, code)
		}
		c.conn.Close()
	}
	if n := svc.Calls(); n != 1 {
		t.Errorf("the service saw %d calls for two connects, want 1", n)
	}
}

// TestHTTPAuthHookBlocksNoOne: while the identity service sits on one
// client's CONNECT, other clients connect, publish and receive: the call
// runs on the connecting client's own goroutine.
func TestHTTPAuthHookBlocksNoOne(t *testing.T) {
	asked := make(chan struct{})
	release := make(chan struct{})
	svc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(asked)
		<-release
		_, _ = w.Write([]byte(`{"allow": true}`))
	}))
	defer svc.Close()
	s, _ := startHookServer(t, svc.URL, 0)

	c := dialRawConn(t, s.Addr(), 5)
	cp := packets.ConnectParams{ProtocolName: []byte("MQTT"), Clean: true, Keepalive: 30, ClientIdentifier: "waiting",
		UsernameFlag: true, Username: []byte("waiter"), PasswordFlag: true, Password: []byte("pw")}
	c.write(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect}, Connect: cp})
	done := make(chan byte, 1)
	go func() {
		pk, err := c.next()
		if err != nil {
			done <- 0xff
			return
		}
		done <- pk.ReasonCode
	}()
	<-asked // the service holds the waiter's CONNECT from now on

	ops := dialUser(t, s.Addr(), "ops-sub", "ops")
	ops.subscribe(t, "live/#")
	pub := dialUser(t, s.Addr(), "ops-pub", "ops")
	pub.publishAll(t, "live/a", "live/end")
	expectTopics(t, "ops", ops.receiveUntil(t, "live/end"), "live/a", "live/end")

	close(release)
	if code := <-done; code != 0 {
		t.Errorf("the waiter's CONNACK %#x, want 0 once the service answered", code)
	}
}
