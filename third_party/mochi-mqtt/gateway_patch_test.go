package mqtt

// Tests of the gateway's patches to mochi (see README.md in this directory).

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net"
	"sort"
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
	go func() { got <- readPubackIDs(r, producers*each) }()

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
	var ids []uint16
	select {
	case ids = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("not every queued packet was written (a lost wake-up?)")
	}
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

// readPubackIDs reads n PUBACKs from r and returns their packet ids; it stops
// early (returning fewer) at the first error.
func readPubackIDs(r io.Reader, n int) []uint16 {
	var ids []uint16
	br := bufio.NewReader(r)
	for len(ids) < n {
		fh := new(packets.FixedHeader)
		b, err := br.ReadByte()
		if err != nil || fh.Decode(b) != nil {
			break
		}
		if fh.Remaining, _, err = packets.DecodeLength(br); err != nil {
			break
		}
		body := make([]byte, fh.Remaining)
		if _, err := io.ReadFull(br, body); err != nil {
			break
		}
		pk := packets.Packet{FixedHeader: *fh, ProtocolVersion: 4}
		if pk.PubackDecode(body) != nil {
			break
		}
		ids = append(ids, pk.PacketID)
	}
	return ids
}

// The writer exits whenever the queue empties and the next packet starts a
// new one: packets queued one at a time, each waited for, from several
// goroutines, are all written; a closed client's queue is dropped and its
// count returns to 0.
func TestOutboundWriterStartsAndStopsWithTheQueue(t *testing.T) {
	cl, r, w := newTestClient()
	defer w.Close()
	const producers, each = 4, 300
	got := make(chan []uint16, 1)
	go func() { got <- readPubackIDs(r, producers*each) }()
	var wg sync.WaitGroup
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			for i := 0; i < each; i++ {
				pk := &packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Puback}, PacketID: uint16(p*each + i + 1)}
				for !cl.enqueue(pk) { // the queue holds 3 (newTestClient)
					time.Sleep(time.Microsecond)
				}
				if i%7 == 0 {
					waitWritten(cl) // let the writer run dry and exit
				}
			}
		}(p)
	}
	wg.Wait()
	select {
	case ids := <-got:
		require.Len(t, ids, producers*each)
	case <-time.After(10 * time.Second):
		t.Fatal("not every queued packet was written (a lost wake-up?)")
	}

	// Closed: what is queued is dropped, and the count goes back to 0.
	cl.Stop(errClientStop)
	for i := 0; i < 3; i++ {
		cl.enqueue(&packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Puback}, PacketID: 1})
	}
	require.Eventually(t, func() bool { return atomic.LoadInt32(&cl.State.outboundQty) == 0 },
		5*time.Second, time.Millisecond)
}

// A will's copy queued for an offline MQTT 5 subscriber expires as any
// MQTT 5 publish does (upstream built the will with protocol version 0,
// which expiry never applies to).
func TestWillCopiesExpire(t *testing.T) {
	s := newServer()
	sub := s.NewClient(nil, "t", "sub", false)
	sub.Properties.ProtocolVersion = 5
	s.Clients.Add(sub)
	s.Topics.Subscribe("sub", packets.Subscription{Filter: "w/#", Qos: 1})

	dying := s.NewClient(nil, "t", "dying", false)
	dying.Properties.ProtocolVersion = 5
	dying.Properties.Will = Will{Flag: 1, TopicName: "w/will", Payload: []byte("x"), Qos: 1, MessageExpiryInterval: 1}
	s.sendLWT(dying)
	require.Equal(t, 1, sub.State.Inflight.Len())

	s.clearExpiredInflights(time.Now().Unix() + 10)
	require.Equal(t, 0, sub.State.Inflight.Len(), "the expired will is still queued for the offline subscriber")
}

// A PUBACK written directly while a packet is queued is buffered; when that
// queued packet is then refused before it is written (larger than the
// client's Maximum Packet Size), the PUBACK still goes out.
func TestRefusedQueuedPacketStrandsNothing(t *testing.T) {
	cl, r, w := newTestClient()
	defer w.Close()
	cl.ops.options.ClientNetWriteBufferSize = 2048
	cl.Properties.ProtocolVersion = 5
	cl.Properties.Props.MaximumPacketSize = 64
	got := make(chan []uint16, 1)
	go func() { got <- readPubackIDs(r, 1) }()

	q := &cl.State.outbound
	big := &packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish}, TopicName: "a", Payload: make([]byte, 200)}
	q.mu.Lock()
	q.writing = true // the writer has not run yet
	q.push(big)
	q.mu.Unlock()
	atomic.AddInt32(&cl.State.outboundQty, 1)

	// The reader goroutine acknowledges a QoS 1 publish meanwhile: buffered.
	require.NoError(t, cl.WritePacket(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Puback}, PacketID: 7}))

	q.mu.Lock()
	q.writing = false
	q.mu.Unlock()
	cl.WriteLoop() // refuses the big packet

	select {
	case ids := <-got:
		require.Equal(t, []uint16{7}, ids)
	case <-time.After(5 * time.Second):
		t.Fatalf("the PUBACK was never written; %d bytes left buffered", cl.Net.outbuf.Len())
	}
}

