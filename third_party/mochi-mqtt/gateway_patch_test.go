package mqtt

// Tests of the gateway's patches to mochi (see README.md in this directory).

import (
	"bufio"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/stretchr/testify/require"
)

func TestOutboundQueueRingOrderGrowthAndRelease(t *testing.T) {
	var q outboundQueue
	pks := make([]*packets.Packet, 100)
	for i := range pks {
		pks[i] = &packets.Packet{PacketID: uint16(i)}
	}
	next := 0
	// Interleave pushes and pops so the ring wraps before it grows.
	for i, pk := range pks {
		q.push(pk)
		if i%3 == 2 {
			require.Same(t, pks[next], q.pop())
			next++
		}
	}
	require.Equal(t, len(pks)-next, q.Len())
	require.Greater(t, len(q.ring), keptRing)
	for ; next < len(pks); next++ {
		require.Same(t, pks[next], q.pop())
	}
	require.Nil(t, q.pop())
	require.Equal(t, 0, q.Len())
	require.Nil(t, q.ring, "an emptied queue keeps no ring larger than keptRing")

	q.push(pks[0])
	require.Same(t, pks[0], q.pop())
	require.Len(t, q.ring, keptRing, "a small ring is kept for the next packet")
}

// Packets queued from several goroutines are written once each, each
// producer's in its order, by writers that start and stop with the queue;
// when none is queued no writer runs.
func TestOutboundQueueWritesEverythingInOrder(t *testing.T) {
	cl, r, w := newTestClient()
	defer w.Close()
	cl.ops.options.Capabilities.MaximumClientWritesPending = 1 << 20

	const producers, each = 4, 500
	got := make(chan []uint16, 1)
	go func() {
		var ids []uint16
		br := bufio.NewReader(r)
		for len(ids) < producers*each {
			fh := new(packets.FixedHeader)
			b, err := br.ReadByte()
			if err != nil {
				break
			}
			require.NoError(t, fh.Decode(b))
			fh.Remaining, _, err = packets.DecodeLength(br)
			require.NoError(t, err)
			body := make([]byte, fh.Remaining)
			_, err = io.ReadFull(br, body)
			require.NoError(t, err)
			pk := packets.Packet{FixedHeader: *fh, ProtocolVersion: 4}
			require.NoError(t, pk.PubackDecode(body))
			ids = append(ids, pk.PacketID)
		}
		got <- ids
	}()

	var wg sync.WaitGroup
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			for i := 0; i < each; i++ {
				pk := &packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Puback}, PacketID: uint16(p*each + i + 1)}
				require.True(t, cl.enqueue(pk))
			}
		}(p)
	}
	wg.Wait()
	ids := <-got
	require.Len(t, ids, producers*each)
	last := make([]uint16, producers)
	for _, id := range ids {
		p := int(id-1) / each
		require.Greater(t, id, last[p], "producer %d's packets out of order", p)
		last[p] = id
	}

	q := &cl.State.outbound
	require.Eventually(t, func() bool {
		q.mu.Lock()
		defer q.mu.Unlock()
		return !q.writing
	}, 5*time.Second, time.Millisecond, "the writer stops once the queue is empty")
	require.Equal(t, int32(0), cl.State.outboundQty)
}

func TestEnqueueRefusesOverMaximumClientWritesPending(t *testing.T) {
	cl, _, w := newTestClient()
	defer w.Close()
	q := &cl.State.outbound
	q.mu.Lock() // holds the writer off: nothing is written meanwhile
	q.writing = true
	q.mu.Unlock()
	max := int(cl.ops.options.Capabilities.MaximumClientWritesPending)
	for i := 0; i < max; i++ {
		require.True(t, cl.enqueue(new(packets.Packet)))
	}
	require.False(t, cl.enqueue(new(packets.Packet)))
	require.Equal(t, max, q.Len())
}

// waitWritten waits until every packet queued for cl has been written.
func waitWritten(cl *Client) {
	for atomic.LoadInt32(&cl.State.outboundQty) > 0 {
		time.Sleep(time.Millisecond)
	}
}

// Inflight messages come back in the order they were set, whatever their
// packet ids and however many share a creation second; an update keeps its
// place, and a clone keeps the order.
func TestInflightGetAllKeepsSetOrder(t *testing.T) {
	i := NewInflights()
	var want []uint16
	for n := 0; n < 300; n++ {
		id := uint16((n*7919)%65000 + 1) // ids out of numeric order
		i.Set(packets.Packet{PacketID: id, Created: 1_700_000_000})
		want = append(want, id)
	}
	i.Set(packets.Packet{PacketID: want[5], Created: 1_700_000_001}) // an update (PUBREL)
	require.True(t, i.Delete(want[7]))
	want = append(want[:7], want[8:]...)

	ids := func(pks []packets.Packet) []uint16 {
		var out []uint16
		for _, pk := range pks {
			out = append(out, pk.PacketID)
		}
		return out
	}
	require.Equal(t, want, ids(i.GetAll(false)))
	require.Equal(t, want, ids(i.Clone().GetAll(false)))
}
