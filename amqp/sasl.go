package amqp

import (
	"bytes"
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/tolsey/tolsey/core/auth"
	"github.com/tolsey/tolsey/core/tlsconf"

	"github.com/tolsey/tolsey/amqp/internal/encoding"
	"github.com/tolsey/tolsey/amqp/internal/frames"
)

// The protocol-header exchange and SASL (part 2 section 2.2, part 5
// section 5.3). It runs on the reader goroutine before the writer exists,
// writing straight to the socket. Bytes a client pipelines (Proton and
// go-amqp send the SASL header, sasl-init and the AMQP header without
// waiting) stay buffered in the frames.Reader.

const (
	mechPlain     encoding.Symbol = "PLAIN"
	mechAnonymous encoding.Symbol = "ANONYMOUS"
	mechScram     encoding.Symbol = "SCRAM-SHA-256"
	mechExternal  encoding.Symbol = "EXTERNAL"
)

// handshake negotiates the protocol headers, the TLS upgrade (starttls.go)
// and SASL. On success the AMQP header has been exchanged and the peer's
// open comes next.
func (c *conn) handshake() error {
	h, err := c.r.ReadProtocolHeader()
	if err != nil {
		var he *frames.ProtocolHeaderError
		if !errors.As(err, &he) {
			return err
		}
		if he.Got == frames.HeaderTLS.Bytes() && c.canUpgrade() {
			// TLS first, then the headers again inside it [5.2.1]; once:
			// canUpgrade is false from now on.
			if err := c.startTLS(); err != nil {
				return fmt.Errorf("amqp: TLS upgrade: %w", err)
			}
			return c.handshake()
		}
		c.refuseHeader(he.Got)
		return err
	}
	if h.ProtocolID == frames.ProtocolSASL {
		if err := c.writeHeader(frames.HeaderSASL); err != nil {
			return err
		}
		if err := c.sasl(); err != nil {
			return err
		}
		h, err = c.r.ReadProtocolHeader()
		if err == nil && h.ProtocolID != frames.ProtocolAMQP {
			err = fmt.Errorf("amqp: protocol id %d after SASL, want 0 (AMQP)", h.ProtocolID)
		}
		if err != nil {
			_ = c.writeHeader(frames.HeaderAMQP) // the header we speak, then close [2.2]
			return err
		}
		return c.writeHeader(frames.HeaderAMQP)
	}
	// A bare AMQP header: the client skips SASL (rhea does without a user)
	// and is anonymous.
	if !c.s.anonymousOK() {
		c.s.opts.Metrics.AuthFailure("amqp", "anonymous")
		_ = c.writeHeader(frames.HeaderSASL) // SASL is required
		return errors.New("amqp: client skipped SASL and anonymous access is off")
	}
	return c.writeHeader(frames.HeaderAMQP)
}

// refuseHeader answers a header we do not speak with one we do, as part 2
// section 2.2 asks (the TLS header too, when no TLS is configured or the
// connection is TLS already); the caller then closes the socket.
func (c *conn) refuseHeader(got [8]byte) {
	h := frames.HeaderSASL
	if string(got[:4]) == "AMQP" && got[4] == frames.ProtocolAMQP && c.s.anonymousOK() {
		h = frames.HeaderAMQP
	}
	_ = c.writeHeader(h)
}

func (c *conn) writeHeader(h frames.ProtocolHeader) error {
	b := h.Bytes()
	_, err := c.nc.Write(b[:])
	return err
}

// sasl runs the SASL exchange after the SASL headers: mechanisms, init,
// the mechanism's challenges and responses, outcome. A failure answers
// sasl-outcome code auth after the per-host delay (failDelay; sys-temp at
// once when the HTTP auth hook gave no answer), is counted
// (tolsey_auth_failures_total{protocol="amqp",reason}) and closes the
// socket; the log says which mechanism and why, never with a password.
func (c *conn) sasl() error {
	w := frames.NewWriter(c.nc, 0)
	if err := w.WriteFrame(0, &frames.SASLMechanisms{SASLServerMechanisms: c.mechanisms()}, nil); err != nil {
		return err
	}
	p, err := c.readSASL()
	if err != nil {
		return err
	}
	init, ok := p.(*frames.SASLInit)
	if !ok {
		_ = w.WriteFrame(0, &frames.SASLOutcome{Code: frames.SASLCodeSysPerm}, nil)
		return fmt.Errorf("amqp: got %T, want sasl-init", p)
	}
	ex := saslExchange{c: c, w: w, init: init}
	if c.s.opts.Auth != nil {
		err = ex.authenticate()
	} else {
		err = ex.legacy()
	}
	if err != nil {
		return err // the socket failed: nothing to answer
	}
	if ex.reason != "" {
		c.s.opts.Metrics.AuthFailure("amqp", ex.reason)
		c.log.Info("amqp authentication failed", "mechanism", string(init.Mechanism), "reason", ex.reason)
		code := frames.SASLCodeAuth
		if ex.reason == auth.ReasonUnavailable {
			// The identity service gave no answer: sys-temp, "a transient
			// system error" [5.3.3.6], so the client retries rather than
			// doubting its password; at once, as an outage is no guess.
			code = frames.SASLCodeSysTemp
		} else {
			c.failDelay()
		}
		_ = w.WriteFrame(0, &frames.SASLOutcome{Code: code}, nil)
		return errSASLFailed
	}
	c.ident = ex.ident
	c.authSt.Store(ex.st)
	return w.WriteFrame(0, &frames.SASLOutcome{Code: frames.SASLCodeOK, AdditionalData: ex.final}, nil)
}

