package amqp

import (
	"crypto/tls"
	"net"
	"sync/atomic"

	"github.com/tolsey/tolsey/amqp/internal/frames"
)

// The TLS upgrade on the plain port (AMQP 1.0 part 5 §5.2.1): a client
// that opens with the TLS protocol header "AMQP" 2 1 0 0 gets the same
// header back, then a TLS handshake, then the ordinary header exchange
// (SASL or AMQP) inside TLS, as on amqp.tls.listen. Offered when
// Options.TLS is set; otherwise the TLS header is a header we do not
// speak, answered with one we do before the socket closes [2.2].

// upgradeConn is a connection of the plain listener that may turn to TLS
// at its start. The reader goroutine swaps the TLS layer in once, before
// the writer exists; Shutdown may meanwhile set deadlines on it or close it
// from its own goroutine, hence the atomic pointer. Deadlines go to the TCP
// socket either way: a *tls.Conn's deadlines are its socket's.
type upgradeConn struct {
	net.Conn // the TCP socket
	tls      atomic.Pointer[tls.Conn]
}

func (u *upgradeConn) Read(p []byte) (int, error) {
	if t := u.tls.Load(); t != nil {
		return t.Read(p)
	}
	return u.Conn.Read(p)
}

func (u *upgradeConn) Write(p []byte) (int, error) {
	if t := u.tls.Load(); t != nil {
		return t.Write(p)
	}
	return u.Conn.Write(p)
}

// Close sends TLS's close_notify once upgraded, as a *tls.Conn does.
func (u *upgradeConn) Close() error {
	if t := u.tls.Load(); t != nil {
		return t.Close()
	}
	return u.Conn.Close()
}

// CloseWrite lets linger half-close either layer.
func (u *upgradeConn) CloseWrite() error {
	if t := u.tls.Load(); t != nil {
		return t.CloseWrite()
	}
	if cw, ok := u.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// ConnectionState is the TLS state once upgraded (the zero state before),
// for tlsconf.VerifiedPeer: EXTERNAL works after an upgrade as on
// amqp.tls.listen.
func (u *upgradeConn) ConnectionState() tls.ConnectionState {
	if t := u.tls.Load(); t != nil {
		return t.ConnectionState()
	}
	return tls.ConnectionState{}
}

// canUpgrade reports whether a TLS header may be answered with TLS now:
// a plain-port connection, not yet upgraded (a TLS header inside TLS is
// refused, §5.2.1: a peer already using TLS does not send it).
func (c *conn) canUpgrade() bool {
	u, ok := c.nc.(*upgradeConn)
	return ok && u.tls.Load() == nil
}

// startTLS answers the TLS header and runs the server side of the TLS
// handshake, within the handshake deadline serve set on the socket. Bytes
// the client pipelined behind its header (the ClientHello) are in the
// frames.Reader's buffer and are fed to TLS first; a new Reader then reads
// through TLS.
func (c *conn) startTLS() error {
	u := c.nc.(*upgradeConn)
	if err := c.writeHeader(frames.HeaderTLS); err != nil {
		return err
	}
	pending := c.r.Buffered()
	tc := tls.Server(&prefixConn{Conn: u.Conn, pending: pending}, c.s.opts.TLS)
	if err := tc.Handshake(); err != nil {
		return err
	}
	u.tls.Store(tc)
	c.r = c.newFrameReader()
	c.log.Debug("amqp connection upgraded to TLS", "version", tls.VersionName(tc.ConnectionState().Version))
	return nil
}

// prefixConn reads pending before the socket.
type prefixConn struct {
	net.Conn
	pending []byte // owned by the reader goroutine, which alone reads
}

func (p *prefixConn) Read(b []byte) (int, error) {
	if len(p.pending) > 0 {
		n := copy(b, p.pending)
		p.pending = p.pending[n:]
		return n, nil
	}
	return p.Conn.Read(b)
}
