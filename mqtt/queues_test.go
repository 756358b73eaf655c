package mqtt

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/tolsey/tolsey/core"
	"github.com/tolsey/tolsey/core/queue"
	"github.com/tolsey/tolsey/retain"
	"github.com/tolsey/tolsey/retain/memory"
)

// Queues over MQTT (docs/queues.md, "MQTT"): $queue/<name> subscriptions
// consume a queue of the engine, $queue/<name> publishes fill it. Most
// clients are raw, so that the acknowledgements go exactly when the test
// says and DUP flags and reason codes can be read; paho.golang consumes
// and publishes as an application would.

// startQueueServer runs a front-end with a queue engine (memory backend)
// on its router, and declares cfgs.
func startQueueServer(t *testing.T, cfgs []queue.Config, mods ...func(*Options)) (*Server, *queue.Engine) {
	t.Helper()
	store := memory.New(retain.Limits{})
	router := core.NewRouter(core.RouterOptions{Retainer: retain.Retainer{Store: store}, Node: "n"})
	eng, err := queue.New(context.Background(), queue.Options{Router: router})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(eng.Close) // after the server's shutdown: cleanups run last in, first out
	for _, c := range cfgs {
		if _, err := eng.Declare(context.Background(), c); err != nil {
			t.Fatal(err)
		}
	}
	s := startTestServer(t, store, append([]func(*Options){func(o *Options) {
		o.Router = router
		o.Queues = eng
	}}, mods...)...)
	return s, eng
}

// put stores n messages q/0 … q/n-1 in the queue straight (as a publish
// to $queue/<name> from any front-end does).
func put(t *testing.T, eng *queue.Engine, name string, n int) {
	t.Helper()
	for i := range n {
		errc := make(chan error, 1)
		eng.Put(name, &core.Message{Topic: queuePrefix + name, Payload: fmt.Appendf(nil, "m%d", i), QoS: 1}, func(err error) { errc <- err })
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
}

func info(t *testing.T, eng *queue.Engine, name string) queue.Info {
	t.Helper()
	q, ok := eng.Queue(name)
	if !ok {
		t.Fatalf("no queue %q", name)
	}
	return q.Info()
}

// subscribeCodes subscribes to filter with qos and returns the SUBACK's codes.
func (c *rawClient) subscribeCodes(t *testing.T, filter string, qos byte) []byte {
	t.Helper()
	c.write(t, packets.Packet{
		FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1},
		PacketID:    1,
		Filters:     packets.Subscriptions{{Filter: filter, Qos: qos}},
	})
	pk := c.read(t)
	if pk.FixedHeader.Type != packets.Suback {
		t.Fatalf("want SUBACK, got %v", packets.PacketNames[pk.FixedHeader.Type])
	}
	return pk.ReasonCodes
}

// readDelivery reads the next packet and wants a QoS 1 PUBLISH on topic
// with the DUP flag dup and the payload want ("" for any).
func (c *rawClient) readDelivery(t *testing.T, topic string, dup bool, want string) packets.Packet {
	t.Helper()
	pk := c.read(t)
	if pk.FixedHeader.Type != packets.Publish || pk.TopicName != topic || pk.FixedHeader.Qos != 1 ||
		pk.FixedHeader.Dup != dup || (want != "" && string(pk.Payload) != want) {
		t.Fatalf("want a QoS 1 PUBLISH on %s dup=%v payload %q; got %v on %q qos %d dup=%v payload %q", topic, dup, want,
			packets.PacketNames[pk.FixedHeader.Type], pk.TopicName, pk.FixedHeader.Qos, pk.FixedHeader.Dup, pk.Payload)
	}
	return pk
}

func (c *rawClient) puback(t *testing.T, id uint16) {
	t.Helper()
	c.write(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Puback}, PacketID: id})
}