// TestInflightNextImmediateWithConcurrentSet: NextImmediate read-locked
// the store and then GetAll read-locked it again; a Set queued between the
// two deadlocked all three (gateway patch 10).
func TestInflightNextImmediateWithConcurrentSet(t *testing.T) {
	in := NewInflights()
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for i := 0; i < 20000; i++ {
			id := uint16(i%500 + 1)
			in.Set(packets.Packet{PacketID: id, Expiry: -1})
			in.Delete(id)
		}
	}()
	go func() {
		defer wg.Done()
		for i := 0; i < 20000; i++ {
			in.NextImmediate()
		}
	}()
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Set and NextImmediate deadlocked")
	}
}

// deferHook defers the ack of every QoS 1/2 PUBLISH whose packet id is odd
// (patch 12), and refuses the one with id 100 after deferring it.
type deferHook struct {
	HookBase
	mu      sync.Mutex
	pending map[uint16]*PendingAck
}

func (h *deferHook) ID() string           { return "defer" }
func (h *deferHook) Provides(b byte) bool { return b == OnPublish }
func (h *deferHook) OnPublish(cl *Client, pk packets.Packet) (packets.Packet, error) {
	if pk.PacketID%2 == 0 && pk.PacketID != 100 {
		return pk, nil
	}
	p := cl.DeferAck(pk)
	if pk.PacketID == 100 {
		return pk, packets.ErrRejectPacket
	}
	h.mu.Lock()
	h.pending[pk.PacketID] = p
	h.mu.Unlock()
	return pk, nil
}

// Deferred acks and acks mochi gives at once leave in the order of their
// PUBLISHes, whatever the order of the answers (given on other
// goroutines); a deferred ack its hook then refused leaves no gap; the
// receive quota the deferred acks hold is given back; the reader must wait
// (ackRoomFull) while deferred acks hold the whole quota, and is woken
// when they go (waitForAckRoom).
func TestDeferredAckOutboundOrder(t *testing.T) {
	s := newServer()
	h := &deferHook{pending: map[uint16]*PendingAck{}}
	require.NoError(t, s.AddHook(h, nil))
	r, w := net.Pipe()
	defer r.Close()
	cl := s.NewClient(w, "t", "pub", false)
	cl.Properties.ProtocolVersion = 4
	const quota = 6
	cl.State.Inflight.ResetReceiveQuota(quota)
	got := make(chan []uint16, 1)
	go func() { got <- readPubackIDs(r, 6) }()

	publish := func(id uint16) {
		pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, TopicName: "a/b", PacketID: id}
		require.NoError(t, s.processPacket(cl, pk))
	}
	publish(1) // deferred
	publish(2) // answered at once, but behind 1
	publish(100)
	publish(3) // deferred
	publish(4)
	publish(5) // deferred
	publish(6)
	require.Len(t, h.pending, 3)
	require.Equal(t, int32(0), cl.State.Inflight.receiveQuota)
	require.True(t, cl.ackRoomFull(), "the quota is used up while deferred acks wait")

	var wg sync.WaitGroup
	for _, id := range []uint16{5, 3} { // answered out of order, elsewhere
		wg.Add(1)
		go func(p *PendingAck) { defer wg.Done(); p.Done(packets.CodeSuccess) }(h.pending[id])
	}
	wg.Wait()
	require.True(t, cl.ackRoomFull(), "answers behind the first one free nothing")
	waited := make(chan struct{})
	go func() { cl.waitForAckRoom(); close(waited) }()
	h.pending[1].Done(packets.CodeSuccess)
	select {
	case <-waited:
	case <-time.After(10 * time.Second):
		t.Fatal("the reader was not woken when the acks went")
	}

	select {
	case ids := <-got:
		require.Equal(t, []uint16{1, 2, 3, 4, 5, 6}, ids)
	case <-time.After(10 * time.Second):
		t.Fatal("acks not written")
	}
	waitWritten(cl)
	require.False(t, cl.State.acks.busy())
	require.Equal(t, int32(quota), cl.State.Inflight.receiveQuota)
	require.Nil(t, cl.State.acks.q)
	cl.Stop(nil)
	h.pending[1].Done(packets.CodeSuccess) // a second answer, after the end: harmless
}

// readPublishIDs reads what the server writes to r and sends the packet id
// of each QoS 1 PUBLISH (0 for QoS 0) on the channel it returns.
func readPublishIDs(r net.Conn) <-chan uint16 {
	ids := make(chan uint16, 64)
	go func() {
		defer close(ids)
		for pk := range readPublishes(r, 4) {
			ids <- pk.PacketID
		}
	}()
	return ids
}

