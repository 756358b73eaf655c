package mqtt

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/tolsey/tolsey/core/auth"
	"github.com/tolsey/tolsey/core/metrics"
	"github.com/tolsey/tolsey/retain"
	"github.com/tolsey/tolsey/retain/memory"
)

var testHashes sync.Map // password -> bcrypt hash

// usersFile is the example users file of docs/security.md (alice in group devices, ops
// with every right, bob with none of his own) with extra ACL rules after
// its own; every password is "<name>-pw".
func usersFile(t *testing.T, extra ...string) *auth.Store {
	t.Helper()
	hash := func(pw string) string {
		// One hash per password for the whole run: a reload of a file
		// whose hash changed disconnects the user (revoke.go).
		if h, ok := testHashes.Load(pw); ok {
			return h.(string)
		}
		h, err := auth.HashBcrypt(pw, 4)
		if err != nil {
			t.Fatal(err)
		}
		h2, _ := testHashes.LoadOrStore(pw, h)
		return h2.(string)
	}
	f := fmt.Sprintf(`
users:
  - {name: alice, password: %q, groups: [devices]}
  - {name: ops, password: %q, groups: [admin]}
  - {name: bob, password: %q, groups: [devices]}
acl:
  - {allow: [publish, subscribe], topic: "devices/%%u/#", groups: [devices]}
  - {deny: [subscribe], topic: "test/nosubscribe"}
  - {allow: [subscribe], topic: "public/#"}
  - {allow: [publish, subscribe], topic: "#", users: [ops]}
`, hash("alice-pw"), hash("ops-pw"), hash("bob-pw"))
	for _, r := range extra {
		f += "  - " + r + "\n"
	}
	f += "default: deny\n"
	st, err := auth.Parse([]byte(f))
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// startAuthServer runs a front-end with st in force.
func startAuthServer(t *testing.T, st *auth.Store, anonymous bool) (*Server, *auth.Live, *metrics.Metrics) {
	t.Helper()
	live := &auth.Live{AllowAnonymous: anonymous}
	live.Swap(st)
	m := metrics.New()
	s := startTestServer(t, memory.New(retain.Limits{}), func(o *Options) {
		o.Auth = live
		o.Metrics = m
	})
	return s, live, m
}

// dialUser connects with paho (MQTT 5) as user, wanting success.
func dialUser(t *testing.T, addr, id, user string) *testClient {
	t.Helper()
	return dialConnect(t, addr, &paho.Connect{ClientID: id, CleanStart: true, KeepAlive: 30,
		Username: user, UsernameFlag: true, Password: []byte(user + "-pw"), PasswordFlag: true})
}

// rawConnectCode sends a CONNECT (version 4: MQTT 3.1.1, 5) with the
// credentials given (user "" sends none) and returns the client and the
// CONNACK's code.
func rawConnectCode(t *testing.T, addr string, version byte, id, user, password string) (*rawClient, byte) {
	t.Helper()
	c := dialRawConn(t, addr, version)
	cp := packets.ConnectParams{ProtocolName: []byte("MQTT"), Clean: true, Keepalive: 30, ClientIdentifier: id}
	if user != "" {
		cp.UsernameFlag, cp.Username = true, []byte(user)
		cp.PasswordFlag, cp.Password = true, []byte(password)
	}
	c.write(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect}, Connect: cp})
	pk := c.read(t)
	if pk.FixedHeader.Type != packets.Connack {
		t.Fatalf("%s: want CONNACK, got %s", id, packets.PacketNames[pk.FixedHeader.Type])
	}
	return c, pk.ReasonCode
}

// expectClosed wants the server to close the connection, with no packet
// before (MQTT 3.1.1 has no DISCONNECT from the server).
func (c *rawClient) expectClosed(t *testing.T) {
	t.Helper()
	if pk, err := c.next(); err == nil {
		t.Fatalf("want the connection closed, got %s", packets.PacketNames[pk.FixedHeader.Type])
	}
}

