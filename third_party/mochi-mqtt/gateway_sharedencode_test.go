package mqtt

import (
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/stretchr/testify/require"
)

// encodeCounter counts the PUBLISHes OnPacketEncode is called for.
type encodeCounter struct {
	HookBase
	n atomic.Int32
}

func (h *encodeCounter) ID() string           { return "encodes" }
func (h *encodeCounter) Provides(b byte) bool { return b == OnPacketEncode }
func (h *encodeCounter) OnPacketEncode(cl *Client, pk packets.Packet) packets.Packet {
	if pk.FixedHeader.Type == packets.Publish {
		h.n.Add(1)
	}
	return pk
}

// TestFanOutEncodesOncePerVariant (patch 27): a QoS 0 PUBLISH to five
// subscribers is encoded three times, once for the three MQTT 3.1.1
// clients together, once for the MQTT 5 client, and once for the MQTT 5
// client whose subscription has an identifier (its own, which it alone
// gets); a client whose Maximum Packet Size it exceeds does not get it.
// Every client reads what it would have read with an encoding of its own.
// Before the patch every copy was encoded by its writer: 6 encodes.
func TestFanOutEncodesOncePerVariant(t *testing.T) {
	s := newServer()
	h := new(encodeCounter)
	require.NoError(t, s.AddHook(h, nil))
	type sub struct {
		id      string
		version byte
		ident   int
		maxSize uint32
	}
	subs := []sub{{"v4a", 4, 0, 0}, {"v4b", 4, 0, 0}, {"v4c", 4, 0, 0}, {"v5", 5, 0, 0}, {"v5id", 5, 7, 0}, {"small", 5, 0, 8}}
	reads := map[string]<-chan packets.Packet{}
	var clients []*Client
	for _, c := range subs {
		r, w := net.Pipe()
		defer r.Close()
		cl := s.NewClient(w, "t", c.id, false)
		cl.Properties.ProtocolVersion = c.version
		cl.Properties.Props.MaximumPacketSize = c.maxSize
		s.Clients.Add(cl)
		s.Topics.Subscribe(c.id, packets.Subscription{Filter: "a/+", Identifier: c.ident})
		reads[c.id] = readPublishes(r, c.version)
		clients = append(clients, cl)
		defer cl.Stop(nil)
	}
	pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish}, TopicName: "a/b",
		Payload: []byte("shared payload"), Properties: packets.Properties{User: []packets.UserProperty{{Key: "k", Val: "v"}}}}
	s.publishToSubscribers(pk)

	for _, c := range subs {
		if c.maxSize > 0 {
			continue
		}
		select {
		case got := <-reads[c.id]:
			require.Equal(t, "a/b", got.TopicName, c.id)
			require.Equal(t, "shared payload", string(got.Payload), c.id)
			if c.version == 5 {
				require.Equal(t, []packets.UserProperty{{Key: "k", Val: "v"}}, got.Properties.User, c.id)
			}
			if c.ident > 0 {
				require.Equal(t, []int{c.ident}, got.Properties.SubscriptionIdentifier, c.id)
			} else {
				require.Empty(t, got.Properties.SubscriptionIdentifier, c.id)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s got nothing", c.id)
		}
	}
	require.Eventually(t, func() bool {
		for _, cl := range clients {
			if atomic.LoadInt32(&cl.State.outboundQty) > 0 {
				return false
			}
		}
		return true
	}, 10*time.Second, time.Millisecond, "queues written")
	require.Equal(t, int64(5), atomic.LoadInt64(&s.Info.MessagesSent), "the PUBLISH over a client's Maximum Packet Size was not written")
	// 3.1.1 clients, MQTT 5, MQTT 5 with an identifier; and the client
	// with the small Maximum Packet Size twice: the encoding its limit
	// refused, then its own write's, which refuses it.
	require.Equal(t, int32(5), h.n.Load(), "encodes")
}

// TestFanOutSharedEncodingsKeepTheirBytes (patch 27): encodings go back to
// their pool after the last writer: 500 PUBLISHes fanned out to three
// clients, their writers running behind, each read intact and in order (a
// buffer given back early is overwritten by a later message's).
func TestFanOutSharedEncodingsKeepTheirBytes(t *testing.T) {
	s := newServer()
	s.Options.Capabilities.MaximumClientWritesPending = 1024
	const n = 500
	var reads []<-chan packets.Packet
	for _, id := range []string{"a", "b", "c"} {
		r, w := net.Pipe()
		defer r.Close()
		cl := s.NewClient(w, "t", id, false)
		cl.Properties.ProtocolVersion = 4
		s.Clients.Add(cl)
		s.Topics.Subscribe(id, packets.Subscription{Filter: "f/#"})
		reads = append(reads, readPublishes(r, 4))
		defer cl.Stop(nil)
	}
	for i := 0; i < n; i++ {
		s.publishToSubscribers(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish},
			TopicName: "f/" + strconv.Itoa(i), Payload: []byte("payload " + strconv.Itoa(i))})
	}
	for c, pks := range reads {
		for i := 0; i < n; i++ {
			select {
			case got := <-pks:
				require.Equal(t, "f/"+strconv.Itoa(i), got.TopicName, "client %d", c)
				require.Equal(t, "payload "+strconv.Itoa(i), string(got.Payload), "client %d", c)
			case <-time.After(10 * time.Second):
				t.Fatalf("client %d: message %d not written", c, i)
			}
		}
	}
}