// readPublishes reads what the server writes to r, encoded for protocol
// version v, and sends each PUBLISH on the channel it returns.
func readPublishes(r net.Conn, v byte) <-chan packets.Packet {
	pks := make(chan packets.Packet, 64)
	go func() {
		defer close(pks)
		br := bufio.NewReader(r)
		for {
			var fh packets.FixedHeader
			b, err := br.ReadByte()
			if err != nil {
				return
			}
			if err := fh.Decode(b); err != nil {
				return
			}
			n, _, err := packets.DecodeLength(br)
			if err != nil {
				return
			}
			body := make([]byte, n)
			if _, err := io.ReadFull(br, body); err != nil {
				return
			}
			if fh.Type != packets.Publish {
				continue
			}
			pk := packets.Packet{FixedHeader: fh, ProtocolVersion: v}
			if err := pk.PublishDecode(body); err != nil {
				return
			}
			pks <- pk
		}
	}()
	return pks
}

// TestNextImmediateGivesQuotaBack: a client with a Receive Maximum of 2
// that acknowledges each QoS 1 PUBLISH as it comes gets all of them. A
// held-back message mochi sent left the inflight store at once, so its
// PUBACK gave no quota back: after two of them nothing more was sent
// (gateway patch 13). While a hook holds the client's PUBLISHes, none is
// queued and none takes quota; released, they go, QoS 0 first.
func TestNextImmediateGivesQuotaBack(t *testing.T) {
	s := newServer()
	cl, r, _ := newTestClient()
	cl.ops.options.Capabilities.MaximumClientWritesPending = 64
	cl.State.Inflight.ResetSendQuota(2)
	defer cl.Stop(nil)
	ids := readPublishIDs(r)
	sub := packets.Subscription{Filter: "a/b/c", Qos: 1}
	publish := func(qos byte) {
		pk := *packets.TPacketData[packets.Publish].Get(packets.TPublishQos1).Packet
		pk.FixedHeader.Qos = qos
		_, err := s.publishToClient(cl, sub, pk)
		require.NoError(t, err)
	}
	ack := func(id uint16) {
		require.NoError(t, s.processPacket(cl, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Puback}, PacketID: id}))
	}
	next := func() uint16 {
		select {
		case id := <-ids:
			return id
		case <-time.After(10 * time.Second):
			t.Fatal("no PUBLISH written")
			return 0
		}
	}

	const n = 8
	for i := 0; i < n; i++ {
		publish(1)
	}
	require.Equal(t, n-2, cl.State.Inflight.Held())
	for i := 0; i < n; i++ {
		ack(next())
	}
	require.Equal(t, 0, cl.State.Inflight.Len())
	require.Equal(t, int32(2), atomic.LoadInt32(&cl.State.Inflight.sendQuota))

	// The writer counts a packet out once written (after the read above).
	require.Eventually(t, func() bool { return atomic.LoadInt32(&cl.State.outboundQty) == 0 }, 10*time.Second, time.Millisecond)
	cl.HoldPublishes()
	publish(1)
	publish(0)
	publish(1)
	require.Equal(t, 2, cl.State.Inflight.Held())
	require.Equal(t, int32(2), atomic.LoadInt32(&cl.State.Inflight.sendQuota), "held PUBLISHes take no quota")
	require.Equal(t, int32(0), atomic.LoadInt32(&cl.State.outboundQty))
	cl.ReleasePublishes()
	require.Equal(t, uint16(0), next(), "the QoS 0 one first")
	ack(next())
	ack(next())
	require.Equal(t, 0, cl.State.Inflight.Len())
	require.Equal(t, int32(2), atomic.LoadInt32(&cl.State.Inflight.sendQuota))
}

// TestInflightCloneLeavesBoundOut (patch 15): a packet set with SetBound is
// kept and acknowledged as any other, but a session carried on by a new
// connection (Clone) does not get it; deleting it forgets the mark.
func TestInflightCloneLeavesBoundOut(t *testing.T) {
	i := NewInflights()
	require.True(t, i.Set(packets.Packet{PacketID: 1}))
	require.True(t, i.SetBound(packets.Packet{PacketID: 2}))
	require.True(t, i.Set(packets.Packet{PacketID: 3}))
	require.Equal(t, 3, i.Len())
	_, ok := i.Get(2)
	require.True(t, ok)

	c := i.Clone()
	require.Equal(t, 2, c.Len())
	_, ok = c.Get(2)
	require.False(t, ok, "a bound packet went to the clone")

	require.True(t, i.Delete(2))
	require.True(t, i.Set(packets.Packet{PacketID: 2})) // the id reused for a session's message
	require.Equal(t, 3, i.Clone().Len())
}

// quotaClient adds to s a connected client "sub" of protocol version v with
// a Receive Maximum of rm, subscribed to q/# at QoS 2, and returns it and
// the PUBLISHes written to it.
func quotaClient(t *testing.T, s *Server, rm int32, v byte) (*Client, packets.Subscription, <-chan packets.Packet) {
	cl, sub, r := quotaClientConn(t, s, rm, v)
	return cl, sub, readPublishes(r, v)
}

