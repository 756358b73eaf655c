package rig

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Term sends SIGTERM and waits up to limit for the child to exit; it
// returns the exit code (-1: still running at limit, then killed).
func (c *Child) Term(limit time.Duration) int {
	c.killed.Store(true)
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
		return c.cmd.ProcessState.ExitCode()
	case <-time.After(limit):
		c.Kill()
		return -1
	}
}

// HWM is the child's peak resident set size so far in bytes (VmHWM).
func (c *Child) HWM() (int64, error) { return procStatus(c.PID, "VmHWM:") }

// procStatus reads one "kB" field of /proc/PID/status, in bytes.
func procStatus(pid int, field string) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no %s for pid %d", field, pid)
}
