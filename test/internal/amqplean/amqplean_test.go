package amqplean

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/tolsey/tolsey/core/coretest"
	"github.com/tolsey/tolsey/gateway"
	"github.com/tolsey/tolsey/test/internal/rabbitnode"
)

// startGateway runs an in-process gateway on free ports with durable
// queues "load", "big", "frames1", "frames2", "bigframes1" and
// "bigframes2" (the embedded backend, on disk) and returns its AMQP
// address; it stops when the test ends.
func startGateway(t *testing.T) string {
	t.Helper()
	cfg, err := gateway.LoadConfig([]string{"--mqtt.listen=127.0.0.1:0", "--mqtt.ws.listen=127.0.0.1:0", "--admin.listen=127.0.0.1:0", "--amqp.listen=127.0.0.1:0",
		"--retain.backend=memory", "--data.dir=" + t.TempDir(), "--node.id=" + t.Name(),
		`--queues.declare=[{"name":"load"},{"name":"big"},{"name":"frames1"},{"name":"frames2"},{"name":"bigframes1"},{"name":"bigframes2"}]`}, nil, io.Discard)
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	g := gateway.New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err := g.Start(context.Background()); err != nil {
		t.Fatalf("start gateway: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := g.Stop(ctx); err != nil {
			t.Errorf("stop gateway: %v", err)
		}
	})
	return g.AMQPAddr()
}

func dial(t *testing.T, addr string, o Options) *Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Dial(ctx, addr, o)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// body is message seq of sender s, size bytes: the sender and the
// sequence number, then a pattern that depends on both, so a message cut,
// shifted or mixed with another does not pass for intact.
func body(s, seq, size int) []byte {
	b := make([]byte, size)
	binary.BigEndian.PutUint32(b, uint32(s))
	binary.BigEndian.PutUint32(b[4:], uint32(seq))
	for i := 8; i < size; i++ {
		b[i] = byte(i*7 + s*13 + seq)
	}
	return b
}

// collector receives on one connection, accepts every delivery, keeps
// credit topped up as queueload does, and checks each message against
// body: intact, durable, and in order per sender.
type collector struct {
	t     *testing.T
	c     *Conn
	size  int
	mu    sync.Mutex
	next  map[int]int // sender → the sequence number expected next
	got   int
	bad   []string
	accep int
}

func receive(t *testing.T, addr, source string, o Options, size int) *collector {
	t.Helper()
	col := &collector{t: t, c: dial(t, addr, o), size: size, next: map[int]int{}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := col.c.AttachReceiver(ctx, source, col.onMsg); err != nil {
		t.Fatalf("receiver %s: %v", source, err)
	}
	col.c.IssueCredit(256)
	return col
}

func (col *collector) onMsg(d *Delivery) {
	col.mu.Lock()
	defer col.mu.Unlock()
	switch {
	case len(d.Data) != col.size:
		col.bad = append(col.bad, "a message of "+itoa(len(d.Data))+" bytes")
	case !d.Durable:
		col.bad = append(col.bad, "a message not durable")
	case d.Settled:
		col.bad = append(col.bad, "a message sent settled")
	default:
		s, seq := int(binary.BigEndian.Uint32(d.Data)), int(binary.BigEndian.Uint32(d.Data[4:]))
		if !bytes.Equal(d.Data, body(s, seq, col.size)) {
			col.bad = append(col.bad, "sender "+itoa(s)+" message "+itoa(seq)+" not intact")
		} else if seq != col.next[s] {
			col.bad = append(col.bad, "sender "+itoa(s)+" message "+itoa(seq)+" where "+itoa(col.next[s])+" was due")
		}
		col.next[s] = seq + 1
	}
	col.got++
	col.c.Accept(d.ID)
	if col.accep++; col.accep == 128 {
		col.accep = 0
		col.c.IssueCredit(128)
	}
}

func (col *collector) wait(n int) {
	col.t.Helper()
	coretest.Eventually(col.t, itoa(n)+" messages", 60*time.Second, func() bool {
		col.mu.Lock()
		defer col.mu.Unlock()
		return col.got >= n || col.c.Err() != nil
	})
	col.mu.Lock()
	defer col.mu.Unlock()
	if err := col.c.Err(); err != nil {
		col.t.Fatalf("receiver: %v", err)
	}
	if col.got != n || len(col.bad) > 0 {
		col.t.Fatalf("received %d of %d; wrong: %v", col.got, n, col.bad[:min(len(col.bad), 10)])
	}
}

// send sends n messages of sender s with inFlight unsettled at most and
// waits for their outcomes: every one accepted. It may run on a goroutine
// of its own, so it returns its errors (t.Fatal there would end only that
// goroutine, and the test would wait for ever for its result).
func send(t *testing.T, addr, target string, o Options, s, n, size, inFlight int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := Dial(ctx, addr, o)
	if err != nil {
		return err
	}
	t.Cleanup(func() { c.Close() })
	if err := c.AttachSender(ctx, target, inFlight); err != nil {
		return err
	}
	for seq := range n {
		if err := c.Ready(ctx, size); err != nil {
			return err
		}
		if err := c.Send(body(s, seq, size)); err != nil {
			return err
		}
	}
	if err := c.Wait(ctx); err != nil {
		return err
	}
	if a := c.Accepted(); a != int64(n) {
		return errors.New("accepted " + itoa(int(a)) + " of " + itoa(n))
	}
	return nil
}

// Two senders, 1 KiB messages, 64 in flight each, into the gateway's
// durable queue; one receiver gets every message intact and each
// sender's in its order, and every send is accepted.
func TestGatewayQueue(t *testing.T) {
	addr := startGateway(t)
	const n, size = 3000, 1024
	col := receive(t, addr, "queue://load", Options{}, size)
	errs := make(chan error, 2)
	for s := range 2 {
		go func() { errs <- send(t, addr, "queue://load", Options{}, s, n, size, 64) }()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatalf("sender: %v", err)
		}
	}
	col.wait(2 * n)
}