// quotaClientConn is quotaClient, returning the client's end of the
// connection, not yet read.
func quotaClientConn(t *testing.T, s *Server, rm int32, v byte) (*Client, packets.Subscription, net.Conn) {
	r, w := net.Pipe()
	cl := s.NewClient(w, "t", "sub", false)
	t.Cleanup(func() {
		cl.Stop(nil)
		_ = r.Close()
	})
	cl.Properties.ProtocolVersion = v
	cl.State.Inflight.ResetSendQuota(rm)
	s.Clients.Add(cl)
	sub := packets.Subscription{Filter: "q/#", Qos: 2}
	s.Topics.Subscribe(cl.ID, sub)
	cl.State.Subscriptions.Add(sub.Filter, sub)
	return cl, sub, r
}

// nextPublish returns the next PUBLISH from pks, failing t when none comes.
func nextPublish(t *testing.T, pks <-chan packets.Packet, why string) packets.Packet {
	t.Helper()
	select {
	case pk, ok := <-pks:
		require.True(t, ok, "the connection ended")
		return pk
	case <-time.After(10 * time.Second):
		t.Fatalf("no PUBLISH written: %s", why)
		return packets.Packet{}
	}
}

// TestSendQuotaNoLostWakeup: with a Receive Maximum of 1, a PUBLISH held
// back because the quota was used up must go once the PUBACK gives the
// quota back, however the publisher and the reader interleave. sendHeld
// skipped the lock when nothing was held; a publisher that had found no
// quota but not yet marked its message held was missed, and the message
// (and every one after it) waited for the client's next packet, for ever
// with keepalive 0.
func TestSendQuotaNoLostWakeup(t *testing.T) {
	s := newServerWithInlineClient()
	cl, _, pubs := quotaClient(t, s, 1, 4)
	got := make(chan packets.Packet, 2)
	go func() { // the client, acknowledging at once; its reader's work
		for pk := range pubs {
			_ = s.processPacket(cl, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Puback}, PacketID: pk.PacketID})
			got <- pk
		}
	}()
	rng := rand.New(rand.NewSource(1))
	deadline := time.Now().Add(6 * time.Second)
	for round := 0; round < 50000 && time.Now().Before(deadline); round++ {
		require.NoError(t, s.Publish("q/a", []byte("1"), false, 1))
		jitter := time.Duration(rng.Intn(97)) * time.Microsecond
		for start := time.Now(); time.Since(start) < jitter; { // finer than a sleep
		}
		require.NoError(t, s.Publish("q/a", []byte("2"), false, 1))
		for i := 0; i < 2; i++ {
			select {
			case <-got:
			case <-time.After(10 * time.Second):
				t.Fatalf("round %d: a PUBLISH stayed held with the quota free (quota %d, held %d)",
					round, atomic.LoadInt32(&cl.State.Inflight.sendQuota), cl.State.Inflight.Held())
			}
		}
	}
}

// TestSendQuotaGivenBackByPubrecError: a PUBREC with a reason code of 0x80
// or more ends the QoS 2 flow and gives its unit of the send quota back
// [MQTT-4.9.0-2]: with a Receive Maximum of 2, the third message went
// nowhere after two such PUBRECs.
func TestSendQuotaGivenBackByPubrecError(t *testing.T) {
	s := newServerWithInlineClient()
	cl, _, pubs := quotaClient(t, s, 2, 4)
	for i := 0; i < 3; i++ {
		require.NoError(t, s.Publish("q/a", []byte{byte(i)}, false, 2))
	}
	for i := 0; i < 3; i++ {
		pk := nextPublish(t, pubs, "after PUBRECs refusing the earlier ones")
		require.Equal(t, []byte{byte(i)}, pk.Payload)
		require.NoError(t, s.processPacket(cl, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pubrec},
			PacketID: pk.PacketID, ReasonCode: packets.ErrUnspecifiedError.Code}))
	}
	require.Equal(t, 0, cl.State.Inflight.Len())
	require.Equal(t, int32(2), atomic.LoadInt32(&cl.State.Inflight.sendQuota))
}

