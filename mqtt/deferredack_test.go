package mqtt

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/tolsey/tolsey/core"
	"github.com/tolsey/tolsey/retain"
	"github.com/tolsey/tolsey/retain/memory"
)

// Acknowledgements a subscriber holds (core.Delivery.Acks), given back to
// an MQTT publisher later, in the order of its PUBLISHes
// (docs/mqtt-frontend.md, "Acknowledgements"). The holder stands for the
// bridge's store-and-forward buffer waiting for its group commit; it
// answers when the test says. The clients are raw so that the order of
// the server's acks, and their absence, can be seen exactly: a PINGREQ
// sent after the PUBLISHes is answered by the reader once it has handled
// them, so a PINGRESP read before any PUBACK proves none was written.

// ackHolder is a core.Subscriber that holds the acknowledgement of every
// message it gets.
type ackHolder struct {
	mu       sync.Mutex
	held     []*core.Acks // in delivery order
	answered []bool
	open     int // held and not answered
	maxOpen  int
}

func (h *ackHolder) Deliver(_ *core.Message, d core.Delivery) error {
	if d.Acks == nil {
		return errors.New("ackHolder: a QoS 1/2 publish without Acks")
	}
	d.Acks.Hold()
	h.mu.Lock()
	h.held = append(h.held, d.Acks)
	h.answered = append(h.answered, false)
	h.open++
	h.maxOpen = max(h.maxOpen, h.open)
	h.mu.Unlock()
	return nil
}

// n is how many messages it has held.
func (h *ackHolder) n() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.held)
}

// answer gives the answer to the i-th message held.
func (h *ackHolder) answer(i int, err error) {
	h.mu.Lock()
	a := h.held[i]
	h.answered[i] = true
	h.open--
	h.mu.Unlock()
	a.Done(err)
}

// answerAll answers every message not yet answered with nil.
func (h *ackHolder) answerAll() {
	h.mu.Lock()
	var todo []int
	for i, done := range h.answered {
		if !done {
			todo = append(todo, i)
		}
	}
	h.mu.Unlock()
	for _, i := range todo {
		h.answer(i, nil)
	}
}

// startHolderServer runs a front-end whose router has an ackHolder on
// "d/#"; the holder answers whatever is left when the test ends, before the
// server shuts down.
func startHolderServer(t *testing.T, mods ...func(*Options)) (*Server, *ackHolder) {
	t.Helper()
	s := startTestServer(t, memory.New(retain.Limits{}), mods...)
	h := &ackHolder{}
	if _, err := s.opts.Router.Subscribe("d/#", h, core.SubOptions{QoS: 2}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.answerAll) // cleanups run last in, first out: before the shutdown
	return s, h
}

func (c *rawClient) publish(t *testing.T, topic string, qos byte, id uint16, dup bool) {
	t.Helper()
	c.write(t, packets.Packet{
		FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: qos, Dup: dup},
		TopicName:   topic,
		PacketID:    id,
		Payload:     []byte("m"),
	})
}

// expectNoAckYet sends a PINGREQ and wants its PINGRESP to be the next
// packet: no ack was written for what was sent before it.
func (c *rawClient) expectNoAckYet(t *testing.T) {
	t.Helper()
	c.write(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pingreq}})
	if pk := c.read(t); pk.FixedHeader.Type != packets.Pingresp {
		t.Fatalf("want PINGRESP before any ack, got %v id %d", pk.FixedHeader.Type, pk.PacketID)
	}
}

// expectAcks reads one ack per id, of type typ, in that order, with the
// reason code codes gives for it (0 when absent).
func (c *rawClient) expectAcks(t *testing.T, typ byte, ids []uint16, codes map[uint16]byte) {
	t.Helper()
	for _, id := range ids {
		pk := c.read(t)
		if pk.FixedHeader.Type != typ || pk.PacketID != id || pk.ReasonCode != codes[id] {
			t.Fatalf("want %v id %d code %#x, got %v id %d code %#x", packets.PacketNames[typ], id, codes[id],
				packets.PacketNames[pk.FixedHeader.Type], pk.PacketID, pk.ReasonCode)
		}
	}
}

