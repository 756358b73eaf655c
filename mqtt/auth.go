package mqtt

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"time"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/tolsey/tolsey/core"
	"github.com/tolsey/tolsey/core/auth"
	"github.com/tolsey/tolsey/core/tlsconf"
)

// Authentication and authorisation of MQTT clients (docs/security.md,
// "MQTT") against the users file in force, Options.Auth. With no file
// loaded every check is one atomic load and lets everything through.
//
//   - CONNECT (OnConnect): user name and password, else the verified TLS
//     client certificate's CN, else anonymous if allowed. The CONNACK is
//     written here, not by mochi: mochi maps 0x86 to the MQTT 3.1.1 return
//     code 5, where 3.1.1 has 4 for bad credentials [MQTT-3.2.2.3].
//   - PUBLISH (OnPublish, not OnACLCheck: mochi asks OnACLCheck before it
//     resolves a topic alias, so a publish by alias would be checked
//     against the empty topic).
//   - SUBSCRIBE: OnSubscribe decides each filter (auth.Store.Subscribe);
//     mochi then asks OnACLCheck for each filter, and the answer noted
//     turns a denied one into SUBACK 0x87 (3.1.1: 0x80).
//   - Delivery: mochi asks OnACLCheck per recipient; a client that holds
//     an AllowPartly subscription, or a session it inherited, has each
//     message checked with Allowed(Subscribe, topic). The replayer asks
//     the same for retained copies.
//
// $queue/<name> is an ordinary topic to the rules: publishing to a queue
// needs publish on "$queue/<name>", consuming it subscribe on that filter.
type authz struct {
	s    *Server
	live *auth.Live // nil: no auth

	// mu guards clients: written on the connecting client's reader
	// (connect) and by OnDisconnect, read on every goroutine that
	// delivers to a client.
	mu      sync.RWMutex
	clients map[*mochi.Client]*clientAuth
	swept   int // len(clients) after the last sweep of closed clients

	stopWatch func() // ends the recheck on every swap of live (revoke.go)
}

// clientAuth is what one connection authenticated as.
type clientAuth struct {
	id auth.Identity // fixed at CONNECT

	// st is the users file id was last found the same in: the one of the
	// CONNECT, then each one a reload rechecked it against (revoke.go).
	st atomic.Pointer[auth.Store]

	// checkAll: every message delivered to the client is checked with
	// Allowed. Set, never cleared, on the client's reader (a SUBSCRIBE
	// granted AllowPartly, a session inherited) or by a reload's recheck
	// (revoke.go); read by every publisher.
	checkAll atomic.Bool

	// subscribing holds the decision of each filter of the SUBSCRIBE being
	// processed, from OnSubscribe to OnSubscribed, for mochi's OnACLCheck
	// on the filter. mu guards it and decidedBy, the users file that
	// decided them; pending says whether to look.
	pending     atomic.Bool
	mu          sync.Mutex
	subscribing map[string]bool
	decidedBy   *auth.Store
}

func newAuthz(s *Server) *authz {
	return &authz{s: s, live: s.opts.Auth, clients: map[*mochi.Client]*clientAuth{}}
}

// Reasons of refusal, the reason label of tolsey_auth_failures_total
// beside auth.Reason's.
const (
	reasonUnknownCert = "unknown_certificate"
	reasonAnonymous   = "anonymous"
	reasonPublish     = "publish_denied"
	reasonSubscribe   = "subscribe_denied"
)

// connect authenticates cl's CONNECT; an error means the CONNACK refusing
// it has been written. Runs on the connecting client's goroutine.
func (a *authz) connect(cl *mochi.Client, pk packets.Packet) error {
	st := a.live.Load()
	if st == nil {
		return nil
	}
	id, reason := a.identify(st, cl, pk)
	if reason == "" {
		if w := &cl.Properties.Will; w.Flag > 0 && !st.Allowed(id, cl.ID, auth.Publish, w.TopicName) {
			reason = reasonPublish
		}
	}
	if reason != "" {
		return a.refuseConnect(cl, pk, reason)
	}
	ca := &clientAuth{id: id}
	ca.st.Store(st)
	a.mu.Lock()
	if len(a.clients) >= 2*a.swept+64 {
		// mochi calls OnDisconnect only for a client it attached: one whose
		// CONNACK could not be written leaves its entry. Swept when the map
		// has doubled, so the cost per connect stays constant.
		for c := range a.clients {
			if c.Closed() && !a.holdsSession(c) {
				delete(a.clients, c)
			}
		}
		a.swept = len(a.clients)
	}
	a.clients[cl] = ca
	a.mu.Unlock()
	if now := a.live.Load(); now != st {
		// A reload swapped the file since this CONNECT read it, and its
		// recheck may have missed this client, not yet in clients.
		a.recheckClient(cl, ca, now)
	}
	return nil
}

