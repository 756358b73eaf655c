package mqtt

import (
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/tolsey/tolsey/core"
	"github.com/tolsey/tolsey/retain"
	"github.com/tolsey/tolsey/retain/memory"
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
	s := startTestServer(t, store)
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
	return dialConnect(t, addr, &paho.Connect{ClientID: id, CleanStart: true, KeepAlive: 30, WillMessage: will})
}

func dialConnect(t *testing.T, addr string, cp *paho.Connect) *testClient {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	return connectOn(t, conn, cp)
}

// connectOn connects a paho client over conn with cp, wanting success.
func connectOn(t *testing.T, conn net.Conn, cp *paho.Connect) *testClient {
	t.Helper()
	id := cp.ClientID
	c := &testClient{id: id, conn: conn, msgs: make(chan *paho.Publish, 10)}
	c.Client = paho.NewClient(paho.ClientConfig{ClientID: id, Conn: conn,
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(pr paho.PublishReceived) (bool, error) {
			c.msgs <- pr.Packet
			return true, nil
		}}})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ca, err := c.Connect(ctx, cp)
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

// TestWillCarriesItsProperties: a will goes out with its MQTT 5 properties
// (payload format, message expiry, content type, response topic,
// correlation data, user properties), live and as the retained copy a late
// subscriber gets; a delayed will's expiry runs from when it is sent.
// mochi 2.7.9 kept only the user properties, and sent a delayed will with
// an expiry interval of 1 s (third_party/mochi-mqtt, patch 3).
func TestWillCarriesItsProperties(t *testing.T) {
	store := memory.New(retain.Limits{})
	s := startTestServer(t, store)

	live := dialTest(t, s.Addr(), "live", nil)
	live.subscribe(t, "will/#")
	const expiry = 600
	check := func(who string, m *paho.Publish, topic string, retained bool) {
		t.Helper()
		p := m.Properties
		switch {
		case m.Topic != topic || string(m.Payload) != `{"state":"gone"}` || m.Retain != retained:
			t.Errorf("%s: got %s %q retain=%v, want %s retain=%v", who, m.Topic, m.Payload, m.Retain, topic, retained)
		case p == nil:
			t.Errorf("%s: %s came without properties", who, topic)
		case p.PayloadFormat == nil || *p.PayloadFormat != 1:
			t.Errorf("%s: %s payload format %v, want 1", who, topic, p.PayloadFormat)
		case p.MessageExpiry == nil || *p.MessageExpiry > expiry || *p.MessageExpiry < expiry-30:
			t.Errorf("%s: %s message expiry %v, want about %d", who, topic, p.MessageExpiry, expiry)
		case p.ContentType != "application/json" || p.ResponseTopic != "reply/here" || string(p.CorrelationData) != "corr-1":
			t.Errorf("%s: %s content type %q, response topic %q, correlation data %q", who, topic, p.ContentType, p.ResponseTopic, p.CorrelationData)
		case len(p.User) != 2 || p.User[0] != (paho.UserProperty{Key: "k1", Value: "v1"}) || p.User[1] != (paho.UserProperty{Key: "k2", Value: "v2"}):
			t.Errorf("%s: %s user properties %v, want k1=v1, k2=v2 in order", who, topic, p.User)
		}
	}
	receive := func(c *testClient) *paho.Publish {
		t.Helper()
		select {
		case m := <-c.msgs:
			return m
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no will message", c.id)
			return nil
		}
	}

	for _, tc := range []struct {
		topic   string
		delayed bool
	}{{"will/now", false}, {"will/delayed", true}} {
		dying := dialWillRaw(t, s.Addr(), "dying-"+tc.topic[5:], tc.topic, tc.delayed)
		_ = dying.Close() // no DISCONNECT: the will goes out
		check("live subscriber", receive(live), tc.topic, false)
		late := dialTest(t, s.Addr(), "late-"+tc.topic[5:], nil)
		late.subscribe(t, tc.topic)
		check("late subscriber", receive(late), tc.topic, true)
	}
}

// dialWillRaw connects as id with a retained QoS 1 will on topic carrying
// every will property (delayed by 1 s in a 30 s session when delayed), and
// waits for the CONNACK. It writes the CONNECT itself: paho.golang 0.23
// sends no will properties.
func dialWillRaw(t *testing.T, addr, id, topic string, delayed bool) net.Conn {
	t.Helper()
	str := func(v string) []byte { return append([]byte{byte(len(v) >> 8), byte(len(v))}, v...) }
	u32 := func(v uint32) []byte { return []byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)} }
	var props []byte // CONNECT properties
	if delayed {
		props = append([]byte{0x11}, u32(30)...) // session expiry interval
	}
	will := []byte{0x01, 1}                        // payload format indicator
	will = append(append(will, 0x02), u32(600)...) // message expiry interval
	will = append(append(will, 0x03), str("application/json")...)
	will = append(append(will, 0x08), str("reply/here")...)
	will = append(append(will, 0x09), str("corr-1")...) // correlation data (binary)
	will = append(append(append(will, 0x26), str("k1")...), str("v1")...)
	will = append(append(append(will, 0x26), str("k2")...), str("v2")...)
	if delayed {
		will = append(append(will, 0x18), u32(1)...) // will delay interval
	}
	body := append([]byte{0, 4, 'M', 'Q', 'T', 'T', 5, 0x02 | 0x04 | 0x08 | 0x20, 0, 30, byte(len(props))}, props...)
	body = append(body, str(id)...)
	body = append(append(body, byte(len(will))), will...)
	body = append(body, str(topic)...)
	body = append(body, str(`{"state":"gone"}`)...)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	pk := binary.AppendUvarint([]byte{0x10}, uint64(len(body))) // MQTT's variable byte integer is a uvarint
	if _, err := c.Write(append(pk, body...)); err != nil {
		t.Fatal(err)
	}
	ack := make([]byte, 5)
	if _, err := io.ReadFull(c, ack); err != nil || ack[0] != 0x20 || ack[3] != 0 {
		t.Fatalf("%s: CONNACK % x, %v", id, ack, err)
	}
	_ = c.SetDeadline(time.Time{})
	return c
}

// startTestServer runs a front-end on a free port with store behind its
// router, shut down when the test ends.
func startTestServer(t testing.TB, store retain.Store, mods ...func(*Options)) *Server {
	t.Helper()
	s := startTestServerOnly(t, store, mods...)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
	})
	return s
}

// startTestServerOnly runs a front-end (TCP and WebSocket) on free ports
// with store behind its router, and mods applied to its options; the test
// shuts it down.
func startTestServerOnly(t testing.TB, store retain.Store, mods ...func(*Options)) *Server {
	t.Helper()
	router := core.NewRouter(core.RouterOptions{Retainer: retain.Retainer{Store: store}, Node: "n"})
	opts := Options{Listen: "127.0.0.1:0", WSListen: "127.0.0.1:0", Router: router, Store: store, Node: "n",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	for _, m := range mods {
		m(&opts)
	}
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	return s
}
