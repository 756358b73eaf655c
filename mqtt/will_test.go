package mqtt

import (
	"context"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/gatewayd/gateway/core"
	"github.com/gatewayd/gateway/retain"
	"github.com/gatewayd/gateway/retain/memory"
)

// gatedStore holds up the Set of one topic until released, to open the
// window between a message being routed and being stored.
type gatedStore struct {
	retain.Store
	topic   string
	once    sync.Once
	entered chan struct{}
	release chan struct{}
}

func (s *gatedStore) Set(ctx context.Context, m *core.Message) error {
	if m.Topic == s.topic {
		s.once.Do(func() { close(s.entered) })
		<-s.release
	}
	return s.Store.Set(ctx, m)
}

// TestRetainedWillNotLostToSubscriberInBetween: mochi delivered a will to
// MQTT subscribers before the hook stored it (OnWillSent runs after the
// fan-out), so a client subscribing in between got it neither live nor from
// the retained store. Found by the Python end-to-end check "retained will to
// a late subscriber".
func TestRetainedWillNotLostToSubscriberInBetween(t *testing.T) {
	store := &gatedStore{Store: memory.New(retain.Limits{}), topic: "will/dev",
		entered: make(chan struct{}), release: make(chan struct{})}
	router := core.NewRouter(core.RouterOptions{Retainer: retain.Retainer{Store: store}, Node: "n"})
	s, err := New(Options{Listen: "127.0.0.1:0", Router: router, Store: store, Node: "n",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
	})
	released := false
	release := func() {
		if !released {
			released = true
			close(store.release)
		}
	}
	t.Cleanup(release)

	live := dialTest(t, s.Addr(), "live", nil)
	live.subscribe(t, "will/#")
	dying := dialTest(t, s.Addr(), "dying", &paho.WillMessage{Topic: "will/dev", Payload: []byte("gone"), QoS: 1, Retain: true})
	_ = dying.conn.Close() // no DISCONNECT: the will goes out

	select {
	case <-store.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the will was never stored")
	}
	late := dialTest(t, s.Addr(), "late", nil)
	late.subscribe(t, "will/#") // subscribed while the will is being stored
	release()

	for _, c := range []*testClient{live, late} {
		select {
		case m := <-c.msgs:
			if m.Topic != "will/dev" || string(m.Payload) != "gone" {
				t.Fatalf("%s got %s %q", c.id, m.Topic, m.Payload)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no will message (neither live nor retained)", c.id)
		}
	}
}

type testClient struct {
	*paho.Client
	id   string
	conn net.Conn
	msgs chan *paho.Publish
}

func dialTest(t *testing.T, addr, id string, will *paho.WillMessage) *testClient {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c := &testClient{id: id, conn: conn, msgs: make(chan *paho.Publish, 10)}
	c.Client = paho.NewClient(paho.ClientConfig{ClientID: id, Conn: conn,
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(pr paho.PublishReceived) (bool, error) {
			c.msgs <- pr.Packet
			return true, nil
		}}})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ca, err := c.Connect(ctx, &paho.Connect{ClientID: id, CleanStart: true, KeepAlive: 30, WillMessage: will})
	if err != nil || ca.ReasonCode != 0 {
		t.Fatalf("connect %s: %v %v", id, err, ca)
	}
	t.Cleanup(func() { _ = c.Disconnect(&paho.Disconnect{}) })
	return c
}

func (c *testClient) subscribe(t *testing.T, filter string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: filter, QoS: 1}}}); err != nil {
		t.Fatalf("subscribe %s: %v", c.id, err)
	}
}
