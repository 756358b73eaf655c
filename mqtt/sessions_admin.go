package mqtt

import (
	"slices"
	"strings"

	"github.com/mochi-mqtt/server/v2/packets"
)

// SessionInfo is one MQTT session, connected or kept for a client that
// is offline (GET /api/v1/sessions).
type SessionInfo struct {
	ClientID      string   `json:"clientId"`
	Connected     bool     `json:"connected"`
	Persistent    bool     `json:"persistent"` // outlives its connection (kept on disk unless mqtt.sessions.backend=memory)
	Subscriptions []string `json:"subscriptions"`
	Queued        int      `json:"queued"` // QoS 1/2 messages held for it or in flight to it
	// ExpirySeconds is how long the session is kept once disconnected
	// (MQTT 5 Session Expiry Interval; 0 for MQTT 3 clean session 0,
	// kept until mqtt.maxSessionExpiry if set).
	ExpirySeconds uint32 `json:"expirySeconds"`
}

// Sessions lists the sessions mochi holds, sorted by client id.
func (s *Server) Sessions() []SessionInfo {
	var out []SessionInfo
	for id, cl := range s.mochi.Clients.GetAll() {
		if cl.Net.Inline {
			continue
		}
		subs := make([]string, 0, cl.State.Subscriptions.Len())
		for f := range cl.State.Subscriptions.GetAll() {
			subs = append(subs, f)
		}
		slices.Sort(subs)
		out = append(out, SessionInfo{
			ClientID:      id,
			Connected:     !cl.Closed(),
			Persistent:    persistent(cl),
			Subscriptions: subs,
			Queued:        cl.State.Inflight.Len(),
			ExpirySeconds: cl.Properties.Props.SessionExpiryInterval,
		})
	}
	slices.SortFunc(out, func(a, b SessionInfo) int { return strings.Compare(a.ClientID, b.ClientID) })
	return out
}

// DeleteSession ends the session of id: a connected client is
// disconnected (MQTT 5: DISCONNECT 0x98 Administrative action), its
// subscriptions and queued messages are dropped, and its stored copy is
// removed. It reports whether there was one.
func (s *Server) DeleteSession(id string) bool {
	cl, ok := s.mochi.Clients.Get(id)
	if !ok || cl.Net.Inline {
		return false
	}
	// Forgotten first: the ending connection's OnDisconnect must not
	// store the session again behind the delete.
	if ss := s.sessions; ss != nil {
		done := ss.beginDelete(id)
		if epoch, was := ss.forget(id); was {
			ss.forgetHeld(id)
			defer ss.queueDelete(id, epoch, done)
		} else {
			ss.endDelete(id, done)
		}
	}
	if !cl.Closed() {
		_ = s.mochi.DisconnectClientNoWait(cl, packets.ErrAdministrativeAction)
	}
	if s.mochi.Clients.DeleteIf(id, cl) {
		cl.ClearInflights()
		s.mochi.UnsubscribeClient(cl)
	}
	return true
}
