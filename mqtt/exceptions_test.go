package mqtt

import (
	"context"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/tolsey/tolsey/core"
	"github.com/tolsey/tolsey/retain"
	"github.com/tolsey/tolsey/retain/memory"
)

// subscribeExcept subscribes c to filter at QoS 1 with one tolsey-except
// user property per exception, and returns the SUBACK's reason codes.
func (c *testClient) subscribeExcept(t *testing.T, filter string, exceptions ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	props := &paho.SubscribeProperties{}
	for _, e := range exceptions {
		props.User.Add(exceptProperty, e)
	}
	sa, err := c.Subscribe(ctx, &paho.Subscribe{Properties: props,
		Subscriptions: []paho.SubscribeOptions{{Topic: filter, QoS: 1}}})
	if sa != nil {
		return sa.Reasons // paho returns an error too for a refusal
	}
	t.Fatalf("subscribe %s: %v", c.id, err)
	return nil
}

// publishAll publishes each topic at QoS 1, in order, with the topic as
// its payload.
func (c *testClient) publishAll(t *testing.T, topics ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, topic := range topics {
		if _, err := c.Publish(ctx, &paho.Publish{Topic: topic, QoS: 1, Payload: []byte(topic)}); err != nil {
			t.Fatalf("publish %s: %v", topic, err)
		}
	}
}

// receiveUntil returns the topics c receives up to and including last.
// Messages from one publisher arrive in the order published, so a topic
// published before last and missing here was not delivered.
func (c *testClient) receiveUntil(t *testing.T, last string) []string {
	t.Helper()
	var got []string
	for {
		select {
		case m := <-c.msgs:
			got = append(got, m.Topic)
			if m.Topic == last {
				return got
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("%s: %s never came; got %v", c.id, last, got)
		}
	}
}

func expectTopics(t *testing.T, who string, got []string, want ...string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s received %v, want %v", who, got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("%s received %v, want %v", who, got, want)
		}
	}
}

