package e2e

import (
	"testing"

	"go.uber.org/goleak"
)

// Gateways started by these tests stop every goroutine they started
// (listeners, connections, backlog writers, store loops), even after real
// clients, a Redis outage and slow subscribers.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
