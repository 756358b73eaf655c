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
		ci := ConnInfo{ID: c.id, Remote: c.nc.RemoteAddr().String(), Since: c.since}
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
	s.mu.Lock()
	var found *conn
	for c := range s.conns {
		if c.id == id {
			found = c
			break
		}
	}
	s.mu.Unlock()
	// One that is closing already (a DELETE before, a shutdown) is not
	// open: it stays in conns until its goroutines end.
	if found == nil || !found.forced.CompareAndSwap(false, true) {
		return false
	}
	found.forceClose()
	return true
}
