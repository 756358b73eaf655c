package mqtt

import (
	"net"
	"os"
	"sync"
	"syscall"
)

// readAheadSize is the most one read takes from the socket while bytes keep
// arriving. mochi reads through a small bufio.Reader (256 B,
// ClientNetReadBufferSize, which every connection holds); this buffer comes
// from a pool and is held only while the socket has data, so a busy
// connection reads 4 KiB a system call and an idle one holds nothing.
const readAheadSize = 4 << 10

var readAheadPool = sync.Pool{New: func() any { return new([readAheadSize]byte) }}

// readAhead is a connection's read-ahead (drainConn, wsConn): non-blocking
// reads into a pooled buffer, held only while the socket has data. Its user
// reads only from one goroutine at a time.
type readAhead struct {
	conn    net.Conn
	raw     syscall.RawConn       // nil: no read-ahead (not a socket, or not on this OS)
	rawRead func(fd uintptr) bool // a.readNow, bound once
	buf     *[readAheadSize]byte  // nil while the socket is quiet
	n       int                   // readNow's result
	err     error
}

func (a *readAhead) init(c net.Conn) {
	a.conn = c
	if sc, ok := c.(syscall.Conn); ok && readAheadSupported {
		if raw, err := sc.SyscallConn(); err == nil {
			a.raw, a.rawRead = raw, a.readNow
		}
	}
}

// fill reads what the socket holds, without waiting, and returns it: bytes
// of the pooled buffer, valid until the next fill or release. With nothing
// there, or at the end of the stream (which the plain read that follows
// reports), it lets the buffer go and returns none; a read error is
// returned.
func (a *readAhead) fill() ([]byte, error) {
	if a.raw == nil {
		return nil, nil
	}
	if a.buf == nil {
		a.buf = readAheadPool.Get().(*[readAheadSize]byte)
	}
	a.n, a.err = 0, nil
	err := a.raw.Read(a.rawRead)
	if err == nil && a.err == nil && a.n > 0 {
		return a.buf[:a.n], nil
	}
	a.release()
	// RawConn.Read's own error (an expired deadline, a closed connection)
	// is left to the plain read that follows, which reports it as usual.
	if err != nil || a.err == nil || wouldBlock(a.err) {
		return nil, nil
	}
	return nil, &net.OpError{Op: "read", Net: "tcp", Source: a.conn.LocalAddr(), Addr: a.conn.RemoteAddr(), Err: os.NewSyscallError("read", a.err)}
}

// readNow is one non-blocking read (Go's sockets are non-blocking: no
// data is EAGAIN); returning true tells RawConn.Read not to wait.
func (a *readAhead) readNow(fd uintptr) bool {
	a.n, a.err = readNonblocking(fd, a.buf[:])
	return true
}

// release returns the buffer to the pool; what fill returned is gone.
func (a *readAhead) release() {
	if a.buf != nil {
		readAheadPool.Put(a.buf)
		a.buf = nil
	}
}
