package mqtt

import (
	"context"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/tolsey/tolsey/core"
	"github.com/tolsey/tolsey/core/coretest"
	"github.com/tolsey/tolsey/core/metrics"
	"github.com/tolsey/tolsey/retain"
	"github.com/tolsey/tolsey/retain/memory"
)

// The MQTT→MQTT QoS 0 path is mochi's own fan-out plus what the hook adds:
// OnPublish (router lookup, message count), OnPacketProcessed for every
// inbound packet and OnPacketEncode for every outbound one. These benchmarks
// measure that addition without sockets:
//
//	go test -run '^$' -bench 'Hook|MochiPublish' -benchmem ./mqtt/

// benchServer is a front-end as Start leaves it (the router subscription
// "#" with SkipOrigin mqtt in place), without listeners.
func benchServer(tb testing.TB) *Server {
	tb.Helper()
	return benchServerTopics(tb, core.NewTopicTable(10_000)) // as the gateway has it (GET /api/v1/topics)
}

func benchServerTopics(tb testing.TB, topics *core.TopicTable) *Server {
	tb.Helper()
	store := memory.New(retain.Limits{})
	router := core.NewRouter(core.RouterOptions{Retainer: retain.Retainer{Store: store}, Node: "n", Topics: topics})
	s, err := New(Options{Listen: "127.0.0.1:0", Router: router, Store: store, Node: "n",
		Metrics: metrics.New(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		tb.Fatal(err)
	}
	s.sub, err = router.Subscribe("#", s.hook, core.SubOptions{QoS: 2, SkipOrigin: core.ProtocolMQTT})
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

func benchPublish(topic string) packets.Packet {
	return packets.Packet{
		FixedHeader:     packets.FixedHeader{Type: packets.Publish},
		TopicName:       topic,
		Payload:         make([]byte, 64),
		ProtocolVersion: 5,
	}
}

// BenchmarkHookQoS0 is what the hook does for one MQTT→MQTT QoS 0 message
// delivered to one subscriber: OnPublish and OnPacketProcessed on the
// publisher's packet, OnPacketEncode on the subscriber's copy.
func BenchmarkHookQoS0(b *testing.B) {
	benchHookQoS0(b, benchServer(b))
}

// BenchmarkHookQoS0TopicTable is BenchmarkHookQoS0 without the topic table
// and with it, one after the other, to compare on a busy machine:
//
//	go test -run '^$' -bench 'HookQoS0TopicTable' -count 5 ./mqtt/
func BenchmarkHookQoS0TopicTable(b *testing.B) {
	b.Run("none", func(b *testing.B) { benchHookQoS0(b, benchServerTopics(b, nil)) })
	b.Run("table", func(b *testing.B) { benchHookQoS0(b, benchServerTopics(b, core.NewTopicTable(10_000))) })
}

func benchHookQoS0(b *testing.B, s *Server) {
	h := s.hook
	pub := s.mochi.NewClient(nil, "t", "pub", false)
	sub := s.mochi.NewClient(nil, "t", "sub", false)
	pk := benchPublish("load/p0/s0")
	out := pk
	out.Expiry = time.Now().Unix() + noExpiryCap
	out.Properties.MessageExpiryInterval = noExpiryCap
	b.ReportAllocs()
	for b.Loop() {
		x, _ := h.OnPublish(pub, pk)
		h.OnPacketProcessed(pub, x, nil)
		h.OnPacketEncode(sub, out)
	}
}

func BenchmarkHookQoS0Parallel(b *testing.B) {
	s := benchServer(b)
	h := s.hook
	b.ReportAllocs()
	var next atomic.Int32
	b.RunParallel(func(pb *testing.PB) {
		i := next.Add(1)
		pub := s.mochi.NewClient(nil, "t", "pub"+string(rune('a'+i)), false)
		sub := s.mochi.NewClient(nil, "t", "sub"+string(rune('a'+i)), false)
		pk := benchPublish("load/p0/s0")
		out := pk
		for pb.Next() {
			x, _ := h.OnPublish(pub, pk)
			h.OnPacketProcessed(pub, x, nil)
			h.OnPacketEncode(sub, out)
		}
	})
}

// discardConn is a connection that swallows writes and never reads.
type discardConn struct{ net.Conn }

func (discardConn) Write(p []byte) (int, error)      { return len(p), nil }
func (discardConn) Close() error                     { return nil }
func (discardConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (discardConn) SetDeadline(time.Time) error      { return nil }
func (discardConn) SetWriteDeadline(time.Time) error { return nil }
func (discardConn) SetReadDeadline(time.Time) error  { return nil }

// allowHook is what bare mochi runs with (test/bench/baremochi).
type allowHook struct{ mochi.HookBase }

func (*allowHook) ID() string { return "allow" }
func (*allowHook) Provides(b byte) bool {
	return b == mochi.OnConnectAuthenticate || b == mochi.OnACLCheck
}
func (*allowHook) OnConnectAuthenticate(*mochi.Client, packets.Packet) bool { return true }
func (*allowHook) OnACLCheck(*mochi.Client, string, bool) bool              { return true }

// BenchmarkMochiPublish runs a QoS 0 PUBLISH through mochi's whole inbound
// path (processPacket: ACL, hooks, fan-out) and the subscriber's write path
// (WriteLoop: encode, hooks, write to a discarding connection), for the
// gateway's mochi and for a bare mochi with the same write queue: the
// difference is the hook's share of mochi's per-message work.
func BenchmarkMochiPublish(b *testing.B) {
	run := func(b *testing.B, ms *mochi.Server) {
		pub := benchPubSub(b, ms)
		pk := benchPublish("load/p0/s0")
		b.ReportAllocs()
		for b.Loop() {
			if err := ms.InjectPacket(pub, pk); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		b.ReportMetric(float64(ms.Info.MessagesDropped)/float64(b.N), "drops/op")
	}
	b.Run("gateway", func(b *testing.B) {
		s := benchServer(b)
		run(b, s.mochi)
	})
	b.Run("bare", func(b *testing.B) {
		caps := mochi.NewDefaultServerCapabilities()
		caps.MaximumClientWritesPending = 128
		ms := mochi.New(&mochi.Options{Capabilities: caps, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err := ms.AddHook(new(allowHook), nil); err != nil {
			b.Fatal(err)
		}
		run(b, ms)
	})
}

// benchPubSub adds to ms a publisher and a subscriber to "load/+/s0" (QoS
// 0) whose connections discard what is written, and returns the publisher;
// the subscriber stops with the benchmark.
func benchPubSub(b testing.TB, ms *mochi.Server) *mochi.Client {
	pub := ms.NewClient(discardConn{}, "t", "pub", false)
	pub.Properties.ProtocolVersion = 5
	pub.State.Inflight.ResetReceiveQuota(1024)
	ms.Clients.Add(pub)
	benchSubscriber(b, ms, "sub")
	return pub
}

// benchSubscriber adds to ms a subscriber to "load/+/s0" (QoS 0) whose
// connection discards what is written; it stops with the test.
func benchSubscriber(tb testing.TB, ms *mochi.Server, id string) {
	sub := ms.NewClient(discardConn{}, "t", id, false)
	sub.Properties.ProtocolVersion = 5
	ms.Clients.Add(sub)
	ms.Topics.Subscribe(sub.ID, packets.Subscription{Filter: "load/+/s0"})
	go sub.WriteLoop()
	tb.Cleanup(func() { sub.Stop(nil) })
}

// BenchmarkMochiPublishQoS1 is BenchmarkMochiPublish with a QoS 1 PUBLISH:
// the publisher's PUBACK path (written on its reader as mochi processes
// the packet), for a message only MQTT subscribers want. The subscriber
// takes it at QoS 0 so that its inflight window, which nothing
// acknowledges here, does not fill.
func BenchmarkMochiPublishQoS1(b *testing.B) {
	ms := benchServer(b).mochi
	pub := benchPubSub(b, ms)
	pk := benchPublish("load/p0/s0")
	pk.FixedHeader.Qos = 1
	pk.PacketID = 7
	b.ReportAllocs()
	for b.Loop() {
		if err := ms.InjectPacket(pub, pk); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHookQoS1Routed is OnPublish for a QoS 1 publish that another
// front-end's subscriber wants, and which that subscriber takes at once
// (no Delivery.Acks hold): the router's acknowledgement path the hook waits
// for or, when the answer comes before PublishAsync returns, does not.
func BenchmarkHookQoS1Routed(b *testing.B) {
	s := benchServer(b)
	h := s.hook
	if _, err := s.opts.Router.Subscribe("load/#", new(benchTaker), core.SubOptions{QoS: 1}); err != nil {
		b.Fatal(err)
	}
	pub := s.mochi.NewClient(nil, "t", "pub", false)
	pub.Properties.ProtocolVersion = 5
	pk := benchPublish("load/p0/s0")
	pk.FixedHeader.Qos = 1
	pk.PacketID = 7
	b.ReportAllocs()
	for b.Loop() {
		if _, err := h.OnPublish(pub, pk); err != nil {
			b.Fatal(err)
		}
	}
}

// benchTaker is a core.Subscriber that takes every message at once.
type benchTaker struct{ n atomic.Int64 }

func (t *benchTaker) Deliver(*core.Message, core.Delivery) error { t.n.Add(1); return nil }

// BenchmarkRouterPublishNoMQTTSubscriber is one AMQP-origin QoS 0 message
// routed to one AMQP-side subscriber (benchTaker) with no MQTT subscriber:
// the router's fan-out, which also hands it to the front-end's "#"
// (Deliver). Before Deliver asked mochi's index first, the message was
// injected through mochi's publish path anyway.
func BenchmarkRouterPublishNoMQTTSubscriber(b *testing.B) {
	s := benchServer(b)
	taker := new(benchTaker)
	if _, err := s.opts.Router.Subscribe("load/#", taker, core.SubOptions{}); err != nil {
		b.Fatal(err)
	}
	if s.inline() == nil {
		b.Fatal("no inline client")
	}
	m := &core.Message{Topic: "load/p0/s0", Payload: make([]byte, 64), Origin: core.Origin{Protocol: core.ProtocolAMQP}}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		s.opts.Router.Publish(ctx, m)
	}
	if taker.n.Load() == 0 {
		b.Fatal("nothing delivered")
	}
}

// BenchmarkReachesAny is Deliver's question (is there an MQTT subscriber
// for this topic?) for a topic nobody subscribes to, one a plain
// subscription matches, and one a shared group matches, whose lookup
// mochi does not keep in patch 23's cache (its fan-out selects a member
// in it); patch 39 keeps the answer.
func BenchmarkReachesAny(b *testing.B) {
	s := benchServer(b)
	s.mochi.Topics.Subscribe("plain", packets.Subscription{Filter: "plain/#"})
	s.mochi.Topics.Subscribe("member", packets.Subscription{Filter: "$share/g/shared/#"})
	for _, topic := range []string{"nobody/x", "plain/x", "shared/x"} {
		b.Run(strings.Split(topic, "/")[0], func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if s.hook.reachesAny(topic) == (topic == "nobody/x") {
					b.Fatal("wrong answer")
				}
			}
		})
	}
}

// BenchmarkMochiPublishRouted is a client's QoS 0 PUBLISH through mochi's
// inbound path that another part wants (a core subscriber, as a NATS
// bridge rule's), and no MQTT subscriber: the MQTT → NATS path up to the
// bridge's queue (docs/bridge.md, "Performance: the QoS 0 goal").
func BenchmarkMochiPublishRouted(b *testing.B) {
	s := benchServer(b)
	taker := new(benchTaker)
	if _, err := s.opts.Router.Subscribe("out/#", taker, core.SubOptions{}); err != nil {
		b.Fatal(err)
	}
	pub := s.mochi.NewClient(discardConn{}, "t", "pub", false)
	pub.Properties.ProtocolVersion = 4
	pub.State.Inflight.ResetReceiveQuota(1024)
	s.mochi.Clients.Add(pub)
	pk := benchPublish("out/p0/s0")
	pk.ProtocolVersion = 4
	b.ReportAllocs()
	cpu := processCPU()
	for b.Loop() {
		if err := s.mochi.InjectPacket(pub, pk); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
	if taker.n.Load() == 0 {
		b.Fatal("nothing routed")
	}
}

// BenchmarkRouterPublishToMQTT is a message from another part (a NATS
// bridge's inbound one) routed to one MQTT subscriber: Deliver, mochi's
// fan-out through the inline client, and the subscriber's writer, whose
// connection discards what it writes: the NATS → MQTT path after the
// bridge.
func BenchmarkRouterPublishToMQTT(b *testing.B) {
	s := benchServer(b)
	if s.inline() == nil {
		b.Fatal("no inline client")
	}
	benchSubscriber(b, s.mochi, "sub")
	m := &core.Message{Topic: "load/p0/s0", Payload: make([]byte, 64), Origin: core.Origin{Protocol: core.ProtocolNATS}}
	ctx := context.Background()
	b.ReportAllocs()
	cpu := processCPU()
	for b.Loop() {
		s.opts.Router.Publish(ctx, m)
	}
	b.StopTimer()
	// Once the subscriber's writer has written them all: its CPU counts.
	want := int64(b.N) - atomic.LoadInt64(&s.mochi.Info.MessagesDropped)
	coretest.Eventually(b, "every message written", 30*time.Second, func() bool {
		return atomic.LoadInt64(&s.mochi.Info.MessagesSent) >= want
	})
	b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(s.mochi.Info.MessagesDropped)/float64(b.N), "drops/op")
}