// TestQueueConsumeWithPaho: paho.golang subscribes to $queue/jobs (QoS 2
// asked, 1 granted) and gets the queue's messages, stored before and after
// it came, in order, on $queue/jobs; its PUBACKs empty the queue. A message
// that reached the queue through a topic subscription carries its topic in
// the user property tolsey-topic.
func TestQueueConsumeWithPaho(t *testing.T) {
	s, eng := startQueueServer(t, []queue.Config{{Name: "jobs", Subscriptions: []string{"animals/f*"}}})
	put(t, eng, "jobs", 2)
	c := dialTest(t, s.Addr(), "worker", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	sa, err := c.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "$queue/jobs", QoS: 2}}})
	if err != nil || len(sa.Reasons) != 1 || sa.Reasons[0] != 1 {
		t.Fatalf("want QoS 1 granted, got %v %v", sa, err)
	}
	pub := dialTest(t, s.Addr(), "pub", nil)
	if _, err := pub.Publish(ctx, &paho.Publish{Topic: "animals/frog", QoS: 1, Payload: []byte("ribbit")}); err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"m0", "m1", "ribbit"} {
		select {
		case m := <-c.msgs:
			if m.Topic != "$queue/jobs" || m.QoS != 1 || string(m.Payload) != want {
				t.Fatalf("delivery %d: got %q on %s QoS %d, want %q on $queue/jobs QoS 1", i, m.Payload, m.Topic, m.QoS, want)
			}
			if got := m.Properties.User.Get(topicProperty); (want == "ribbit") != (got == "animals/frog") || (want != "ribbit" && got != "") {
				t.Fatalf("delivery %d: %s = %q", i, topicProperty, got)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("delivery %d never came", i)
		}
	}
	waitUntil(t, "the PUBACKs to empty the queue", func() bool {
		in := info(t, eng, "jobs")
		return in.Messages == 0 && in.Counters.Acked == 3
	})
}

// TestQueueRedeliveredAfterDisconnect: a consumer that leaves without
// acknowledging gives its messages back; the next consumer gets them with
// DUP=1, and its PUBACKs remove them.
func TestQueueRedeliveredAfterDisconnect(t *testing.T) {
	s, eng := startQueueServer(t, []queue.Config{{Name: "jobs"}})
	put(t, eng, "jobs", 2)
	a := dialRaw(t, s.Addr(), "a", 0)
	a.subscribeQoS1(t, "$queue/jobs")
	a.readDelivery(t, "$queue/jobs", false, "m0")
	a.readDelivery(t, "$queue/jobs", false, "m1")
	a.conn.Close()

	b := dialRaw(t, s.Addr(), "b", 0)
	b.subscribeQoS1(t, "$queue/jobs")
	for _, want := range []string{"m0", "m1"} {
		pk := b.readDelivery(t, "$queue/jobs", true, want)
		b.puback(t, pk.PacketID)
	}
	waitUntil(t, "the queue to be empty", func() bool { return info(t, eng, "jobs").Messages == 0 })
	if in := info(t, eng, "jobs"); in.Counters.Redelivered != 2 || in.Counters.Acked != 2 {
		t.Fatalf("counters %+v", in.Counters)
	}
}

// TestQueueExclusiveStandby: on an exclusive queue the first subscriber
// gets everything and the second waits; when the first leaves without
// acknowledging, the second takes over and gets its messages again.
func TestQueueExclusiveStandby(t *testing.T) {
	s, eng := startQueueServer(t, []queue.Config{{Name: "ex", Access: queue.Exclusive}})
	a := dialRaw(t, s.Addr(), "a", 0)
	a.subscribeQoS1(t, "$queue/ex")
	// The consumer attaches once the SUBACK is out: a's first.
	waitUntil(t, "a's consumer", func() bool { return info(t, eng, "ex").Consumers == 1 })
	b := dialRaw(t, s.Addr(), "b", 0)
	b.subscribeQoS1(t, "$queue/ex")
	waitUntil(t, "b's consumer", func() bool { return info(t, eng, "ex").Consumers == 2 })
	put(t, eng, "ex", 3)
	for _, want := range []string{"m0", "m1", "m2"} {
		a.readDelivery(t, "$queue/ex", false, want)
	}
	// b got nothing: everything is in flight to a.
	if in := info(t, eng, "ex"); in.InFlight != 3 || in.Consumers != 2 {
		t.Fatalf("want 3 in flight to a of 2 consumers, got %+v", in)
	}
	a.conn.Close()
	for _, want := range []string{"m0", "m1", "m2"} {
		pk := b.readDelivery(t, "$queue/ex", true, want)
		b.puback(t, pk.PacketID)
	}
	waitUntil(t, "the queue to be empty", func() bool { return info(t, eng, "ex").Messages == 0 })
}

