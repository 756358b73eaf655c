//go:build unix

package mqtt

import "syscall"

// readNonblocking is one read(2) on a socket Go keeps non-blocking: with
// no data it fails with EAGAIN instead of waiting.
func readNonblocking(fd uintptr, p []byte) (int, error) {
	return syscall.Read(int(fd), p)
}
