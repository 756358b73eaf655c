package mqtt

import (
	"slices"
	"strings"

	"github.com/mochi-mqtt/server/v2/packets"
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
		})
	}
	slices.SortFunc(out, func(a, b ConnInfo) int { return strings.Compare(a.ClientID, b.ClientID) })
	return out
}

// Subscriptions is the filters of the open connection of id, sorted; ok
// is false when there is none.
func (s *Server) Subscriptions(id string) (filters []string, ok bool) {
	cl, found := s.mochi.Clients.Get(id)
	if !found || cl.Net.Inline || cl.Closed() {
		return nil, false
	}
	for f := range cl.State.Subscriptions.GetAll() {
		filters = append(filters, f)
	}
	slices.Sort(filters)
	return filters, true
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
