package mqtt

import (
	"sync/atomic"
	"time"
)

// ConnStats are one connection's own counters (gateway patch 33): what
// mochi counts for the whole server in system.Info, counted again per
// client, for an operator who asks which connection sends or receives
// what (the gateway's GET /api/v1/connections). Each is one atomic add
// beside the server-wide one, on the client's own memory: the reader adds
// what comes in, the writers what goes out.
type ConnStats struct {
	Since            time.Time // the connection was accepted
	BytesReceived    atomic.Int64
	BytesSent        atomic.Int64
	MessagesReceived atomic.Int64 // PUBLISH packets read
	MessagesSent     atomic.Int64 // PUBLISH packets written
}
