//go:build !unix

package mqtt

import "errors"

// readAheadSupported: not here; connections read without read-ahead.
const readAheadSupported = false

func readNonblocking(uintptr, []byte) (int, error) { return 0, errors.ErrUnsupported }

func wouldBlock(error) bool { return true }
