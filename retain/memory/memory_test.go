package memory

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/gatewayd/gateway/retain"
	"github.com/gatewayd/gateway/retain/retaintest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConformance(t *testing.T) {
	retaintest.Run(t, func(t *testing.T, limits retain.Limits) retain.Store {
		s := New(limits)
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}