func seq(from, to uint16) []uint16 {
	var ids []uint16
	for id := from; id <= to; id++ {
		ids = append(ids, id)
	}
	return ids
}

// TestDeferredPubacksWaitForHolder: ten QoS 1 PUBLISHes in flight all
// reach the holder (the reader does not wait for its answer), no PUBACK
// goes before the answers, then all ten go, in order.
func TestDeferredPubacksWaitForHolder(t *testing.T) {
	s, h := startHolderServer(t)
	c := dialRaw(t, s.Addr(), "pub", 0)
	for id := uint16(1); id <= 10; id++ {
		c.publish(t, "d/x", 1, id, false)
	}
	waitUntil(t, "the holder to get all 10 while none is answered", func() bool { return h.n() == 10 })
	c.expectNoAckYet(t)
	h.answerAll()
	c.expectAcks(t, packets.Puback, seq(1, 10), nil)
}

// TestDeferredPubacksKeepPublishOrder: answers given in reverse order;
// PUBACKs still go in the order of the PUBLISHes [MQTT-4.6.0-2], and none
// before the first PUBLISH's answer.
func TestDeferredPubacksKeepPublishOrder(t *testing.T) {
	s, h := startHolderServer(t)
	c := dialRaw(t, s.Addr(), "pub", 0)
	for id := uint16(1); id <= 10; id++ {
		c.publish(t, "d/x", 1, id, false)
	}
	waitUntil(t, "the holder to get all 10", func() bool { return h.n() == 10 })
	for i := 9; i >= 1; i-- {
		h.answer(i, nil)
	}
	c.expectNoAckYet(t)
	h.answer(0, nil)
	c.expectAcks(t, packets.Puback, seq(1, 10), nil)
}

// TestDeferredRefusalMQTT5: a held answer that refuses (the bridge buffer
// full) gives PUBACK 0x97 in its place, and PUBREC 0x97 for QoS 2, whose
// flow it ends: the session holds nothing for it afterwards.
func TestDeferredRefusalMQTT5(t *testing.T) {
	s, h := startHolderServer(t)
	c := dialRaw(t, s.Addr(), "pub", 0)
	c.publish(t, "d/x", 1, 1, false)
	c.publish(t, "d/x", 1, 2, false)
	c.publish(t, "d/x", 1, 3, false)
	c.publish(t, "d/x", 2, 4, false)
	waitUntil(t, "the holder to get all 4", func() bool { return h.n() == 4 })
	h.answer(1, errors.New("buffer full"))
	h.answer(3, errors.New("buffer full"))
	c.expectNoAckYet(t)
	h.answer(0, nil)
	h.answer(2, nil)
	quota := packets.ErrQuotaExceeded.Code
	c.expectAcks(t, packets.Puback, seq(1, 3), map[uint16]byte{2: quota})
	c.expectAcks(t, packets.Pubrec, []uint16{4}, map[uint16]byte{4: quota})
	cl, ok := s.mochi.Clients.Get("pub")
	if !ok {
		t.Fatal("the client is gone")
	}
	waitUntil(t, "the refused QoS 2 flow to be released", func() bool { return cl.State.Inflight.Len() == 0 })
}

// TestDeferredRefusalClosesMQTT311: MQTT 3.1.1 acks have no reason code,
// so a refused publish closes the connection, without a PUBACK for it
// [MQTT-3.3.5-2].
func TestDeferredRefusalClosesMQTT311(t *testing.T) {
	s, h := startHolderServer(t)
	c := dialRawVersion(t, s.Addr(), "pub", 4, true, 0)
	c.publish(t, "d/x", 1, 1, false)
	waitUntil(t, "the holder to get it", func() bool { return h.n() == 1 })
	c.expectNoAckYet(t)
	h.answer(0, errors.New("buffer full"))
	if pk, err := c.next(); !errors.Is(err, io.EOF) {
		t.Fatalf("want the connection closed without a PUBACK, got %v id %d, %v", pk.FixedHeader.Type, pk.PacketID, err)
	}
}

