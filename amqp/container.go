package amqp

// A container id used by one connection at a time, for a connection that
// asks for it with the desired capability sole-connection-for-container
// (docs/cluster.md, "AMQP container ids"). Qpid JMS asks for it on every
// connection, its container id being the JMS ClientID, which JMS wants
// unique (JMS 2.0 §6.1.2). As ActiveMQ Artemis does, a connection whose
// container id is open already, here or (Options.Containers) on another
// gateway of the cluster, is refused: an open whose properties say
// amqp:connection-establishment-failed, then a close with
// amqp:invalid-field and info {invalid-field: container-id}, which Qpid
// JMS reports as InvalidClientIDException. The connection already open
// stays: the opposite of MQTT's takeover, as JMS wants.

import (
	"sync"
	"time"

	"github.com/tolsey/tolsey/amqp/internal/encoding"
	"github.com/tolsey/tolsey/amqp/internal/frames"
)

// Containers is the cluster as the AMQP front-end sees it
// (bridge/cluster.Cluster, wired by the gateway).
type Containers interface {
	// ClaimContainer tells the other gateways that a connection of
	// container opens here at stamp (unix ns) and reports whether one of
	// them holds an older one. On the connection's reader.
	ClaimContainer(container string, stamp int64) (inUse bool)
}

const (
	capSoleConnection encoding.Symbol = "sole-connection-for-container"
	// propOpenFailed in the open's properties tells the client a close
	// follows at once (the connection is refused).
	propOpenFailed encoding.Symbol = "amqp:connection-establishment-failed"
)

// errContainerInUse ends a connection refused for its container id; finish
// closes it with containerInUse.
var errContainerInUse = &ConnError{Cond: frames.ErrCondInvalidField, Desc: "container-id is in use by another connection"}

// containerInUse is the close's error, with the field named as Artemis
// and Qpid JMS name it.
func containerInUse() *frames.Error {
	return &frames.Error{Condition: frames.ErrCondInvalidField, Description: errContainerInUse.Desc,
		Info: encoding.Fields{{Key: "invalid-field", Value: encoding.Symbol("container-id")}}}
}

// containerIDs is each open connection's container id, with the time it
// opened; mu guards it (readers opening and ending connections, the
// cluster's goroutine asking).
type containerIDs struct {
	mu   sync.Mutex
	open map[string]map[*conn]int64
}

// claimContainer records c's container id and, when the client asked for
// it alone, reports whether it must be refused: an older connection of the
// id is open here or on another gateway.
func (c *conn) claimContainer(open *frames.Open) (refused bool) {
	id := open.ContainerID
	if id == "" {
		return false
	}
	ids := &c.s.ctrs
	stamp := time.Now().UnixNano()
	ids.mu.Lock()
	if ids.open == nil {
		ids.open = map[string]map[*conn]int64{}
	}
	if ids.open[id] == nil {
		ids.open[id] = map[*conn]int64{}
	}
	ids.open[id][c] = stamp
	older := false
	for o, s := range ids.open[id] {
		// Equal stamps (the same nanosecond): the lower connection number
		// is the older, so that exactly one of the two is refused.
		older = older || o != c && (s < stamp || s == stamp && o.id < c.id)
	}
	ids.mu.Unlock()
	if !hasCap(open.DesiredCapabilities, capSoleConnection) {
		return false
	}
	refused = older
	if !refused && c.s.opts.Containers != nil {
		refused = c.s.opts.Containers.ClaimContainer(id, stamp)
	}
	if refused {
		c.s.dropContainer(c) // refused: it holds the id from no one
	}
	return refused
}

// dropContainer forgets c's container id as its connection ends.
func (s *Server) dropContainer(c *conn) {
	ids := &s.ctrs
	ids.mu.Lock()
	defer ids.mu.Unlock()
	if m := ids.open[c.containerID]; m != nil {
		delete(m, c)
		if len(m) == 0 {
			delete(ids.open, c.containerID)
		}
	}
}

// ContainerInUse implements bridge/cluster's Containers: whether a
// connection of container opened here before stamp (equal stamps: this
// gateway's node id sorts first) is open.
func (s *Server) ContainerInUse(container string, stamp int64, node string) bool {
	ids := &s.ctrs
	ids.mu.Lock()
	defer ids.mu.Unlock()
	for _, st := range ids.open[container] {
		if st < stamp || st == stamp && s.opts.Node < node {
			return true
		}
	}
	return false
}
