package auth

import (
	"sync"
	"sync/atomic"
)

// Live is the users and rules in force, shared by the front-ends and
// swapped whole when the gateway reloads the users file (SIGHUP, POST
// /api/v1/reload): a check reads one Store from start to end, never half
// of an old file and half of a new one. The zero value holds no Store.
type Live struct {
	p atomic.Pointer[Store]
	// AllowAnonymous lets clients in without credentials (MQTT CONNECT
	// without a username, AMQP SASL ANONYMOUS or no SASL layer). Set once
	// before the front-ends start.
	AllowAnonymous bool
	// External checks users the users file does not name (auth.http.url);
	// nil: only the file's users log in. Set once before the front-ends
	// start.
	External Authenticator
	// OnRevoke is what a swap does to a connection holding a subscription
	// the new rules deny (acl.onRevoke). Set once before the front-ends
	// start.
	OnRevoke Revoke
	// CertIdentity is the field of a verified client certificate that
	// names its user (auth.certIdentity). Set once before the front-ends
	// start.
	CertIdentity CertField

	// Failures delays the answer to failed logins per source host, for
	// every front-end that reads this Live.
	Failures Throttle

	mu       sync.Mutex // guards watchers and next; held while they run
	watchers map[int]func(*Store)
	next     int
}

// Revoke is what a reload does to a subscription the new rules deny.
type Revoke uint8

const (
	// RevokeUnsubscribe removes the subscription (MQTT) or detaches the
	// link with amqp:unauthorized-access; the connection stays.
	RevokeUnsubscribe Revoke = iota
	// RevokeDisconnect closes the connection: MQTT 5 DISCONNECT 0x87 Not
	// authorized (3.1.1: the network connection is closed), AMQP close
	// with amqp:unauthorized-access.
	RevokeDisconnect
)

// Load is the Store in force; nil when the gateway has no users file, in
// which case every client is anonymous and every action allowed.
func (l *Live) Load() *Store {
	if l == nil {
		return nil
	}
	return l.p.Load()
}

// Swap puts s in force for every check that starts from now on, then runs
// every watcher with s on the caller's goroutine, one after the other, so
// that the front-ends re-check what was granted under the old rules
// before Swap returns.
func (l *Live) Swap(s *Store) {
	l.p.Store(s)
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, fn := range l.watchers {
		fn(s)
	}
}

// Watch runs fn after every Swap, on the swapping goroutine, until stop is
// called. fn must not call Swap or Watch. stop waits for a run of fn in
// progress.
func (l *Live) Watch(fn func(*Store)) (stop func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.watchers == nil {
		l.watchers = map[int]func(*Store){}
	}
	id := l.next
	l.next++
	l.watchers[id] = fn
	return func() {
		l.mu.Lock()
		delete(l.watchers, id)
		l.mu.Unlock()
	}
}
