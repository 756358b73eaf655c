package bridge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tolsey/tolsey/bridge/buffer"
	"github.com/tolsey/tolsey/core"
	"github.com/tolsey/tolsey/core/coretest"
)

// startBridge starts a NATS bridge on router with rules, against url,
// its buffer in a temporary directory; stopped when the test ends.
func startBridge(t testing.TB, router *core.Router, url string, buf BufferOptions, rules ...Rule) *NATS {
	t.Helper()
	return startBridgeOpts(t, NATSOptions{URLs: []string{url}, Rules: rules, Router: router, Buffer: buf})
}

// startBridgeOpts is startBridge with more of opts: its Name, Node,
// ReconnectMax, Logger and Buffer.Dir are the tests' when not set.
func startBridgeOpts(t testing.TB, opts NATSOptions) *NATS {
	t.Helper()
	if opts.Buffer.Dir == "" {
		opts.Buffer.Dir = t.TempDir()
	}
	if opts.Name == "" {
		opts.Name = "bridge-test"
	}
	if opts.Node == "" {
		opts.Node = "n1"
	}
	if opts.ReconnectMax == 0 {
		opts.ReconnectMax = 100 * time.Millisecond
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	b, err := NewNATS(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := b.Stop(ctx); err != nil {
			t.Error(err)
		}
	})
	return b
}

// jsStream makes a file stream on subjects in s.
func jsStream(t testing.TB, s *server.Server, name string, subjects ...string) jetstream.Stream {
	t.Helper()
	js, err := jetstream.New(natsConn(t, s))
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: name, Subjects: subjects, Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func streamMsgs(t testing.TB, st jetstream.Stream) uint64 {
	info, err := st.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

var jsRule = Rule{Direction: Out, Local: "t/#", Remote: "js.>", QoS: 1, JetStream: JetStream{Enabled: true}}

// TestJetStreamAckAfterCommit: a QoS 1 publish through a JetStream rule
// holds the publisher's acknowledgement (core.Delivery.Acks) until the
// buffer committed the record, and PublishAsync returns without waiting for
// it. The first publish's acknowledgement is kept waiting (its done blocks
// the buffer's notifier), so that none after it can have been acknowledged
// when its PublishAsync returns: before AppendAsync, Deliver appended and
// waited, and each PublishAsync returned acknowledged. The stream gets
// everything in publish order, QoS 0 publishes on the rule included.
func TestJetStreamAckAfterCommit(t *testing.T) {
	s, _ := startNATS(t)
	st := jsStream(t, s, "ASYNC", "js.>")
	router := core.NewRouter(core.RouterOptions{Node: "n1"})
	startBridge(t, router, s.ClientURL(), BufferOptions{}, jsRule)

	const n = 200
	var mu sync.Mutex
	var acked []int // publish numbers, in the order of their acknowledgements
	ack := func(i int, res core.PublishResult) {
		if res.Err != nil || res.Failed != 0 || res.Matched != 1 {
			t.Errorf("publish %d: %+v", i, res)
		}
		mu.Lock()
		acked = append(acked, i)
		mu.Unlock()
	}
	msg := func(i int) *core.Message {
		qos := byte(1)
		if i%10 == 5 {
			qos = 0 // a QoS 0 publish on the JetStream rule: buffered, nobody waits
		}
		return &core.Message{Topic: fmt.Sprintf("t/%d", i%3), Payload: fmt.Append(nil, i), QoS: qos}
	}

	entered, gate := make(chan struct{}), make(chan struct{})
	first := make(chan struct{})
	go func() {
		defer close(first)
		router.PublishAsync(context.Background(), msg(0), func(res core.PublishResult) {
			close(entered)
			select {
			case <-gate:
			case <-time.After(10 * time.Second): // the code before AppendAsync calls this on the publisher's goroutine
			}
			ack(0, res)
		})
	}()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the first publish never acknowledged")
	}
	acks := 1
	for i := 1; i < n; i++ {
		m := msg(i)
		if m.QoS == 0 {
			if res := router.Publish(context.Background(), m); res.Err != nil || res.Matched != 1 {
				t.Fatalf("QoS 0 publish %d: %+v", i, res)
			}
			continue
		}
		acks++
		var called sync.Mutex
		returned := false
		router.PublishAsync(context.Background(), m, func(res core.PublishResult) {
			called.Lock()
			early := !returned
			called.Unlock()
			if early {
				t.Errorf("publish %d acknowledged before PublishAsync returned: it waited for the buffer", i)
			}
			ack(i, res)
		})
		called.Lock()
		returned = true
		called.Unlock()
	}
	// The records are committed and sent while their acknowledgements wait
	// behind the first one's.
	coretest.Eventually(t, "the stream holds every message", 20*time.Second, func() bool { return streamMsgs(t, st) == n })
	close(gate)
	<-first
	coretest.Eventually(t, "every publish acknowledged", 20*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(acked) == acks
	})
	mu.Lock()
	for k := 1; k < len(acked); k++ {
		if acked[k] < acked[k-1] {
			t.Errorf("acknowledged %d after %d: not in publish order", acked[k], acked[k-1])
		}
	}
	mu.Unlock()
	for seq := uint64(1); seq <= n; seq++ {
		rm, err := st.GetMsg(context.Background(), seq)
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprint(seq - 1); string(rm.Data) != want {
			t.Fatalf("stream seq %d holds %q, want %q: out of publish order", seq, rm.Data, want)
		}
	}
}

// TestJetStreamBufferFull: with NATS unreachable and the buffer full under
// rejectNew, a QoS 1 publish is refused with ErrFull (the publisher's
// PUBACK 0x97) and a QoS 0 one is dropped and counted, never refused.
func TestJetStreamBufferFull(t *testing.T) {
	router := core.NewRouter(core.RouterOptions{Node: "n1"})
	b := startBridge(t, router, "nats://127.0.0.1:1", BufferOptions{MaxBytes: 4096}, jsRule)
	payload := make([]byte, 200)
	full := false
	for range 100 {
		res := router.Publish(context.Background(), &core.Message{Topic: "t/a", Payload: payload, QoS: 1})
		if res.Err != nil {
			if !errors.Is(res.Err, buffer.ErrFull) || res.Failed != 1 {
				t.Fatalf("refused with %+v, want ErrFull", res)
			}
			full = true
			break
		}
	}
	if !full {
		t.Fatal("100 publishes of 200 bytes fit in 4 KiB")
	}
	before := b.Status().Rules[0]
	res := router.Publish(context.Background(), &core.Message{Topic: "t/a", Payload: payload, QoS: 0})
	if res.Err != nil || res.Failed != 0 {
		t.Fatalf("QoS 0 publish on a full buffer: %+v, want dropped without a refusal", res)
	}
	// QoS 0: the drop may be counted after Publish returned (a refusal by the
	// writer rather than at once).
	coretest.Eventually(t, "the QoS 0 drop counted", 10*time.Second, func() bool {
		after := b.Status().Rules[0]
		return after.Dropped == before.Dropped+1 && after.Buffer.Rejected == before.Buffer.Rejected+1
	})
	if got := b.Status().Rules[0].Buffer.Messages; got != before.Buffer.Messages {
		t.Fatalf("the buffer holds %d, held %d before the QoS 0 publish", got, before.Buffer.Messages)
	}
}
