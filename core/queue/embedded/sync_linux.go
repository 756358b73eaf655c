//go:build linux

package embedded

import (
	"os"
	"syscall"
)

// fdatasync flushes f's data (and the size, when it grew) without the
// rest of its metadata: the write-ahead log's one flush per commit.
func fdatasync(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		for {
			serr = syscall.Fdatasync(int(fd))
			if serr != syscall.EINTR {
				return
			}
		}
	}); err != nil {
		return err
	}
	return serr
}
