package mqtt

import (
	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/tolsey/tolsey/core"
	"github.com/tolsey/tolsey/core/auth"
)

// What a reload does to the clients already connected (docs/security.md,
// "Reload and revocation"). auth.Live.Swap runs recheck on the reloading
// goroutine (SIGHUP, POST /api/v1/reload), never a client's:
//
//   - a client whose user is gone from the new file, or whose groups or
//     credentials changed, is disconnected (MQTT 5 DISCONNECT 0x87,
//     3.1.1: closed), as Mosquitto does on reload;
//   - each subscription is decided again as a SUBSCRIBE would be: a
//     denied one is removed (acl.onRevoke: unsubscribe), or the client is
//     disconnected (acl.onRevoke: disconnect); an "allow partly" one, or
//     any denied one, turns on the per-message check (checkAll), which
//     also stops what the client would be sent on a revoked filter in the
//     moment before it is removed.
//
// Races with the client's own goroutine are closed from both sides: the
// session lock orders the removal against its SUBSCRIBE, UNSUBSCRIBE and a
// takeover (mochi's RemoveSubscriptions), and a CONNECT or SUBSCRIBE
// decided under the file a swap replaced rechecks its own client
// (authz.connect, authz.subscribed).

// watch starts rechecking every client on each swap of the users file.
func (a *authz) watch() {
	if a.live != nil {
		a.stopWatch = a.live.Watch(a.recheck)
	}
}

// unwatch ends it (Shutdown).
func (a *authz) unwatch() {
	if a.stopWatch != nil {
		a.stopWatch()
	}
}

// recheck applies st, just swapped in, to every connected client.
func (a *authz) recheck(st *auth.Store) {
	for _, cl := range a.s.mochi.Clients.GetAll() {
		if cl.Net.Inline || cl.Closed() {
			// An offline session's deliveries are checked as they are
			// queued (mayRead), and every one once it is carried on.
			continue
		}
		a.recheckClient(cl, a.get(cl), st)
	}
}

// recheckClient applies st to cl, whose identity is ca (nil: it connected
// while no users file was loaded, and is anonymous).
func (a *authz) recheckClient(cl *mochi.Client, ca *clientAuth, st *auth.Store) {
	if st == nil {
		return
	}
	var id auth.Identity
	if ca != nil {
		id = ca.id
		if old := ca.st.Swap(st); id.User != "" && old != nil && !st.SameUser(old, id.User) {
			a.s.opts.Metrics.AuthFailure("mqtt", "user_revoked")
			a.s.log.Info("mqtt client disconnected: its user changed or left the users file", "client", cl.ID, "user", id.User)
			a.disconnect(cl)
			return
		}
	}
	var denied []string
	partial := false
	for filter := range cl.State.Subscriptions.GetAll() {
		f := filter
		if _, sf, ok := core.SplitShared(f); ok {
			f = sf
		}
		switch st.Subscribe(id, cl.ID, f) {
		case auth.Deny:
			denied = append(denied, filter)
		case auth.AllowPartly:
			partial = true
		}
	}
	if !partial && len(denied) == 0 {
		return
	}
	if ca == nil {
		ca = &clientAuth{}
		a.mu.Lock()
		if c := a.clients[cl]; c != nil {
			ca = c
		} else {
			a.clients[cl] = ca
		}
		a.mu.Unlock()
	}
	ca.checkAll.Store(true) // before the removal: nothing more goes out on a denied filter
	if len(denied) == 0 {
		return
	}
	a.s.opts.Metrics.AuthFailure("mqtt", "subscription_revoked")
	if a.live.OnRevoke == auth.RevokeDisconnect {
		a.s.log.Info("mqtt client disconnected: the reloaded ACL denies its subscriptions", "client", cl.ID, "user", id.User, "filters", denied)
		a.disconnect(cl)
		return
	}
	n := a.s.mochi.RemoveSubscriptions(cl, denied)
	a.s.log.Info("mqtt subscriptions removed: the reloaded ACL denies them", "client", cl.ID, "user", id.User, "filters", denied, "removed", n)
}

// disconnect ends cl for a revocation: MQTT 5 DISCONNECT 0x87 Not
// authorized; MQTT 3.1.1, which has no DISCONNECT from the server, closes
// the network connection. The reload's goroutine does not wait behind a
// write to a client that stopped reading.
func (a *authz) disconnect(cl *mochi.Client) {
	if cl.Properties.ProtocolVersion >= 5 {
		_ = a.s.mochi.DisconnectClientNoWait(cl, packets.ErrNotAuthorized)
		return
	}
	cl.Stop(packets.ErrNotAuthorized)
}