// TestSendQuotaKeptWhileSentMessageExpires: a message sent and not yet
// acknowledged does not expire: its delivery has begun [MQTT-3.3.2-5], it
// still counts against the client's Receive Maximum until acknowledged
// [MQTT-3.3.4-9], and it is resent on reconnection [MQTT-4.4.0-1]. The
// expiry loop deleted it, so its late PUBACK gave no quota back and the
// next message was never sent. A message held back still expires, and
// when it goes its Message Expiry Interval is lowered by the time it
// waited [MQTT-3.3.2-6] (it was sent with the publisher's, and an expired
// one was sent anyway).
func TestSendQuotaKeptWhileSentMessageExpires(t *testing.T) {
	s := newServer() // no MaximumMessageExpiryInterval
	cl, sub, pubs := quotaClient(t, s, 1, 5)
	now := time.Now().Unix()
	msg := func(n byte, interval uint32) packets.Packet {
		created := now - 50 // as publishToSubscribers sets Expiry
		return packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, TopicName: "q/a",
			Payload: []byte{n}, ProtocolVersion: 5, Created: created, Expiry: created + int64(interval),
			Properties: packets.Properties{MessageExpiryInterval: interval}}
	}
	_, err := s.publishToClient(cl, sub, msg(1, 60)) // sent; expires at now+10
	require.NoError(t, err)
	first := nextPublish(t, pubs, "the first message")
	_, err = s.publishToClient(cl, sub, msg(2, 60)) // held; expires at now+10
	require.NoError(t, err)
	_, err = s.publishToClient(cl, sub, msg(3, 100)) // held; expires at now+50
	require.NoError(t, err)
	require.Equal(t, 2, cl.State.Inflight.Held())

	s.clearExpiredInflights(now + 20)
	require.Equal(t, 2, cl.State.Inflight.Len(), "the sent message is kept, the expired held one dropped")
	require.Equal(t, 1, cl.State.Inflight.Held())

	require.NoError(t, s.processPacket(cl, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Puback}, PacketID: first.PacketID}))
	third := nextPublish(t, pubs, "the late PUBACK gave no quota back")
	require.Equal(t, []byte{3}, third.Payload, "the expired held message was sent")
	require.Less(t, third.Properties.MessageExpiryInterval, uint32(100), "sent with the interval it was published with")
	require.Greater(t, third.Properties.MessageExpiryInterval, uint32(0))
	require.NoError(t, s.processPacket(cl, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Puback}, PacketID: third.PacketID}))
	require.Equal(t, 0, cl.State.Inflight.Len())
	require.Equal(t, int32(1), atomic.LoadInt32(&cl.State.Inflight.sendQuota))

	// Offline, nothing is sent: a message stored then expires.
	cl.Stop(nil)
	_, err = s.publishToClient(cl, sub, msg(4, 60))
	require.ErrorIs(t, err, packets.CodeDisconnect)
	s.clearExpiredInflights(now + 20)
	require.Equal(t, 0, cl.State.Inflight.Len(), "a message stored for an offline session does not expire")
}

// TestSendQuotaHoldReleasedWhenConnackFails: a connection resuming a
// session holds the PUBLISHes routed to it until its CONNACK is written
// (patch 13); when that write failed, the hold was never released, and the
// offline session kept every QoS 0 message (up to
// MaximumClientWritesPending) and every QoS 1/2 one without expiry.
func TestSendQuotaHoldReleasedWhenConnackFails(t *testing.T) {
	s := newServer()
	old := s.NewClient(nil, "t", "sub", false)
	old.Properties.ProtocolVersion = 4
	s.Clients.Add(old)
	sub := packets.Subscription{Filter: "q/#", Qos: 1}
	s.Topics.Subscribe(old.ID, sub)
	old.State.Subscriptions.Add(sub.Filter, sub)
	old.Stop(errors.New("gone"))

	r, w := net.Pipe()
	done := make(chan error, 1)
	go func() { done <- s.EstablishConnection("t", r) }()
	connect := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect}, ProtocolVersion: 4,
		Connect: packets.ConnectParams{ProtocolName: []byte("MQTT"), Keepalive: 30, ClientIdentifier: "sub"}}
	var buf bytes.Buffer
	require.NoError(t, connect.ConnectEncode(&buf))
	_, err := w.Write(buf.Bytes())
	require.NoError(t, err)
	_ = w.Close() // before reading the CONNACK: its write fails
	select {
	case err = <-done:
		require.Error(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the connection did not end")
	}
	cl, ok := s.Clients.Get("sub")
	require.True(t, ok, "the session goes on")
	require.NotSame(t, old, cl)

	s.publishToSubscribers(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish}, TopicName: "q/a", Payload: []byte("0")})
	s.publishToSubscribers(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, TopicName: "q/a", Payload: []byte("1")})
	cl.State.hold.mu.Lock()
	n, qos0 := cl.State.hold.n, len(cl.State.hold.qos0)
	cl.State.hold.mu.Unlock()
	require.Equal(t, 0, n, "the connection's hold on its PUBLISHes is released")
	require.Equal(t, 0, qos0, "an offline session keeps no QoS 0 message")
	require.Equal(t, 1, cl.State.Inflight.Len())
}

// TestSendQuotaHeldGoWhenWriteQueueEmpties: held PUBLISHes a full write
// queue refused go once the writer has emptied it. They were held again
// for the client's next packet, which may never come (keepalive 0).
func TestSendQuotaHeldGoWhenWriteQueueEmpties(t *testing.T) {
	s := newServerWithInlineClient()
	s.Options.Capabilities.MaximumClientWritesPending = 2
	cl, _, r := quotaClientConn(t, s, 10, 4)
	cl.HoldPublishes()
	const n = 6
	for i := 0; i < n; i++ {
		require.NoError(t, s.Publish("q/a", []byte{byte(i)}, false, 1))
	}
	cl.ReleasePublishes() // the connection is not read: the queue fills
	require.Greater(t, cl.State.Inflight.Held(), 0)
	pubs := readPublishes(r, 4)
	for i := 0; i < n; i++ {
		pk := nextPublish(t, pubs, "held behind a full write queue")
		require.Equal(t, []byte{byte(i)}, pk.Payload)
	}
}

