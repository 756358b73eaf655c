package accept

import (
	"errors"
	"net"
	"syscall"
	"testing"
	"time"
)

// TestSendBufferBoundsAStuckClient: a client that never reads can hold no
// more of the server's writes in the kernel than the send buffer set by
// SetSendBuffer (Linux doubles the value for its own bookkeeping; the
// client's small receive buffer adds a few KiB). Without it, Linux autotunes
// the buffer up to net.ipv4.tcp_wmem's maximum, megabytes per stuck client
// (drill 5, docs/reliability.md).
func TestSendBufferBoundsAStuckClient(t *testing.T) {
	const sendBuffer = 64 << 10
	_, l, _ := listen(t)
	l.SetSendBuffer(sendBuffer)

	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
		})
		return errors.Join(err, serr)
	}}
	client, err := d.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close() // never read
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	// Write until a write has waited 500 ms for the client to read: what
	// went out sits in the kernel's buffers.
	chunk := make([]byte, 64<<10)
	written := 0
	for {
		_ = c.SetWriteDeadline(time.Now().Add(500 * time.Millisecond))
		n, err := c.Write(chunk)
		written += n
		if err != nil {
			var ne net.Error
			if !errors.As(err, &ne) || !ne.Timeout() {
				t.Fatalf("write: %v", err)
			}
			break
		}
		if written > 64<<20 {
			t.Fatal("64 MiB written to a client that does not read")
		}
	}
	if limit := 4*sendBuffer + 64<<10; written > limit {
		t.Errorf("a client that never reads took %d KiB of writes, want at most %d KiB", written>>10, limit>>10)
	}
	t.Logf("a client that never reads took %d KiB", written>>10)
}
