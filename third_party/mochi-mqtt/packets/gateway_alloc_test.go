package packets

import (
	"bytes"
	"testing"
)

// TestPublishEncodeGrowsOnce (gateway patch 35): a PUBLISH encoded into an
// empty buffer allocates once, the buffer the size of the packet; before
// the patch it was twice (64 bytes for the header, then room for the
// payload), and the pooled buffers of patch 27's shared encodings begin
// empty whenever the garbage collector has emptied their pool.
func TestPublishEncodeGrowsOnce(t *testing.T) {
	for _, v := range []byte{4, 5} {
		pk := Packet{FixedHeader: FixedHeader{Type: Publish}, TopicName: "load/p0/s0", Payload: make([]byte, 64), ProtocolVersion: v}
		var n int
		allocs := testing.AllocsPerRun(100, func() {
			var buf bytes.Buffer
			if err := pk.PublishEncode(&buf); err != nil {
				t.Fatal(err)
			}
			n = buf.Len()
		})
		if allocs > 1 {
			t.Errorf("MQTT %d: %v allocations per encode of %d bytes, want 1", v, allocs, n)
		}
	}
}