func failures(t *testing.T, m *metrics.Metrics, reason string) float64 {
	return counter(t, m.AuthFailures, "mqtt", reason)
}

// TestAuthConnect: the CONNACK codes of MQTT 5 and 3.1.1 for a good
// password, a bad one, an unknown user (the same answer as a bad password)
// and no credentials with anonymous access refused; each refusal counted
// by reason.
func TestAuthConnect(t *testing.T) {
	s, _, m := startAuthServer(t, usersFile(t), false)
	for _, tc := range []struct {
		name, user, password string
		v5, v3               byte
	}{
		{"good", "alice", "alice-pw", 0, 0},
		{"bad-password", "alice", "wrong", 0x86, 4},
		{"unknown-user", "mallory", "alice-pw", 0x86, 4},
		{"anonymous", "", "", 0x87, 5},
	} {
		for _, v := range []struct {
			version byte
			want    byte
		}{{5, tc.v5}, {4, tc.v3}} {
			_, code := rawConnectCode(t, s.Addr(), v.version, fmt.Sprintf("%s-%d", tc.name, v.version), tc.user, tc.password)
			if code != v.want {
				t.Errorf("%s, version %d: CONNACK code %#x, want %#x", tc.name, v.version, code, v.want)
			}
		}
	}
	for reason, want := range map[string]float64{"bad_password": 2, "unknown_user": 2, "anonymous": 2} {
		if got := failures(t, m, reason); got != want {
			t.Errorf("tolsey_auth_failures_total{reason=%q} = %v, want %v", reason, got, want)
		}
	}
	// paho sees the MQTT 5 refusal as such.
	conn, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	pc := paho.NewClient(paho.ClientConfig{ClientID: "paho-bad", Conn: conn})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ca, _ := pc.Connect(ctx, &paho.Connect{ClientID: "paho-bad", CleanStart: true, Username: "alice",
		UsernameFlag: true, Password: []byte("nope"), PasswordFlag: true})
	if ca == nil || ca.ReasonCode != 0x86 {
		t.Fatalf("paho: CONNACK %v, want 0x86", ca)
	}
}

// TestAuthAnonymousAllowed: with anonymous access allowed a client without
// credentials connects, and the ACL applies to it as to nobody in
// particular: public/# may be read, a device's topics may not.
func TestAuthAnonymousAllowed(t *testing.T) {
	s, _, _ := startAuthServer(t, usersFile(t), true)
	for _, version := range []byte{5, 4} {
		c, code := rawConnectCode(t, s.Addr(), version, fmt.Sprintf("anon-%d", version), "", "")
		if code != 0 {
			t.Fatalf("version %d: CONNACK %#x, want 0", version, code)
		}
		want := []byte{0x87}
		if version == 4 {
			want = []byte{0x80}
		}
		if got := c.subscribeCodes(t, "public/#", 1); string(got) != "\x01" {
			t.Errorf("version %d: public/#: SUBACK % x, want 01", version, got)
		}
		if got := c.subscribeCodes(t, "devices/alice/#", 1); string(got) != string(want) {
			t.Errorf("version %d: devices/alice/#: SUBACK % x, want % x", version, got, want)
		}
	}
}