// Messages larger than a frame cross as multi-frame transfers both ways
// (the gateway's max-frame-size is 64 KiB and so is ours): sent split,
// received reassembled, intact.
func TestMultiFrameTransfers(t *testing.T) {
	addr := startGateway(t)
	const n, size = 20, 200 << 10
	col := receive(t, addr, "queue://big", Options{SASL: "ANONYMOUS"}, size)
	if err := send(t, addr, "queue://big", Options{}, 7, n, size, 4); err != nil {
		t.Fatalf("sender: %v", err)
	}
	col.wait(n)
}

// A sender or receiver attached to a queue that does not exist is
// refused with amqp:not-found, and the error names it.
func TestRefusalNamesCondition(t *testing.T) {
	addr := startGateway(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, receiver := range []bool{false, true} {
		c := dial(t, addr, Options{})
		var err error
		if receiver {
			err = c.AttachReceiver(ctx, "queue://missing", func(*Delivery) {})
		} else {
			err = c.AttachSender(ctx, "queue://missing", 1)
		}
		var e *Error
		if !errors.As(err, &e) || e.Condition != "amqp:not-found" || e.Frame != "detach" {
			t.Errorf("receiver %v: attach to a missing queue: %v, want a detach with amqp:not-found", receiver, err)
		}
	}
}

// RabbitMQ 3.10 with its AMQP 1.0 plugin (test/internal/rabbitnode; as
// test/e2e, it needs Debian's rabbitmq-server, which test/run installs):
// SASL PLAIN as guest, a durable queue at /queue/lean, every message
// accepted and received intact, in order; the same frames as go-amqp.
func TestRabbitMQ(t *testing.T) {
	node, err := rabbitnode.Start(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(node.Stop)
	o := Options{SASL: "PLAIN", User: "guest", Password: "guest"}
	const n, size = 2000, 1024
	col := receive(t, node.Addr, "/queue/lean", o, size)
	if err := send(t, node.Addr, "/queue/lean", o, 3, n, size, 64); err != nil {
		t.Fatalf("sender: %v", err)
	}
	col.wait(n)

	// The same frames as go-amqp's for the same load, as against the
	// gateway (TestSameFramesAsGoAMQP).
	t.Run("SameFramesAsGoAMQP", func(t *testing.T) { sameFrames(t, node.Addr, "/queue/frames", o, 3000, 1024) })

	// A wrong password is refused at the SASL outcome.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if c, err := Dial(ctx, node.Addr, Options{SASL: "PLAIN", User: "guest", Password: "wrong"}); err == nil {
		c.Close()
		t.Error("logged in with a wrong password")
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
