package amqp

import (
	"crypto/tls"
	"fmt"
	"sync"
	"testing"

	goamqp "github.com/Azure/go-amqp"
	dto "github.com/prometheus/client_model/go"

	"github.com/tolsey/tolsey/amqp/internal/encoding"
	"github.com/tolsey/tolsey/amqp/internal/frames"
	"github.com/tolsey/tolsey/core/auth"
	"github.com/tolsey/tolsey/core/auth/scramtest"
	"github.com/tolsey/tolsey/core/tlsconf/tlstest"
)

// authEnv starts a server whose Options.Auth holds users (alice: PLAIN and
// SCRAM "secret", groups devices; device-7: a certificate identity) and
// acl, with anonymous access as anon says.
func authEnv(t *testing.T, anon bool, acl string, mods ...func(*Options)) *env {
	t.Helper()
	st := usersStore(t, usersYAML(t)+acl)
	live := &auth.Live{AllowAnonymous: anon}
	live.Swap(st)
	return startServer(t, append([]func(*Options){func(o *Options) {
		o.Auth = live
		o.Users = map[string]string{"legacy": "x"} // replaced by Auth
	}}, mods...)...)
}

// usersYAML is the users section authEnv serves. Its hashes are made once
// per run: a reload of a file whose hash changed closes the user's
// connections (revoke.go).
func usersYAML(t *testing.T) string {
	t.Helper()
	testUsersOnce.Do(func() {
		pw, err := auth.HashBcrypt("secret", 4)
		if err != nil {
			panic(err)
		}
		cred, err := auth.NewScramCredential("secret", 4096)
		if err != nil {
			panic(err)
		}
		testUsers = fmt.Sprintf("users:\n  - {name: alice, password: %q, scram: %q, groups: [devices]}\n  - {name: device-7, password: %q}\n", pw, cred, pw)
	})
	return testUsers
}

var (
	testUsersOnce sync.Once
	testUsers     string
)

