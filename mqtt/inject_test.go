package mqtt

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/tolsey/tolsey/core"
	"github.com/tolsey/tolsey/core/metrics"
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

// TestDeliverSkipKeepsRetained: a retained message from another front-end
// that no MQTT subscription here matches is not injected into mochi, and
// is still stored (the router writes the retained store before its
// fan-out, not mochi), replayed to a later MQTT subscriber with RETAIN=1;
// an empty retained one still deletes what was stored; mochi's own
// retained index holds none of them. tolsey_messages_out_total
// {protocol="mqtt"} counts the messages injected only: a message no MQTT
// session here takes is not counted as delivered.
func TestDeliverSkipKeepsRetained(t *testing.T) {
	store := memory.New(retain.Limits{})
	met := metrics.New()
	s := startTestServer(t, store, func(o *Options) { o.Metrics = met })
	r := s.opts.Router
	ctx := context.Background()
	amqp := core.Origin{Protocol: core.ProtocolAMQP}
	injected := func() int64 { return atomic.LoadInt64(&s.mochi.Info.MessagesReceived) }

	before := injected()
	for _, m := range []*core.Message{
		{Topic: "rk/amqp", Payload: []byte("kept"), Retain: true, QoS: 1, Origin: amqp},
		{Topic: "rk/gone", Payload: []byte("soon deleted"), Retain: true, Origin: amqp},
		{Topic: "rk/gone", Retain: true, Origin: amqp}, // empty: deletes it
	} {
		if res := r.Publish(ctx, m); res.Err != nil || res.RetainErr != nil {
			t.Fatalf("publish %s: %+v", m.Topic, res)
		}
	}
	if n := injected() - before; n != 0 {
		t.Fatalf("%d retained messages nobody subscribes to were injected into mochi, want 0", n)
	}
	if got, err := store.Get(ctx, "rk/amqp"); err != nil || got == nil || string(got.Payload) != "kept" {
		t.Fatalf("retained store rk/amqp: %v %v, want kept", got, err)
	}
	if got, err := store.Get(ctx, "rk/gone"); err != nil || got != nil {
		t.Fatalf("retained store rk/gone: %v %v, want deleted", got, err)
	}
	if out := counter(t, met.MessagesOut, "mqtt"); out != 0 {
		t.Fatalf("tolsey_messages_out_total{protocol=mqtt} %v for messages nobody here took, want 0", out)
	}

	late := dialRaw(t, s.Addr(), "late", 0)
	late.subscribeQoS1(t, "rk/#")
	if pk := late.read(t); pk.TopicName != "rk/amqp" || string(pk.Payload) != "kept" || !pk.FixedHeader.Retain {
		t.Fatalf("late subscriber got %q %q retain=%v, want the stored rk/amqp", pk.TopicName, pk.Payload, pk.FixedHeader.Retain)
	} else if pk.FixedHeader.Qos == 1 {
		late.puback(t, pk.PacketID)
	}
	// Now someone subscribes: the next one goes in, live, and is counted
	// (the replayed copy is counted too, by the replayer). Each count is
	// taken just after the socket write, so the client can read the packet
	// before it lands: wait for it.
	outReaches := func(want float64) float64 {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			got := counter(t, met.MessagesOut, "mqtt")
			if got >= want || time.Now().After(deadline) {
				return got
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	if out := outReaches(1); out != 1 {
		t.Fatalf("tolsey_messages_out_total{protocol=mqtt} %v after the replayed copy, want 1", out)
	}
	r.Publish(ctx, &core.Message{Topic: "rk/amqp", Payload: []byte("live"), Retain: true, Origin: amqp})
	if pk := late.read(t); pk.TopicName != "rk/amqp" || string(pk.Payload) != "live" {
		t.Fatalf("subscriber got %q %q, want the live rk/amqp", pk.TopicName, pk.Payload)
	}
	if n := injected() - before; n != 1 {
		t.Fatalf("%d messages injected, want the 1 that had a subscriber", n)
	}
	if out := outReaches(2); out != 2 {
		t.Fatalf("tolsey_messages_out_total{protocol=mqtt} %v after the live message, want 2 (replayed and live)", out)
	}
	if got, err := store.Get(ctx, "rk/amqp"); err != nil || got == nil || string(got.Payload) != "live" {
		t.Fatalf("retained store rk/amqp: %v %v, want live", got, err)
	}
	for topic := range s.mochi.Topics.Retained.GetAll() {
		if strings.HasPrefix(topic, "rk/") {
			t.Fatalf("mochi's own retained index holds %s, want it in the retained store only", topic)
		}
	}
}

// TestSubscribeDuringRoutedStreamMissesNothing: while another front-end
// publishes a steady stream on one topic, an MQTT client subscribes and
// unsubscribes again and again; after each SUBACK it gets every message
// whose publish began after the SUBACK arrived. Between rounds nobody
// subscribes, so Deliver's lookup (patch 23's cache) has kept "nobody"
// for the topic: a subscription must be seen by the very next message
// after its SUBACK, not by a later one.
func TestSubscribeDuringRoutedStreamMissesNothing(t *testing.T) {
	s := startTestServer(t, memory.New(retain.Limits{}))
	r := s.opts.Router
	amqp := core.Origin{Protocol: core.ProtocolAMQP}
	const topic = "stream/x"

	// started counts publishes begun (a message's payload is its number);
	// window bounds how far the publisher runs ahead of what the
	// subscriber has read from the moment it sends its SUBSCRIBE, so that
	// no QoS 0 copy is dropped for a full write queue. Paced only from
	// the SUBACK, a publisher on a loaded machine filled the queue (8,192)
	// before the test read the SUBACK, the copies begun after it were
	// dropped, and reader and publisher waited for each other until the
	// read timed out. read only moves forward.
	const window = 256
	var started, read atomic.Int64
	var subscribed atomic.Bool
	advance := func(n int64) {
		for o := read.Load(); n > o && !read.CompareAndSwap(o, n); o = read.Load() {
		}
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			for subscribed.Load() && started.Load()-read.Load() > window {
				select {
				case <-stop:
					return
				case <-time.After(100 * time.Microsecond): // pacing only
				}
			}
			n := started.Add(1)
			r.Publish(context.Background(), &core.Message{Topic: topic, Payload: []byte(strconv.FormatInt(n, 10)), Origin: amqp})
		}
	}()
	defer func() { close(stop); <-done }()

	c := dialRaw(t, s.Addr(), "late", 0)
	seq := func(pk packets.Packet) int64 {
		n, err := strconv.ParseInt(string(pk.Payload), 10, 64)
		if err != nil || pk.TopicName != topic {
			t.Fatalf("got %s %q %q, want a message of the stream", packets.PacketNames[pk.FixedHeader.Type], pk.TopicName, pk.Payload)
		}
		return n
	}
	const rounds, after = 20, 100
	for round := range rounds {
		id := uint16(2*round + 1)
		advance(started.Load())
		subscribed.Store(true)
		c.write(t, packets.Packet{
			FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1},
			PacketID:    id,
			Filters:     packets.Subscriptions{{Filter: topic}},
		})
		got := map[int64]bool{}
		var subacked int64 // the publishes begun when the SUBACK arrived
		for {
			pk := c.read(t)
			if pk.FixedHeader.Type == packets.Suback && pk.PacketID == id {
				subacked = started.Load()
				advance(subacked)
				break
			}
			n := seq(pk)
			got[n] = true // the subscription is in mochi's index before its SUBACK is written
			advance(n)
		}
		last := subacked
		for last < subacked+after {
			pk := c.read(t)
			last = seq(pk)
			if got[last] {
				t.Fatalf("round %d: message %d twice", round, last)
			}
			got[last] = true
			advance(last)
		}
		for n := subacked + 1; n <= last; n++ {
			if !got[n] {
				t.Fatalf("round %d: SUBACK when %d publishes had begun; message %d, begun after it, missing (%d messages got up to %d)",
					round, subacked, n, len(got), last)
			}
		}
		subscribed.Store(false)
		c.write(t, packets.Packet{
			FixedHeader: packets.FixedHeader{Type: packets.Unsubscribe, Qos: 1},
			PacketID:    id + 1,
			Filters:     packets.Subscriptions{{Filter: topic}},
		})
		for {
			pk := c.read(t)
			if pk.FixedHeader.Type == packets.Unsuback && pk.PacketID == id+1 {
				break
			}
			seq(pk) // a message of the stream, still on its way
		}
	}
}
