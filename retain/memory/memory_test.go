package memory

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/tolsey/tolsey/retain"
	"github.com/tolsey/tolsey/retain/retaintest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConformance(t *testing.T) {
	retaintest.Run(t, func(t *testing.T, limits retain.Limits) retain.Store {
		s := New(limits)
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}
