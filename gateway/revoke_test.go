package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"
	"github.com/eclipse/paho.golang/paho"

	"github.com/tolsey/tolsey/core/auth"
	"github.com/tolsey/tolsey/core/tlsconf/tlstest"
)

func writeFile(t *testing.T, path, text string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// acl.file holds the ACL apart from the users: its rules apply to
// auth.file's users; a broken one stops the start naming acl.file and its
// line (exit 2), and on reload keeps the rules in force; a users file
// that has rules of its own beside it is refused.
func TestACLFile(t *testing.T) {
	dir := t.TempDir()
	users := writeUsers(t, filepath.Join(dir, "users.yaml"), "alice")
	acl := writeFile(t, filepath.Join(dir, "acl.yaml"), "acl:\n  - {allow: [publish], topic: \"a/#\", users: [alice]}\n")
	broken := writeFile(t, filepath.Join(dir, "broken.yaml"), "acl:\n  - {allow: [read], topic: a}\n")
	withRules := writeFile(t, filepath.Join(dir, "users-rules.yaml"), "users: []\ndefault: allow\n")

	wantConfigError(t, []string{"--auth.file=" + users, "--acl.file=" + broken}, nil, "acl.file", broken+": line 2: acl[0].allow")
	wantConfigError(t, []string{"--auth.file=" + users, "--acl.file=" + filepath.Join(dir, "none.yaml")}, nil, "acl.file", "none.yaml")
	wantConfigError(t, []string{"--auth.file=" + withRules, "--acl.file=" + acl}, nil, "acl.file", "keep them in one file")
	wantConfigError(t, []string{"--acl.onRevoke=maybe"}, nil, "acl.onRevoke", "maybe")

	g := startGateway(t, "--auth.file="+users, "--acl.file="+acl)
	may := func(topic string) bool {
		id, ok := g.Auth().Load().Lookup("alice")
		return ok && g.Auth().Load().Allowed(id, "c", auth.Publish, topic)
	}
	if !canLogIn(g, "alice") || !may("a/x") || may("b/x") {
		t.Fatal("the users of auth.file with the rules of acl.file: want alice in, a/x allowed, b/x denied")
	}
	writeFile(t, acl, "acl:\n  - {allow: [publish], topic: \"b/#\", users: [alice]}\n")
	if err := g.Reload(); err != nil {
		t.Fatal(err)
	}
	if may("a/x") || !may("b/x") {
		t.Fatal("after the reload: want b/x allowed, a/x denied")
	}
	writeFile(t, acl, "acl:\n  - {allow: [read], topic: a}\n")
	var ce *ConfigError
	if err := g.Reload(); !errors.As(err, &ce) || ce.Key != "acl.file" || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("reload of a broken acl.file: %v, want a ConfigError on acl.file naming line 2", err)
	}
	if !may("b/x") {
		t.Fatal("a broken acl.file replaced the rules in force")
	}
}

// A reload through the gateway applies acl.onRevoke: with disconnect, an
// MQTT 5 subscriber whose subscription the rewritten acl.file denies gets
// DISCONNECT 0x87.
func TestReloadRevokeDisconnects(t *testing.T) {
	dir := t.TempDir()
	users := writeUsers(t, filepath.Join(dir, "users.yaml"), "alice")
	acl := writeFile(t, filepath.Join(dir, "acl.yaml"), "acl:\n  - {allow: [subscribe], topic: \"feed/#\"}\n")
	g := startGateway(t, "--auth.file="+users, "--acl.file="+acl, "--acl.onRevoke=disconnect")

	conn, err := net.Dial("tcp", g.MQTTAddr())
	if err != nil {
		t.Fatal(err)
	}
	told := make(chan byte, 1)
	c := paho.NewClient(paho.ClientConfig{Conn: conn, OnServerDisconnect: func(d *paho.Disconnect) { told <- d.ReasonCode }})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Connect(ctx, &paho.Connect{ClientID: "alice-1", CleanStart: true, Username: "alice", UsernameFlag: true,
		Password: []byte("alice-pw"), PasswordFlag: true}); err != nil {
		t.Fatal(err)
	}
	defer func() { <-c.Done() }()
	if _, err := c.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "feed/#", QoS: 1}}}); err != nil {
		t.Fatal(err)
	}
	writeFile(t, acl, "acl:\n  - {allow: [subscribe], topic: \"other/#\"}\n")
	if err := g.Reload(); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-told:
		if code != 0x87 {
			t.Fatalf("DISCONNECT %#x, want 0x87", code)
		}
	case <-ctx.Done():
		t.Fatal("no DISCONNECT after the reload denied feed/#")
	}
}

// auth.certIdentity chooses the certificate field that names the user:
// an MQTT client without a user name and an AMQP SASL EXTERNAL login are
// the user of the certificate's first DNS or email SAN; with the default,
// cn, the same certificate names its CN, which is no user here.
func TestCertIdentity(t *testing.T) {
	for _, tc := range []struct {
		field string
		cert  func(*tlstest.CA) *tlstest.Cert
	}{
		{"san-dns", func(ca *tlstest.CA) *tlstest.Cert {
			return ca.ClientSAN(t, "not-a-user", []string{"dev1.plant.example", "dev2.plant.example"}, nil)
		}},
		{"san-email", func(ca *tlstest.CA) *tlstest.Cert {
			return ca.ClientSAN(t, "not-a-user", nil, []string{"dev1.plant.example"})
		}},
	} {
		t.Run(tc.field, func(t *testing.T) {
			f := newTLSFixture(t)
			users := writeUsers(t, filepath.Join(f.dir, "users.yaml"), "dev1.plant.example")
			cert := tc.cert(f.ca)
			args := append(f.args("require"), "--auth.file="+users, "--auth.allowAnonymous=false")
			for _, field := range []string{tc.field, "cn"} {
				g := startGateway(t, append(args, "--auth.certIdentity="+field)...)
				_, _, merr := mqttTLS(t, g.MQTTTLSAddr(), "dev-"+field, tlstest.ClientConfig(f.ca, cert))
				aerr := amqpExternal(t, g.AMQPTLSAddr(), tlstest.ClientConfig(f.ca, cert))
				if want := field != "cn"; (merr == nil) != want || (aerr == nil) != want {
					t.Errorf("auth.certIdentity=%s: MQTT %v, AMQP EXTERNAL %v; want logged in: %v", field, merr, aerr, want)
				}
			}
		})
	}
}

func amqpExternal(t *testing.T, addr string, cfg *tls.Config) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := goamqp.Dial(ctx, "amqps://"+addr, &goamqp.ConnOptions{SASLType: goamqp.SASLTypeExternal(""), TLSConfig: cfg})
	if err == nil {
		c.Close()
	}
	return err
}

// bridge.identity must name a user of auth.file (docs/security.md, "The
// bridge"): an unknown user, or the key without a users file, exits 2
// naming it.
func TestBridgeIdentityConfig(t *testing.T) {
	dir := t.TempDir()
	users := writeUsers(t, filepath.Join(dir, "users.yaml"), "alice")
	wantConfigError(t, []string{"--auth.file=" + users, "--bridge.identity=bob"}, nil, "bridge.identity", `user "bob" is not in auth.file`)
	wantConfigError(t, []string{"--bridge.identity=alice"}, nil, "bridge.identity", "no auth.file")
	if _, err := LoadConfig([]string{"--auth.file=" + users, "--bridge.identity=alice"}, nil, io.Discard); err != nil {
		t.Fatalf("a user of the file: %v", err)
	}
}