// TestAuthPublishACL: alice may publish on her own device topics, not on
// bob's: MQTT 5 PUBACK/PUBREC 0x87 and the connection goes on, QoS 0
// dropped and counted; MQTT 3.1.1 closes the connection.
func TestAuthPublishACL(t *testing.T) {
	s, _, m := startAuthServer(t, usersFile(t), false)
	watcher := dialUser(t, s.Addr(), "watcher", "ops")
	watcher.subscribe(t, "devices/#")

	c, code := rawConnectCode(t, s.Addr(), 5, "alice5", "alice", "alice-pw")
	if code != 0 {
		t.Fatalf("CONNACK %#x", code)
	}
	c.publish(t, "devices/alice/x", 1, 1, false)
	c.expectAcks(t, packets.Puback, []uint16{1}, nil)
	c.publish(t, "devices/bob/x", 1, 2, false)
	c.expectAcks(t, packets.Puback, []uint16{2}, map[uint16]byte{2: 0x87})
	c.publish(t, "devices/bob/x", 2, 3, false)
	c.expectAcks(t, packets.Pubrec, []uint16{3}, map[uint16]byte{3: 0x87})
	c.publish(t, "devices/bob/q0", 0, 0, false)
	c.publish(t, "devices/alice/last", 1, 4, false)
	c.expectAcks(t, packets.Puback, []uint16{4}, nil)
	expectTopics(t, "watcher", watcher.receiveUntil(t, "devices/alice/last"), "devices/alice/x", "devices/alice/last")
	if got := failures(t, m, "publish_denied"); got != 3 {
		t.Errorf("publish_denied = %v, want 3", got)
	}

	c3, code := rawConnectCode(t, s.Addr(), 4, "alice3", "alice", "alice-pw")
	if code != 0 {
		t.Fatalf("CONNACK %#x", code)
	}
	c3.publish(t, "devices/alice/x", 1, 1, false)
	c3.expectAcks(t, packets.Puback, []uint16{1}, nil)
	c3.publish(t, "devices/bob/x", 1, 2, false)
	c3.expectClosed(t)
}

// TestAuthSubscribeFailure is what the Paho interop suite's
// test_subscribe_failure checks: with a users file that denies subscribe
// on test/nosubscribe, a SUBSCRIBE to it is refused (MQTT 5 0x87, 3.1.1
// 0x80), for every user, even one allowed "#".
func TestAuthSubscribeFailure(t *testing.T) {
	s, _, m := startAuthServer(t, usersFile(t), false)
	for _, user := range []string{"alice", "ops"} {
		for _, v := range []struct{ version, want byte }{{5, 0x87}, {4, 0x80}} {
			c, code := rawConnectCode(t, s.Addr(), v.version, fmt.Sprintf("%s-%d", user, v.version), user, user+"-pw")
			if code != 0 {
				t.Fatalf("CONNACK %#x", code)
			}
			if got := c.subscribeCodes(t, "test/nosubscribe", 1); len(got) != 1 || got[0] != v.want {
				t.Errorf("%s, version %d: SUBACK % x, want %#x", user, v.version, got, v.want)
			}
		}
	}
	if got := failures(t, m, "subscribe_denied"); got != 4 {
		t.Errorf("subscribe_denied = %v, want 4", got)
	}
}

// TestAuthPartialSubscription: a wildcard subscription that the rules
// allow but that overlaps denied topics is granted, and never receives a
// message on those topics, live or retained: ops's "#" gets everything
// but test/nosubscribe and public/secret/# (a rule added for the test,
// more specific than ops's "#"), alice's public/# everything public but
// public/secret/#, and none of bob's device topics.
func TestAuthPartialSubscription(t *testing.T) {
	s, _, _ := startAuthServer(t, usersFile(t, `{deny: [subscribe], topic: "public/secret/#"}`), false)
	pub := dialUser(t, s.Addr(), "pub", "ops")
	pub.publishRetained(t, "public/r")
	pub.publishRetained(t, "public/secret/r")

	ops := dialUser(t, s.Addr(), "ops-sub", "ops")
	ops.subscribe(t, "#")
	alice := dialUser(t, s.Addr(), "alice-sub", "alice")
	alice.subscribe(t, "public/#")
	// Retained copies first: alice gets public/r only.
	expectTopics(t, "alice retained", alice.receiveUntil(t, "public/r"), "public/r")

	pub.publishAll(t, "test/nosubscribe", "devices/bob/x", "public/secret/x", "public/a", "public/end")
	expectTopics(t, "ops", ops.receiveUntil(t, "public/end"),
		"public/r", "devices/bob/x", "public/a", "public/end")
	expectTopics(t, "alice", alice.receiveUntil(t, "public/end"), "public/a", "public/end")
}