// identify returns who cl is, or the reason it is refused.
func (a *authz) identify(st *auth.Store, cl *mochi.Client, pk packets.Packet) (auth.Identity, string) {
	if pk.Connect.UsernameFlag || len(pk.Connect.Username) > 0 {
		// With auth.http.url this may be a network call, bounded by its
		// time-out; it runs on this client's goroutine (mochi calls
		// OnConnect from the connection's own), so no one else waits.
		id, err := a.live.Authenticate(context.Background(), st, auth.Credentials{
			Username:    string(pk.Connect.Username),
			Password:    string(pk.Connect.Password),
			ClientID:    cl.ID,
			Protocol:    "mqtt",
			CertSubject: certSubject(cl.Net.Conn),
			RemoteAddr:  cl.Net.Remote,
		})
		return id, auth.Reason(err)
	}
	if name, ok := certName(cl.Net.Conn, a.live.CertIdentity); ok {
		if id, ok := st.Lookup(name); ok {
			return id, ""
		}
		if !a.live.AllowAnonymous {
			return auth.Identity{}, reasonUnknownCert
		}
	}
	if a.live.AllowAnonymous {
		return auth.Identity{}, ""
	}
	return auth.Identity{}, reasonAnonymous
}

// certName is the user the client certificate of a TLS connection names
// in field (auth.certIdentity: its CN or a SAN), if the handshake verified
// one against the client CA. A certificate that was only requested and
// not verified (tls.RequestClientCert) names nobody.
func certName(c net.Conn, field auth.CertField) (string, bool) {
	if leaf := tlsconf.VerifiedPeer(c); leaf != nil {
		name := field.Name(leaf)
		return name, name != ""
	}
	return "", false
}

// certSubject is the subject of the verified client certificate, "" when
// there is none.
func certSubject(c net.Conn) string {
	if leaf := tlsconf.VerifiedPeer(c); leaf != nil {
		return leaf.Subject.String()
	}
	return ""
}

// refuseConnect counts and logs a refused CONNECT (never its password),
// waits as the per-host throttle says (auth.Throttle, shared with AMQP),
// and writes the CONNACK:
//   - bad credentials, unknown user or certificate: MQTT 5 0x86 Bad User
//     Name or Password, 3.1.1 return code 4, the same for each so that a
//     client cannot tell whether a name exists;
//   - no credentials, anonymous not allowed, or a will the user may not
//     publish: MQTT 5 0x87 Not authorized, 3.1.1 return code 5;
//   - the identity service (auth.http.url) gave no answer: MQTT 5 0x88
//     Server unavailable, 3.1.1 return code 3, at once: an outage is not
//     a guess to slow down, and the client should retry, not give up.
func (a *authz) refuseConnect(cl *mochi.Client, pk packets.Packet, reason string) error {
	a.s.opts.Metrics.AuthFailure("mqtt", reason)
	a.s.log.Info("mqtt connect refused", "client", cl.ID, "remote", cl.Net.Remote,
		"user", string(pk.Connect.Username), "reason", reason)
	code, v3 := packets.ErrNotAuthorized, packets.Err3NotAuthorized
	switch reason {
	case reasonAnonymous, reasonPublish:
	case auth.ReasonUnavailable:
		code, v3 = packets.ErrServerUnavailable, packets.Err3ServerUnavailable
	default:
		code, v3 = packets.ErrBadUsernameOrPassword, packets.ErrMalformedUsernameOrPassword // 4: bad user name or password
	}
	if reason != auth.ReasonUnavailable {
		host, _, err := net.SplitHostPort(cl.Net.Remote)
		if err != nil {
			host = cl.Net.Remote
		}
		time.Sleep(a.live.Failures.Failed(host, time.Now())) // one wait on this connection's goroutine, capped: not a poll
	}
	if cl.Properties.ProtocolVersion >= 5 {
		_ = a.s.mochi.SendConnack(cl, code, false, nil)
	} else {
		// SendConnack would send 0x86 as 5, and 0x87 unmapped.
		_ = cl.WritePacket(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connack}, ReasonCode: v3.Code})
	}
	return code
}

// holdsSession reports whether c is the session its client id names: a
// connection that ended and left a persistent session behind, offline,
// keeps its identity, which the messages queued for the session are
// checked against. One taken over, or whose session expired, holds none.
func (a *authz) holdsSession(c *mochi.Client) bool {
	cur, ok := a.s.mochi.Clients.Get(c.ID)
	return ok && cur == c
}