// twoDeferHook defers every ack as a second hook beside another that
// does (patch 18); with answerAt, it answers that packet id at once.
type twoDeferHook struct {
	HookBase
	id       string
	answerAt uint16
	mu       sync.Mutex
	pending  map[uint16]*PendingAck
}

func (h *twoDeferHook) ID() string           { return h.id }
func (h *twoDeferHook) Provides(b byte) bool { return b == OnPublish }
func (h *twoDeferHook) OnPublish(cl *Client, pk packets.Packet) (packets.Packet, error) {
	p := cl.DeferAck(pk)
	if pk.PacketID == h.answerAt {
		p.Done(packets.CodeSuccess)
	}
	h.mu.Lock()
	h.pending[pk.PacketID] = p
	h.mu.Unlock()
	return pk, nil
}

// TestDeferredAckTwoHooks (patch 18): two hooks defer the same ack; it is
// written once both have answered, with the first code that is not
// success, also when the first hook answered inside OnPublish, before the
// second deferred it.
func TestDeferredAckTwoHooks(t *testing.T) {
	s := newServer()
	a := &twoDeferHook{id: "a", answerAt: 2, pending: map[uint16]*PendingAck{}}
	b := &twoDeferHook{id: "b", pending: map[uint16]*PendingAck{}}
	require.NoError(t, s.AddHook(a, nil))
	require.NoError(t, s.AddHook(b, nil))
	r, w := net.Pipe()
	defer r.Close()
	cl := s.NewClient(w, "t", "pub", false)
	cl.Properties.ProtocolVersion = 5
	cl.State.Inflight.ResetReceiveQuota(10)
	got := make(chan []uint16, 1)
	go func() { got <- readPubackIDs(r, 2) }()
	for _, id := range []uint16{1, 2} {
		pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, TopicName: "a/b", PacketID: id}
		require.NoError(t, s.processPacket(cl, pk))
	}
	require.Same(t, a.pending[1], b.pending[1])
	require.Same(t, a.pending[2], b.pending[2])

	a.pending[1].Done(packets.CodeSuccess)
	cl.State.acks.mu.Lock()
	require.Len(t, cl.State.acks.q, 2, "one answer of two writes nothing")
	require.False(t, cl.State.acks.q[1].answered, "answered in OnPublish by a, still due from b")
	cl.State.acks.mu.Unlock()

	b.pending[1].Done(packets.ErrQuotaExceeded)
	b.pending[2].Done(packets.CodeSuccess)
	select {
	case ids := <-got:
		require.Equal(t, []uint16{1, 2}, ids)
	case <-time.After(10 * time.Second):
		t.Fatal("acks not written")
	}
	require.Equal(t, packets.ErrQuotaExceeded, a.pending[1].code)
	waitWritten(cl)
	require.False(t, cl.State.acks.busy())
	cl.Stop(nil)
}

// TestSubscribersCachedFollowsSubscriptions: the lookup cache of patch 23
// never serves a result from before a change to the subscriptions: a
// client subscribing, a second filter, an unsubscribe, an inline
// subscription and a shared one are each seen by the next lookup of a
// topic looked up (and cached) before.
func TestSubscribersCachedFollowsSubscriptions(t *testing.T) {
	x := NewTopicsIndex()
	ids := func() []string {
		var out []string
		for id := range x.SubscribersCached("a/b/c").Subscriptions {
			out = append(out, id)
		}
		sort.Strings(out)
		return out
	}
	require.Empty(t, ids())
	x.Subscribe("cl1", packets.Subscription{Filter: "a/+/c"})
	require.Equal(t, []string{"cl1"}, ids())
	x.Subscribe("cl2", packets.Subscription{Filter: "a/#", Qos: 1})
	require.Equal(t, []string{"cl1", "cl2"}, ids())
	x.Subscribe("cl2", packets.Subscription{Filter: "a/b/c", Identifier: 5})
	require.Equal(t, 5, x.SubscribersCached("a/b/c").Subscriptions["cl2"].Identifiers["a/b/c"])
	x.Unsubscribe("a/+/c", "cl1")
	require.Equal(t, []string{"cl2"}, ids())
	x.InlineSubscribe(InlineSubscription{Subscription: packets.Subscription{Filter: "a/b/c", Identifier: 1}})
	require.Len(t, x.SubscribersCached("a/b/c").InlineSubscriptions, 1)
	x.InlineUnsubscribe(1, "a/b/c")
	require.Empty(t, x.SubscribersCached("a/b/c").InlineSubscriptions)
	x.Subscribe("cl3", packets.Subscription{Filter: SharePrefix + "/g/a/b/c"})
	shared := x.SubscribersCached("a/b/c")
	require.Len(t, shared.Shared, 1)
	require.NotSame(t, shared, x.SubscribersCached("a/b/c"), "a result with shared subscriptions is made fresh")
}

