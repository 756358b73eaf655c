package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
)

// VerifiedPeer is the client certificate of c when c is a TLS connection
// (a *tls.Conn, or a connection that upgraded to TLS and says so through
// ConnectionState) whose handshake verified it against the client CA; nil
// otherwise. A certificate only requested and not verified
// (tls.RequestClientCert) names nobody. The handshake must be done.
func VerifiedPeer(c any) *x509.Certificate {
	tc, ok := c.(interface{ ConnectionState() tls.ConnectionState })
	if !ok {
		return nil
	}
	cs := tc.ConnectionState()
	if len(cs.VerifiedChains) == 0 || len(cs.PeerCertificates) == 0 {
		return nil
	}
	return cs.PeerCertificates[0]
}
