//go:build unix

package mqtt

import (
	"syscall"
	"time"
)

// processCPU is the CPU time the test process has used (user + system),
// for benchmarks that report CPU per message next to wall time: on a
// shared machine the wall time also counts the waits for a core.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
