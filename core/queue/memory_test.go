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

// TestDeliveryStateEncoding: a state reads back as written, and a damaged
// one is refused rather than read past its end or into a huge list.
func TestDeliveryStateEncoding(t *testing.T) {
	in := queue.DeliveryState{Count: 7, Skip: []string{"c\x00link-a", ""}}
	b, _ := in.AppendBinary(nil)
	var out queue.DeliveryState
	if err := out.UnmarshalBinary(b); err != nil || out.Count != 7 || len(out.Skip) != 2 || out.Skip[0] != in.Skip[0] || out.Skip[1] != "" {
		t.Fatalf("read back %+v, %v", out, err)
	}
	for _, bad := range [][]byte{nil, {0, 0, 1}, append(b[:4:4], 9, 'x'), append(b[:4:4], 0xff)} {
		if err := out.UnmarshalBinary(bad); err == nil {
			t.Fatalf("%q read as %+v", bad, out)
		}
	}
}
