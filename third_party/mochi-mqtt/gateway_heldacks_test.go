package mqtt

import (
	"bytes"
	"net"
	"sync/atomic"
	"testing"

	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/stretchr/testify/require"
)

// writeCounter counts the writes made to its connection.
type writeCounter struct {
	net.Conn
	writes atomic.Int32
}

func (c *writeCounter) Write(b []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(b)
}

// TestReaderAcksWrittenPerBurst (patch 26): QoS 1 PUBLISHes that arrived
// together are answered with their PUBACKs in order, in one write per
// heldAcksMax acks, where each PUBACK was a write of its own (100 for
// 100); QoS 2 PUBRECs alike. A packet handled outside a burst (a direct
// call) is answered at once.
func TestReaderAcksWrittenPerBurst(t *testing.T) {
	for _, qos := range []byte{1, 2} {
		s := newServer()
		r, w := net.Pipe()
		defer r.Close()
		conn := &writeCounter{Conn: w}
		cl := s.NewClient(conn, "t", "pub", false)
		cl.Properties.ProtocolVersion = 4
		const n = 100
		cl.State.Inflight.ResetReceiveQuota(n + 1) // QoS 2 keeps it until PUBCOMP
		var in bytes.Buffer
		for i := 1; i <= n; i++ {
			pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: qos}, TopicName: "a/b",
				PacketID: uint16(i), Payload: []byte("x"), ProtocolVersion: 4}
			require.NoError(t, pk.PublishEncode(&in))
		}
		go func() { _, _ = r.Write(in.Bytes()) }() // one write: all of it arrives in one read
		got := make(chan []uint16, 1)
		go func() { got <- readPubackIDs(r, n) }()

		require.NoError(t, cl.awaitInput())
		require.Equal(t, in.Len(), cl.Net.bconn.Buffered(), "the test needs every PUBLISH read at once")
		require.NoError(t, cl.readBurst(s.receivePacket))
		ids := <-got
		require.Len(t, ids, n)
		for i, id := range ids {
			require.Equal(t, uint16(i+1), id, "acks in the order of their PUBLISHes [MQTT-4.6.0-2]")
		}
		require.Equal(t, int32((n+heldAcksMax-1)/heldAcksMax), conn.writes.Load(), "writes for %d acks at QoS %d", n, qos)

		conn.writes.Store(0)
		go func() { got <- readPubackIDs(r, 1) }()
		pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: qos}, TopicName: "a/b",
			PacketID: n + 1, Payload: []byte("x")}
		require.NoError(t, s.processPacket(cl, pk))
		require.Equal(t, []uint16{n + 1}, <-got, "a packet handled outside a burst is answered at once")
		require.Equal(t, int32(1), conn.writes.Load())
		cl.Stop(nil)
	}
}