// forget drops cl's identity (OnDisconnect of a session that ends with its
// connection, OnClientExpired of one that was left offline).
func (a *authz) forget(cl *mochi.Client) {
	if a.live == nil {
		return
	}
	a.mu.Lock()
	delete(a.clients, cl)
	a.mu.Unlock()
}

func (a *authz) get(cl *mochi.Client) *clientAuth {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.clients[cl]
}

// identity is cl's identity, and whether cl authenticated against a users
// file: a client that connected while none was loaded is anonymous, and
// its subscriptions were never checked.
func (a *authz) identity(cl *mochi.Client) (*clientAuth, auth.Identity) {
	if ca := a.get(cl); ca != nil {
		return ca, ca.id
	}
	return nil, auth.Identity{}
}

// mayPublish reports whether cl may publish on topic, counting a refusal.
func (a *authz) mayPublish(cl *mochi.Client, topic string) bool {
	st := a.live.Load()
	if st == nil || cl.Net.Inline {
		return true
	}
	_, id := a.identity(cl)
	if st.Allowed(id, cl.ID, auth.Publish, topic) {
		return true
	}
	a.s.opts.Metrics.AuthFailure("mqtt", reasonPublish)
	a.s.log.Debug("publish refused by the ACL", "client", cl.ID, "user", id.User, "topic", topic)
	return false
}

// subscribing decides each filter of a SUBSCRIBE (OnSubscribe, on the
// client's reader), for mochi's OnACLCheck on them that follows. Filters
// already refused (made empty) are skipped. A shared subscription is
// decided on its filter without the $share/<group>/ prefix.
func (a *authz) subscribing(cl *mochi.Client, filters packets.Subscriptions) {
	st := a.live.Load()
	if st == nil {
		return
	}
	ca, id := a.identity(cl)
	if ca == nil {
		// Connected while no users file was loaded: anonymous, and its
		// earlier subscriptions were never checked.
		ca = &clientAuth{}
		ca.checkAll.Store(true)
		a.mu.Lock()
		a.clients[cl] = ca
		a.mu.Unlock()
	}
	ca.mu.Lock()
	defer ca.mu.Unlock()
	ca.subscribing = make(map[string]bool, len(filters))
	ca.decidedBy = st
	for _, f := range filters {
		if f.Filter == "" {
			continue
		}
		filter := f.Filter
		if _, sf, ok := core.SplitShared(filter); ok {
			filter = sf
		}
		d := st.Subscribe(id, cl.ID, filter)
		switch d {
		case auth.Deny:
			a.s.opts.Metrics.AuthFailure("mqtt", reasonSubscribe)
			a.s.log.Debug("subscription refused by the ACL", "client", cl.ID, "user", id.User, "filter", f.Filter)
		case auth.AllowPartly:
			ca.checkAll.Store(true) // before mochi adds it: its first delivery is checked
		}
		ca.subscribing[f.Filter] = d != auth.Deny
	}
	ca.pending.Store(true)
}

// subscribed ends the SUBSCRIBE's window (OnSubscribed).
func (a *authz) subscribed(cl *mochi.Client) {
	if a.live == nil {
		return
	}
	if ca := a.get(cl); ca != nil && ca.pending.Load() {
		ca.mu.Lock()
		ca.subscribing = nil
		ca.pending.Store(false)
		by := ca.decidedBy
		ca.mu.Unlock()
		if now := a.live.Load(); now != by {
			// A reload came between the decision and mochi adding the
			// filters: its recheck may have run before they were there.
			a.recheckClient(cl, ca, now)
		}
	}
}

// inherited notes that cl carries on a session (OnSessionEstablished):
// its subscriptions were granted to whoever held the client id before,
// perhaps under other rules, so each delivery is checked.
func (a *authz) inherited(cl *mochi.Client) {
	if a.live.Load() == nil || len(cl.State.Subscriptions.GetAll()) == 0 {
		return
	}
	if ca := a.get(cl); ca != nil {
		ca.checkAll.Store(true)
	}
}

// mayRead reports whether topic may reach cl: mochi's OnACLCheck with
// write false, asked per recipient and for each filter of a SUBSCRIBE
// (decided in subscribing), and the replayer's check per retained copy.
func (a *authz) mayRead(cl *mochi.Client, topic string) bool {
	st := a.live.Load()
	if st == nil {
		return true
	}
	ca, id := a.identity(cl)
	if ca != nil {
		if ca.pending.Load() {
			ca.mu.Lock()
			ok, has := ca.subscribing[topic]
			ca.mu.Unlock()
			if has {
				// A filter being subscribed; or a delivery on a topic
				// equal to one, which its own decision answers alike.
				return ok
			}
		}
		if !ca.checkAll.Load() {
			return true // only Allow subscriptions: every topic they match may be read
		}
	}
	return st.Allowed(id, cl.ID, auth.Subscribe, topic)
}
