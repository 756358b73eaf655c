package mqtt

import (
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tolsey/tolsey/core/coretest"
)

// Every goroutine the front-end starts (listeners, connections, backlog
// writers) is gone once its tests have shut it down.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// waitUntil polls cond until it holds, failing the test after 20 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	coretest.Eventually(t, what, 20*time.Second, cond)
}
