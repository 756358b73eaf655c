// Package coretest holds what the tests of every package share: a log sink
// goroutines write to while the test reads it, polling for a condition
// instead of sleeping, and running a child test process to kill -9. Only tests import it (test/arch checks); it imports
// nothing of ours.
package coretest

import (
	"bytes"
	"sync"
	"testing"
	"time"
)

// SyncBuffer is a bytes.Buffer that a logger or a child process writes to
// while the test reads it.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String is what has been written so far.
func (b *SyncBuffer) String() string {
	if b == nil {
		return ""
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Eventually polls cond every 10 ms until it holds, and fails the test,
// naming what it waited for, once within has passed.
func Eventually(t testing.TB, what string, within time.Duration, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(within); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
