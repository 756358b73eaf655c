package queue_test

import (
	"testing"

	"github.com/tolsey/tolsey/core/queue"
	"github.com/tolsey/tolsey/core/queue/queuetest"
)

func TestMemoryBackend(t *testing.T) {
	queuetest.Run(t, func(t *testing.T) (queue.Backend, func(queue.Backend) queue.Backend) {
		return queue.NewMemory(), nil
	})
}
