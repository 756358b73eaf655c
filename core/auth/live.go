package auth

import "sync/atomic"

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
}

// Load is the Store in force; nil when the gateway has no users file, in
// which case every client is anonymous and every action allowed.
func (l *Live) Load() *Store {
	if l == nil {
		return nil
	}
	return l.p.Load()
}

// Swap puts s in force for every check that starts from now on.
func (l *Live) Swap(s *Store) { l.p.Store(s) }
