package gateway

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"
	"github.com/eclipse/paho.golang/paho"
	"github.com/gorilla/websocket"

	"github.com/tolsey/tolsey/core/coretest"
	"github.com/tolsey/tolsey/core/tlsconf/tlstest"
)

// tlsFixture is a CA, a server certificate and its files, and a client
// certificate of that CA.
type tlsFixture struct {
	ca     *tlstest.CA
	server *tlstest.Cert
	client *tlstest.Cert
	files  tlstest.Files
	dir    string
}

func newTLSFixture(t *testing.T) *tlsFixture {
	t.Helper()
	f := &tlsFixture{ca: tlstest.NewCA(t, "test CA"), dir: t.TempDir()}
	f.server = f.ca.Server(t)
	f.client = f.ca.Client(t, "device-1")
	f.files = tlstest.Write(t, f.dir, f.server, f.ca)
	return f
}

// args turn on every TLS listener with f's files and clientAuth auth.
func (f *tlsFixture) args(auth string) []string {
	var a []string
	for _, p := range []string{"mqtt", "amqp"} {
		a = append(a, "--"+p+".tls.listen=127.0.0.1:0", "--"+p+".tls.cert="+f.files.Cert, "--"+p+".tls.key="+f.files.Key,
			"--"+p+".tls.clientCA="+f.files.CA, "--"+p+".tls.clientAuth="+auth)
	}
	return append(a, "--mqtt.wss.listen=127.0.0.1:0", "--amqp.listen=127.0.0.1:0")
}

// mqttTLS connects a paho MQTT 5 client over TLS; the TLS connection is
// returned for its state.
func mqttTLS(t *testing.T, addr, id string, cfg *tls.Config) (*paho.Client, *tls.Conn, error) {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		return nil, nil, err
	}
	c := paho.NewClient(paho.ClientConfig{Conn: conn})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.Connect(ctx, &paho.Connect{ClientID: id, CleanStart: true}); err != nil {
		conn.Close()
		return nil, nil, err
	}
	t.Cleanup(func() { _ = c.Disconnect(&paho.Disconnect{}); <-c.Done() })
	return c, conn, nil
}

// roundTrip subscribes sub to topic and publishes from pub at QoS 1.
func roundTrip(t *testing.T, sub, pub *paho.Client, got <-chan *paho.Publish, topic string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if sub != nil {
		if _, err := sub.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: topic, QoS: 1}}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pub.Publish(ctx, &paho.Publish{Topic: topic, QoS: 1, Payload: []byte("over tls")}); err != nil {
		t.Fatal(err)
	}
	select {
	case p := <-got:
		if p.Topic != topic || string(p.Payload) != "over tls" {
			t.Fatalf("received %s %q", p.Topic, p.Payload)
		}
	case <-ctx.Done():
		t.Fatalf("no message on %s", topic)
	}
}

func receiver(id string) (paho.ClientConfig, chan *paho.Publish) {
	got := make(chan *paho.Publish, 16)
	return paho.ClientConfig{ClientID: id, OnPublishReceived: []func(paho.PublishReceived) (bool, error){
		func(r paho.PublishReceived) (bool, error) { got <- r.Packet; return true, nil },
	}}, got
}