// TestPublishToSessionTakenOverReachesTheNewConnection is the interleaving
// the soak drill found (patch 25): a publisher looks a persistent
// subscriber up in Clients, a new connection of that client takes the
// session over (its inflight store copied, the old one cleared), then the
// publisher hands the QoS 1 message to the old client. Before the patch it
// went into the old client's store, which nobody reads any more: lost,
// although its publisher had been acknowledged.
func TestPublishToSessionTakenOverReachesTheNewConnection(t *testing.T) {
	for _, clean := range []bool{false, true} {
		s := newServerWithInlineClient()
		old, sub, r := quotaClientConn(t, s, 10, 5)
		old.Properties.Props.SessionExpiryInterval = 3600
		_ = r.Close()
		old.Stop(nil) // offline, its session kept

		nr, nw := net.Pipe()
		next := s.NewClient(nw, "t", "sub", false)
		t.Cleanup(func() { next.Stop(nil); _ = nr.Close() })
		next.Properties.ProtocolVersion = 5
		next.Properties.Props.SessionExpiryInterval = 3600
		connect := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect},
			Connect: packets.ConnectParams{Clean: clean, ClientIdentifier: "sub"}}
		mu := s.sessionLock(next.ID)
		mu.Lock()
		present, _ := s.inheritClientSession(connect, next)
		s.Clients.Add(next)
		mu.Unlock()
		require.Equal(t, !clean, present)

		// The publisher that found old before the takeover.
		pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, TopicName: "q/1", Payload: []byte("m")}
		_, _ = s.publishToClient(old, sub, pk)

		require.Equal(t, 0, old.State.Inflight.Len(), "clean %v: the message went to the connection taken over", clean)
		if clean {
			require.Equal(t, 0, next.State.Inflight.Len(), "a clean start does not get the old session's subscription's messages")
			continue
		}
		got := next.State.Inflight.GetAll(false)
		require.Len(t, got, 1, "the session carried on did not get the message")
		require.Equal(t, "q/1", got[0].TopicName)
	}
}

// TestSubscribersCacheBoundsEntries: the cache (patch 23) is bounded by
// the subscribers it holds, not only by topics: 4,096 topics matched by a
// wildcard with thousands of subscribers held gigabytes.
func TestSubscribersCacheBoundsEntries(t *testing.T) {
	x := NewTopicsIndex()
	for i := 0; i < subscribersCacheMaxOne+1; i++ {
		x.Subscribe(fmt.Sprintf("big%d", i), packets.Subscription{Filter: "big/+"})
	}
	require.Len(t, x.SubscribersCached("big/1").Subscriptions, subscribersCacheMaxOne+1)
	require.Empty(t, x.cache.m, "a result with more subscribers than subscribersCacheMaxOne was kept")

	const per = 200
	for i := 0; i < per; i++ {
		x.Subscribe(fmt.Sprintf("mid%d", i), packets.Subscription{Filter: "mid/+"})
	}
	for i := 0; i < 2*subscribersCacheEntries/per; i++ {
		require.Len(t, x.SubscribersCached(fmt.Sprintf("mid/%d", i)).Subscriptions, per)
		require.LessOrEqual(t, x.cache.entries, subscribersCacheEntries)
		require.Equal(t, len(x.cache.m)*per, x.cache.entries)
	}
}

// dropCountHook counts OnPublishDropped and OnQosDropped calls.
type dropCountHook struct {
	HookBase
	n, qos atomic.Int32
}

func (h *dropCountHook) ID() string                               { return "dropcount" }
func (h *dropCountHook) Provides(b byte) bool                     { return b == OnPublishDropped || b == OnQosDropped }
func (h *dropCountHook) OnPublishDropped(*Client, packets.Packet) { h.n.Add(1) }
func (h *dropCountHook) OnQosDropped(*Client, packets.Packet)     { h.qos.Add(1) }

// TestDroppedCopyTakenOverIsNotKeptTwice (patch 32): a QoS 1 copy put into
// a subscriber's inflight store whose write queue then refuses it was
// handed to OnPublishDropped (the gateway's backlog keeps it) before the
// rollback. When a reconnect took the session over in between, the copy
// was in the store the new connection inherited and the hook made a second
// one: two deliveries. Now the rollback comes first, and a copy taken over
// with the session is not handed to the hook; one not taken over still is.
func TestDroppedCopyTakenOverIsNotKeptTwice(t *testing.T) {
	for _, takeover := range []bool{true, false} {
		s := newServerWithInlineClient()
		h := &dropCountHook{}
		require.NoError(t, s.AddHook(h, nil))
		old, sub, _ := quotaClientConn(t, s, 10, 5)
		old.Properties.Props.SessionExpiryInterval = 3600
		s.Options.Capabilities.MaximumClientWritesPending = 0 // every enqueue fails: a full write queue

		var next *Client
		if takeover {
			testAfterAddInflight = func(*Client) {
				nr, nw := net.Pipe()
				next = s.NewClient(nw, "t", "sub", false)
				t.Cleanup(func() { next.Stop(nil); _ = nr.Close() })
				next.Properties.ProtocolVersion = 5
				next.Properties.Props.SessionExpiryInterval = 3600
				mu := s.sessionLock(next.ID)
				mu.Lock()
				present, _ := s.inheritClientSession(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect},
					Connect: packets.ConnectParams{ClientIdentifier: "sub"}}, next)
				s.Clients.Add(next)
				mu.Unlock()
				require.True(t, present)
			}
		}
		pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, TopicName: "q/1", Payload: []byte("m")}
		_, err := s.publishToClientStall(old, sub, pk, false)
		testAfterAddInflight = nil
		require.ErrorIs(t, err, packets.ErrPendingClientWritesExceeded)
		require.Equal(t, 0, old.State.Inflight.Len(), "takeover %v: the refused copy stayed in the old store", takeover)
		if takeover {
			require.Equal(t, int32(0), h.n.Load(), "the hook was asked to keep a copy the new connection inherited")
			require.Len(t, next.State.Inflight.GetAll(false), 1, "the new connection did not inherit the copy")
		} else {
			require.Equal(t, int32(1), h.n.Load(), "a refused copy not taken over goes to the hook")
			// The entry OnQosPublish reported is reported gone, and counted out.
			require.Equal(t, int32(1), h.qos.Load(), "the rolled-back entry was not reported dropped")
			require.Equal(t, int64(0), atomic.LoadInt64(&s.Info.Inflight), "Info.Inflight still counts the rolled-back entry")
		}
	}
}

