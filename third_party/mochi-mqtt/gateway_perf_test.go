package mqtt

import (
	"net"
	"sync/atomic"
	"testing"

	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/stretchr/testify/require"
)

// TestFanOutSharesAReadPayload (patch 33): the subscribers' copies of a
// PUBLISH a client sent share its payload, read for it alone; a payload
// the inline client publishes is its caller's and each copy has its own,
// as upstream. Before the patch every copy had its own: an allocation per
// delivered message. The subscribers have no connection, so their QoS 1
// copies stay in their inflight stores, where they are looked at.
func TestFanOutSharesAReadPayload(t *testing.T) {
	s := newServer()
	s.Options.InlineClient = true
	s.inlineClient = s.NewClient(nil, LocalListener, InlineClientId, true)
	s.Clients.Add(s.inlineClient)
	var subs []*Client
	for _, id := range []string{"a", "b"} {
		cl := s.NewClient(nil, "t", id, false)
		cl.Properties.ProtocolVersion = 5
		s.Clients.Add(cl)
		s.Topics.Subscribe(id, packets.Subscription{Filter: "f/#", Qos: 1})
		subs = append(subs, cl)
	}
	pub := s.NewClient(nil, "t", "pub", false)
	s.Clients.Add(pub)

	for _, tc := range []struct {
		from   *Client
		shared bool
	}{{pub, true}, {s.inlineClient, false}} {
		payload := []byte("the payload")
		pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, TopicName: "f/g", Payload: payload}
		s.publishToSubscribersFrom(tc.from, pk)
		for _, cl := range subs {
			got := cl.State.Inflight.GetAll(false)
			require.Len(t, got, 1, cl.ID)
			require.Equal(t, "the payload", string(got[0].Payload), cl.ID)
			require.Equal(t, tc.shared, &got[0].Payload[0] == &payload[0], "%s: payload shared, from %s", cl.ID, tc.from.ID)
			cl.State.Inflight.Delete(got[0].PacketID)
		}
	}
}

// TestCopySharedPayload (patch 33): CopySharedPayload is Copy but for
// the payload, which it shares.
func TestCopySharedPayload(t *testing.T) {
	pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1, Dup: true}, TopicName: "t",
		PacketID: 9, Payload: []byte("p"), Properties: packets.Properties{User: []packets.UserProperty{{Key: "k", Val: "v"}}}}
	c, sh := pk.Copy(false), pk.CopySharedPayload(false)
	require.Equal(t, c, sh)
	require.NotSame(t, &pk.Payload[0], &c.Payload[0])
	require.Same(t, &pk.Payload[0], &sh.Payload[0])
	require.Equal(t, pk.Copy(true), pk.CopySharedPayload(true))

	// Room behind the payload is not shared: an append reallocates.
	pk.Payload = append(make([]byte, 0, 16), 'p')
	sh = pk.CopySharedPayload(false)
	require.Equal(t, 1, cap(sh.Payload))
	sh.Payload = append(sh.Payload, 'x')
	require.Equal(t, "p", string(pk.Payload[:1]))
	require.NotSame(t, &pk.Payload[0], &sh.Payload[0])
}

// providesCounter provides OnPublish and OnACLCheck and counts how often
// it is asked what it provides, and its OnPublish calls.
type providesCounter struct {
	HookBase
	id       string
	asked    int
	order    *[]string
	provides []byte
}

func (h *providesCounter) ID() string { return h.id }
func (h *providesCounter) Provides(b byte) bool {
	h.asked++
	for _, p := range h.provides {
		if p == b {
			return true
		}
	}
	return false
}
func (h *providesCounter) OnPublish(cl *Client, pk packets.Packet) (packets.Packet, error) {
	*h.order = append(*h.order, h.id)
	return pk, nil
}
func (h *providesCounter) OnACLCheck(*Client, string, bool) bool { return true }

