// Package certgen makes certificate authorities and certificates for the
// programs under test/ that are not Go tests (the end-to-end scripts with
// the reference clients, the benchmarks), so that no key is ever committed.
// Go tests use core/tlsconf/tlstest, which reports through testing.TB; this
// one returns errors and lets the caller choose the validity window (an
// expired client certificate is one of the cases the scripts check).
package certgen

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"time"
)

// CA signs certificates.
type CA struct {
	Cert *x509.Certificate
	key  *ecdsa.PrivateKey
	PEM  []byte
}

// Cert is a certificate and its key in PEM.
type Cert struct {
	CertPEM, KeyPEM []byte
}

// Validity is a certificate's NotBefore and NotAfter.
type Validity struct {
	From, Until time.Time
}

// Current is valid from an hour ago (clock skew between the processes of
// one machine is nil, but a certificate made this second must not look
// future to a verifier that truncates) for a day.
func Current() Validity {
	now := time.Now()
	return Validity{From: now.Add(-time.Hour), Until: now.Add(24 * time.Hour)}
}

// Expired ended an hour ago.
func Expired() Validity {
	now := time.Now()
	return Validity{From: now.Add(-48 * time.Hour), Until: now.Add(-time.Hour)}
}

func serial() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, err
	}
	return n.Add(n, big.NewInt(1)), nil
}

// NewCA makes a self-signed ECDSA P-256 CA named name.
func NewCA(name string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	sn, err := serial()
	if err != nil {
		return nil, err
	}
	v := Current()
	tmpl := &x509.Certificate{
		SerialNumber:          sn,
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             v.From,
		NotAfter:              v.Until,
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

// Server issues a server certificate for 127.0.0.1, ::1 and localhost.
func (ca *CA) Server() (*Cert, error) {
	return ca.issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "localhost"},
		DNSNames:    []string{"localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}, Current())
}

// Client issues a client certificate whose subject CN is cn.
func (ca *CA) Client(cn string, v Validity) (*Cert, error) {
	return ca.issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: cn},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, v)
}

func (ca *CA) issue(tmpl *x509.Certificate, v Validity) (*Cert, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	if tmpl.SerialNumber, err = serial(); err != nil {
		return nil, err
	}
	tmpl.NotBefore, tmpl.NotAfter = v.From, v.Until
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, err
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return &Cert{
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}),
	}, nil
}

// Write writes the certificate to certPath and its key (mode 0600) to keyPath.
func (c *Cert) Write(certPath, keyPath string) error {
	if err := os.WriteFile(certPath, c.CertPEM, 0o644); err != nil {
		return err
	}
	return os.WriteFile(keyPath, c.KeyPEM, 0o600)
}
