package gateway

import (
	"context"
	"errors"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"
)

// The amqp.* limits reach the AMQP front-end: go-amqp honours the
// channel-max that amqp.maxSessions sets, and an attach beyond
// amqp.maxLinksPerConnection is refused with resource-limit-exceeded.
func TestAMQPLimitsWired(t *testing.T) {
	g := New(testConfig(t, "--amqp.listen=127.0.0.1:0", "--amqp.maxSessions=2", "--amqp.maxLinksPerConnection=1"), quiet())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := g.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer g.Stop(ctx)
	c, s := amqpDial(ctx, t, g)
	if _, err := c.NewSession(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.NewReceiver(ctx, "wired/#", nil); err != nil {
		t.Fatal(err)
	}
	_, err := s.NewReceiver(ctx, "wired/#", nil)
	var ae *goamqp.Error // a refused attach: the detach's error
	if !errors.As(err, &ae) || ae.Condition != goamqp.ErrCondResourceLimitExceeded {
		t.Fatalf("second link with amqp.maxLinksPerConnection=1: %v, want amqp:resource-limit-exceeded", err)
	}
	// Last: go-amqp closes its whole connection when it runs out of
	// channels.
	if _, err := c.NewSession(ctx, nil); err == nil {
		t.Error("third session opened with amqp.maxSessions=2")
	}
}

// amqp.bareAddress: queue reaches the AMQP front-end: a send to a bare
// address creates the queue (with queues.autoCreate).
func TestAMQPBareAddressWired(t *testing.T) {
	g := startGateway(t, "--amqp.listen=127.0.0.1:0", "--queues.autoCreate=true", "--amqp.bareAddress=queue")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, s := amqpDial(ctx, t, g)
	snd, err := s.NewSender(ctx, "bare", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := snd.Send(ctx, goamqp.NewMessage([]byte("x")), nil); err != nil {
		t.Fatal(err)
	}
	if _, ok := g.queues.Load().Queue("bare"); !ok {
		t.Fatal("amqp.bareAddress=queue: no queue bare after a send")
	}
}

// amqpDial opens an anonymous go-amqp connection to g, closed at the end
// of the test, and a session on it.
func amqpDial(ctx context.Context, t *testing.T, g *Gateway) (*goamqp.Conn, *goamqp.Session) {
	t.Helper()
	c, err := goamqp.Dial(ctx, "amqp://"+g.AMQPAddr(), &goamqp.ConnOptions{SASLType: goamqp.SASLTypeAnonymous()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	s, err := c.NewSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c, s
}
