package auth

import (
	"crypto/x509"
	"fmt"
)

// CertField is the field of a verified client certificate that names its
// user (auth.certIdentity): MQTT clients that connect without a user name,
// AMQP SASL EXTERNAL.
type CertField uint8

const (
	CertCN       CertField = iota // the subject's common name (the default)
	CertSANDNS                    // the first DNS name of the subject alternative names
	CertSANEmail                  // the first email address of the subject alternative names
)

// ParseCertField reads cn, san-dns or san-email.
func ParseCertField(s string) (CertField, error) {
	switch s {
	case "", "cn":
		return CertCN, nil
	case "san-dns":
		return CertSANDNS, nil
	case "san-email":
		return CertSANEmail, nil
	}
	return 0, fmt.Errorf("%q: want cn, san-dns or san-email", s)
}

func (f CertField) String() string {
	return [...]string{"cn", "san-dns", "san-email"}[f]
}

// Name is the user name cert carries in field f; "" when it has none. The
// first SAN of the kind asked for counts: a certificate naming several
// devices names none of the others.
func (f CertField) Name(cert *x509.Certificate) string {
	switch f {
	case CertSANDNS:
		if len(cert.DNSNames) > 0 {
			return cert.DNSNames[0]
		}
		return ""
	case CertSANEmail:
		if len(cert.EmailAddresses) > 0 {
			return cert.EmailAddresses[0]
		}
		return ""
	}
	return cert.Subject.CommonName
}
