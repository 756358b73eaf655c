package auth

import (
	"context"
	"errors"
)

// Credentials are what a client presented to log in, as an identity
// service outside the users file may want them (docs/security.md, "HTTP
// auth hook").
type Credentials struct {
	Username string
	Password string
	// ClientID is the MQTT client identifier; "" for AMQP, whose
	// container-id arrives in open, after SASL.
	ClientID string
	Protocol string // "mqtt" or "amqp"
	// CertSubject is the subject of the TLS client certificate, when the
	// handshake verified one against the client CA; "" otherwise.
	CertSubject string
	RemoteAddr  string
}

// Authenticator checks the credentials of users the users file does not
// name (the HTTP auth hook, core/auth/httpauth). Authenticate runs on the
// connecting client's own goroutine, so it may block on the network
// (within its own time-out) without holding up any other client. It
// returns ErrDenied when the service said no and an error wrapping
// ErrUnavailable when it gave no answer: a caller never lets a client in on
// an error.
type Authenticator interface {
	Authenticate(ctx context.Context, cr Credentials) (Identity, error)
}

// Errors of an Authenticator.
var (
	// ErrDenied: the identity service refused the credentials. Front-ends
	// answer it as they answer a bad password.
	ErrDenied = errors.New("auth: denied by the identity service")
	// ErrUnavailable: the identity service could not be asked (down, slow,
	// an answer that is neither yes nor no). Front-ends answer "server
	// unavailable" (MQTT 5 0x88, 3.1.1 return code 3, AMQP sasl-outcome
	// sys-temp), so a client retries later rather than thinking its
	// password wrong.
	ErrUnavailable = errors.New("auth: identity service unavailable")
)

// Authenticate checks cr against st, the Store in force that the caller
// loaded (one Store for the whole check), and, for a user st does not
// name, against l.External. Users of the file win: a name the file knows
// is never sent to the identity service, whatever its password.
func (l *Live) Authenticate(ctx context.Context, st *Store, cr Credentials) (Identity, error) {
	if l.External != nil {
		if _, known := st.Lookup(cr.Username); !known {
			return l.External.Authenticate(ctx, cr)
		}
	}
	return st.Authenticate(cr.Username, cr.Password)
}
