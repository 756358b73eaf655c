// Package tlsconf builds the gateway's server-side TLS configuration from
// PEM files and re-reads them on demand (Reload, called on SIGHUP), so a
// rotated certificate (Let's Encrypt, cert-manager) takes effect without a
// restart and without dropping anyone: a handshake reads the certificate and
// client CA pool current at that moment, and an established connection keeps
// the session it negotiated.
//
// It sits under core/ for the reason core/accept does (docs/architecture.md,
// "Why core/metrics sits in core/"): the MQTT and AMQP front-ends and the
// admin API all terminate TLS, may not import each other, and must not
// reach up into gateway. It imports only the standard library, and the core
// proper never imports it.
package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
)

// ClientAuth values: what a listener asks of a client's certificate.
const (
	ClientAuthNone    = "none"    // none asked for
	ClientAuthRequest = "request" // asked for; one sent is verified against ClientCA, none is fine
	ClientAuthRequire = "require" // required and verified against ClientCA
)

// Options name the files of one listener's TLS configuration.
type Options struct {
	Cert     string // PEM certificate chain, leaf first; required
	Key      string // PEM private key of Cert; required
	ClientCA string // PEM CAs that sign client certificates; required with ClientAuthRequire
	// ClientAuth is none (the default when empty), request or require.
	ClientAuth string
}

// Error is a bad option or file. Field is the option it is about (cert,
// key, clientCA, clientAuth) so that the caller can name its own key
// (mqtt.tls.cert).
type Error struct {
	Field string
	Err   error
}

func (e *Error) Error() string { return e.Field + ": " + e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// Config holds one listener's current certificate and client CA pool.
// TLSConfig, Reload and the handshakes it serves may run on any goroutine.
type Config struct {
	opts Options
	auth tls.ClientAuthType
	base *tls.Config // never changed after Load; each handshake clones it

	reloadMu sync.Mutex // one Reload at a time: the files are read in order
	cur      atomic.Pointer[material]
}

// material is what a reload replaces, as one value, so that a handshake
// never pairs the new certificate with the old CA pool.
type material struct {
	cert *tls.Certificate
	pool *x509.CertPool // nil without ClientCA
}

// Load reads the files and checks them: every file readable, the key
// matching the certificate, ClientCA present when ClientAuth is require.
// The error is an *Error naming the option.
func Load(o Options) (*Config, error) {
	c := &Config{opts: o}
	switch o.ClientAuth {
	case "", ClientAuthNone:
		c.auth = tls.NoClientCert
	case ClientAuthRequest:
		// Verified if sent: a client that presents a certificate of an
		// unknown CA is refused, one that presents none is let in.
		c.auth = tls.VerifyClientCertIfGiven
	case ClientAuthRequire:
		c.auth = tls.RequireAndVerifyClientCert
		if o.ClientCA == "" {
			return nil, &Error{Field: "clientCA", Err: errors.New("required with clientAuth require (the CAs client certificates are checked against)")}
		}
	default:
		return nil, &Error{Field: "clientAuth", Err: fmt.Errorf("%q is not one of none, request, require", o.ClientAuth)}
	}
	if o.Cert == "" {
		return nil, &Error{Field: "cert", Err: errors.New("required")}
	}
	if o.Key == "" {
		return nil, &Error{Field: "key", Err: errors.New("required")}
	}
	m, err := read(o)
	if err != nil {
		return nil, err
	}
	c.cur.Store(m)
	c.base = &tls.Config{
		// TLS 1.0 and 1.1 are deprecated (RFC 8996). Go negotiates 1.3
		// whenever the client offers it; its default TLS 1.2 suites are
		// ECDHE only, AEAD first (no RC4, 3DES, CBC-SHA256 or static RSA
		// key exchange), so CipherSuites is left at Go's default and
		// improves with it.
		MinVersion: tls.VersionTLS12,
	}
	return c, nil
}

// read loads the certificate, its key and the client CA pool.
func read(o Options) (*material, error) {
	certPEM, err := os.ReadFile(o.Cert)
	if err != nil {
		return nil, &Error{Field: "cert", Err: unwrapPath(err)}
	}
	keyPEM, err := os.ReadFile(o.Key)
	if err != nil {
		return nil, &Error{Field: "key", Err: unwrapPath(err)}
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		// X509KeyPair does not say which file is wrong; a certificate
		// that parses alone puts the blame on the key.
		field := "cert"
		if x509.NewCertPool().AppendCertsFromPEM(certPEM) {
			field = "key"
		}
		return nil, &Error{Field: field, Err: fmt.Errorf("%s with %s: %w", o.Cert, o.Key, err)}
	}
	m := &material{cert: &cert}
	if o.ClientCA != "" {
		caPEM, err := os.ReadFile(o.ClientCA)
		if err != nil {
			return nil, &Error{Field: "clientCA", Err: unwrapPath(err)}
		}
		m.pool = x509.NewCertPool()
		if !m.pool.AppendCertsFromPEM(caPEM) {
			return nil, &Error{Field: "clientCA", Err: fmt.Errorf("%s holds no PEM certificate", o.ClientCA)}
		}
	}
	return m, nil
}

// unwrapPath keeps "open server.pem: no such file" readable without the
// *PathError's op repeated by the caller.
func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("cannot read %s: %w", pe.Path, pe.Err)
	}
	return err
}

// Reload re-reads the files. On an error the configuration in use stays
// as it was (new handshakes keep getting the old certificate) and the error,
// an *Error naming the option, is returned for the caller to log.
// Established connections are never touched either way.
func (c *Config) Reload() error {
	c.reloadMu.Lock()
	defer c.reloadMu.Unlock()
	m, err := read(c.opts)
	if err != nil {
		return err
	}
	c.cur.Store(m)
	return nil
}

// Certificate is the certificate new handshakes present.
func (c *Config) Certificate() *tls.Certificate { return c.cur.Load().cert }

// TLSConfig returns the configuration a listener serves with
// (tls.NewListener, tls.Server). Every handshake reads the certificate and
// client CA pool current at that moment, through GetConfigForClient.
func (c *Config) TLSConfig() *tls.Config {
	t := c.base.Clone()
	t.GetConfigForClient = c.forClient
	return t
}

// forClient is the configuration of one handshake: the current material,
// read once, so certificate and CA pool come from the same reload.
func (c *Config) forClient(*tls.ClientHelloInfo) (*tls.Config, error) {
	m := c.cur.Load()
	t := c.base.Clone()
	t.Certificates = []tls.Certificate{*m.cert}
	t.ClientAuth = c.auth
	t.ClientCAs = m.pool
	return t, nil
}
