//go:build unix

package mqtt

import (
	"errors"
	"syscall"
)

// readAheadSupported: connections read ahead without blocking (drainConn,
// wsConn).
const readAheadSupported = true

// readNonblocking is one read(2) on a socket Go keeps non-blocking: with
// no data it fails with EAGAIN instead of waiting.
func readNonblocking(fd uintptr, p []byte) (int, error) {
	return syscall.Read(int(fd), p)
}

// wouldBlock reports whether a readNonblocking error only means "no data
// now".
func wouldBlock(err error) bool {
	return errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EINTR)
}