// Patch 31: a connection counts its own PUBLISH packets and bytes, both
// ways, the fixed header included.
func TestConnStatsCountPublishesAndBytes(t *testing.T) {
	cl, r, w := newTestClient()
	defer w.Close()
	defer r.Close()
	require.False(t, cl.Net.Stats.Since.IsZero())

	in := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish}, TopicName: "a/b", Payload: []byte("hello")}
	var enc bytes.Buffer
	require.NoError(t, in.PublishEncode(&enc))
	go func() { _, _ = r.Write(enc.Bytes()) }()
	var fh packets.FixedHeader
	require.NoError(t, cl.ReadFixedHeader(&fh))
	_, err := cl.ReadPacket(&fh)
	require.NoError(t, err)
	require.Equal(t, int64(1), cl.Net.Stats.MessagesReceived.Load())
	require.Equal(t, int64(enc.Len()), cl.Net.Stats.BytesReceived.Load())

	got := make(chan int64, 1)
	go func() {
		b := make([]byte, 64)
		n, _ := r.Read(b)
		got <- int64(n)
	}()
	require.NoError(t, cl.WritePacket(in))
	n := <-got
	require.Equal(t, int64(1), cl.Net.Stats.MessagesSent.Load())
	require.Equal(t, n, cl.Net.Stats.BytesSent.Load())
	require.Equal(t, int64(enc.Len()), n)
}

// TestHasSubscribersFollowsSubscriptions: patch 39's answer is that of a
// lookup, for a topic nobody, a client, a shared group, an inline
// subscription or more clients than patch 23's cache keeps subscribe to;
// it is kept for the topics patch 23 does not keep, and every change to
// the subscriptions is seen by the next question about a topic asked
// (and answered from what was kept) before.
func TestHasSubscribersFollowsSubscriptions(t *testing.T) {
	x := NewTopicsIndex()
	require.False(t, x.HasSubscribers("a/b"))
	require.False(t, x.HasSubscribers("a/b"), "answered from the cache")
	x.Subscribe("cl1", packets.Subscription{Filter: "a/+"})
	require.True(t, x.HasSubscribers("a/b"))
	x.Unsubscribe("a/+", "cl1")
	require.False(t, x.HasSubscribers("a/b"))

	x.Subscribe("cl2", packets.Subscription{Filter: SharePrefix + "/g/a/#"})
	require.True(t, x.HasSubscribers("a/b"))
	require.True(t, x.cache.has["a/b"], "a topic with a shared group: the answer is kept")
	require.True(t, x.HasSubscribers("a/b"))
	x.Unsubscribe(SharePrefix+"/g/a/#", "cl2")
	require.Nil(t, x.cache.has, "emptied by the change")
	require.False(t, x.HasSubscribers("a/b"))

	x.InlineSubscribe(InlineSubscription{Subscription: packets.Subscription{Filter: "a/b", Identifier: 1}})
	require.True(t, x.HasSubscribers("a/b"))
	x.InlineUnsubscribe(1, "a/b")
	require.False(t, x.HasSubscribers("a/b"))

	for i := 0; i <= subscribersCacheMaxOne; i++ {
		x.Subscribe(fmt.Sprintf("big%d", i), packets.Subscription{Filter: "big/+"})
	}
	require.True(t, x.HasSubscribers("big/1"))
	require.True(t, x.cache.has["big/1"], "a topic with more subscribers than patch 23 keeps: the answer is kept")
	for i := 0; i <= subscribersCacheMaxOne; i++ {
		x.Unsubscribe("big/+", fmt.Sprintf("big%d", i))
	}
	require.False(t, x.HasSubscribers("big/1"))

	// [MQTT-4.7.2-1] as a lookup has it: "#" does not match a $ topic.
	x.Subscribe("cl3", packets.Subscription{Filter: "#"})
	require.False(t, x.HasSubscribers("$SYS/x"))
	require.True(t, x.HasSubscribers("x"))
}
