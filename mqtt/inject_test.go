package mqtt

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/tolsey/tolsey/core"
	"github.com/tolsey/tolsey/retain"
	"github.com/tolsey/tolsey/retain/memory"
)

// TestDeliverInjectsOnlyWhatSomeoneTakes: a message from another
// front-end goes into mochi (mochi's MessagesReceived counts the inline
// client's PUBLISHes) only when a subscription here matches its topic;
// those that match still reach their subscribers, plain, wildcard and
// shared; and a share copy the cluster hands this gateway is still
// answered ErrNoMember when no member of its group is here, also for a
// topic nobody subscribes to. Before the shortcut, every message was
// injected (the count of the first publish failed).
func TestDeliverInjectsOnlyWhatSomeoneTakes(t *testing.T) {
	s := startTestServer(t, memory.New(retain.Limits{}))
	plain := dialRaw(t, s.Addr(), "plain", 0)
	plain.subscribeQoS1(t, "a/+")
	member := dialRaw(t, s.Addr(), "member", 0)
	member.subscribeQoS1(t, "$share/g/s/#")
	r := s.opts.Router
	ctx := context.Background()
	injected := func() int64 { return atomic.LoadInt64(&s.mochi.Info.MessagesReceived) }
	amqp := core.Origin{Protocol: core.ProtocolAMQP}

	before := injected()
	r.Publish(ctx, &core.Message{Topic: "nobody/here", Payload: []byte("x"), Origin: amqp})
	r.Publish(ctx, &core.Message{Topic: "a", Payload: []byte("x"), Origin: amqp}) // a/+ does not match a
	if n := injected() - before; n != 0 {
		t.Fatalf("%d messages nobody subscribes to were injected into mochi, want 0", n)
	}

	r.Publish(ctx, &core.Message{Topic: "a/b", Payload: []byte("plain"), Origin: amqp})
	if pk := plain.read(t); pk.TopicName != "a/b" || string(pk.Payload) != "plain" {
		t.Fatalf("plain subscriber got %q %q, want a/b", pk.TopicName, pk.Payload)
	}
	r.Publish(ctx, &core.Message{Topic: "s/1", Payload: []byte("shared"), Origin: amqp})
	if pk := member.read(t); pk.TopicName != "s/1" || string(pk.Payload) != "shared" {
		t.Fatalf("shared member got %q %q, want s/1", pk.TopicName, pk.Payload)
	}
	if n := injected() - before; n != 2 {
		t.Fatalf("%d messages injected, want the 2 that had subscribers", n)
	}

	// Share copies (core.Router.PublishShare, what the cluster calls).
	for _, tc := range []struct {
		topic, target string
		taken         bool
	}{
		{"s/2", "$share/g/s/#", true},
		{"s/3", "$share/other/s/#", false},       // the topic matches, the group has no member here
		{"nobody/2", "$share/g/nobody/#", false}, // nothing here matches the topic at all
	} {
		res := r.PublishShare(ctx, &core.Message{Topic: tc.topic, Payload: []byte("copy"),
			Origin: core.Origin{Protocol: core.ProtocolMQTT, Node: "other"}}, tc.target)
		if tc.taken {
			if res.Matched <= res.Failed {
				t.Fatalf("share copy %s for %s: not taken (%+v)", tc.topic, tc.target, res)
			}
			if pk := member.read(t); pk.TopicName != tc.topic {
				t.Fatalf("shared member got %q, want %s", pk.TopicName, tc.topic)
			}
			continue
		}
		if !errors.Is(res.Err, core.ErrNoMember) {
			t.Fatalf("share copy %s for %s with no member here: %+v, want ErrNoMember", tc.topic, tc.target, res)
		}
	}
	// Nothing else reached either subscriber: a share copy for one group
	// went to no plain subscriber, and none came twice.
	plain.write(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pingreq}})
	if pk := plain.read(t); pk.FixedHeader.Type != packets.Pingresp {
		t.Fatalf("plain subscriber got %s %q, want only the PINGRESP", packets.PacketNames[pk.FixedHeader.Type], pk.TopicName)
	}
}