// TestSubscribeExceptions: an MQTT 5 SUBSCRIBE to animals/# carrying the
// user property tolsey-except=animals/fox gets animals/frog and not
// animals/fox; a client without it gets both; a SUBSCRIBE to the same
// filter without the property replaces the exceptions, and an UNSUBSCRIBE
// drops them.
func TestSubscribeExceptions(t *testing.T) {
	s := startTestServer(t, memory.New(retain.Limits{}))
	pub := dialTest(t, s.Addr(), "pub", nil)
	except := dialTest(t, s.Addr(), "except", nil)
	plain := dialTest(t, s.Addr(), "plain", nil)
	if codes := except.subscribeExcept(t, "animals/#", "animals/fox"); len(codes) != 1 || codes[0] != 1 {
		t.Fatalf("SUBACK %v, want [1]", codes)
	}
	plain.subscribe(t, "animals/#")

	pub.publishAll(t, "animals/fox", "animals/frog")
	expectTopics(t, "except", except.receiveUntil(t, "animals/frog"), "animals/frog")
	expectTopics(t, "plain", plain.receiveUntil(t, "animals/frog"), "animals/fox", "animals/frog")

	// The Solace-style forms work in exceptions too, and several add up.
	except.subscribeExcept(t, "animals/#", "animals/f*", "!animals/cat")
	pub.publishAll(t, "animals/fox", "animals/frog", "animals/cat", "animals/dog")
	expectTopics(t, "except", except.receiveUntil(t, "animals/dog"), "animals/dog")

	except.subscribeExcept(t, "animals/#") // replaces: no exceptions now
	pub.publishAll(t, "animals/fox", "animals/frog")
	expectTopics(t, "except", except.receiveUntil(t, "animals/frog"), "animals/fox", "animals/frog")

	except.subscribeExcept(t, "animals/#", "animals/fox")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := except.Unsubscribe(ctx, &paho.Unsubscribe{Topics: []string{"animals/#"}}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the exceptions to go with the subscription", func() bool { return s.hook.except.used.Load() == 0 })
	except.subscribe(t, "animals/#")
	pub.publishAll(t, "animals/fox", "animals/frog")
	expectTopics(t, "except", except.receiveUntil(t, "animals/frog"), "animals/fox", "animals/frog")
}

// TestExceptionsPerClient: a message an exception keeps out of one
// subscription still reaches the client through another of its
// subscriptions that matches it without one; a SUBSCRIBE to a filter an
// existing exception matches, read as a topic, is granted (mochi asks
// OnACLCheck about the filter).
func TestExceptionsPerClient(t *testing.T) {
	s := startTestServer(t, memory.New(retain.Limits{}))
	pub := dialTest(t, s.Addr(), "pub", nil)
	c := dialTest(t, s.Addr(), "c", nil)
	c.subscribeExcept(t, "animals/#", "animals/fox")
	c.subscribeExcept(t, "plants/#", "plants/oak")
	if codes := c.subscribeExcept(t, "animals/fox"); len(codes) != 1 || codes[0] != 1 {
		t.Fatalf("SUBACK for animals/fox: %v, want [1]", codes)
	}
	pub.publishAll(t, "animals/fox", "plants/oak", "animals/frog")
	expectTopics(t, "c", c.receiveUntil(t, "animals/frog"), "animals/fox", "animals/frog")
}

// TestExceptionsKeptWithSession: a client that comes back with clean start
// false keeps its subscriptions' exceptions, also for what was published
// while it was away; one that comes back with clean start true has neither.
func TestExceptionsKeptWithSession(t *testing.T) {
	s := startTestServer(t, memory.New(retain.Limits{}))
	pub := dialTest(t, s.Addr(), "pub", nil)
	expiry := uint32(300)
	connect := &paho.Connect{ClientID: "durable", KeepAlive: 30, Properties: &paho.ConnectProperties{SessionExpiryInterval: &expiry}}
	first := dialConnect(t, s.Addr(), connect)
	first.subscribeExcept(t, "animals/#", "animals/fox")
	_ = first.Disconnect(&paho.Disconnect{})
	waitUntil(t, "the client to be gone", func() bool {
		cl, ok := s.mochi.Clients.Get("durable")
		return ok && cl.Closed()
	})
	pub.publishAll(t, "animals/fox", "animals/frog") // queued for the session

	second := dialConnect(t, s.Addr(), connect)
	expectTopics(t, "resumed", second.receiveUntil(t, "animals/frog"), "animals/frog")
	pub.publishAll(t, "animals/fox", "animals/frog")
	expectTopics(t, "resumed", second.receiveUntil(t, "animals/frog"), "animals/frog")
	_ = second.Disconnect(&paho.Disconnect{})

	waitUntil(t, "the client to be gone", func() bool {
		cl, ok := s.mochi.Clients.Get("durable")
		return ok && cl.Closed()
	})
	connect.CleanStart = true
	dialConnect(t, s.Addr(), connect)
	waitUntil(t, "a clean start to drop the exceptions", func() bool { return s.hook.except.used.Load() == 0 })
}

// TestExceptionsRetained: a new subscription's stored retained copies obey
// its exceptions.
func TestExceptionsRetained(t *testing.T) {
	store := memory.New(retain.Limits{})
	s := startTestServer(t, store)
	for _, topic := range []string{"animals/fox", "animals/frog"} {
		if err := store.Set(context.Background(), &core.Message{Topic: topic, Payload: []byte(topic), Retain: true, QoS: 1}); err != nil {
			t.Fatal(err)
		}
	}
	c := dialTest(t, s.Addr(), "c", nil)
	c.subscribeExcept(t, "animals/#", "animals/fox")
	dialTest(t, s.Addr(), "pub", nil).publishAll(t, "animals/zebra") // live: after the stored copies
	expectTopics(t, "c", c.receiveUntil(t, "animals/zebra"), "animals/frog", "animals/zebra")
}

// TestExceptionInvalid: a SUBSCRIBE whose exception is not a valid filter
// is refused, every filter of it with 0x8F Topic Filter invalid.
func TestExceptionInvalid(t *testing.T) {
	s := startTestServer(t, memory.New(retain.Limits{}))
	c := dialTest(t, s.Addr(), "c", nil)
	if codes := c.subscribeExcept(t, "animals/#", "animals/#/fox"); len(codes) != 1 || codes[0] != 0x8F {
		t.Fatalf("SUBACK %v, want [0x8F]", codes)
	}
	if s.hook.except.used.Load() != 0 {
		t.Fatal("a refused SUBSCRIBE left exceptions")
	}
}

// TestExceptionsShared: a shared subscription's exceptions apply to the
// member mochi picks (here the only one).
func TestExceptionsShared(t *testing.T) {
	s := startTestServer(t, memory.New(retain.Limits{}))
	pub := dialTest(t, s.Addr(), "pub", nil)
	c := dialTest(t, s.Addr(), "c", nil)
	c.subscribeExcept(t, "$share/g/animals/#", "animals/fox")
	pub.publishAll(t, "animals/fox", "animals/frog")
	expectTopics(t, "c", c.receiveUntil(t, "animals/frog"), "animals/frog")
}
