package mqtt

import (
	"testing"

	"go.uber.org/goleak"
)

// Every goroutine the front-end starts (listeners, connections, backlog
// writers) is gone once its tests have shut it down.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
