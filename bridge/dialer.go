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
// and keeps every one still open, so that Stop can close them under a
// write that waits on a peer which stopped reading: nats.go holds its
// connection lock across such a write for up to its one-minute write
// timeout, and Close, Drain and IsConnected all wait for that lock.
//
// Every one, not the last: more than one nats.Conn dials through it. The
// cluster's connection for shared subscriptions is made from a copy of
// the bridge connection's options (bridge/cluster, shares.start), this
// dialer with them; keeping the last connection dialed, the stop's
// deadline cut that one (closed already, the cluster stops first) and
// left the bridge's own blocked.
type abortDialer struct {
	mu      sync.Mutex
	conns   map[*dialedConn]struct{} // guarded by mu: dialed and not closed
	aborted bool                     // guarded by mu
}

// dialedConn is a connection the dialer made; closing it forgets it.
type dialedConn struct {
	net.Conn
	d *abortDialer
}

// Close implements net.Conn.
func (c *dialedConn) Close() error {
	c.d.mu.Lock()
	delete(c.d.conns, c)
	c.d.mu.Unlock()
	return c.Conn.Close()
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
	dc := &dialedConn{Conn: c, d: a}
	if a.conns == nil {
		a.conns = map[*dialedConn]struct{}{}
	}
	a.conns[dc] = struct{}{}
	return dc, nil
}

// abort closes every connection still open and refuses new ones.
func (a *abortDialer) abort() {
	a.mu.Lock()
	a.aborted = true
	conns := make([]*dialedConn, 0, len(a.conns))
	for c := range a.conns {
		conns = append(conns, c)
	}
	a.mu.Unlock()
	for _, c := range conns {
		_ = c.SetDeadline(time.Now())
		_ = c.Close()
	}
}
