package amqp

import (
	"slices"
	"time"
)

// ConnInfo is one open AMQP connection (GET /api/v1/connections).
type ConnInfo struct {
	ID          uint64    `json:"id"` // the connection's number, as in the logs (conn=)
	ContainerID string    `json:"containerId,omitempty"`
	User        string    `json:"user,omitempty"`
	Remote      string    `json:"remote"`
	Since       time.Time `json:"connectedSince"`
	Open        bool      `json:"open"` // the AMQP open was exchanged (container id and user are known)
	Links       int       `json:"links"`
	// Whole messages received on links and deliveries sent; bytes of
	// every frame, protocol header and SASL exchange, inside any TLS.
	MessagesIn  int64 `json:"messagesIn"`
	MessagesOut int64 `json:"messagesOut"`
	BytesIn     int64 `json:"bytesIn"`
	BytesOut    int64 `json:"bytesOut"`
}

// ConnectionList lists the open AMQP connections, by number. The
// container id and user are those of connections past their open frame
// (they are final then, and set by the reader before opened).
func (s *Server) ConnectionList() []ConnInfo {
	s.mu.Lock()
	out := make([]ConnInfo, 0, len(s.conns))
	for c := range s.conns {
		if c.forced.Load() {
			continue // closing: not open any more
		}
		ci := ConnInfo{ID: c.id, Remote: c.nc.RemoteAddr().String(), Since: c.since,
			MessagesIn: c.stats.msgsIn.Load(), MessagesOut: c.stats.msgsOut.Load(),
			BytesIn: c.stats.bytesIn.Load(), BytesOut: c.stats.bytesOut.Load()}
		c.linkReg.mu.Lock()
		ci.Links = len(c.linkReg.m)
		c.linkReg.mu.Unlock()
		if c.opened.Load() {
			ci.Open, ci.ContainerID, ci.User = true, c.containerID, c.ident.User
		}
		out = append(out, ci)
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b ConnInfo) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
	return out
}

// Disconnect closes connection number id with amqp:connection:forced, as
// an operator asks (DELETE /api/v1/connections/amqp:{id}). It reports
// whether it was open.
func (s *Server) Disconnect(id uint64) bool {
	// One that is closing already (a DELETE before, a shutdown) is not
	// open: it stays in conns until its goroutines end.
	c := s.connByID(id)
	if c == nil || !c.forced.CompareAndSwap(false, true) {
		return false
	}
	c.forceClose()
	return true
}

// SubInfo is one receiving link of an open connection, as a subscription
// (GET /api/v1/subscriptions): its source address is the filter.
type SubInfo struct {
	Conn        uint64 // the connection's number
	ContainerID string
	Link        LinkInfo
}

// Subscriptions is the receiving links of every open connection, by
// connection number, then address and link name.
func (s *Server) Subscriptions() []SubInfo {
	var out []SubInfo
	for _, ci := range s.ConnectionList() {
		links, ok := s.Links(ci.ID)
		if !ok {
			continue
		}
		for _, l := range links {
			if l.Role == "receiver" {
				out = append(out, SubInfo{Conn: ci.ID, ContainerID: ci.ContainerID, Link: l})
			}
		}
	}
	return out
}
