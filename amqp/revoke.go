package amqp

import (
	"maps"
	"slices"
	"strconv"

	"github.com/tolsey/tolsey/amqp/internal/frames"
	"github.com/tolsey/tolsey/core/auth"
)

// What a reload does to the connections already open (docs/security.md,
// "Reload and revocation"). auth.Live.Swap runs recheck on the reloading
// goroutine, never a connection's:
//
//   - a connection whose user is gone from the new file, or whose groups
//     or credentials changed, is closed with amqp:unauthorized-access;
//   - each receiving link is decided again as at attach: a denied one
//     delivers nothing more at once (revoked, checked by Deliver and the
//     writer) and the writer detaches it with amqp:unauthorized-access
//     (acl.onRevoke: unsubscribe), or the connection is closed with it
//     (acl.onRevoke: disconnect); an "allow partly" one has each message
//     checked from now on; one allowed whole again is not.
//
// Sending links need nothing: every message is checked against the rules
// in force (sender.go).

// watchACL notes a receiving link whose filter the ACL decided, for the
// rechecks of later reloads. Called by the reader at attach.
func (c *conn) watchACL(l *outLink) {
	if l.aclFilter == "" || c.s.opts.Auth == nil {
		return
	}
	c.aclMu.Lock()
	if c.aclLinks == nil {
		c.aclLinks = map[*outLink]struct{}{}
	}
	c.aclLinks[l] = struct{}{}
	c.aclMu.Unlock()
}

// unwatchACL forgets l (its teardown).
func (c *conn) unwatchACL(l *outLink) {
	c.aclMu.Lock()
	delete(c.aclLinks, l)
	c.aclMu.Unlock()
}

// watch starts rechecking every connection on each swap of the users
// file; the returned func ends it.
func (s *Server) watch() func() {
	if s.opts.Auth == nil {
		return func() {}
	}
	return s.opts.Auth.Watch(s.recheck)
}

// recheck applies st, just swapped in, to every open connection.
func (s *Server) recheck(st *auth.Store) {
	s.mu.Lock()
	conns := slices.Collect(maps.Keys(s.conns))
	s.mu.Unlock()
	for _, c := range conns {
		s.recheckConn(c, st)
	}
}

// recheckConn applies st to c, once c's identity is final (opened); a
// connection still logging in rechecks itself after its open (serve).
func (s *Server) recheckConn(c *conn, st *auth.Store) {
	if st == nil || !c.opened.Load() || c.forced.Load() {
		return
	}
	if old := c.authSt.Swap(st); c.ident.User != "" && old != nil && !st.SameUser(old, c.ident.User) {
		s.opts.Metrics.AuthFailure("amqp", "user_revoked")
		c.revoke("user " + strconv.Quote(c.ident.User) + " changed or left the users file")
		return
	}
	c.aclMu.Lock()
	links := slices.Collect(maps.Keys(c.aclLinks))
	c.aclMu.Unlock()
	for _, l := range links {
		if l.revoked.Load() {
			continue // detached already, the peer's answer not yet in
		}
		d := st.Subscribe(c.ident, c.containerID, l.aclFilter)
		if d == auth.Deny || d == auth.AllowPartly && l.aclWhole {
			s.opts.Metrics.AuthFailure("amqp", "subscription_revoked")
			if s.opts.Auth.OnRevoke == auth.RevokeDisconnect {
				c.revoke("not authorised to subscribe to " + strconv.Quote(l.aclFilter) + " any more")
				return
			}
			l.revoked.Store(true)
			l.wake()
			continue
		}
		l.aclPartial.Store(d == auth.AllowPartly)
	}
}

// revoke closes the connection with amqp:unauthorized-access, as
// forceClose does with connection-forced.
func (c *conn) revoke(why string) {
	c.log.Info("amqp connection closed by a reload of the users file", "user", c.ident.User, "why", why)
	c.revokedBy.Store(connErr(frames.ErrCondUnauthorizedAccess, "%s", why))
	c.forceClose()
}

// forcedErr is the error a forced connection closes with.
func (c *conn) forcedErr() error {
	if e := c.revokedBy.Load(); e != nil {
		return e
	}
	return connErr(frames.ErrCondConnectionForced, "the gateway is shutting down")
}

// detachRevoked detaches l, which a reload denied, as detachDeleted does
// for a deleted queue.
func (w *writer) detachRevoked(l *outLink) {
	l.mu.Lock()
	closed := l.closed
	l.mu.Unlock()
	if closed || !w.detachOut(l) {
		return
	}
	w.c.log.Info("amqp link detached: the reloaded ACL denies it", "link", l.name, "filter", l.aclFilter)
	w.write(l.sess.ch, &frames.Detach{Handle: l.handle, Closed: true,
		Error: wireError(frames.ErrCondUnauthorizedAccess, "not authorised to subscribe to "+strconv.Quote(l.aclFilter)+" any more")}, nil)
}
