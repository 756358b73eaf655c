package mqtt

// Gateway patch 20: how the server closes a connection it ends, so that the
// DISCONNECT it sent last reaches a client that reads it.
//
// Upstream's Stop closed the socket at once. That lost the DISCONNECT two
// ways. A DISCONNECT that could not wait for a write in progress
// (DisconnectClientNoWait: a revocation, a shutdown, a takeover) was left
// for that write's goroutine, which wrote it into the socket Stop had
// closed. And closing a TCP socket with bytes the server had not read
// (the client's next PINGREQ or PUBLISH) sends a reset, and the client's
// kernel drops what it had received but the client not yet read: the
// DISCONNECT went with it. TestServerDisconnectReachesReadingClient lost
// about one in five of 200 DISCONNECTs, both ways.
//
// Now Stop closes the connection in two halves, each bounded by closeGrace
// so that a client that stopped reading holds nothing:
//
//   - the writes end once no write is in progress (endWrites, by Stop or
//     by whoever holds wmu after it, as writePending does): a DISCONNECT
//     left pending is written, what is buffered is flushed, and nothing
//     more is written;
//   - the reader, woken at once, ends the client as before, and then reads
//     what the client still sends, to its end or closeGrace (drainConn), so
//     that the close sends no reset.
//
// Whichever half ends last closes the socket (closeRefs). No goroutine is
// started: the reader's goroutine drains, a writer's ends the writes.
//
// No FIN goes early (no half-close): a client reading with two threads at
// once spins on an end of stream (the gateway's drainConn in mqtt/ notes
// it of the Paho test client), and a client that reads the DISCONNECT
// closes its side, which ends the drain.

import (
	"crypto/tls"
	"io"
	"net"
	"time"
)

// The states of ClientConnection.ending.
const (
	notEnding   int32 = iota
	stopping          // Stop was called: the writes end once wmu is free
	writesEnded       // nothing more is written
)

// closeGrace bounds each half of a stopped connection's close: the writes
// left (a write in progress, a DISCONNECT pending) and the reader's drain.
const closeGrace = time.Second

// socket is a connection on a socket (*net.TCPConn, *net.UnixConn, and the
// gateway's wrappers of them), which a close with unread bytes resets; a
// net.Pipe is none.
type socket interface{ CloseRead() error }

// endConn is Stop's end of the network connection.
func (cl *Client) endConn() {
	c := cl.Net.Conn
	cl.Net.closeRefs.Add(1) // the writes' half
	by := time.Now().Add(closeGrace)
	cl.Net.closeBy.Store(by.UnixNano())
	_ = c.SetWriteDeadline(by)
	_ = c.SetReadDeadline(time.Now()) // the reader ends now; it drains later
	cl.Net.ending.Store(stopping)
	cl.writePending()
}

// keepCloseDeadline brings a write deadline a writer set back to a stopped
// connection's, when it set a later one (writeOut re-arms its own). Stop
// may set its deadline before or after the writer: it loads closeBy after
// its own deadline is set, so the earlier of the two stands either way.
func (cl *Client) keepCloseDeadline(set time.Time) {
	if by := cl.Net.closeBy.Load(); by != 0 && by < set.UnixNano() {
		_ = cl.Net.Conn.SetWriteDeadline(time.Unix(0, by))
	}
}

// endWrites flushes what is buffered of a stopped connection, after the
// DISCONNECT pending, if any, was written; nothing is written after it.
// The caller holds wmu.
func (cl *Client) endWrites() {
	cl.Net.ending.Store(writesEnded)
	if !cl.State.writesDone.Load() {
		_ = cl.flushOutbuf()
	}
	cl.releaseConn()
}

// drainConn is the reader's half of a stopped connection's close: what the
// client still sends is read and dropped until it closes its side or
// closeGrace ends, so that closing the socket sends no reset, which would
// make the client's kernel drop the DISCONNECT unread. A TLS connection
// is drained below TLS: its reads fail for good once one has timed out, as
// Stop's did. Only a socket is drained.
func (cl *Client) drainConn() {
	var c net.Conn = cl.Net.Conn
	if c == nil {
		return
	}
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	if _, ok := c.(socket); ok {
		_ = c.SetReadDeadline(time.Now().Add(closeGrace))
		_, _ = io.Copy(io.Discard, c)
	}
	cl.releaseConn()
}

// releaseConn ends one half of the close; the last one closes the socket.
func (cl *Client) releaseConn() {
	if cl.Net.closeRefs.Add(-1) == 0 {
		_ = cl.Net.Conn.Close()
	}
}