// TestHooksAskedOnceWhatTheyProvide (patch 34): the events of every
// message go to the hooks that provide them, in the order they were
// added, without asking each hook again on every event; an event no hook
// provides calls none. Before the patch each dispatch asked every hook.
func TestHooksAskedOnceWhatTheyProvide(t *testing.T) {
	h := new(Hooks)
	var order []string
	a := &providesCounter{id: "a", order: &order, provides: []byte{OnPublish}}
	b := &providesCounter{id: "b", order: &order}
	c := &providesCounter{id: "c", order: &order, provides: []byte{OnPublish, OnACLCheck}}
	for _, hk := range []*providesCounter{a, b, c} {
		require.NoError(t, h.Add(hk, nil))
	}
	a.asked, b.asked, c.asked = 0, 0, 0
	cl := &Client{}
	pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish}}
	for i := 0; i < 10; i++ {
		_, err := h.OnPublish(cl, pk)
		require.NoError(t, err)
		require.True(t, h.OnACLCheck(cl, "t", true))
		h.OnPublished(cl, pk)
		h.OnPacketSent(cl, pk, nil)
		h.OnPacketProcessed(cl, pk, nil)
		_, err = h.OnPacketRead(cl, pk)
		require.NoError(t, err)
		_ = h.OnPacketEncode(cl, pk)
	}
	require.Equal(t, 0, a.asked+b.asked+c.asked, "Provides asked on dispatch")
	require.Len(t, order, 20)
	require.Equal(t, []string{"a", "c"}, order[:2])
	require.True(t, h.provided(OnPublish))
	require.False(t, h.provided(OnPublished))
	require.True(t, h.Provides(OnACLCheck)) // upstream's Provides still asks
}

// packetCounter counts its OnPacketRead and OnPacketProcessed calls; with
// only set, it is a PacketHook wanting those for packets of that type.
type packetCounter struct {
	HookBase
	only            *byte
	read, processed []byte
}

func (h *packetCounter) ID() string { return "packets" }
func (h *packetCounter) Provides(b byte) bool {
	return b == OnPacketRead || b == OnPacketProcessed
}
func (h *packetCounter) OnPacketRead(cl *Client, pk packets.Packet) (packets.Packet, error) {
	h.read = append(h.read, pk.FixedHeader.Type)
	return pk, nil
}
func (h *packetCounter) OnPacketProcessed(cl *Client, pk packets.Packet, err error) {
	h.processed = append(h.processed, pk.FixedHeader.Type)
}

type typedPacketCounter struct{ packetCounter }

func (h *typedPacketCounter) ProvidesPacket(ev, typ byte) bool { return typ == *h.only }

// TestPacketHookTypes (patch 36): a PacketHook gets OnPacketRead and
// OnPacketProcessed for the packet types it names only, read from a
// connection and processed; a hook that is not one gets every packet.
// Before the patch both got every packet.
func TestPacketHookTypes(t *testing.T) {
	puback := byte(packets.Puback)
	s := newServer()
	plain := new(packetCounter)
	typed := &typedPacketCounter{packetCounter{only: &puback}}
	require.NoError(t, s.AddHook(plain, nil))
	require.NoError(t, s.AddHook(typed, nil))

	r, w := net.Pipe()
	defer r.Close()
	cl := s.NewClient(w, "t", "c", false)
	cl.Properties.ProtocolVersion = 4
	cl.State.Inflight.ResetReceiveQuota(10)
	s.Clients.Add(cl)
	defer cl.Stop(nil)
	for _, raw := range [][]byte{
		{packets.Publish << 4, 5, 0, 1, 'a', 'h', 'i'}, // QoS 0 PUBLISH "a": "hi"
		{packets.Puback << 4, 2, 0, 7},                 // PUBACK 7, nothing inflight
	} {
		go func() { _, _ = r.Write(raw) }()
		fh := new(packets.FixedHeader)
		require.NoError(t, cl.ReadFixedHeader(fh))
		pk, err := cl.ReadPacket(fh)
		require.NoError(t, err)
		require.NoError(t, s.processPacket(cl, pk))
	}
	want := []byte{packets.Publish, packets.Puback}
	require.Equal(t, want, plain.read)
	require.Equal(t, want, plain.processed)
	require.Equal(t, []byte{packets.Puback}, typed.read)
	require.Equal(t, []byte{packets.Puback}, typed.processed)
}

