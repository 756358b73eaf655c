package amqp

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"
	dto "github.com/prometheus/client_model/go"

	"github.com/tolsey/tolsey/amqp/internal/frames"
)

// disconnects reads tolsey_connections_closed_total{protocol="amqp",reason}.
func (e *env) disconnects(reason string) float64 {
	var m dto.Metric
	if err := e.metrics.ConnsClosed.WithLabelValues("amqp", reason).Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}

// TestWriteTimeout: a receiver that grants 10,000 credit and never reads
// its socket is disconnected once a write to it has waited WriteTimeout,
// although heartbeats flow both ways (it used to stay for ever). A
// normal receiver gets every message meanwhile, and the publisher every
// disposition.
func TestWriteTimeout(t *testing.T) {
	e := startServer(t, func(o *Options) {
		o.WriteTimeout = 500 * time.Millisecond
		o.LinkBuffer = 10000 // nothing dropped for the normal receiver either
	})
	const topic, n, size = "stuck/t", 600, 16 << 10 // 9.6 MB: more than both socket buffers hold

	// The stuck client: a tiny receive buffer, an idle time-out that makes
	// the gateway send heartbeats, heartbeats of its own, and after the
	// attach it never reads again.
	stuck := rawDial(t, e.addr)
	if err := stuck.nc.(*net.TCPConn).SetReadBuffer(2048); err != nil {
		t.Fatal(err)
	}
	stuck.open(&frames.Open{ContainerID: "stuck", IdleTimeOut: 1000})
	stuck.send(0, &frames.Begin{IncomingWindow: 1 << 30, OutgoingWindow: 1000}, nil)
	expectFrame[*frames.Begin](stuck)
	settled := frames.SenderSettleModeSettled // no unsettled bound to stop the gateway sending
	a := attachReceiver("stuck", 0, topic)
	a.SndSettleMode = &settled
	stuck.send(0, a, nil)
	expectFrame[*frames.Attach](stuck)
	stuck.send(0, &frames.Flow{NextIncomingID: ptr(uint32(0)), IncomingWindow: 1 << 30, OutgoingWindow: 1000,
		Handle: ptr(uint32(0)), DeliveryCount: ptr(uint32(0)), LinkCredit: ptr(uint32(10000))}, nil)
	stop, beatsDone := make(chan struct{}), make(chan struct{})
	go func() { // its heartbeats, until the gateway drops it or the test ends
		defer close(beatsDone)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			if _, err := stuck.nc.Write([]byte{0, 0, 0, 8, 2, 0, 0, 0}); err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-beatsDone })
	eventually(t, "the stuck receiver's subscription", func() bool { return e.router.Len() == 1 })

	// A normal receiver, and a publisher on a connection of its own.
	r := newReceiver(t, e.session(t), topic, &goamqp.ReceiverOptions{Credit: 200})
	snd := newSender(t, e.session(t), topic, nil)
	if got := e.srv.Connections(); got != 3 {
		t.Fatalf("%d connections, want 3", got)
	}
	received := make(chan error, 1)
	go func() {
		for i := range n {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			m, err := r.Receive(ctx, nil)
			if err == nil {
				err = r.AcceptMessage(ctx, m)
			}
			cancel()
			if err != nil {
				received <- fmt.Errorf("message %d: %w", i, err)
				return
			}
			if got := m.GetData(); len(got) != size || got[0] != byte(i) {
				received <- fmt.Errorf("message %d: %d bytes starting %d", i, len(got), got[0])
				return
			}
		}
		received <- nil
	}()
	payload := bytes.Repeat([]byte{'x'}, size)
	for i := range n {
		payload[0] = byte(i)
		// Send returns once the disposition is in: every one must come.
		if err := snd.Send(ctx5(t), goamqp.NewMessage(payload), nil); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	if err := <-received; err != nil {
		t.Fatalf("normal receiver: %v", err)
	}
	eventually(t, "the stuck connection closed", func() bool { return e.srv.Connections() == 2 })
	if got := e.disconnects(reasonWriteTimeout); got != 1 {
		t.Fatalf("disconnects{reason=write_timeout} = %v, want 1", got)
	}
	if e.router.Len() != 1 {
		t.Fatalf("%d router subscriptions, want the normal receiver's only", e.router.Len())
	}
}
