package amqp

import (
	"bytes"
	"sync"
	"sync/atomic"

	"github.com/tolsey/tolsey/core"
)

// This file encodes a message once for all the receiving links one publish
// reaches, instead of once per link. The encoding of a live topic delivery
// depends on the message and the server only (x-opt-jms-dest, reply-to
// kind): delivery-id, tag and handle are in the transfer, written per
// delivery. A TTL is counted from the moment of sending, so a message with
// an expiry is encoded per delivery as before.
//
// The first link of a publish encodes into its writer's own buffer (no
// allocation: a publish that reaches one AMQP receiver costs what it did);
// the second and later links share one encoding, made by whichever of their
// writers comes first: for N receivers two encodes instead of N, for two
// allocations per publish.

// sharedEncoding is one message's encoding shared by the links it was
// queued on after the first.
type sharedEncoding struct {
	done atomic.Bool // b and err are set
	mu   sync.Mutex  // held while the first writer encodes
	b    []byte      // immutable once done
	err  error
}

// fanOut recognises the second and later Deliver calls of one publish. It
// remembers the last message handed to a link: the router hands one
// message to its subscribers one after another on the publisher's
// goroutine, so consecutive calls for the same message are one fan-out.
// Two publishers interleaving only share less.
type fanOut struct {
	mu     sync.Mutex
	m      *core.Message
	shared *sharedEncoding
}

// share returns the encoding to share for a delivery of m, or nil for the
// first link of a publish and for a message with an expiry.
func (f *fanOut) share(m *core.Message) *sharedEncoding {
	if !m.Expiry.IsZero() {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m != m {
		f.m, f.shared = m, nil
		return nil
	}
	if f.shared == nil {
		f.shared = &sharedEncoding{}
	}
	return f.shared
}

// encodeHook, when set (by a test, before any server starts), is called
// for every message encoding a writer makes.
var encodeHook func()

// sharedBytes returns q's shared encoding, encoding it with w if no
// writer has yet.
func (w *writer) sharedBytes(e *sharedEncoding, encode func() error) ([]byte, error) {
	if e.done.Load() {
		return e.b, e.err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.done.Load() {
		w.msg.Reset()
		e.err = encode()
		e.b = bytes.Clone(w.msg.Written())
		e.done.Store(true)
	}
	return e.b, e.err
}
