package tlsconf_test

import (
	"crypto/tls"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/tolsey/tolsey/core/tlsconf"
	"github.com/tolsey/tolsey/core/tlsconf/tlstest"
)

// serve accepts TLS connections on 127.0.0.1:0 with c and echoes; the
// server side's handshake error of each connection goes to errs.
func serve(t *testing.T, c *tlsconf.Config) (addr string, errs chan error) {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", c.TLSConfig())
	if err != nil {
		t.Fatal(err)
	}
	errs = make(chan error, 16)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer nc.Close()
				err := nc.(*tls.Conn).Handshake()
				errs <- err
				if err == nil {
					_, _ = io.Copy(nc, nc)
				}
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	return ln.Addr().String(), errs
}

// dial handshakes and round-trips a byte, so that a client refused after
// the handshake (TLS 1.3 sends the refusal of a client certificate after
// the client's Finished) sees the refusal.
func dial(addr string, cfg *tls.Config) (*tls.Conn, error) {
	c, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		return nil, err
	}
	if _, err := c.Write([]byte{1}); err != nil {
		c.Close()
		return nil, err
	}
	if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func load(t *testing.T, o tlsconf.Options) *tlsconf.Config {
	t.Helper()
	c, err := tlsconf.Load(o)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestHandshakeAndClientAuth(t *testing.T) {
	ca, other := tlstest.NewCA(t, "ca"), tlstest.NewCA(t, "other")
	f := tlstest.Write(t, t.TempDir(), ca.Server(t), ca)
	good, stranger := ca.Client(t, "dev1"), other.Client(t, "dev2")

	for _, tc := range []struct {
		auth   string
		client *tlstest.Cert
		ok     bool
	}{
		{tlsconf.ClientAuthNone, nil, true},
		{tlsconf.ClientAuthRequest, nil, true},
		{tlsconf.ClientAuthRequest, good, true},
		{tlsconf.ClientAuthRequest, stranger, false},
		{tlsconf.ClientAuthRequire, nil, false},
		{tlsconf.ClientAuthRequire, good, true},
		{tlsconf.ClientAuthRequire, stranger, false},
	} {
		c := load(t, tlsconf.Options{Cert: f.Cert, Key: f.Key, ClientCA: f.CA, ClientAuth: tc.auth})
		addr, errs := serve(t, c)
		conn, err := dial(addr, tlstest.ClientConfig(ca, tc.client))
		if conn != nil {
			conn.Close()
		}
		if (err == nil) != tc.ok {
			t.Errorf("clientAuth %s with client cert %v: err %v, want ok=%v", tc.auth, tc.client != nil, err, tc.ok)
		}
		if serr := <-errs; (serr == nil) != tc.ok {
			t.Errorf("clientAuth %s with client cert %v: server saw %v", tc.auth, tc.client != nil, serr)
		}
	}
}

// TLS 1.0 and 1.1 are refused (RFC 8996); a client that offers 1.3 gets it.
func TestVersions(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	f := tlstest.Write(t, t.TempDir(), ca.Server(t), ca)
	addr, _ := serve(t, load(t, tlsconf.Options{Cert: f.Cert, Key: f.Key}))
	for _, v := range []uint16{tls.VersionTLS10, tls.VersionTLS11} {
		cfg := tlstest.ClientConfig(ca, nil)
		cfg.MinVersion, cfg.MaxVersion = v, v
		if c, err := dial(addr, cfg); err == nil {
			c.Close()
			t.Errorf("a client at most %s connected", tls.VersionName(v))
		}
	}
	c, err := dial(addr, tlstest.ClientConfig(ca, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if v := c.ConnectionState().Version; v != tls.VersionTLS13 {
		t.Errorf("negotiated %s, want TLS 1.3", tls.VersionName(v))
	}
	cfg := tlstest.ClientConfig(ca, nil)
	cfg.MaxVersion = tls.VersionTLS12
	c12, err := dial(addr, cfg)
	if err != nil {
		t.Fatalf("TLS 1.2 client: %v", err)
	}
	c12.Close()
}

// Reload: new handshakes get the new certificate, a connection made before
// keeps working; a broken file keeps the old certificate and names the option.
func TestReload(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	dir := t.TempDir()
	first := ca.Server(t)
	f := tlstest.Write(t, dir, first, ca)
	c := load(t, tlsconf.Options{Cert: f.Cert, Key: f.Key})
	addr, _ := serve(t, c)

	old, err := dial(addr, tlstest.ClientConfig(ca, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()

	second := ca.Server(t)
	tlstest.Write(t, dir, second, ca)
	if err := c.Reload(); err != nil {
		t.Fatal(err)
	}
	fresh, err := dial(addr, tlstest.ClientConfig(ca, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	if got := fresh.ConnectionState().PeerCertificates[0].SerialNumber; got.Cmp(second.Leaf.SerialNumber) != 0 {
		t.Errorf("after Reload a new connection saw serial %v, want %v", got, second.Leaf.SerialNumber)
	}
	if _, err := old.Write([]byte{2}); err != nil {
		t.Fatalf("established connection after Reload: %v", err)
	}
	if _, err := io.ReadFull(old, make([]byte, 1)); err != nil {
		t.Fatalf("established connection after Reload: %v", err)
	}

	// A truncated key: Reload fails naming the key, the second certificate stays.
	if err := os.WriteFile(f.Key, second.KeyPEM[:20], 0o600); err != nil {
		t.Fatal(err)
	}
	err = c.Reload()
	var te *tlsconf.Error
	if !errors.As(err, &te) || te.Field != "key" {
		t.Fatalf("Reload with a broken key: %v, want an error naming key", err)
	}
	again, err := dial(addr, tlstest.ClientConfig(ca, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if got := again.ConnectionState().PeerCertificates[0].SerialNumber; got.Cmp(second.Leaf.SerialNumber) != 0 {
		t.Errorf("after a failed Reload a new connection saw serial %v, want the old %v", got, second.Leaf.SerialNumber)
	}
}

func TestLoadErrors(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	dir := t.TempDir()
	f := tlstest.Write(t, dir, ca.Server(t), ca)
	otherKey := filepath.Join(dir, "other.key")
	if err := os.WriteFile(otherKey, ca.Server(t).KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.pem")
	for _, tc := range []struct {
		name  string
		o     tlsconf.Options
		field string
		msg   string
	}{
		{"missing cert", tlsconf.Options{Cert: missing, Key: f.Key}, "cert", "missing.pem"},
		{"missing key", tlsconf.Options{Cert: f.Cert, Key: missing}, "key", "missing.pem"},
		{"no cert", tlsconf.Options{Key: f.Key}, "cert", "required"},
		{"key of another cert", tlsconf.Options{Cert: f.Cert, Key: otherKey}, "key", "does not match"},
		{"key as cert", tlsconf.Options{Cert: f.Key, Key: f.Key}, "cert", ""},
		{"require without CA", tlsconf.Options{Cert: f.Cert, Key: f.Key, ClientAuth: "require"}, "clientCA", "require"},
		{"missing CA", tlsconf.Options{Cert: f.Cert, Key: f.Key, ClientCA: missing, ClientAuth: "request"}, "clientCA", "missing.pem"},
		{"CA not PEM", tlsconf.Options{Cert: f.Cert, Key: f.Key, ClientCA: f.Key}, "clientCA", "no PEM certificate"},
		{"bad clientAuth", tlsconf.Options{Cert: f.Cert, Key: f.Key, ClientAuth: "always"}, "clientAuth", "always"},
	} {
		_, err := tlsconf.Load(tc.o)
		var te *tlsconf.Error
		if !errors.As(err, &te) || te.Field != tc.field || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: %v, want an error on %s saying %q", tc.name, err, tc.field, tc.msg)
		}
	}
}
