package amqp

import (
	"crypto/tls"
	"io"
	"net"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"

	"github.com/tolsey/tolsey/amqp/internal/frames"
	"github.com/tolsey/tolsey/core/tlsconf/tlstest"
)

// upgradeTLS is a server TLS configuration signed by a test CA that also
// verifies client certificates when sent.
func upgradeTLS(t testing.TB) (*tlstest.CA, *tls.Config) {
	t.Helper()
	ca := tlstest.NewCA(t, "test CA")
	return ca, &tls.Config{
		Certificates: []tls.Certificate{ca.Server(t).TLS},
		ClientCAs:    ca.Pool(),
		ClientAuth:   tls.VerifyClientCertIfGiven,
		MinVersion:   tls.VersionTLS12,
	}
}

// headerFirst sends the TLS header in one write with the ClientHello and
// reads the server's header before handing the stream to TLS: a client
// that pipelines, as [5.2.1] allows, whose ClientHello the server reads in
// the same segment as the header.
type headerFirst struct {
	net.Conn
	t       *testing.T
	read    bool
	written bool
}

func (h *headerFirst) Write(p []byte) (int, error) {
	if !h.written {
		h.written = true
		b := frames.HeaderTLS.Bytes()
		if _, err := h.Conn.Write(append(b[:], p...)); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	return h.Conn.Write(p)
}

func (h *headerFirst) Read(p []byte) (int, error) {
	if !h.read {
		h.read = true
		var b [8]byte
		if _, err := io.ReadFull(h.Conn, b[:]); err != nil {
			return 0, err
		}
		if b != frames.HeaderTLS.Bytes() {
			h.t.Errorf("server answered the TLS header with %q, want it back", b[:])
		}
	}
	return h.Conn.Read(p)
}

// upgrade opens a connection to addr and upgrades it to TLS with the TLS
// protocol header, presenting cfg's client certificate if any. Pipelined,
// the ClientHello goes right behind the header; otherwise after the
// server's answer. go-amqp 1.7 cannot do this itself (its TLS negotiation
// is never switched on), hence the raw socket and amqp.NewConn over it.
func upgrade(t *testing.T, addr string, cfg *tls.Config, pipelined bool) *tls.Conn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	var under net.Conn = &headerFirst{Conn: nc, t: t}
	if !pipelined {
		h := frames.HeaderTLS.Bytes()
		if _, err := nc.Write(h[:]); err != nil {
			t.Fatal(err)
		}
		var got [8]byte
		if _, err := io.ReadFull(nc, got[:]); err != nil || got != h {
			t.Fatalf("answer to the TLS header: %q %v, want %q", got[:], err, h[:])
		}
		under = nc
	}
	tc := tls.Client(under, cfg)
	if err := tc.Handshake(); err != nil {
		t.Fatalf("pipelined %v: TLS handshake: %v", pipelined, err)
	}
	_ = nc.SetDeadline(time.Time{})
	return tc
}

// TestTLSUpgrade: on the plain port, the TLS protocol header is answered
// with itself and a TLS handshake (AMQP 1.0 §5.2.1); inside TLS the SASL
// and AMQP headers follow as usual, and a go-amqp connection over the
// upgraded stream logs in with PLAIN and sends and receives, with the
// ClientHello pipelined behind the header or not.
func TestTLSUpgrade(t *testing.T) {
	ca, cfg := upgradeTLS(t)
	e := authEnv(t, false, "", func(o *Options) { o.TLS = cfg })
	for _, pipelined := range []bool{false, true} {
		tc := upgrade(t, e.addr, tlstest.ClientConfig(ca, nil), pipelined)
		c, err := goamqp.NewConn(ctx5(t), tc, &goamqp.ConnOptions{SASLType: goamqp.SASLTypePlain("alice", "secret")})
		if err != nil {
			t.Fatalf("pipelined %v: AMQP over the upgraded stream: %v", pipelined, err)
		}
		s, err := c.NewSession(ctx5(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		r := newReceiver(t, s, "up/t", nil)
		send(t, newSender(t, s, "up/t", nil), &goamqp.Message{Data: [][]byte{[]byte("over tls")}})
		if got := body(receive(t, r)); got != "over tls" {
			t.Errorf("received %q", got)
		}
		c.Close()
	}
}

// TestTLSUpgradeExternal: after the upgrade, SASL EXTERNAL logs in with
// the client certificate as on amqp.tls.listen; an unknown certificate is
// refused.
func TestTLSUpgradeExternal(t *testing.T) {
	ca, cfg := upgradeTLS(t)
	e := authEnv(t, false, "", func(o *Options) { o.TLS = cfg })
	tc := upgrade(t, e.addr, tlstest.ClientConfig(ca, ca.Client(t, "device-7")), false)
	c, err := goamqp.NewConn(ctx5(t), tc, &goamqp.ConnOptions{SASLType: goamqp.SASLTypeExternal("")})
	if err != nil {
		t.Fatalf("EXTERNAL after the TLS upgrade: %v", err)
	}
	c.Close()
	tc = upgrade(t, e.addr, tlstest.ClientConfig(ca, ca.Client(t, "nobody")), false)
	if c, err := goamqp.NewConn(ctx5(t), tc, &goamqp.ConnOptions{SASLType: goamqp.SASLTypeExternal("")}); err == nil {
		c.Close()
		t.Error("EXTERNAL with an unknown certificate: connected")
	}
}

// TestTLSUpgradeRefused: without TLS configured, or inside TLS already
// (amqp.tls.listen), the TLS header is a header we do not speak: the
// server answers the one the client may use (SASL, anonymous access being
// off) and closes the connection [2.2].
func TestTLSUpgradeRefused(t *testing.T) {
	plain := authEnv(t, false, "")
	ca, cfg := upgradeTLS(t)
	withTLS := authEnv(t, false, "", func(o *Options) {
		o.TLSListen = "127.0.0.1:0"
		o.TLS = cfg
	})
	dialTLS := func() net.Conn {
		c, err := tls.Dial("tcp", withTLS.srv.TLSAddr(), tlstest.ClientConfig(ca, nil))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	dialPlain := func() net.Conn {
		c, err := net.Dial("tcp", plain.addr)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	for name, dial := range map[string]func() net.Conn{"no TLS configured": dialPlain, "inside TLS": dialTLS} {
		nc := dial()
		_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
		h := frames.HeaderTLS.Bytes()
		if _, err := nc.Write(h[:]); err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(nc)
		if err != nil {
			t.Errorf("%s: %v, want the connection closed", name, err)
		}
		if want := frames.HeaderSASL.Bytes(); string(got) != string(want[:]) {
			t.Errorf("%s: got %q, want the SASL header and the end", name, got)
		}
		nc.Close()
	}
}
