package amqp

import (
	"bytes"
	"crypto/subtle"
	"errors"
	"fmt"

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
)

// handshake negotiates the protocol headers and SASL. On success the AMQP
// header has been exchanged and the peer's open comes next.
func (c *conn) handshake() error {
	h, err := c.r.ReadProtocolHeader()
	if err != nil {
		var he *frames.ProtocolHeaderError
		if errors.As(err, &he) {
			c.refuseHeader(he.Got)
		}
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
	// A bare AMQP header: the client skips SASL (rhea does without a user).
	if !c.s.opts.AllowAnonymous {
		_ = c.writeHeader(frames.HeaderSASL) // SASL is required
		return errors.New("amqp: client skipped SASL and anonymous access is off")
	}
	return c.writeHeader(frames.HeaderAMQP)
}

// refuseHeader answers a header we do not speak with one we do, as part 2
// section 2.2 asks; the caller then closes the socket.
func (c *conn) refuseHeader(got [8]byte) {
	h := frames.HeaderSASL
	if string(got[:4]) == "AMQP" && got[4] == frames.ProtocolAMQP && c.s.opts.AllowAnonymous {
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
// an empty challenge when PLAIN came without an initial response, outcome.
func (c *conn) sasl() error {
	var mechs []encoding.Symbol
	if len(c.s.opts.Users) > 0 {
		mechs = append(mechs, mechPlain)
	}
	if c.s.opts.AllowAnonymous {
		mechs = append(mechs, mechAnonymous)
	}
	if len(mechs) == 0 {
		mechs = []encoding.Symbol{mechPlain} // nothing can succeed; keep the exchange well-formed
	}
	w := frames.NewWriter(c.nc, 0)
	if err := w.WriteFrame(0, &frames.SASLMechanisms{SASLServerMechanisms: mechs}, nil); err != nil {
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
	code := frames.SASLCodeAuth
	switch init.Mechanism {
	case mechAnonymous:
		if c.s.opts.AllowAnonymous {
			code = frames.SASLCodeOK
		}
	case mechPlain:
		resp := init.InitialResponse
		if resp == nil {
			if err := w.WriteFrame(0, &frames.SASLChallenge{Challenge: []byte{}}, nil); err != nil {
				return err
			}
			p, err := c.readSASL()
			if err != nil {
				return err
			}
			r, ok := p.(*frames.SASLResponse)
			if !ok {
				_ = w.WriteFrame(0, &frames.SASLOutcome{Code: frames.SASLCodeSysPerm}, nil)
				return fmt.Errorf("amqp: got %T, want sasl-response", p)
			}
			resp = r.Response
		}
		if user, ok := c.checkPlain(resp); ok {
			c.user = user
			code = frames.SASLCodeOK
		}
	}
	if err := w.WriteFrame(0, &frames.SASLOutcome{Code: code}, nil); err != nil {
		return err
	}
	if code != frames.SASLCodeOK {
		c.log.Info("amqp authentication failed", "mechanism", string(init.Mechanism))
		return errSASLFailed
	}
	return nil
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

// checkPlain checks a PLAIN response, "authzid NUL authcid NUL passwd"
// (RFC 4616), against the configured users.
func (c *conn) checkPlain(resp []byte) (string, bool) {
	parts := bytes.Split(resp, []byte{0})
	if len(parts) != 3 {
		return "", false
	}
	authz, user, pass := string(parts[0]), string(parts[1]), parts[2]
	if authz != "" && authz != user {
		return "", false // acting as another identity is not supported
	}
	want, ok := c.s.opts.Users[user]
	if !ok {
		// Compare anyway, so that timing does not tell which users exist.
		subtle.ConstantTimeCompare(pass, pass)
		return "", false
	}
	return user, subtle.ConstantTimeCompare(pass, []byte(want)) == 1
}
