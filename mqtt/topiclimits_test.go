package mqtt

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	pahov3 "github.com/eclipse/paho.mqtt.golang"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/tolsey/tolsey/core"
	"github.com/tolsey/tolsey/core/coretest"
	"github.com/tolsey/tolsey/core/metrics"
	"github.com/tolsey/tolsey/retain"
	"github.com/tolsey/tolsey/retain/embedded"
)

// Topic limits at the MQTT door. The server runs with the
// default limits (128 levels, 4,096 bytes) and the embedded store, whose
// 32 KiB key limit a long retained topic used to run into.

type limitsEnv struct {
	s    *Server
	met  *metrics.Metrics
	logs *coretest.SyncBuffer
}

func startLimitsServer(t *testing.T) *limitsEnv {
	t.Helper()
	store, err := embedded.Open(t.TempDir(), retain.Limits{}, embedded.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	e := &limitsEnv{met: metrics.New(), logs: &coretest.SyncBuffer{}}
	router := core.NewRouter(core.RouterOptions{Retainer: retain.Retainer{Store: store}, Node: "n"})
	e.s, err = New(Options{Listen: "127.0.0.1:0", Router: router, Store: store, Node: "n", Metrics: e.met,
		Logger: slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = e.s.Shutdown(ctx)
		store.Close()
	})
	return e
}

func counter(t *testing.T, vec *prometheus.CounterVec, labels ...string) float64 {
	t.Helper()
	var m dto.Metric
	if err := vec.WithLabelValues(labels...).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// storeErrors is every tolsey_retained_store_errors_total series, summed.
func (e *limitsEnv) storeErrors(t *testing.T) float64 {
	return counter(t, e.met.StoreErrors, "set") + counter(t, e.met.StoreErrors, "match")
}

// v5Client is an MQTT 5 paho client that records a server's DISCONNECT.
type v5Client struct {
	*paho.Client
	msgs       chan *paho.Publish
	disconnect chan *paho.Disconnect
}

func (e *limitsEnv) dial5(t *testing.T, id string) *v5Client {
	t.Helper()
	conn, err := net.Dial("tcp", e.s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	c := &v5Client{msgs: make(chan *paho.Publish, 10), disconnect: make(chan *paho.Disconnect, 1)}
	c.Client = paho.NewClient(paho.ClientConfig{ClientID: id, Conn: conn,
		OnServerDisconnect: func(d *paho.Disconnect) { c.disconnect <- d },
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(pr paho.PublishReceived) (bool, error) {
			c.msgs <- pr.Packet
			return true, nil
		}}})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if ca, err := c.Connect(ctx, &paho.Connect{ClientID: id, CleanStart: true, KeepAlive: 30}); err != nil || ca.ReasonCode != 0 {
		t.Fatalf("connect %s: %v %v", id, err, ca)
	}
	t.Cleanup(func() { _ = c.Disconnect(&paho.Disconnect{}); conn.Close() })
	return c
}

// dial311 connects an MQTT 3.1.1 client; lost receives the error that ends
// its connection.
func (e *limitsEnv) dial311(t *testing.T, id string, opts func(*pahov3.ClientOptions)) (c pahov3.Client, lost chan error, err error) {
	t.Helper()
	lost = make(chan error, 1)
	o := pahov3.NewClientOptions().AddBroker("tcp://" + e.s.Addr()).SetClientID(id).
		SetProtocolVersion(4).SetAutoReconnect(false).SetConnectRetry(false).
		SetConnectionLostHandler(func(_ pahov3.Client, err error) { lost <- err })
	if opts != nil {
		opts(o)
	}
	c = pahov3.NewClient(o)
	tok := c.Connect()
	if !tok.WaitTimeout(10 * time.Second) {
		t.Fatalf("connect %s: no CONNACK", id)
	}
	if tok.Error() == nil {
		t.Cleanup(func() { c.Disconnect(0) })
	}
	return c, lost, tok.Error()
}

func ctx10(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// levels is a name of n levels.
func levels(prefix string, n int) string {
	return strings.TrimSuffix(strings.Repeat(prefix+"/", n), "/")
}

// TestDeepFilterRefused: a SUBSCRIBE with a filter over the limits is
// answered SUBACK 0x8F for that filter, before mochi indexes it; the
// packet's other filters are granted, and another client's SUBSCRIBE made
// meanwhile is answered as usual. Before the fix, a filter of 32,767 levels
// was granted after 16 s on this machine (mochi indexes a filter in time
// levels × length, under its index's lock), and the other client's
// SUBSCRIBE waited for it.
func TestDeepFilterRefused(t *testing.T) {
	e := startLimitsServer(t)
	deep := levels("a", 32767)                         // 65,533 bytes: the filter
	wide := "long/" + strings.Repeat("x", 5000)        // 2 levels, over 4,096 bytes
	atLimit := levels("l", core.DefaultMaxTopicLevels) // 128 levels: accepted
	overLevels := levels("+", 200) + "/#"              // 201 levels, 402 bytes
	shared := "$share/g/" + levels("s", 128)           // $share/{group}/ adds no levels
	a := e.dial5(t, "deep")
	base := atomic.LoadInt64(&e.s.Info().Subscriptions)

	type result struct {
		sa  *paho.Suback
		err error
	}
	done := make(chan result, 1)
	go func() {
		sa, err := a.Subscribe(context.Background(), &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{
			{Topic: deep, QoS: 1}, {Topic: atLimit, QoS: 1}, {Topic: wide, QoS: 1},
			{Topic: overLevels, QoS: 1}, {Topic: shared, QoS: 1},
		}})
		done <- result{sa, err}
	}()
	b := e.dial5(t, "other")
	if sb, err := b.Subscribe(ctx10(t), &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "other/#", QoS: 1}}}); err != nil || !bytes.Equal(sb.Reasons, []byte{1}) {
		t.Fatalf("other client's subscribe: %v %v", sb, err)
	}
	var r result
	select {
	case r = <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("no SUBACK for the deep filter")
	}
	if r.sa == nil { // paho also returns an error when any filter is refused
		t.Fatalf("subscribe: %v", r.err)
	}
	if want := []byte{0x8F, 1, 0x8F, 0x8F, 1}; !bytes.Equal(r.sa.Reasons, want) {
		t.Fatalf("SUBACK reasons % x, want % x", r.sa.Reasons, want)
	}
	// mochi holds other/#, atLimit and the shared one: nothing of the others.
	if got := atomic.LoadInt64(&e.s.Info().Subscriptions) - base; got != 3 {
		t.Errorf("mochi holds %d new subscriptions, want 3", got)
	}
	if l, n := counter(t, e.met.LimitRefusals, "mqtt", "topic_levels"), counter(t, e.met.LimitRefusals, "mqtt", "topic_length"); l != 1 || n != 2 {
		t.Errorf("refused: levels %v, length %v; want 1 and 2", l, n)
	}
	// The client goes on: its granted 128-level filter works.
	if _, err := b.Publish(ctx10(t), &paho.Publish{Topic: atLimit, QoS: 1, Payload: []byte("hi")}); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-a.msgs:
		if m.Topic != atLimit {
			t.Fatalf("got %q", core.ShortTopic(m.Topic))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no message on the 128-level filter")
	}
}

