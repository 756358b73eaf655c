package amqp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"

	"github.com/tolsey/tolsey/core"
	"github.com/tolsey/tolsey/retain"
	"github.com/tolsey/tolsey/retain/memory"
)

func TestTopicSendReceive(t *testing.T) {
	e := startServer(t)
	s := e.session(t)
	r := newReceiver(t, s, "sensors/+/temp", nil)
	snd := newSender(t, s, "sensors/room1/temp", nil)
	send(t, snd, goamqp.NewMessage([]byte("21.5")))
	m := receive(t, r)
	if body(m) != "21.5" {
		t.Fatalf("body %q", body(m))
	}
	if m.Properties == nil || m.Properties.To == nil || *m.Properties.To != "sensors/room1/temp" {
		t.Fatalf("to = %+v", m.Properties)
	}
	if _, ok := m.Annotations["x-opt-retain"]; ok {
		t.Fatal("live message carries x-opt-retain")
	}
	if d, _ := m.Annotations["x-opt-jms-dest"].(int8); d != 1 {
		t.Fatalf("x-opt-jms-dest = %v, want 1 (topic)", m.Annotations["x-opt-jms-dest"])
	}
}

// TestNoSASL: a client that sends the bare AMQP header (rhea, go-amqp
// without SASLType) is served when anonymous access is allowed.
func TestNoSASL(t *testing.T) {
	e := startServer(t)
	c := e.dial(t, &goamqp.ConnOptions{})
	s, err := c.NewSession(ctx5(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	r := newReceiver(t, s, "plain/t", nil)
	send(t, newSender(t, s, "topic://plain/t", nil), goamqp.NewMessage([]byte("x")))
	if got := body(receive(t, r)); got != "x" {
		t.Fatalf("got %q", got)
	}
}

func TestWildcards(t *testing.T) {
	e := startServer(t)
	s := e.session(t)
	filters := []string{"a/#", "a/+/c", "a/b/c", "#", "+/b/#", "topic://a/b"}
	recv := map[string]*goamqp.Receiver{}
	for _, f := range filters {
		recv[f] = newReceiver(t, s, f, &goamqp.ReceiverOptions{Credit: 100})
	}
	snd := newSender(t, s, "", nil) // anonymous relay
	for _, topic := range []string{"a/b/c", "a/x", "a/b", "b/b/c", "$tmp/x/y", "fence"} {
		m := goamqp.NewMessage([]byte(topic))
		m.Properties = &goamqp.MessageProperties{To: &topic}
		send(t, snd, m)
	}
	want := map[string]string{
		"a/#":         "a/b/c,a/x,a/b",
		"a/+/c":       "a/b/c",
		"a/b/c":       "a/b/c",
		"#":           "a/b/c,a/x,a/b,b/b/c,fence",
		"+/b/#":       "a/b/c,a/b,b/b/c",
		"topic://a/b": "a/b",
	}
	for f, w := range want {
		var got []string
		for range strings.Count(w, ",") + 1 {
			got = append(got, body(receive(t, recv[f])))
		}
		if strings.Join(got, ",") != w {
			t.Errorf("%s got %v want %s", f, got, w)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		if m, err := recv[f].Receive(ctx, nil); err == nil {
			t.Errorf("%s got an extra message %q", f, body(m))
		}
		cancel()
	}
}

func retainedMsg(payload string) *goamqp.Message {
	m := goamqp.NewMessage([]byte(payload))
	m.Annotations = goamqp.Annotations{"x-opt-retain": true}
	return m
}

// TestRetained: a retained publish reaches current subscribers without
// x-opt-retain, is stored, and reaches a late subscriber with it, before
// any live message (docs/architecture.md, decision 1).
func TestRetained(t *testing.T) {
	e := startServer(t)
	s := e.session(t)
	early := newReceiver(t, s, "r/#", nil)
	snd := newSender(t, s, "r/1", nil)
	send(t, snd, retainedMsg("one"))
	m := receive(t, early)
	if body(m) != "one" || m.Annotations["x-opt-retain"] != nil {
		t.Fatalf("early subscriber: %q annotations %v", body(m), m.Annotations)
	}
	if got, _ := e.store.Get(context.Background(), "r/1"); got == nil || string(got.Payload) != "one" {
		t.Fatalf("not stored: %v", got)
	}
	late := newReceiver(t, s, "r/+", nil)
	send(t, newSender(t, s, "r/2", nil), goamqp.NewMessage([]byte("live")))
	m = receive(t, late)
	if body(m) != "one" || m.Annotations["x-opt-retain"] != true {
		t.Fatalf("late subscriber first message: %q annotations %v", body(m), m.Annotations)
	}
	m = receive(t, late)
	if body(m) != "live" || m.Annotations["x-opt-retain"] != nil {
		t.Fatalf("late subscriber second message: %q annotations %v", body(m), m.Annotations)
	}
	// An empty retained payload deletes.
	send(t, snd, retainedMsg(""))
	eventually(t, "retained r/1 deleted", func() bool {
		got, _ := e.store.Get(context.Background(), "r/1")
		return got == nil
	})
}

// TestRetainedManyWithSmallBuffer: more retained messages than LinkBuffer
// all arrive (the feeder waits for room), each once.
func TestRetainedManyWithSmallBuffer(t *testing.T) {
	e := startServer(t, func(o *Options) { o.LinkBuffer = 4 })
	for i := range 50 {
		m := &core.Message{Topic: fmt.Sprintf("many/%02d", i), Payload: []byte(fmt.Sprint(i)), Retain: true, Created: time.Now()}
		if err := e.store.Set(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	s := e.session(t)
	r := newReceiver(t, s, "many/#", &goamqp.ReceiverOptions{Credit: 1})
	seen := map[string]bool{}
	for range 50 {
		m := receive(t, r)
		if m.Annotations["x-opt-retain"] != true || seen[body(m)] {
			t.Fatalf("message %q retain=%v dup=%v", body(m), m.Annotations["x-opt-retain"], seen[body(m)])
		}
		seen[body(m)] = true
	}
}

func TestLargeMessage(t *testing.T) {
	e := startServer(t)
	s := e.session(t)
	r := newReceiver(t, s, "big", nil)
	snd := newSender(t, s, "big", nil)
	payload := bytes.Repeat([]byte("0123456789abcdef"), 4<<20/16)
	for i := range 2 {
		p := append([]byte{byte(i)}, payload...)
		send(t, snd, goamqp.NewMessage(p))
		if got := receive(t, r).GetData(); !bytes.Equal(got, p) {
			t.Fatalf("message %d: got %d bytes, want %d", i, len(got), len(p))
		}
	}
}

func TestCreditOne(t *testing.T) {
	e := startServer(t)
	s := e.session(t)
	r := newReceiver(t, s, "c1", &goamqp.ReceiverOptions{Credit: 1})
	snd := newSender(t, s, "c1", nil)
	for i := range 20 {
		send(t, snd, goamqp.NewMessage([]byte(fmt.Sprint(i))))
	}
	for i := range 20 {
		if got := body(receive(t, r)); got != fmt.Sprint(i) {
			t.Fatalf("message %d: %q", i, got)
		}
	}
}

func TestDrain(t *testing.T) {
	e := startServer(t)
	s := e.session(t)
	r := newReceiver(t, s, "drain", &goamqp.ReceiverOptions{Credit: -1})
	snd := newSender(t, s, "drain", nil)
	if err := r.IssueCredit(5); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		send(t, snd, goamqp.NewMessage([]byte(fmt.Sprint(i))))
	}
	var got []string
	eventually(t, "2 prefetched", func() bool {
		if m := r.Prefetched(); m != nil {
			got = append(got, body(m))
		}
		return len(got) == 2
	})
	if err := r.DrainCredit(ctx5(t), nil); err != nil {
		t.Fatalf("drain: %v", err)
	}
	// With the credit drained, the next message waits for new credit.
	send(t, snd, goamqp.NewMessage([]byte("2")))
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if m, err := r.Receive(ctx, nil); err == nil {
		got = append(got, body(m))
	}
	if strings.Join(got, ",") != "0,1" {
		t.Fatalf("before new credit got %v, want 0,1", got)
	}
	if err := r.IssueCredit(1); err != nil {
		t.Fatal(err)
	}
	if got := body(receive(t, r)); got != "2" {
		t.Fatalf("after new credit: %q", got)
	}
}

// TestRequestReply: a dynamic receiver gets a temporary address; a
// responder answers through an anonymous-relay sender to the reply-to.
func TestRequestReply(t *testing.T) {
	e := startServer(t)
	svc := e.session(t)
	requests := newReceiver(t, svc, "svc/echo", nil)
	relay := newSender(t, svc, "", nil)

	cli := e.session(t)
	replies := newReceiver(t, cli, "", &goamqp.ReceiverOptions{DynamicAddress: true})
	addr := replies.Address()
	if !strings.HasPrefix(addr, "$tmp/") {
		t.Fatalf("dynamic address %q", addr)
	}
	// "#" must not match a temporary address [MQTT-4.7.2-1].
	all := newReceiver(t, cli, "#", &goamqp.ReceiverOptions{Credit: 10})

	req := goamqp.NewMessage([]byte("ping"))
	req.Properties = &goamqp.MessageProperties{ReplyTo: &addr, CorrelationID: []byte("c-1")}
	send(t, newSender(t, cli, "svc/echo", nil), req)

	got := receive(t, requests)
	if got.Properties == nil || got.Properties.ReplyTo == nil || *got.Properties.ReplyTo != addr {
		t.Fatalf("request reply-to: %+v", got.Properties)
	}
	if id, _ := got.Properties.CorrelationID.([]byte); string(id) != "c-1" {
		t.Fatalf("request correlation-id %#v", got.Properties.CorrelationID)
	}
	resp := goamqp.NewMessage([]byte("pong"))
	resp.Properties = &goamqp.MessageProperties{To: got.Properties.ReplyTo, CorrelationID: got.Properties.CorrelationID}
	send(t, relay, resp)

	m := receive(t, replies)
	if body(m) != "pong" {
		t.Fatalf("reply %q", body(m))
	}
	if id, _ := m.Properties.CorrelationID.([]byte); string(id) != "c-1" {
		t.Fatalf("reply correlation-id %#v", m.Properties.CorrelationID)
	}
	if d, _ := m.Annotations["x-opt-jms-dest"].(int8); d != 3 {
		t.Fatalf("reply x-opt-jms-dest %v, want 3 (temporary topic)", m.Annotations["x-opt-jms-dest"])
	}
	if g := body(receive(t, all)); g != "ping" {
		t.Fatalf("# subscriber got %q first", g)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if m, err := all.Receive(ctx, nil); err == nil {
		t.Fatalf("# matched the temporary address: %q", body(m))
	}
}

// TestCorrelationIDTypes: a string, uuid or ulong correlation-id sent over
// AMQP reaches AMQP receivers as it was sent (core.Message.CorrelationKind),
// also from the retained store.
func TestCorrelationIDTypes(t *testing.T) {
	e := startServer(t)
	s := e.session(t)
	r := newReceiver(t, s, "corr", nil)
	snd := newSender(t, s, "corr", nil)
	for _, id := range []any{"req-42", goamqp.UUID{1, 2, 3}, uint64(7), []byte("bin"), uint64(1 << 63)} {
		m := goamqp.NewMessage([]byte("x"))
		m.Properties = &goamqp.MessageProperties{CorrelationID: id}
		send(t, snd, m)
		got := receive(t, r).Properties.CorrelationID
		if fmt.Sprintf("%T %v", got, got) != fmt.Sprintf("%T %v", id, id) {
			t.Errorf("sent %T %v, received %T %v", id, id, got, got)
		}
	}
	m := retainedMsg("kept")
	m.Properties = &goamqp.MessageProperties{CorrelationID: "ret-1"}
	send(t, snd, m)
	receive(t, r)
	late := newReceiver(t, s, "corr", nil)
	if got := receive(t, late).Properties.CorrelationID; got != "ret-1" {
		t.Errorf("retained copy correlation-id %#v", got)
	}
}

// TestDynamicSender: without the queue engine, a dynamic node with
// capability temporary-queue is a temporary topic (queues_test.go has it
// with the engine: a temporary queue).
func TestDynamicSender(t *testing.T) {
	e := startServer(t, func(o *Options) { o.Queues = nil })
	s := e.session(t)
	snd := newSender(t, s, "", &goamqp.SenderOptions{DynamicAddress: true, TargetCapabilities: []string{"temporary-queue"}})
	addr := snd.Address()
	if !strings.HasPrefix(addr, "$tmp/") {
		t.Fatalf("dynamic target address %q", addr)
	}
	r := newReceiver(t, s, addr, &goamqp.ReceiverOptions{SourceCapabilities: []string{"temporary-queue"}})
	send(t, snd, goamqp.NewMessage([]byte("to-temp")))
	m := receive(t, r)
	if body(m) != "to-temp" {
		t.Fatalf("got %q", body(m))
	}
	if d, _ := m.Annotations["x-opt-jms-dest"].(int8); d != 2 {
		t.Fatalf("x-opt-jms-dest %v, want 2 (temporary queue)", m.Annotations["x-opt-jms-dest"])
	}
}

func amqpCond(err error) string {
	var ae *goamqp.Error
	if errors.As(err, &ae) {
		return string(ae.Condition)
	}
	var le *goamqp.LinkError
	if errors.As(err, &le) && le.RemoteErr != nil {
		return string(le.RemoteErr.Condition)
	}
	return ""
}

func TestOutcomes(t *testing.T) {
	e := startServer(t)
	s := e.session(t)

	t.Run("no subscriber is accepted", func(t *testing.T) {
		if err := newSender(t, s, "nobody/listens", nil).Send(ctx5(t), goamqp.NewMessage([]byte("x")), nil); err != nil {
			t.Fatalf("send to a topic without subscribers: %v", err)
		}
	})
	t.Run("attach to unknown queue is refused", func(t *testing.T) {
		for _, tc := range []struct {
			addr string
			caps []string
		}{{"queue://orders", nil}, {"orders", []string{"queue"}}} {
			_, err := s.NewSender(ctx5(t), tc.addr, &goamqp.SenderOptions{TargetCapabilities: tc.caps})
			if amqpCond(err) != "amqp:not-found" {
				t.Errorf("sender %s %v: %v, want amqp:not-found", tc.addr, tc.caps, err)
			}
			_, err = s.NewReceiver(ctx5(t), tc.addr, &goamqp.ReceiverOptions{SourceCapabilities: tc.caps})
			if amqpCond(err) != "amqp:not-found" {
				t.Errorf("receiver %s %v: %v, want amqp:not-found", tc.addr, tc.caps, err)
			}
		}
	})
	t.Run("bad topic is refused", func(t *testing.T) {
		if _, err := s.NewSender(ctx5(t), "a/+/b", nil); amqpCond(err) != "amqp:invalid-field" {
			t.Errorf("sender with a wildcard: %v", err)
		}
		if _, err := s.NewReceiver(ctx5(t), "a/#/b", nil); amqpCond(err) != "amqp:invalid-field" {
			t.Errorf("receiver with a bad filter: %v", err)
		}
	})
	relay := newSender(t, s, "", nil)
	t.Run("anonymous relay to a queue is rejected", func(t *testing.T) {
		to := "queue://orders"
		m := goamqp.NewMessage([]byte("x"))
		m.Properties = &goamqp.MessageProperties{To: &to}
		if err := relay.Send(ctx5(t), m, nil); amqpCond(err) != "amqp:not-found" {
			t.Fatalf("got %v, want rejected amqp:not-found", err)
		}
		to = "orders"
		m.Annotations = goamqp.Annotations{"x-opt-jms-dest": int8(0)}
		if err := relay.Send(ctx5(t), m, nil); amqpCond(err) != "amqp:not-found" {
			t.Fatalf("jms queue: got %v, want rejected amqp:not-found", err)
		}
	})
	t.Run("anonymous relay without to is rejected", func(t *testing.T) {
		if err := relay.Send(ctx5(t), goamqp.NewMessage([]byte("x")), nil); amqpCond(err) != "amqp:invalid-field" {
			t.Fatalf("got %v, want rejected amqp:invalid-field", err)
		}
	})
	t.Run("amqp-value string and binary are accepted", func(t *testing.T) {
		r := newReceiver(t, s, "values", nil)
		vs := newSender(t, s, "values", nil)
		send(t, vs, &goamqp.Message{Value: "text"})
		send(t, vs, &goamqp.Message{Value: []byte{0, 1, 2}})
		if m := receive(t, r); m.Value != "text" {
			t.Errorf("string value delivered as %#v / %q", m.Value, m.GetData())
		}
		// as an amqp-value binary still, not a data section (the body kind
		// passes unchanged, TestBodyKindAndTTLUnchanged)
		if m := receive(t, r); !reflect.DeepEqual(m.Value, []byte{0, 1, 2}) {
			t.Errorf("binary value delivered as %#v / %q", m.Value, m.GetData())
		}
	})
}

func TestRetainedQuotaRejected(t *testing.T) {
	store := memory.New(retain.Limits{MaxMessages: 1})
	e := startServer(t, func(o *Options) { o.Store = store })
	defer store.Close()
	s := e.session(t)
	r := newReceiver(t, s, "q/#", nil)
	snd := newSender(t, s, "q/1", nil)
	send(t, snd, retainedMsg("a"))
	err := newSender(t, s, "q/2", nil).Send(ctx5(t), retainedMsg("b"), nil)
	if amqpCond(err) != "amqp:resource-limit-exceeded" || !strings.Contains(err.Error(), "not retained") {
		t.Fatalf("over quota: %v", err)
	}
	if got := body(receive(t, r)) + body(receive(t, r)); got != "ab" {
		t.Fatalf("live deliveries %q: a refused retain must still be delivered live", got)
	}
}

type failingStore struct{ retain.Store }

func (failingStore) Set(context.Context, *core.Message) error {
	return fmt.Errorf("%w: redis down", retain.ErrUnavailable)
}

func TestRetainedStoreFailureRejected(t *testing.T) {
	store := memory.New(retain.Limits{})
	e := startServer(t, func(o *Options) { o.Store = failingStore{store} })
	defer store.Close()
	s := e.session(t)
	r := newReceiver(t, s, "f/#", nil)
	err := newSender(t, s, "f/1", nil).Send(ctx5(t), retainedMsg("a"), nil)
	if amqpCond(err) != "amqp:internal-error" || !strings.Contains(err.Error(), "redis down") {
		t.Fatalf("store failure: %v", err)
	}
	if got := body(receive(t, r)); got != "a" {
		t.Fatalf("live delivery %q", got)
	}
}

func TestSettleModes(t *testing.T) {
	e := startServer(t)
	s := e.session(t)
	settled, unsettled := goamqp.SenderSettleModeSettled, goamqp.SenderSettleModeUnsettled
	second := goamqp.ReceiverSettleModeSecond
	for _, tc := range []struct {
		name string
		ro   *goamqp.ReceiverOptions
		so   *goamqp.SenderOptions
	}{
		{"presettled both ways", &goamqp.ReceiverOptions{RequestedSenderSettleMode: &settled}, &goamqp.SenderOptions{SettlementMode: &settled}},
		{"unsettled both ways", &goamqp.ReceiverOptions{RequestedSenderSettleMode: &unsettled}, &goamqp.SenderOptions{SettlementMode: &unsettled}},
		{"rcv-settle-mode second", &goamqp.ReceiverOptions{SettlementMode: &second}, &goamqp.SenderOptions{RequestedReceiverSettleMode: &second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			topic := "settle/" + strings.ReplaceAll(tc.name, " ", "-")
			r := newReceiver(t, s, topic, tc.ro)
			snd := newSender(t, s, topic, tc.so)
			for i := range 3 {
				send(t, snd, goamqp.NewMessage([]byte(fmt.Sprint(i))))
			}
			for i := range 3 {
				if got := body(receive(t, r)); got != fmt.Sprint(i) {
					t.Fatalf("message %d: %q", i, got)
				}
			}
		})
	}
}

// TestSlowConsumerDrops: a receiver that takes nothing holds at most
// LinkBuffer messages; the rest are dropped and counted, and publishers
// are not held up.
func TestSlowConsumerDrops(t *testing.T) {
	e := startServer(t, func(o *Options) { o.LinkBuffer = 10 })
	s := e.session(t)
	r := newReceiver(t, s, "slow", &goamqp.ReceiverOptions{Credit: 1})
	snd := newSender(t, s, "slow", nil)
	for i := range 50 {
		send(t, snd, goamqp.NewMessage([]byte(fmt.Sprint(i))))
	}
	dropped := func() float64 { return e.dropped("slow_consumer") }
	eventually(t, "drops counted", func() bool { return dropped() >= 50-10-1-1 })
	n := 0
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		m, err := r.Receive(ctx, nil)
		cancel()
		if err != nil {
			break
		}
		r.AcceptMessage(context.Background(), m)
		n++
	}
	if n+int(dropped()) != 50 || n > 12 {
		t.Fatalf("received %d, dropped %v; want all 50 accounted for and at most ~LinkBuffer received", n, dropped())
	}
}

func TestSASL(t *testing.T) {
	e := startServer(t, func(o *Options) { o.AllowAnonymous = false })
	ctx := ctx5(t)
	c, err := goamqp.Dial(ctx, "amqp://"+e.addr, &goamqp.ConnOptions{SASLType: goamqp.SASLTypePlain("alice", "secret")})
	if err != nil {
		t.Fatalf("good PLAIN: %v", err)
	}
	s, err := c.NewSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	newSender(t, s, "sasl/t", nil)
	c.Close()
	for _, o := range []*goamqp.ConnOptions{
		{SASLType: goamqp.SASLTypePlain("alice", "wrong")},
		{SASLType: goamqp.SASLTypePlain("mallory", "secret")},
		{SASLType: goamqp.SASLTypeAnonymous()},
		{}, // no SASL at all
	} {
		if c, err := goamqp.Dial(ctx, "amqp://"+e.addr, o); err == nil {
			c.Close()
			t.Errorf("%+v: connected, want refused", o)
		}
	}
	// URL credentials (go-amqp turns them into PLAIN).
	c, err = goamqp.Dial(ctx, "amqp://alice:secret@"+e.addr, nil)
	if err != nil {
		t.Fatalf("PLAIN from URL: %v", err)
	}
	c.Close()
}

// TestShutdown: Shutdown closes client connections with
// amqp:connection:forced and leaves no goroutine behind (goleak).
func TestShutdown(t *testing.T) {
	e := startServer(t)
	c := e.dial(t, nil)
	s, err := c.NewSession(ctx5(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	newReceiver(t, s, "shut/#", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := e.srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("client connection not closed")
	}
	var ce *goamqp.ConnError
	if !errors.As(c.Err(), &ce) || ce.RemoteErr == nil || ce.RemoteErr.Condition != "amqp:connection:forced" {
		t.Fatalf("client saw %v, want amqp:connection:forced", c.Err())
	}
	if e.router.Len() != 0 {
		t.Fatalf("%d subscriptions left in the router", e.router.Len())
	}
}

// TestDetachUnsubscribes: closing a receiver, its session or its
// connection takes its subscription out of the router.
func TestDetachUnsubscribes(t *testing.T) {
	e := startServer(t)
	c := e.dial(t, nil)
	s, _ := c.NewSession(ctx5(t), nil)
	r := newReceiver(t, s, "d/1", nil)
	newReceiver(t, s, "d/2", nil)
	s2, _ := c.NewSession(ctx5(t), nil)
	newReceiver(t, s2, "d/3", nil)
	if e.router.Len() != 3 {
		t.Fatalf("router has %d subscriptions", e.router.Len())
	}
	r.Close(ctx5(t))
	eventually(t, "detach", func() bool { return e.router.Len() == 2 })
	s.Close(ctx5(t))
	eventually(t, "end", func() bool { return e.router.Len() == 1 })
	c.Close()
	eventually(t, "close", func() bool { return e.router.Len() == 0 && e.srv.Connections() == 0 })
}

// TestConcurrentChurn: publishers, receivers and links coming and going
// on several connections at once, under the race detector; every message
// to a receiver that stays reaches it, in order per publisher.
func TestConcurrentChurn(t *testing.T) {
	e := startServer(t, func(o *Options) { o.LinkBuffer = 10000 }) // no slow-consumer drops
	const pubs, n = 4, 300
	stay := newReceiver(t, e.session(t), "churn/#", &goamqp.ReceiverOptions{Credit: 50})
	done := make(chan error, pubs*2)
	for p := range pubs {
		s := e.session(t)
		go func() {
			snd, err := s.NewSender(context.Background(), fmt.Sprintf("churn/%d", p), nil)
			if err != nil {
				done <- err
				return
			}
			for i := range n {
				m := goamqp.NewMessage([]byte(fmt.Sprintf("%d/%d", p, i)))
				if i%3 == 0 {
					m.Header = &goamqp.MessageHeader{Durable: true}
				}
				if err := snd.Send(context.Background(), m, nil); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
		go func() { // receivers that attach, take a little and leave
			for range 10 {
				r, err := s.NewReceiver(context.Background(), "churn/+", &goamqp.ReceiverOptions{Credit: 5})
				if err != nil {
					done <- err
					return
				}
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
				if m, err := r.Receive(ctx, nil); err == nil {
					r.AcceptMessage(context.Background(), m)
				}
				cancel()
				r.Close(context.Background())
			}
			done <- nil
		}()
	}
	next := make([]int, pubs)
	for range pubs * n {
		if d := e.dropped("slow_consumer"); d > 0 {
			t.Fatalf("%v dropped", d)
		}
		m := receive(t, stay)
		var p, i int
		fmt.Sscanf(body(m), "%d/%d", &p, &i)
		if i != next[p] {
			t.Fatalf("publisher %d: got %d, want %d", p, i, next[p])
		}
		next[p]++
	}
	for range pubs * 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}
