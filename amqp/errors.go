package amqp

import (
	"errors"
	"fmt"

	"github.com/tolsey/tolsey/amqp/internal/encoding"
	"github.com/tolsey/tolsey/amqp/internal/frames"
)

// Errors are typed by the layer they end: a ConnError closes the
// connection, a SessionError ends one session, a LinkError detaches one
// link. Each carries the AMQP error condition sent to the peer (part 2
// section 2.8.15-2.8.18), or received from it when Remote is set.

// ConnError ends a connection with a close frame carrying Cond.
type ConnError struct {
	Cond   encoding.Symbol
	Desc   string
	Remote bool // the peer closed the connection with this error
}

func (e *ConnError) Error() string { return "amqp connection: " + condString(e.Cond, e.Desc) }

// SessionError ends a session with an end frame carrying Cond.
type SessionError struct {
	Cond encoding.Symbol
	Desc string
}

func (e *SessionError) Error() string { return "amqp session: " + condString(e.Cond, e.Desc) }

// LinkError detaches a link (closed=true) with Cond.
type LinkError struct {
	Cond encoding.Symbol
	Desc string
}

func (e *LinkError) Error() string { return "amqp link: " + condString(e.Cond, e.Desc) }

func condString(c encoding.Symbol, d string) string {
	if d == "" {
		return string(c)
	}
	return string(c) + ": " + d
}

func connErr(cond encoding.Symbol, format string, args ...any) *ConnError {
	return &ConnError{Cond: cond, Desc: fmt.Sprintf(format, args...)}
}

func sessionErr(cond encoding.Symbol, format string, args ...any) *SessionError {
	return &SessionError{Cond: cond, Desc: fmt.Sprintf(format, args...)}
}

func linkErr(cond encoding.Symbol, format string, args ...any) *LinkError {
	return &LinkError{Cond: cond, Desc: fmt.Sprintf(format, args...)}
}

// asLinkError is err as the link error it carries, or, when it carries
// none, an internal-error for the link: a refusal always has a condition.
func asLinkError(err error) *LinkError {
	var le *LinkError
	if errors.As(err, &le) {
		return le
	}
	return linkErr(frames.ErrCondInternalError, "%v", err)
}

// wireError is the error field sent in close, end or detach.
func wireError(cond encoding.Symbol, desc string) *frames.Error {
	return &frames.Error{Condition: cond, Description: desc}
}

// errPeerClosed: the peer sent close without an error; we answer and stop.
var errPeerClosed = errors.New("amqp: peer closed the connection")

// errSASLFailed: authentication failed; the socket is closed after the
// sasl-outcome (there is no AMQP connection to close).
var errSASLFailed = errors.New("amqp: SASL authentication failed")