// TestQueueSpreadsOverConsumers: a non-exclusive queue spreads over its
// consumers by their windows: two clients with Receive Maximum 1 get one
// message each, then one more per PUBACK.
func TestQueueSpreadsOverConsumers(t *testing.T) {
	s, eng := startQueueServer(t, []queue.Config{{Name: "work"}})
	a := dialRaw(t, s.Addr(), "a", 1)
	a.subscribeQoS1(t, "$queue/work")
	b := dialRaw(t, s.Addr(), "b", 1)
	b.subscribeQoS1(t, "$queue/work")
	put(t, eng, "work", 4)
	got := map[string]bool{}
	pa := a.readDelivery(t, "$queue/work", false, "")
	pb := b.readDelivery(t, "$queue/work", false, "")
	got[string(pa.Payload)], got[string(pb.Payload)] = true, true
	a.puback(t, pa.PacketID)
	b.puback(t, pb.PacketID)
	pa = a.readDelivery(t, "$queue/work", false, "")
	pb = b.readDelivery(t, "$queue/work", false, "")
	got[string(pa.Payload)], got[string(pb.Payload)] = true, true
	a.puback(t, pa.PacketID)
	b.puback(t, pb.PacketID)
	if len(got) != 4 {
		t.Fatalf("each message once across the two, got %v", got)
	}
	waitUntil(t, "the queue to be empty", func() bool { return info(t, eng, "work").Messages == 0 })
}

// TestQueueRespectsReceiveMaximum: a consumer with Receive Maximum 2 never
// holds more than 2 unacknowledged queue messages, and gets all 10 as it
// acknowledges. The engine's count of messages in flight to it is read
// after each delivery: the worker takes a place in the window before it
// takes a message, so the count can never pass the window even for a
// moment.
func TestQueueRespectsReceiveMaximum(t *testing.T) {
	const n = 10
	s, eng := startQueueServer(t, []queue.Config{{Name: "rm"}})
	put(t, eng, "rm", n)
	c := dialRaw(t, s.Addr(), "c", 2)
	c.subscribeQoS1(t, "$queue/rm")
	var window []uint16
	for i := range n {
		pk := c.readDelivery(t, "$queue/rm", false, fmt.Sprintf("m%d", i))
		window = append(window, pk.PacketID)
		if in := info(t, eng, "rm"); in.InFlight > 2 {
			t.Fatalf("after delivery %d: %d in flight, over Receive Maximum 2", i, in.InFlight)
		}
		if len(window) == 2 {
			// The window is full: a PINGRESP comes before any third
			// delivery, and the engine still holds 2 in flight.
			c.write(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pingreq}})
			if pk := c.read(t); pk.FixedHeader.Type != packets.Pingresp {
				t.Fatalf("a third message in flight: %v", packets.PacketNames[pk.FixedHeader.Type])
			}
			c.puback(t, window[0])
			window = window[1:]
		}
	}
	for _, id := range window {
		c.puback(t, id)
	}
	waitUntil(t, "the queue to be empty", func() bool { return info(t, eng, "rm").Messages == 0 })
}