// TestDeferredPubrec: QoS 2 PUBRECs wait for the holder likewise; a
// PUBLISH re-sent while its PUBREC waits is not published again; then
// PUBREL/PUBCOMP as usual.
func TestDeferredPubrec(t *testing.T) {
	s, h := startHolderServer(t)
	c := dialRaw(t, s.Addr(), "pub", 0)
	for id := uint16(1); id <= 3; id++ {
		c.publish(t, "d/x", 2, id, false)
	}
	c.publish(t, "d/x", 2, 1, true) // a duplicate of the first
	c.expectNoAckYet(t)
	if n := h.n(); n != 3 {
		t.Fatalf("the holder got %d messages, want 3: the duplicate was published again", n)
	}
	h.answerAll()
	c.expectAcks(t, packets.Pubrec, seq(1, 3), nil)
	// mochi answers the duplicate, behind the others, with 0x91 Packet
	// Identifier in use (its handling of a duplicate, deferred or not).
	c.expectAcks(t, packets.Pubrec, []uint16{1}, map[uint16]byte{1: packets.ErrPacketIdentifierInUse.Code})
	for id := uint16(1); id <= 3; id++ {
		c.write(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pubrel}, PacketID: id})
	}
	c.expectAcks(t, packets.Pubcomp, seq(1, 3), nil)
}

// TestDeferredAcksAfterDisconnect: the client leaves with acks waiting;
// the holder's answers that come afterwards write nothing and break
// nothing (goleak in TestMain checks that no writer is left behind), and
// the session's next connection works.
func TestDeferredAcksAfterDisconnect(t *testing.T) {
	s, h := startHolderServer(t)
	c := dialRawVersion(t, s.Addr(), "pub", 4, false, 0) // a session that outlives the connection
	for id := uint16(1); id <= 3; id++ {
		c.publish(t, "d/x", 1, id, false)
	}
	waitUntil(t, "the holder to get all 3", func() bool { return h.n() == 3 })
	old, ok := s.mochi.Clients.Get("pub")
	if !ok {
		t.Fatal("no session")
	}
	c.conn.Close()
	waitUntil(t, "the connection to end", old.Closed)
	h.answerAll()

	c2 := dialRawVersion(t, s.Addr(), "pub", 4, false, 0)
	c2.publish(t, "d/x", 1, 4, false)
	waitUntil(t, "the holder to get the new connection's message", func() bool { return h.n() == 4 })
	h.answerAll()
	c2.expectAcks(t, packets.Puback, []uint16{4}, nil)
}

// TestDeferredAcksBackpressure: with Receive Maximum 4 and nothing
// answered, the reader stops after 4 PUBLISHes (an MQTT 3.1.1 client,
// which knows no Receive Maximum, sends 8) instead of disconnecting the
// client or buffering; each answer lets one more in, and all 8 are
// acknowledged in order.
func TestDeferredAcksBackpressure(t *testing.T) {
	const rm, n = 4, 8
	s, h := startHolderServer(t, func(o *Options) { o.ReceiveMaximum = rm })
	c := dialRawVersion(t, s.Addr(), "pub", 4, true, 0)
	for id := uint16(1); id <= n; id++ {
		c.publish(t, "d/x", 1, id, false)
	}
	for i := 0; i < n; i++ {
		want := min(i+rm, n)
		waitUntil(t, fmt.Sprintf("the holder to get %d", want), func() bool { return h.n() == want })
		h.answer(i, nil)
	}
	c.expectAcks(t, packets.Puback, seq(1, n), nil)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.maxOpen > rm {
		t.Fatalf("%d acks were outstanding at once; Receive Maximum is %d", h.maxOpen, rm)
	}
}
