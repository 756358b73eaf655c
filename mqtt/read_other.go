//go:build !unix

package mqtt

import "errors"

// readNonblocking is not offered here: drainConn then reads without
// read-ahead.
func readNonblocking(uintptr, []byte) (int, error) {
	return 0, errors.ErrUnsupported
}