// failDelay holds a failed login's answer back by the time the per-host
// throttle says (auth.Throttle: it grows with the failures from the same
// host in the last minute, on any connection, MQTT's included). It ends
// early when Shutdown closes the connection.
func (c *conn) failDelay() {
	host, _, err := net.SplitHostPort(c.nc.RemoteAddr().String())
	if err != nil {
		host = c.nc.RemoteAddr().String()
	}
	t := time.NewTimer(c.s.failures().Failed(host, time.Now()))
	defer t.Stop()
	select {
	case <-t.C:
	case <-c.s.quit:
	}
}

// mechanisms are the SASL mechanisms offered: with Options.Auth, those its
// users file can serve (SCRAM-SHA-256 first, as the preferred one), EXTERNAL
// on a TLS connection whose client certificate was verified, ANONYMOUS
// when anonymous access is allowed; without, PLAIN against Options.Users.
func (c *conn) mechanisms() []encoding.Symbol {
	var mechs []encoding.Symbol
	if a := c.s.opts.Auth; a != nil {
		if a.Load() != nil {
			mechs = append(mechs, mechScram, mechPlain)
			if c.peerName() != "" {
				mechs = append(mechs, mechExternal)
			}
		}
	} else if len(c.s.opts.Users) > 0 {
		mechs = append(mechs, mechPlain)
	}
	if c.s.anonymousOK() {
		mechs = append(mechs, mechAnonymous)
	}
	if len(mechs) == 0 {
		mechs = []encoding.Symbol{mechPlain} // nothing can succeed; keep the exchange well-formed
	}
	return mechs
}

// peerName is the user the TLS client certificate names (its CN, or the
// SAN auth.certIdentity chooses), when the connection is TLS and the
// certificate was verified against the client CA; "" otherwise. The TLS handshake is done: the protocol header was read
// through it.
func (c *conn) peerName() string {
	leaf := tlsconf.VerifiedPeer(c.nc)
	if leaf == nil {
		return ""
	}
	var field auth.CertField
	if c.s.opts.Auth != nil {
		field = c.s.opts.Auth.CertIdentity
	}
	return field.Name(leaf)
}

// peerSubject is the subject of the verified client certificate, "" when
// there is none.
func (c *conn) peerSubject() string {
	if leaf := tlsconf.VerifiedPeer(c.nc); leaf != nil {
		return leaf.Subject.String()
	}
	return ""
}

// failures is the per-host throttle of failed logins: the users file's,
// shared with MQTT, or the server's own without one.
func (s *Server) failures() *auth.Throttle {
	if s.opts.Auth != nil {
		return &s.opts.Auth.Failures
	}
	return &s.legacyFailures
}

// anonymousOK reports whether clients may connect without credentials.
func (s *Server) anonymousOK() bool {
	if s.opts.Auth != nil {
		return s.opts.Auth.AllowAnonymous
	}
	return s.opts.AllowAnonymous
}

// saslExchange is one SASL exchange after sasl-init, on the reader
// goroutine. reason is set when authentication failed.
type saslExchange struct {
	c    *conn
	w    *frames.Writer
	init *frames.SASLInit

	ident  auth.Identity
	st     *auth.Store // the users file ident comes from; nil without one
	final  []byte      // the outcome's additional-data (SCRAM's server-final)
	reason string      // the metric label of a failure; "" on success
}

// authenticate runs the mechanism the client chose against Options.Auth.
// Only I/O errors are returned; a failure sets reason.
func (x *saslExchange) authenticate() error {
	c, st := x.c, x.c.s.opts.Auth.Load()
	x.st = st
	switch x.init.Mechanism {
	case mechAnonymous:
		if !c.s.anonymousOK() {
			x.reason = "anonymous"
		}
		return nil
	case mechExternal:
		// RFC 4422 appendix A: the response is an authorisation identity,
		// empty for "the one the certificate names".
		name := c.peerName()
		switch {
		case name == "" || st == nil:
			x.reason = "no_certificate"
		case len(x.init.InitialResponse) > 0 && string(x.init.InitialResponse) != name:
			x.reason = "authzid"
		default:
			id, ok := st.Lookup(name)
			if !ok {
				x.reason = auth.Reason(auth.ErrUnknownUser)
			}
			x.ident = id
		}
		return nil
	}
	if st == nil {
		x.reason = "mechanism"
		return nil
	}
	switch x.init.Mechanism {
	case mechPlain:
		resp, err := x.first()
		if err != nil || resp == nil {
			return err
		}
		user, pass, ok := splitPlain(resp)
		if !ok {
			x.reason = "error"
			return nil
		}
		// With auth.http.url a user the file does not name is a network
		// call, bounded by its time-out, on this connection's reader: no
		// other connection waits, and the handshake deadline still holds.
		id, aerr := c.s.opts.Auth.Authenticate(context.Background(), st, auth.Credentials{
			Username:    user,
			Password:    pass,
			Protocol:    "amqp",
			CertSubject: c.peerSubject(),
			RemoteAddr:  c.nc.RemoteAddr().String(),
		})
		x.ident, x.reason = id, auth.Reason(aerr)
		return nil
	case mechScram:
		// SCRAM serves file users only: the server side needs the stored
		// key, which an identity service behind auth.http.url never gives.
		return x.scram(st)
	}
	x.reason = "mechanism"
	return nil
}