func usersStore(t *testing.T, file string) *auth.Store {
	t.Helper()
	st, err := auth.Parse([]byte(file))
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func (e *env) authFailures(reason string) float64 {
	var m dto.Metric
	if err := e.metrics.AuthFailures.WithLabelValues("amqp", reason).Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}

func TestAuthPlainAndAnonymous(t *testing.T) {
	e := authEnv(t, false, "")
	ctx := ctx5(t)
	c, err := goamqp.Dial(ctx, "amqp://"+e.addr, &goamqp.ConnOptions{SASLType: goamqp.SASLTypePlain("alice", "secret")})
	if err != nil {
		t.Fatalf("good PLAIN: %v", err)
	}
	c.Close()
	for _, tc := range []struct {
		name   string
		o      *goamqp.ConnOptions
		reason string
	}{
		{"bad password", &goamqp.ConnOptions{SASLType: goamqp.SASLTypePlain("alice", "wrong")}, "bad_password"},
		{"unknown user", &goamqp.ConnOptions{SASLType: goamqp.SASLTypePlain("mallory", "secret")}, "unknown_user"},
		{"Options.Users is replaced", &goamqp.ConnOptions{SASLType: goamqp.SASLTypePlain("legacy", "x")}, "unknown_user"},
		// go-amqp gives up itself on a mechanism not offered: nothing to count.
		{"anonymous", &goamqp.ConnOptions{SASLType: goamqp.SASLTypeAnonymous()}, ""},
		{"EXTERNAL without TLS", &goamqp.ConnOptions{SASLType: goamqp.SASLTypeExternal("")}, ""},
		{"no SASL", &goamqp.ConnOptions{}, "anonymous"},
	} {
		before := e.authFailures(tc.reason)
		if c, err := goamqp.Dial(ctx, "amqp://"+e.addr, tc.o); err == nil {
			c.Close()
			t.Errorf("%s: connected, want refused", tc.name)
		}
		if got := e.authFailures(tc.reason); tc.reason != "" && got != before+1 {
			t.Errorf("%s: tolsey_auth_failures_total{reason=%q} = %v, want %v", tc.name, tc.reason, got, before+1)
		}
	}

	// Allowed anonymous access: both ways in.
	e = authEnv(t, true, "")
	for _, o := range []*goamqp.ConnOptions{{SASLType: goamqp.SASLTypeAnonymous()}, {}} {
		c, err := goamqp.Dial(ctx, "amqp://"+e.addr, o)
		if err != nil {
			t.Fatalf("anonymous allowed: %v", err)
		}
		c.Close()
	}
}

// TestAuthMechanisms: what is offered depends on the users file and the
// transport; a failed exchange answers code auth and closes.
func TestAuthMechanisms(t *testing.T) {
	e := authEnv(t, false, "")
	c := rawDial(t, e.addr)
	c.header(frames.HeaderSASL)
	c.readHeader()
	m := expectFrame[*frames.SASLMechanisms](c)
	if got := fmt.Sprint(m.SASLServerMechanisms); got != "[SCRAM-SHA-256 PLAIN]" {
		t.Errorf("mechanisms on plain TCP without anonymous access: %s", got)
	}
	c.send(0, &frames.SASLInit{Mechanism: "PLAIN", InitialResponse: []byte("\x00alice\x00nope")}, nil)
	if o := expectFrame[*frames.SASLOutcome](c); o.Code != frames.SASLCodeAuth {
		t.Fatalf("bad password: code %d, want auth (1)", o.Code)
	}
	c.expectEOF()
	// Mechanisms not offered, chosen anyway.
	for _, mech := range []encoding.Symbol{"ANONYMOUS", "EXTERNAL", "DIGEST-MD5"} {
		c := rawDial(t, e.addr)
		c.header(frames.HeaderSASL)
		c.readHeader()
		expectFrame[*frames.SASLMechanisms](c)
		c.send(0, &frames.SASLInit{Mechanism: mech}, nil)
		if o := expectFrame[*frames.SASLOutcome](c); o.Code != frames.SASLCodeAuth {
			t.Fatalf("%s: code %d, want auth (1)", mech, o.Code)
		}
		c.expectEOF()
	}
}

// TestAuthScram: SCRAM-SHA-256 over raw frames; the server-final message
// comes in the successful outcome's additional-data, as Qpid JMS reads it.
func TestAuthScram(t *testing.T) {
	e := authEnv(t, false, "")
	for _, tc := range []struct {
		user, password string
		ok             bool
	}{{"alice", "secret", true}, {"alice", "wrong", false}, {"mallory", "secret", false}} {
		c := rawDial(t, e.addr)
		c.header(frames.HeaderSASL)
		c.readHeader()
		expectFrame[*frames.SASLMechanisms](c)
		cl := &scramtest.Client{User: tc.user, Password: tc.password, Nonce: "rOprNGfwEbeRWgbNEkqO"}
		c.send(0, &frames.SASLInit{Mechanism: "SCRAM-SHA-256", InitialResponse: []byte(cl.First())}, nil)
		ch := expectFrame[*frames.SASLChallenge](c)
		final, err := cl.Final(string(ch.Challenge))
		if err != nil {
			t.Fatal(err)
		}
		c.send(0, &frames.SASLResponse{Response: []byte(final)}, nil)
		o := expectFrame[*frames.SASLOutcome](c)
		if !tc.ok {
			if o.Code != frames.SASLCodeAuth {
				t.Errorf("%s/%s: code %d, want auth (1)", tc.user, tc.password, o.Code)
			}
			c.expectEOF()
			continue
		}
		if o.Code != frames.SASLCodeOK {
			t.Fatalf("%s: code %d, want ok", tc.user, o.Code)
		}
		if got, want := string(o.AdditionalData), cl.ServerFinal(); got != want {
			t.Fatalf("additional-data %q, want server-final %q", got, want)
		}
		c.open(nil) // the AMQP header and open, as alice
	}
}

// TestAuthExternal: the verified client certificate's CN is the user; a
// certificate naming no user, or none at all, is refused.
func TestAuthExternal(t *testing.T) {
	ca := tlstest.NewCA(t, "test CA")
	srvCert := ca.Server(t)
	cfg := &tls.Config{
		Certificates: []tls.Certificate{srvCert.TLS},
		ClientCAs:    ca.Pool(),
		ClientAuth:   tls.VerifyClientCertIfGiven,
		MinVersion:   tls.VersionTLS12,
	}
	e := authEnv(t, false, "", func(o *Options) {
		o.TLSListen = "127.0.0.1:0"
		o.TLS = cfg
	})
	ctx := ctx5(t)
	url := "amqps://" + e.srv.TLSAddr()
	c, err := goamqp.Dial(ctx, url, &goamqp.ConnOptions{SASLType: goamqp.SASLTypeExternal(""), TLSConfig: tlstest.ClientConfig(ca, ca.Client(t, "device-7"))})
	if err != nil {
		t.Fatalf("EXTERNAL with device-7's certificate: %v", err)
	}
	c.Close()
	for _, tc := range []struct {
		name string
		cert *tlstest.Cert
	}{{"unknown CN", ca.Client(t, "nobody")}, {"no certificate", nil}} {
		if c, err := goamqp.Dial(ctx, url, &goamqp.ConnOptions{SASLType: goamqp.SASLTypeExternal(""), TLSConfig: tlstest.ClientConfig(ca, tc.cert)}); err == nil {
			c.Close()
			t.Errorf("%s: connected, want refused", tc.name)
		}
	}
	// PLAIN still works inside TLS.
	c, err = goamqp.Dial(ctx, url, &goamqp.ConnOptions{SASLType: goamqp.SASLTypePlain("alice", "secret"), TLSConfig: tlstest.ClientConfig(ca, nil)})
	if err != nil {
		t.Fatalf("PLAIN over TLS: %v", err)
	}
	c.Close()
}
