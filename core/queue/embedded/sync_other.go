//go:build !linux

package embedded

import "os"

// fdatasync is File.Sync where the system has no fdatasync (it flushes
// metadata too).
func fdatasync(f *os.File) error { return f.Sync() }