// scram drives a SCRAM-SHA-256 exchange (RFC 5802, RFC 7677): client-first
// in sasl-init (or the response to an empty challenge), server-first in a
// sasl-challenge, client-final in a sasl-response, and server-final in the
// successful sasl-outcome's additional-data (AMQP 1.0 part 5 §5.3.3.6),
// where Qpid JMS and Proton read it to verify the server.
func (x *saslExchange) scram(st *auth.Store) error {
	srv := st.NewScramServer()
	first, err := x.first()
	if err != nil || first == nil {
		return err
	}
	out, serr := srv.Step(first)
	if serr != nil {
		x.reason = auth.Reason(serr)
		return nil
	}
	final, err := x.round(out)
	if err != nil || final == nil {
		return err
	}
	out, serr = srv.Step(final)
	if serr != nil || !srv.Done() {
		x.reason = auth.Reason(serr)
		if x.reason == "" {
			x.reason = "error"
		}
		return nil
	}
	x.ident, x.final = srv.Identity(), out
	return nil
}

// legacy checks the client against Options.Users and AllowAnonymous
// (no Options.Auth).
func (x *saslExchange) legacy() error {
	switch x.init.Mechanism {
	case mechAnonymous:
		if !x.c.s.opts.AllowAnonymous {
			x.reason = "anonymous"
		}
		return nil
	case mechPlain:
		resp, err := x.first()
		if err != nil || resp == nil {
			return err
		}
		user, ok := x.c.checkPlain(resp)
		if !ok {
			x.reason = "bad_password"
		}
		x.ident = auth.Identity{User: user}
		return nil
	}
	x.reason = "mechanism"
	return nil
}

// first is the client's first message: sasl-init's initial-response, or
// the answer to an empty challenge when it had none (PLAIN without an
// initial response, part 5 §5.3.3.2). nil with a nil error: the exchange
// failed and reason says why.
func (x *saslExchange) first() ([]byte, error) {
	if x.init.InitialResponse != nil {
		return x.init.InitialResponse, nil
	}
	return x.round([]byte{})
}

// round sends a challenge and reads the response; nil with a nil error
// when the client answered something else (reason is set).
func (x *saslExchange) round(challenge []byte) ([]byte, error) {
	if err := x.w.WriteFrame(0, &frames.SASLChallenge{Challenge: challenge}, nil); err != nil {
		return nil, err
	}
	p, err := x.c.readSASL()
	if err != nil {
		return nil, err
	}
	r, ok := p.(*frames.SASLResponse)
	if !ok {
		x.reason = "error"
		return nil, nil
	}
	if r.Response == nil {
		return []byte{}, nil
	}
	return r.Response, nil
}

func (c *conn) readSASL() (frames.Performative, error) {
	f, err := c.r.ReadFrame()
	if err != nil {
		return nil, err
	}
	if f.Header.Type != frames.TypeSASL {
		return nil, errors.New("amqp: AMQP frame during SASL")
	}
	p, _, err := frames.DecodeBody(f.Body)
	if err != nil {
		return nil, err
	}
	return p, nil
}

// splitPlain splits a PLAIN response, "authzid NUL authcid NUL passwd"
// (RFC 4616). Acting as another identity (an authzid other than the
// authcid) is not supported.
func splitPlain(resp []byte) (user, pass string, ok bool) {
	parts := bytes.Split(resp, []byte{0})
	if len(parts) != 3 {
		return "", "", false
	}
	authz, user := string(parts[0]), string(parts[1])
	if authz != "" && authz != user {
		return "", "", false
	}
	return user, string(parts[2]), true
}

// checkPlain checks a PLAIN response against Options.Users.
func (c *conn) checkPlain(resp []byte) (string, bool) {
	user, pass, ok := splitPlain(resp)
	if !ok {
		return "", false
	}
	want, ok := c.s.opts.Users[user]
	if !ok {
		// Compare anyway, so that timing does not tell which users exist.
		subtle.ConstantTimeCompare([]byte(pass), []byte(pass))
		return "", false
	}
	return user, subtle.ConstantTimeCompare([]byte(pass), []byte(want)) == 1
}