// MQTT over TLS and over WSS, and AMQP over TLS, carry messages both ways.
func TestTLSListenersCarryMessages(t *testing.T) {
	f := newTLSFixture(t)
	g := startGateway(t, f.args("none")...)
	cfg := tlstest.ClientConfig(f.ca, nil)

	// MQTT over TLS: a subscriber and a publisher.
	conn, err := tls.Dial("tcp", g.MQTTTLSAddr(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	cc, got := receiver("tls-sub")
	cc.Conn = conn
	sub := paho.NewClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := sub.Connect(ctx, &paho.Connect{ClientID: "tls-sub", CleanStart: true}); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Disconnect(&paho.Disconnect{}); <-sub.Done() }()
	pub, pconn, err := mqttTLS(t, g.MQTTTLSAddr(), "tls-pub", cfg)
	if err != nil {
		t.Fatal(err)
	}
	if v := pconn.ConnectionState().Version; v != tls.VersionTLS13 {
		t.Errorf("MQTT over TLS negotiated %s, want TLS 1.3", tls.VersionName(v))
	}
	roundTrip(t, sub, pub, got, "tls/mqtt")

	// WSS: an MQTT CONNECT through a WebSocket over TLS gets its CONNACK.
	d := websocket.Dialer{TLSClientConfig: cfg, Subprotocols: []string{"mqtt"}}
	ws, _, err := d.DialContext(ctx, "wss://"+g.MQTTWSSAddr()+"/mqtt", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	// MQTT 3.1.1 CONNECT, clean session, keep alive 30, client id "w".
	connect := []byte{0x10, 13, 0, 4, 'M', 'Q', 'T', 'T', 4, 2, 0, 30, 0, 1, 'w'}
	if err := ws.WriteMessage(websocket.BinaryMessage, connect); err != nil {
		t.Fatal(err)
	}
	_ = ws.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, ack, err := ws.ReadMessage()
	if err != nil || !bytes.Equal(ack, []byte{0x20, 2, 0, 0}) {
		t.Fatalf("CONNACK over WSS: % x, %v", ack, err)
	}

	// AMQP over TLS (amqps): a receiver gets what the MQTT publisher sends,
	// and an AMQP sender reaches the MQTT subscriber.
	ac, err := goamqp.Dial(ctx, "amqps://"+g.AMQPTLSAddr(), &goamqp.ConnOptions{TLSConfig: cfg, SASLType: goamqp.SASLTypeAnonymous()})
	if err != nil {
		t.Fatal(err)
	}
	defer ac.Close()
	s, err := ac.NewSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	r, err := s.NewReceiver(ctx, "tls/amqp", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pub.Publish(ctx, &paho.Publish{Topic: "tls/amqp", QoS: 1, Payload: []byte("to amqps")}); err != nil {
		t.Fatal(err)
	}
	m, err := r.Receive(ctx, nil)
	if err != nil || string(m.GetData()) != "to amqps" {
		t.Fatalf("AMQP over TLS received %v, %v", m, err)
	}
	_ = r.AcceptMessage(ctx, m)
	snd, err := s.NewSender(ctx, "tls/mqtt", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := snd.Send(ctx, goamqp.NewMessage([]byte("over tls")), nil); err != nil {
		t.Fatal(err)
	}
	select {
	case p := <-got:
		if string(p.Payload) != "over tls" {
			t.Fatalf("MQTT over TLS received %q from AMQP", p.Payload)
		}
	case <-ctx.Done():
		t.Fatal("the MQTT subscriber got nothing from the amqps sender")
	}
}

// clientAuth require: no certificate and a certificate of another CA are
// refused on MQTT and AMQP; the right one is accepted. A client that goes
// no higher than TLS 1.1 is refused.
func TestTLSClientAuthRequire(t *testing.T) {
	f := newTLSFixture(t)
	g := startGateway(t, f.args("require")...)
	stranger := tlstest.NewCA(t, "other CA").Client(t, "intruder")
	tls11 := tlstest.ClientConfig(f.ca, f.client)
	tls11.MinVersion, tls11.MaxVersion = tls.VersionTLS10, tls.VersionTLS11
	for _, tc := range []struct {
		name string
		cfg  *tls.Config
		ok   bool
	}{
		{"no certificate", tlstest.ClientConfig(f.ca, nil), false},
		{"certificate of another CA", tlstest.ClientConfig(f.ca, stranger), false},
		{"the CA's certificate", tlstest.ClientConfig(f.ca, f.client), true},
		{"TLS 1.1 at most", tls11, false},
	} {
		_, _, err := mqttTLS(t, g.MQTTTLSAddr(), "auth-"+strings.ReplaceAll(tc.name, " ", "-"), tc.cfg)
		if (err == nil) != tc.ok {
			t.Errorf("MQTT, %s: %v, want ok=%v", tc.name, err, tc.ok)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		ac, err := goamqp.Dial(ctx, "amqps://"+g.AMQPTLSAddr(), &goamqp.ConnOptions{TLSConfig: tc.cfg, SASLType: goamqp.SASLTypeAnonymous()})
		cancel()
		if err == nil {
			ac.Close()
		}
		if (err == nil) != tc.ok {
			t.Errorf("AMQP, %s: %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}

// ReloadTLS: a new connection is served the new certificate while one made
// before stays up and keeps working; a broken file keeps the certificate in
// use and the error names the key.
func TestReloadTLS(t *testing.T) {
	f := newTLSFixture(t)
	g := startGateway(t, f.args("none")...)
	cfg := tlstest.ClientConfig(f.ca, nil)

	cc, got := receiver("before")
	conn, err := tls.Dial("tcp", g.MQTTTLSAddr(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	cc.Conn = conn
	before := paho.NewClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := before.Connect(ctx, &paho.Connect{ClientID: "before", CleanStart: true}); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = before.Disconnect(&paho.Disconnect{}); <-before.Done() }()
	if s := conn.ConnectionState().PeerCertificates[0].SerialNumber; s.Cmp(f.server.Leaf.SerialNumber) != 0 {
		t.Fatalf("first connection saw serial %v", s)
	}

	next := f.ca.Server(t)
	tlstest.Write(t, f.dir, next, f.ca)
	if err := g.ReloadTLS(); err != nil {
		t.Fatal(err)
	}
	after, aconn, err := mqttTLS(t, g.MQTTTLSAddr(), "after", cfg)
	if err != nil {
		t.Fatal(err)
	}
	if s := aconn.ConnectionState().PeerCertificates[0].SerialNumber; s.Cmp(next.Leaf.SerialNumber) != 0 {
		t.Errorf("after ReloadTLS a new connection saw serial %v, want the new %v", s, next.Leaf.SerialNumber)
	}
	// The connection from before the reload still subscribes and receives.
	roundTrip(t, before, after, got, "reload/live")
	ac, err := goamqp.Dial(ctx, "amqps://"+g.AMQPTLSAddr(), &goamqp.ConnOptions{TLSConfig: cfg, SASLType: goamqp.SASLTypeAnonymous()})
	if err != nil {
		t.Fatal(err)
	}
	ac.Close()

	// A broken key: the error names it, the new certificate stays.
	if err := os.WriteFile(f.files.Key, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	err = g.ReloadTLS()
	var ce *ConfigError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "mqtt.tls.key") || !strings.Contains(err.Error(), "amqp.tls.key") {
		t.Fatalf("ReloadTLS with a broken key: %v, want errors naming mqtt.tls.key and amqp.tls.key", err)
	}
	_, again, err := mqttTLS(t, g.MQTTTLSAddr(), "again", cfg)
	if err != nil {
		t.Fatal(err)
	}
	if s := again.ConnectionState().PeerCertificates[0].SerialNumber; s.Cmp(next.Leaf.SerialNumber) != 0 {
		t.Errorf("after a failed ReloadTLS a new connection saw serial %v, want %v", s, next.Leaf.SerialNumber)
	}
}

// admin.tls.*: the admin API answers over HTTPS only.
func TestAdminTLS(t *testing.T) {
	f := newTLSFixture(t)
	g := startGateway(t, "--admin.tls.cert="+f.files.Cert, "--admin.tls.key="+f.files.Key)
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: tlstest.ClientConfig(f.ca, nil)}, Timeout: 10 * time.Second}
	defer c.CloseIdleConnections()
	resp, err := c.Get("https://" + g.AdminAddr() + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/readyz over HTTPS: %d %s", resp.StatusCode, body)
	}
	plain := &http.Client{Timeout: 10 * time.Second}
	if resp, err := plain.Get("http://" + g.AdminAddr() + "/readyz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Error("plain HTTP answered 200 with admin.tls set")
		}
	}
}

// Bad TLS configuration stops the gateway at LoadConfig, naming the key.
func TestTLSConfigErrors(t *testing.T) {
	f := newTLSFixture(t)
	other := tlstest.Write(t, t.TempDir(), f.ca.Server(t), f.ca)
	missing := f.dir + "/missing.pem"
	for _, tc := range []struct {
		args []string
		key  string
	}{
		{[]string{"--mqtt.tls.listen=127.0.0.1:0"}, "mqtt.tls.cert"},
		{[]string{"--mqtt.wss.listen=127.0.0.1:0", "--mqtt.tls.cert=" + f.files.Cert}, "mqtt.tls.key"},
		{[]string{"--amqp.tls.listen=127.0.0.1:0", "--amqp.listen=127.0.0.1:0"}, "amqp.tls.cert"},
		{[]string{"--mqtt.tls.listen=127.0.0.1:0", "--mqtt.tls.cert=" + missing, "--mqtt.tls.key=" + f.files.Key}, "mqtt.tls.cert"},
		{[]string{"--mqtt.tls.listen=127.0.0.1:0", "--mqtt.tls.cert=" + f.files.Cert, "--mqtt.tls.key=" + other.Key}, "mqtt.tls.key"},
		{[]string{"--amqp.listen=127.0.0.1:0", "--amqp.tls.listen=127.0.0.1:0", "--amqp.tls.cert=" + f.files.Cert, "--amqp.tls.key=" + f.files.Key, "--amqp.tls.clientAuth=require"}, "amqp.tls.clientCA"},
		{[]string{"--mqtt.tls.clientAuth=sometimes"}, "mqtt.tls.clientAuth"},
		{[]string{"--admin.tls.key=" + f.files.Key}, "admin.tls.cert"},
		{[]string{"--amqp.listen=", "--amqp.tls.listen=127.0.0.1:0"}, "amqp.listen"},
	} {
		_, err := LoadConfig(append([]string{"--data.dir=" + t.TempDir()}, tc.args...), nil, io.Discard)
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Key != tc.key {
			t.Errorf("%v: %v, want a ConfigError on %s", tc.args, err, tc.key)
		}
	}
}

// SIGHUP (as Run receives it) reloads the users file and the TLS files
// and logs the outcome: the new certificate and users at info, a broken
// file at error naming the key.
func TestSIGHUPReloads(t *testing.T) {
	f := newTLSFixture(t)
	users := writeUsers(t, filepath.Join(f.dir, "users.yaml"), "alice")
	var log coretest.SyncBuffer
	g := New(testConfig(t, append(f.args("none"), "--auth.file="+users)...), slog.New(slog.NewTextHandler(&log, nil)))
	if err := g.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer g.Stop(context.Background())
	ctx, cancel := context.WithCancel(context.Background())
	hup := make(chan os.Signal)
	done := make(chan struct{})
	go func() { g.serveSignals(ctx, hup); close(done) }()
	defer func() { cancel(); <-done }()

	next := f.ca.Server(t)
	tlstest.Write(t, f.dir, next, f.ca)
	writeUsers(t, users, "bob")
	hup <- syscall.SIGHUP
	coretest.Eventually(t, "the reload to be logged", 10*time.Second, func() bool {
		return strings.Contains(log.String(), `msg="reload done" users=reloaded tls.sections=2 failed=0`)
	})
	if canLogIn(g, "alice") || !canLogIn(g, "bob") {
		t.Error("after SIGHUP: want bob and not alice in the users in force")
	}
	_, conn, err := mqttTLS(t, g.MQTTTLSAddr(), "hup", tlstest.ClientConfig(f.ca, nil))
	if err != nil {
		t.Fatal(err)
	}
	if s := conn.ConnectionState().PeerCertificates[0].SerialNumber; s.Cmp(next.Leaf.SerialNumber) != 0 {
		t.Errorf("after SIGHUP a new connection saw serial %v, want %v", s, next.Leaf.SerialNumber)
	}
	if err := os.Remove(f.files.Cert); err != nil {
		t.Fatal(err)
	}
	hup <- syscall.SIGHUP
	coretest.Eventually(t, "the failed reload to be logged naming the key", 10*time.Second, func() bool {
		return strings.Contains(log.String(), "level=ERROR") && strings.Contains(log.String(), "mqtt.tls.cert")
	})
}

// tls.watch: a rotation of a listener's files is picked up without a
// signal, even when the certificate is written before its key (the pair
// does not load until both are there, and the old one stays in use in
// between); a connection from before the rotation stays up.
func TestTLSWatchReloadsRotatedFiles(t *testing.T) {
	f := newTLSFixture(t)
	g := startGateway(t, append(f.args("none"), "--tls.watch=20ms")...)
	cfg := tlstest.ClientConfig(f.ca, nil)
	serial := func() string {
		conn, err := tls.Dial("tcp", g.MQTTTLSAddr(), cfg)
		if err != nil {
			t.Fatalf("TLS dial: %v", err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber.String()
	}
	live, err := tls.Dial("tcp", g.MQTTTLSAddr(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	old := f.server.Leaf.SerialNumber.String()
	if s := serial(); s != old {
		t.Fatalf("serial %s before the rotation, want %s", s, old)
	}

	next := f.ca.Server(t)
	if err := os.WriteFile(f.files.Cert, next.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	// Certificate new, key old: the pair does not load; the old one serves.
	time.Sleep(100 * time.Millisecond) // five checks of tls.watch; what is asserted holds whatever the timing
	if s := serial(); s != old {
		t.Fatalf("serial %s with only the certificate rotated, want the old %s", s, old)
	}
	if err := os.WriteFile(f.files.Key, next.KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	want := next.Leaf.SerialNumber.String()
	coretest.Eventually(t, "the rotated pair to be served", 10*time.Second, func() bool { return serial() == want })
	// The connection made before the rotation is still there.
	if err := live.SetReadDeadline(time.Now().Add(50 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if _, err := live.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the connection from before the rotation: %v, want it open (a read time-out)", err)
	}
}
