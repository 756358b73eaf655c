package mqtt

import (
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/tolsey/tolsey/core"
	"github.com/tolsey/tolsey/retain"
	"github.com/tolsey/tolsey/retain/memory"
)

// chanTaker is a subscriber of another protocol: it receives what the
// router hands it on a channel.
type chanTaker chan *core.Message

func (c chanTaker) Deliver(m *core.Message, _ core.Delivery) error { c <- m; return nil }

// TestQoS0TopicAliasRouted: an MQTT 5 QoS 0 PUBLISH that names its topic
// by an alias (the MQTT front-end asks the router about it and publishes
// it in one walk, core.Router.PublishWanted) reaches a subscriber of
// another protocol on the topic the alias stands for, with its payload,
// as does the PUBLISH that set the alias; an MQTT subscriber gets both.
func TestQoS0TopicAliasRouted(t *testing.T) {
	s := startTestServer(t, memory.New(retain.Limits{}))
	other := make(chanTaker, 4)
	if _, err := s.opts.Router.Subscribe("al/#", other, core.SubOptions{}); err != nil {
		t.Fatal(err)
	}
	sub := dialRaw(t, s.Addr(), "sub", 0)
	sub.subscribeQoS1(t, "al/#")
	pub := dialRaw(t, s.Addr(), "pub", 0)
	pub.write(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish}, TopicName: "al/x",
		Properties: packets.Properties{TopicAlias: 1, TopicAliasFlag: true}, Payload: []byte("one")})
	pub.write(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish},
		Properties: packets.Properties{TopicAlias: 1, TopicAliasFlag: true}, Payload: []byte("two")})
	for _, want := range []string{"one", "two"} {
		select {
		case m := <-other:
			if m.Topic != "al/x" || string(m.Payload) != want || m.Origin.Protocol != core.ProtocolMQTT || m.Origin.Client != "pub" {
				t.Fatalf("the other protocol's subscriber got %q %q from %+v, want al/x %q from pub", m.Topic, m.Payload, m.Origin, want)
			}
		case <-time.After(20 * time.Second): // against hanging only
			t.Fatalf("the other protocol's subscriber did not get %q", want)
		}
		if pk := sub.read(t); pk.TopicName != "al/x" || string(pk.Payload) != want {
			t.Fatalf("the MQTT subscriber got %q %q, want al/x %q", pk.TopicName, pk.Payload, want)
		}
	}
}
