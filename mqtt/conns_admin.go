package mqtt

import (
	"slices"
	"strings"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/tolsey/tolsey/core"
)

// ConnInfo is one open MQTT connection (GET /api/v1/connections).
type ConnInfo struct {
	ClientID      string `json:"clientId"`
	Version       string `json:"version"` // 3.1, 3.1.1 or 5
	User          string `json:"user,omitempty"`
	Remote        string `json:"remote"`
	Listener      string `json:"listener"`
	Subscriptions int    `json:"subscriptions"`
	Queued        int    `json:"queued"` // QoS 1/2 messages held for it or in flight to it
	KeepAlive     uint16 `json:"keepAlive"`
	// Since the connection was accepted, and what it sent and received
	// since then: PUBLISH packets and bytes of every packet (mochi patch
	// 33).
	Since       time.Time `json:"connectedSince"`
	MessagesIn  int64     `json:"messagesIn"`
	MessagesOut int64     `json:"messagesOut"`
	BytesIn     int64     `json:"bytesIn"`
	BytesOut    int64     `json:"bytesOut"`
}

// Connections lists the open MQTT connections, sorted by client id (an
// offline persistent session is not one: Sessions lists those).
func (s *Server) Connections() []ConnInfo {
	var out []ConnInfo
	for id, cl := range s.mochi.Clients.GetAll() {
		if cl.Net.Inline || cl.Closed() {
			continue
		}
		out = append(out, ConnInfo{
			ClientID:      id,
			Version:       versionName(cl.Properties.ProtocolVersion),
			User:          string(cl.Properties.Username),
			Remote:        cl.Net.Remote,
			Listener:      cl.Net.Listener,
			Subscriptions: cl.State.Subscriptions.Len(),
			Queued:        cl.State.Inflight.Len(),
			KeepAlive:     cl.State.Keepalive,
			Since:         cl.Net.Stats.Since,
			MessagesIn:    cl.Net.Stats.MessagesReceived.Load(),
			MessagesOut:   cl.Net.Stats.MessagesSent.Load(),
			BytesIn:       cl.Net.Stats.BytesReceived.Load(),
			BytesOut:      cl.Net.Stats.BytesSent.Load(),
		})
	}
	slices.SortFunc(out, func(a, b ConnInfo) int { return strings.Compare(a.ClientID, b.ClientID) })
	return out
}

// SubInfo is one subscription of an open MQTT connection
// (GET /api/v1/subscriptions).
type SubInfo struct {
	ClientID   string `json:"clientId"`
	Filter     string `json:"filter"` // without a $share/<group>/ prefix
	QoS        byte   `json:"qos"`
	ShareGroup string `json:"shareGroup,omitempty"`
	NoLocal    bool   `json:"noLocal,omitempty"`
}

// Subscriptions is the subscriptions of the open connection of id, sorted
// by filter (a shared one by its $share/ form); ok is false when there is
// none.
func (s *Server) Subscriptions(id string) (subs []SubInfo, ok bool) {
	cl, found := s.mochi.Clients.Get(id)
	if !found || cl.Net.Inline || cl.Closed() {
		return nil, false
	}
	return clientSubs(id, cl.State.Subscriptions.GetAll()), true
}

// AllSubscriptions is the subscriptions of every open connection, sorted
// by client id, then filter.
func (s *Server) AllSubscriptions() []SubInfo {
	var out []SubInfo
	for id, cl := range s.mochi.Clients.GetAll() {
		if cl.Net.Inline || cl.Closed() {
			continue
		}
		out = append(out, clientSubs(id, cl.State.Subscriptions.GetAll())...)
	}
	slices.SortFunc(out, func(a, b SubInfo) int {
		if c := strings.Compare(a.ClientID, b.ClientID); c != 0 {
			return c
		}
		return strings.Compare(a.key(), b.key())
	})
	return out
}

// key is the filter as the client subscribed it.
func (si SubInfo) key() string {
	if si.ShareGroup == "" {
		return si.Filter
	}
	return core.ShareFilter(si.ShareGroup, si.Filter)
}

func clientSubs(id string, all map[string]packets.Subscription) []SubInfo {
	out := make([]SubInfo, 0, len(all))
	for key, sub := range all {
		si := SubInfo{ClientID: id, Filter: key, QoS: sub.Qos, NoLocal: sub.NoLocal}
		// mochi keys a shared subscription by its whole $share/ filter.
		if g, f, ok := core.SplitShared(key); ok {
			si.ShareGroup, si.Filter = g, f
		}
		out = append(out, si)
	}
	slices.SortFunc(out, func(a, b SubInfo) int { return strings.Compare(a.key(), b.key()) })
	return out
}

// Disconnect ends the open connection of id, as an operator asks
// (DELETE /api/v1/connections/mqtt:{id}): MQTT 5 gets DISCONNECT 0x98
// Administrative action. Its session is kept, as after any disconnect
// (DeleteSession removes one). It reports whether there was one.
func (s *Server) Disconnect(id string) bool {
	cl, ok := s.mochi.Clients.Get(id)
	if !ok || cl.Net.Inline || cl.Closed() {
		return false
	}
	_ = s.mochi.DisconnectClientNoWait(cl, packets.ErrAdministrativeAction)
	return true
}

func versionName(v byte) string {
	switch v {
	case 3:
		return "3.1"
	case 4:
		return "3.1.1"
	case 5:
		return "5"
	}
	return "unknown"
}