// TestDeepFilterRefusedMQTT311: an MQTT 3.1.1 client gets SUBACK 0x80
// Failure, its only refusal code, for a filter over the limits.
func TestDeepFilterRefusedMQTT311(t *testing.T) {
	e := startLimitsServer(t)
	c, _, err := e.dial311(t, "deep311", nil)
	if err != nil {
		t.Fatal(err)
	}
	deep := levels("a", 32767)
	tok := c.SubscribeMultiple(map[string]byte{deep: 1, "ok/+": 1}, nil)
	if !tok.WaitTimeout(60*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe: %v", tok.Error())
	}
	res := tok.(*pahov3.SubscribeToken).Result()
	if res[deep] != 0x80 || res["ok/+"] != 1 {
		t.Fatalf("SUBACK: deep %#x, ok/+ %#x; want 0x80 and 0x01", res[deep], res["ok/+"])
	}
}

// TestLongTopicPublishRefusedMQTT5: a PUBLISH to a topic over the limits is
// answered PUBACK/PUBREC 0x90 Topic Name invalid and the connection goes
// on; at QoS 0, which has no ack, with DISCONNECT 0x90. It never reaches the
// retained store, so no store error is counted. Before the fix, a retained
// 65,000-byte topic got PUBACK 0x80 (bbolt: key too large), counted as a
// store error, and a 200-level one was taken.
func TestLongTopicPublishRefusedMQTT5(t *testing.T) {
	e := startLimitsServer(t)
	c := e.dial5(t, "pub5")
	long := "t/" + strings.Repeat("x", 65000)
	deep := levels("d", 200)

	pr, _ := c.Publish(ctx10(t), &paho.Publish{Topic: long, QoS: 1, Retain: true, Payload: []byte("v")})
	if pr == nil || pr.ReasonCode != 0x90 {
		t.Fatalf("QoS 1 to a 65,000-byte topic: %+v, want PUBACK 0x90", pr)
	}
	pr, _ = c.Publish(ctx10(t), &paho.Publish{Topic: deep, QoS: 2, Retain: true, Payload: []byte("v")})
	if pr == nil || pr.ReasonCode != 0x90 {
		t.Fatalf("QoS 2 to a 200-level topic: %+v, want PUBREC 0x90", pr)
	}
	if pr, err := c.Publish(ctx10(t), &paho.Publish{Topic: "ok/t", QoS: 1, Retain: true, Payload: []byte("v")}); err != nil || pr.ReasonCode >= 0x80 {
		t.Fatalf("the connection should go on: %+v %v", pr, err)
	}
	if got := e.storeErrors(t); got != 0 {
		t.Errorf("store errors counted: %v", got)
	}
	if n := counter(t, e.met.LimitRefusals, "mqtt", "topic_length"); n != 1 {
		t.Errorf("refused for length: %v, want 1", n)
	}
	if n := counter(t, e.met.LimitRefusals, "mqtt", "topic_levels"); n != 1 {
		t.Errorf("refused for levels: %v, want 1", n)
	}

	if _, err := c.Publish(ctx10(t), &paho.Publish{Topic: long, QoS: 0, Payload: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-c.disconnect:
		if d.ReasonCode != 0x90 {
			t.Fatalf("DISCONNECT %#x, want 0x90", d.ReasonCode)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("QoS 0 to a 65,000-byte topic: no DISCONNECT")
	}
}

// TestLongTopicPublishClosesMQTT311: MQTT 3.1.1 has no way to refuse a
// PUBLISH but to close the connection [MQTT-3.3.5-2]; before the fix the
// publisher was acknowledged and its message not stored, with no signal.
func TestLongTopicPublishClosesMQTT311(t *testing.T) {
	e := startLimitsServer(t)
	for _, tc := range []struct {
		name, topic string
		qos         byte
	}{
		{"long retained QoS 1", "t/" + strings.Repeat("x", 65000), 1},
		{"deep QoS 0", levels("d", 200), 0},
	} {
		c, lost, err := e.dial311(t, "pub311", nil)
		if err != nil {
			t.Fatal(err)
		}
		c.Publish(tc.topic, tc.qos, tc.qos > 0, "v")
		select {
		case <-lost:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the connection stayed open", tc.name)
		}
	}
	if got := e.storeErrors(t); got != 0 {
		t.Errorf("store errors counted: %v", got)
	}
	if n := counter(t, e.met.LimitRefusals, "mqtt", "topic_length") + counter(t, e.met.LimitRefusals, "mqtt", "topic_levels"); n != 2 {
		t.Errorf("refusals counted: %v, want 2", n)
	}
}

// TestWillTopicOverLimitsRefused: a will is a publish too. MQTT 5 gets
// CONNACK 0x90; MQTT 3.1.1 has no return code for it, so the connection is
// closed without a CONNACK. Before the fix the will was taken, and a
// retained one failed in the store when the client went.
func TestWillTopicOverLimitsRefused(t *testing.T) {
	e := startLimitsServer(t)
	long := "will/" + strings.Repeat("x", 65000)

	conn, err := net.Dial("tcp", e.s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := paho.NewClient(paho.ClientConfig{ClientID: "will5", Conn: conn})
	ca, _ := c.Connect(ctx10(t), &paho.Connect{ClientID: "will5", CleanStart: true,
		WillMessage: &paho.WillMessage{Topic: long, QoS: 1, Retain: true, Payload: []byte("gone")}})
	if ca == nil || ca.ReasonCode != 0x90 {
		t.Fatalf("MQTT 5 CONNACK %+v, want 0x90", ca)
	}

	_, _, err = e.dial311(t, "will311", func(o *pahov3.ClientOptions) { o.SetWill(long, "gone", 1, true) })
	if err == nil {
		t.Fatal("MQTT 3.1.1 connect with a 65,000-byte will topic was accepted")
	}
	if n := counter(t, e.met.LimitRefusals, "mqtt", "topic_length"); n != 2 {
		t.Errorf("refused for length: %v, want 2", n)
	}
}