// TestPublishToQueue: a PUBLISH to $queue/<name> (MQTT 5 QoS 1, 3.1.1
// QoS 2 and QoS 0) goes into the queue only, not to the topic space: a
// consumer gets each once, through the queue, and the publisher's acks
// come once the queue holds it.
func TestPublishToQueue(t *testing.T) {
	s, eng := startQueueServer(t, []queue.Config{{Name: "in"}})
	c := dialRaw(t, s.Addr(), "c", 0)
	c.subscribeQoS1(t, "$queue/in")

	p5 := dialRaw(t, s.Addr(), "p5", 0)
	p5.publish(t, "$queue/in", 1, 7, false)
	p5.expectAcks(t, packets.Puback, []uint16{7}, nil)
	p3 := dialRawVersion(t, s.Addr(), "p3", 4, true, 0)
	p3.publish(t, "$queue/in", 2, 8, false)
	p3.expectAcks(t, packets.Pubrec, []uint16{8}, nil)
	p3.write(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pubrel}, PacketID: 8})
	p3.expectAcks(t, packets.Pubcomp, []uint16{8}, nil)
	pc := dialTest(t, s.Addr(), "paho", nil)
	if err := pc.publish0("$queue/in"); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		pk := c.readDelivery(t, "$queue/in", false, "")
		c.puback(t, pk.PacketID)
	}
	waitUntil(t, "the queue to be empty", func() bool { return info(t, eng, "in").Messages == 0 })
	if in := info(t, eng, "in"); in.Counters.In != 3 || in.Counters.Out != 3 {
		t.Fatalf("want 3 in and 3 out (no copy through mochi's fan-out), got %+v", in.Counters)
	}
	// No fourth copy, fanned out by mochi to the $queue/in subscription.
	c.write(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pingreq}})
	if pk := c.read(t); pk.FixedHeader.Type != packets.Pingresp {
		t.Fatalf("a copy outside the queue: %v on %s", packets.PacketNames[pk.FixedHeader.Type], pk.TopicName)
	}
}

func (c *testClient) publish0(topic string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := c.Publish(ctx, &paho.Publish{Topic: topic, QoS: 0, Payload: []byte("q0")})
	return err
}

// TestPublishToFullQueue: a queue of one message refuses the second
// publish: MQTT 5 with PUBACK 0x97 naming the queue; MQTT 3.1.1 by closing
// the connection without a PUBACK, or, with queues.v311Full: drop, with a
// PUBACK. Both refusals are counted by the queue.
func TestPublishToFullQueue(t *testing.T) {
	for _, tc := range []struct {
		name    string
		version byte
		drop    bool
	}{{"mqtt5", 5, false}, {"mqtt311", 4, false}, {"mqtt311-drop", 4, true}} {
		t.Run(tc.name, func(t *testing.T) {
			s, eng := startQueueServer(t, []queue.Config{{Name: "tiny", MaxMessages: 1}}, func(o *Options) {
				if tc.drop {
					o.V311Full = V311FullDrop
				}
			})
			p := dialRawVersion(t, s.Addr(), "p", tc.version, true, 0)
			p.publish(t, "$queue/tiny", 1, 1, false)
			p.expectAcks(t, packets.Puback, []uint16{1}, nil)
			p.publish(t, "$queue/tiny", 1, 2, false)
			switch {
			case tc.version == 5:
				pk := p.read(t)
				if pk.FixedHeader.Type != packets.Puback || pk.PacketID != 2 || pk.ReasonCode != packets.ErrQuotaExceeded.Code ||
					!strings.Contains(pk.Properties.ReasonString, `"tiny"`) {
					t.Fatalf("want PUBACK 0x97 naming the queue, got %v id %d code %#x %q", packets.PacketNames[pk.FixedHeader.Type],
						pk.PacketID, pk.ReasonCode, pk.Properties.ReasonString)
				}
			case tc.drop:
				p.expectAcks(t, packets.Puback, []uint16{2}, nil)
			default:
				if pk, err := p.next(); !errors.Is(err, io.EOF) {
					t.Fatalf("want the connection closed without a PUBACK, got %v id %d, %v", pk.FixedHeader.Type, pk.PacketID, err)
				}
			}
			if in := info(t, eng, "tiny"); in.Messages != 1 || in.Counters.Refused != 1 {
				t.Fatalf("want 1 message and 1 refusal, got %+v", in)
			}
		})
	}
}