// publishRetained publishes a retained QoS 1 message with the topic as
// its payload.
func (c *testClient) publishRetained(t *testing.T, topic string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.Publish(ctx, &paho.Publish{Topic: topic, QoS: 1, Retain: true, Payload: []byte(topic)}); err != nil {
		t.Fatalf("publish %s: %v", topic, err)
	}
}

// TestAuthReload: a new users file swapped in applies to the next publish
// of a client already connected, and to the per-message checks of its
// partial subscriptions.
func TestAuthReload(t *testing.T) {
	s, live, _ := startAuthServer(t, usersFile(t), false)
	c, code := rawConnectCode(t, s.Addr(), 5, "alice", "alice", "alice-pw")
	if code != 0 {
		t.Fatalf("CONNACK %#x", code)
	}
	c.publish(t, "devices/alice/x", 1, 1, false)
	c.expectAcks(t, packets.Puback, []uint16{1}, nil)

	ops := dialUser(t, s.Addr(), "ops-sub", "ops")
	ops.subscribe(t, "#") // partial: test/nosubscribe is denied

	live.Swap(usersFile(t,
		`{deny: [publish], topic: "devices/alice/#", users: [alice]}`,
		`{deny: [subscribe], topic: "secret/#"}`))
	c.publish(t, "devices/alice/x", 1, 2, false)
	c.expectAcks(t, packets.Puback, []uint16{2}, map[uint16]byte{2: 0x87})

	ops.publishAll(t, "secret/x", "open/end")
	expectTopics(t, "ops after reload", ops.receiveUntil(t, "open/end"), "open/end")
}

// TestFailedConnectsThrottledPerHost: refused CONNECTs count against their
// source host in the Live's throttle (auth.Throttle), which AMQP's failed
// SASL logins share.
func TestFailedConnectsThrottledPerHost(t *testing.T) {
	s, live, _ := startAuthServer(t, usersFile(t), false)
	for i := range 2 {
		if _, code := rawConnectCode(t, s.Addr(), 5, fmt.Sprintf("guess-%d", i), "alice", "wrong"); code != 0x86 {
			t.Fatalf("CONNACK %#x, want 0x86", code)
		}
	}
	if d := live.Failures.Failed("127.0.0.1", time.Now()); d != 3*auth.ThrottleStep {
		t.Fatalf("the next failure from 127.0.0.1 waits %v, want %v", d, 3*auth.ThrottleStep)
	}
}

// TestAuthOfflineSessionKeepsIdentity: a persistent session left offline
// is still its user's: the messages queued for it while it is away are
// checked against that user's rules, and it gets them when it comes back.
// The identity used to go with the connection, so under default: deny the
// offline session was anonymous and nothing was queued for it.
func TestAuthOfflineSessionKeepsIdentity(t *testing.T) {
	s, _, _ := startAuthServer(t, usersFile(t), false)
	persistent := func() *paho.Connect {
		return &paho.Connect{ClientID: "alice-dev", CleanStart: false, KeepAlive: 30,
			Username: "alice", UsernameFlag: true, Password: []byte("alice-pw"), PasswordFlag: true,
			Properties: &paho.ConnectProperties{SessionExpiryInterval: paho.Uint32(300)}}
	}
	alice := dialConnect(t, s.Addr(), persistent())
	alice.subscribe(t, "devices/alice/#")
	if err := alice.Disconnect(&paho.Disconnect{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "alice's connection to end", func() bool {
		cl, ok := s.mochi.Clients.Get("alice-dev")
		return ok && cl.Closed()
	})
	ops := dialUser(t, s.Addr(), "ops-pub", "ops")
	ops.publishAll(t, "devices/alice/a", "devices/alice/end")
	back := dialConnect(t, s.Addr(), persistent())
	expectTopics(t, "alice back", back.receiveUntil(t, "devices/alice/end"), "devices/alice/a", "devices/alice/end")
}
