package bridge

import (
	"errors"
	"net"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// errAborted is what a dial answers once the bridge is stopping.
var errAborted = errors.New("bridge nats: stopping")

// abortDialer dials nats.go's connections as nats.go itself would (a TCP
// dial bounded by its default connect timeout; nats.go puts TLS on top)
// and keeps the last one, so that Stop can close it under a write that
// waits on a peer which stopped reading: nats.go holds its connection
// lock across such a write for up to its one-minute write timeout, and
// Close, Drain and IsConnected all wait for that lock.
//
// The last one, not every one: nats.go leaves a connection whose
// handshake failed on a reconnect (TLS, INFO, auth) unclosed for the
// collector, which a set kept here would stop. So it serves one
// nats.Conn: the bridge's. The cluster's connection for shared
// subscriptions, made from a copy of the bridge connection's options,
// dials without it (bridge/cluster, shares.start); dialing through it, it
// took the last place, and a stop's deadline cut that connection (closed
// already: the cluster stops first) and not the bridge's.
type abortDialer struct {
	mu      sync.Mutex
	conn    net.Conn // guarded by mu
	aborted bool     // guarded by mu
}

// Dial implements nats.CustomDialer.
func (a *abortDialer) Dial(network, address string) (net.Conn, error) {
	d := net.Dialer{Timeout: nats.DefaultTimeout}
	c, err := d.Dial(network, address)
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.aborted {
		c.Close()
		return nil, errAborted
	}
	a.conn = c
	return c, nil
}

// abort closes the current connection and refuses new ones.
func (a *abortDialer) abort() {
	a.mu.Lock()
	a.aborted = true
	c := a.conn
	a.mu.Unlock()
	if c != nil {
		_ = c.SetDeadline(time.Now())
		_ = c.Close()
	}
}