// TestTopicPublishIntoFullQueueV311Drop: queues.v311Full applies to a
// topic publish that a matching queue refuses too: acknowledged with drop,
// the connection closed without.
func TestTopicPublishIntoFullQueueV311Drop(t *testing.T) {
	for _, drop := range []bool{false, true} {
		t.Run(fmt.Sprint("drop=", drop), func(t *testing.T) {
			s, eng := startQueueServer(t, []queue.Config{{Name: "tiny", MaxMessages: 1, Subscriptions: []string{"t/#"}}},
				func(o *Options) {
					if drop {
						o.V311Full = V311FullDrop
					}
				})
			p := dialRawVersion(t, s.Addr(), "p", 4, true, 0)
			p.publish(t, "t/x", 1, 1, false)
			p.expectAcks(t, packets.Puback, []uint16{1}, nil)
			p.publish(t, "t/x", 1, 2, false)
			if drop {
				p.expectAcks(t, packets.Puback, []uint16{2}, nil)
			} else if pk, err := p.next(); !errors.Is(err, io.EOF) {
				t.Fatalf("want the connection closed without a PUBACK, got %v id %d, %v", pk.FixedHeader.Type, pk.PacketID, err)
			}
			if in := info(t, eng, "tiny"); in.Messages != 1 || in.Counters.Refused != 1 {
				t.Fatalf("want 1 message and 1 refusal, got %+v", in)
			}
		})
	}
}

// TestUnknownQueue: a SUBSCRIBE to an unknown queue gets 0x8F (MQTT 5) or
// 0x80 (3.1.1), so does a QoS 0 subscription to a known one; a QoS 1
// PUBLISH to an unknown queue gets PUBACK 0x90 (MQTT 5) or closes the
// connection (3.1.1). With AutoCreateQueues the SUBSCRIBE creates it.
func TestUnknownQueue(t *testing.T) {
	s, eng := startQueueServer(t, []queue.Config{{Name: "known"}})
	c5 := dialRaw(t, s.Addr(), "c5", 0)
	if codes := c5.subscribeCodes(t, "$queue/nope", 1); len(codes) != 1 || codes[0] != packets.ErrTopicFilterInvalid.Code {
		t.Fatalf("MQTT 5: want 0x8F, got % x", codes)
	}
	if codes := c5.subscribeCodes(t, "$queue/known", 0); len(codes) != 1 || codes[0] != packets.ErrTopicFilterInvalid.Code {
		t.Fatalf("MQTT 5, QoS 0: want 0x8F, got % x", codes)
	}
	c5.publish(t, "$queue/nope", 1, 3, false)
	pk := c5.read(t)
	if pk.FixedHeader.Type != packets.Puback || pk.ReasonCode != packets.ErrTopicNameInvalid.Code || !strings.Contains(pk.Properties.ReasonString, "nope") {
		t.Fatalf("want PUBACK 0x90, got %v code %#x %q", packets.PacketNames[pk.FixedHeader.Type], pk.ReasonCode, pk.Properties.ReasonString)
	}
	c3 := dialRawVersion(t, s.Addr(), "c3", 4, true, 0)
	if codes := c3.subscribeCodes(t, "$queue/nope", 1); len(codes) != 1 || codes[0] != packets.ErrUnspecifiedError.Code {
		t.Fatalf("MQTT 3.1.1: want 0x80, got % x", codes)
	}
	c3.publish(t, "$queue/nope", 1, 3, false)
	if pk, err := c3.next(); !errors.Is(err, io.EOF) {
		t.Fatalf("want the connection closed without a PUBACK, got %v, %v", packets.PacketNames[pk.FixedHeader.Type], err)
	}
	if _, ok := eng.Queue("nope"); ok {
		t.Fatal("a queue was created without AutoCreateQueues")
	}

	s2, eng2 := startQueueServer(t, nil, func(o *Options) { o.AutoCreateQueues = true })
	a := dialRaw(t, s2.Addr(), "a", 0)
	a.subscribeQoS1(t, "$queue/made")
	waitUntil(t, "the created queue to have its consumer", func() bool { return info(t, eng2, "made").Consumers == 1 })
}