// TestInjectFixedPayloadShared (patch 45): an injected PUBLISH whose
// caller marks its payload fixed (Mods.FixedPayload) reaches the
// subscribers' copies without a copy of the payload each, as a PUBLISH a
// client sent does; unmarked, each copy has its own, as upstream. The
// mark is the injector's promise alone: the copies do not carry it.
func TestInjectFixedPayloadShared(t *testing.T) {
	s := newServer()
	s.Options.InlineClient = true
	s.inlineClient = s.NewClient(nil, LocalListener, InlineClientId, true)
	s.Clients.Add(s.inlineClient)
	var subs []*Client
	for _, id := range []string{"a", "b"} {
		cl := s.NewClient(nil, "t", id, false)
		cl.Properties.ProtocolVersion = 5
		s.Clients.Add(cl)
		s.Topics.Subscribe(id, packets.Subscription{Filter: "f/#", Qos: 1})
		subs = append(subs, cl)
	}

	for _, fixed := range []bool{true, false} {
		payload := []byte("the payload")
		pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, TopicName: "f/g", Payload: payload, PacketID: 1}
		pk.Mods.FixedPayload = fixed
		require.NoError(t, s.InjectPacket(s.inlineClient, pk))
		for _, cl := range subs {
			got := cl.State.Inflight.GetAll(false)
			require.Len(t, got, 1, cl.ID)
			require.Equal(t, "the payload", string(got[0].Payload), cl.ID)
			require.Equal(t, fixed, &got[0].Payload[0] == &payload[0], "%s: payload shared, fixed %v", cl.ID, fixed)
			if fixed {
				require.Equal(t, len(got[0].Payload), cap(got[0].Payload), "%s: an append to a copy reallocates", cl.ID)
			}
			require.False(t, got[0].Mods.FixedPayload, cl.ID)
			cl.State.Inflight.Delete(got[0].PacketID)
		}
	}
}

// publishCounter counts the PUBLISHes its OnPublish is called for, by
// the inline client and by others; with skipInline it is an
// InlinePublishHook that wants none of the inline client's.
type publishCounter struct {
	HookBase
	id             string
	inline, others atomic.Int32
}

func (h *publishCounter) ID() string           { return h.id }
func (h *publishCounter) Provides(b byte) bool { return b == OnPublish }
func (h *publishCounter) OnPublish(cl *Client, pk packets.Packet) (packets.Packet, error) {
	if cl.Net.Inline {
		h.inline.Add(1)
	} else {
		h.others.Add(1)
	}
	return pk, nil
}

type inlineSkipper struct{ publishCounter }

func (h *inlineSkipper) OnPublishInline() bool { return false }

// TestInlinePublishHook (patch 48): a hook that says it passes the inline
// client's PUBLISHes through (InlinePublishHook, false) is not called for
// them, and is for a client's; a hook that does not say so is called for
// both, as upstream; with only skipping hooks the injected PUBLISH still
// reaches its subscriber.
func TestInlinePublishHook(t *testing.T) {
	s := newServer()
	s.Options.InlineClient = true
	s.inlineClient = s.NewClient(nil, LocalListener, InlineClientId, true)
	s.Clients.Add(s.inlineClient)
	skip := &inlineSkipper{publishCounter{id: "skip"}}
	require.NoError(t, s.AddHook(skip, nil))
	var got atomic.Int32
	require.NoError(t, s.Subscribe("f/#", 1, func(*Client, packets.Subscription, packets.Packet) { got.Add(1) }))
	pub := s.NewClient(nil, "t", "pub", false)
	pub.Properties.ProtocolVersion = 5
	pub.State.Inflight.ResetReceiveQuota(16)
	s.Clients.Add(pub)

	publish := func(cl *Client) {
		pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish}, TopicName: "f/g", Payload: []byte("p")}
		require.NoError(t, s.processPublish(cl, pk))
	}
	delivered := func() int { return int(got.Swap(0)) }
	publish(s.inlineClient)
	require.Equal(t, int32(0), skip.inline.Load(), "a skipping hook got an injected PUBLISH")
	require.Equal(t, 1, delivered(), "the injected PUBLISH reaches its subscriber")
	publish(pub)
	require.Equal(t, int32(1), skip.others.Load(), "a skipping hook gets a client's PUBLISH")
	require.Equal(t, 1, delivered())

	all := &publishCounter{id: "all"}
	require.NoError(t, s.AddHook(all, nil))
	publish(s.inlineClient)
	require.Equal(t, int32(1), all.inline.Load(), "a hook that does not skip gets an injected PUBLISH")
	require.Equal(t, int32(0), skip.inline.Load(), "the skipping hook still does not")
	require.Equal(t, 1, delivered())
}