// TestQueueSessionResumed: a persistent session's $queue/ subscription
// consumes again when the client reconnects, without subscribing again,
// whether its old connection had ended or is taken over. The message it
// had not acknowledged comes back from the queue (DUP=1), and only from
// there: mochi does not resend it as one of the session's inflight
// messages (patch 15 keeps queue deliveries out of a session carried on;
// without it, the copy resent on a takeover was one the queue did not know
// of, so its PUBACK left the message in the queue, delivered once more).
func TestQueueSessionResumed(t *testing.T) {
	for _, takeover := range []bool{false, true} {
		t.Run(fmt.Sprint("takeover=", takeover), func(t *testing.T) {
			s, eng := startQueueServer(t, []queue.Config{{Name: "jobs"}})
			put(t, eng, "jobs", 1)
			// MQTT 3.1.1: clean session false keeps the session (MQTT 5
			// would need a session expiry interval too).
			c := dialRawVersion(t, s.Addr(), "p", 4, false, 0)
			c.subscribeQoS1(t, "$queue/jobs")
			c.readDelivery(t, "$queue/jobs", false, "m0")
			if !takeover {
				c.conn.Close()
				waitUntil(t, "the consumer to close", func() bool { return info(t, eng, "jobs").Consumers == 0 })
			}
			c = dialRawVersion(t, s.Addr(), "p", 4, false, 0)
			pk := c.readDelivery(t, "$queue/jobs", true, "m0")
			c.puback(t, pk.PacketID)
			waitUntil(t, "the PUBACK to empty the queue", func() bool {
				in := info(t, eng, "jobs")
				return in.Messages == 0 && in.Counters.Acked == 1
			})
			if in := info(t, eng, "jobs"); in.Counters.Out != 2 {
				t.Fatalf("want 2 deliveries, got %+v", in.Counters)
			}
		})
	}
}

// TestQueueUnsubscribe: an UNSUBSCRIBE closes the consumer; what it held
// unacknowledged goes to the next consumer.
func TestQueueUnsubscribe(t *testing.T) {
	s, eng := startQueueServer(t, []queue.Config{{Name: "jobs"}})
	put(t, eng, "jobs", 1)
	a := dialRaw(t, s.Addr(), "a", 0)
	a.subscribeQoS1(t, "$queue/jobs")
	a.readDelivery(t, "$queue/jobs", false, "m0")
	a.write(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Unsubscribe, Qos: 1}, PacketID: 2,
		Filters: packets.Subscriptions{{Filter: "$queue/jobs"}}})
	if pk := a.read(t); pk.FixedHeader.Type != packets.Unsuback {
		t.Fatalf("want UNSUBACK, got %v", packets.PacketNames[pk.FixedHeader.Type])
	}
	waitUntil(t, "the consumer to close", func() bool { return info(t, eng, "jobs").Consumers == 0 })
	b := dialRaw(t, s.Addr(), "b", 0)
	b.subscribeQoS1(t, "$queue/jobs")
	b.puback(t, b.readDelivery(t, "$queue/jobs", true, "m0").PacketID)
	waitUntil(t, "the queue to be empty", func() bool { return info(t, eng, "jobs").Messages == 0 })
}

// TestWillIntoQueue: a will to $queue/<name>, sent at once or after its
// delay, goes into the queue (counted in, acknowledged out), and reaches the
// queue's consumer once. mochi used to fan it out itself: the consumer got it
// past the queue (in 0, no redelivery had it been lost), and with no
// consumer connected it was gone.
func TestWillIntoQueue(t *testing.T) {
	for _, delayed := range []bool{false, true} {
		t.Run(fmt.Sprintf("delayed=%v", delayed), func(t *testing.T) {
			s, eng := startQueueServer(t, []queue.Config{{Name: "wills"}})
			c := dialRaw(t, s.Addr(), "consumer", 0)
			c.subscribeQoS1(t, "$queue/wills")
			dying := dialWillRaw(t, s.Addr(), "dying", "$queue/wills", delayed)
			_ = dying.Close() // no DISCONNECT: the will goes out
			pk := c.readDelivery(t, "$queue/wills", false, `{"state":"gone"}`)
			c.puback(t, pk.PacketID)
			waitUntil(t, "the will to be acknowledged", func() bool { return info(t, eng, "wills").Counters.Acked == 1 })
			if in := info(t, eng, "wills"); in.Counters.In != 1 || in.Messages != 0 {
				t.Fatalf("want the will in the queue once and taken, got %+v (%d messages)", in.Counters, in.Messages)
			}
			c.write(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pingreq}})
			if pk := c.read(t); pk.FixedHeader.Type != packets.Pingresp {
				t.Fatalf("a copy outside the queue: %v on %s", packets.PacketNames[pk.FixedHeader.Type], pk.TopicName)
			}
		})
	}
}
