package amqp

import (
	"context"
	"fmt"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"

	"github.com/tolsey/tolsey/amqp/internal/encoding"
	"github.com/tolsey/tolsey/amqp/internal/frames"
)

func durableOpts(name string) *goamqp.ReceiverOptions {
	return &goamqp.ReceiverOptions{Name: name, SourceDurability: goamqp.DurabilityUnsettledState, SourceExpiryPolicy: goamqp.ExpiryPolicyNever, Credit: 10}
}

func dialAs(t *testing.T, e *env, container string) (*goamqp.Conn, *goamqp.Session) {
	t.Helper()
	c := e.dial(t, &goamqp.ConnOptions{ContainerID: container, SASLType: goamqp.SASLTypeAnonymous()})
	s, err := c.NewSession(ctx5(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	return c, s
}

func noMessage(t *testing.T, r *goamqp.Receiver) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if m, err := r.Receive(ctx, nil); err == nil {
		t.Fatalf("unexpected message %q", body(m))
	}
}

// TestDurableSubscription: a durable subscription (container-id + link
// name) keeps its messages while no link is attached and resumes; a detach
// with closed=true ends it.
func TestDurableSubscription(t *testing.T) {
	e := startServer(t)
	pubs := e.session(t)
	snd := newSender(t, pubs, "dur/a", nil)

	c1, s1 := dialAs(t, e, "jms-1")
	r := newReceiver(t, s1, "dur/#", durableOpts("sub1"))
	send(t, snd, goamqp.NewMessage([]byte("a")))
	if got := body(receive(t, r)); got != "a" {
		t.Fatalf("got %q", got)
	}
	// Another link may not take the subscription while it is in use.
	_, s1b := dialAs(t, e, "jms-1")
	if _, err := s1b.NewReceiver(ctx5(t), "dur/#", durableOpts("sub1")); amqpCond(err) != "amqp:resource-locked" {
		t.Fatalf("second consumer: %v, want amqp:resource-locked", err)
	}
	c1.Close() // the connection goes: the subscription stays
	eventually(t, "connection gone", func() bool { return e.srv.Connections() == 2 })
	for _, p := range []string{"b", "c"} {
		send(t, snd, goamqp.NewMessage([]byte(p)))
	}
	if e.router.Len() != 1 {
		t.Fatalf("router has %d subscriptions, want the durable one", e.router.Len())
	}

	_, s2 := dialAs(t, e, "jms-1")
	r = newReceiver(t, s2, "dur/#", durableOpts("sub1"))
	for _, want := range []string{"b", "c"} {
		m := receive(t, r)
		if body(m) != want || m.Annotations["x-opt-retain"] != nil {
			t.Fatalf("resumed: got %q (%v), want %q", body(m), m.Annotations, want)
		}
	}
	// go-amqp detaches with closed=true: the subscription ends.
	if err := r.Close(ctx5(t)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "unsubscribed", func() bool { return e.router.Len() == 0 })
	send(t, snd, goamqp.NewMessage([]byte("d")))
	r = newReceiver(t, s2, "dur/#", durableOpts("sub1"))
	send(t, snd, goamqp.NewMessage([]byte("e")))
	if got := body(receive(t, r)); got != "e" {
		t.Fatalf("new subscription got %q first, want e", got)
	}
	// A different container-id is a different subscription.
	_, s3 := dialAs(t, e, "jms-2")
	r3 := newReceiver(t, s3, "dur/#", durableOpts("sub1"))
	send(t, snd, goamqp.NewMessage([]byte("f")))
	if body(receive(t, r3)) != "f" || body(receive(t, r)) != "f" {
		t.Fatal("both subscriptions get f")
	}
}

// TestDurableRedelivery: a delivery the client never settled is sent again
// when the durable subscription resumes.
func TestDurableRedelivery(t *testing.T) {
	e := startServer(t)
	snd := newSender(t, e.session(t), "redo", nil)
	unsettled := goamqp.SenderSettleModeUnsettled
	opts := durableOpts("sub")
	opts.RequestedSenderSettleMode = &unsettled
	c1, s1 := dialAs(t, e, "jms-r")
	r := newReceiver(t, s1, "redo", opts)
	send(t, snd, goamqp.NewMessage([]byte("x")))
	m, err := r.Receive(ctx5(t), nil)
	if err != nil || body(m) != "x" {
		t.Fatalf("%v %v", m, err)
	}
	c1.Close() // without settling
	eventually(t, "connection gone", func() bool { return e.srv.Connections() == 1 })
	_, s2 := dialAs(t, e, "jms-r")
	r = newReceiver(t, s2, "redo", opts)
	if got := body(receive(t, r)); got != "x" {
		t.Fatalf("redelivered %q", got)
	}
	noMessage(t, r)
}

// TestDurableRawDetachAndUnsubscribe: detach with closed=false keeps the
// subscription; Qpid JMS's unsubscribe (attach with a null source, then
// detach closed=true) ends it; a lookup of an unknown name is refused.
func TestDurableRawDetachAndUnsubscribe(t *testing.T) {
	e := startServer(t)
	c := rawDial(t, e.addr)
	c.open(&frames.Open{ContainerID: "raw-jms"})
	c.begin(0)
	src := &frames.Source{Address: "raw/dur", Durable: frames.DurabilityUnsettledState, ExpiryPolicy: frames.ExpiryNever,
		Capabilities: []encoding.Symbol{"topic"}}
	c.send(0, &frames.Attach{Name: "mysub", Handle: 0, Role: frames.RoleReceiver, Source: src, Target: &frames.Target{}}, nil)
	if a := expectFrame[*frames.Attach](c); a.Source == nil || a.Source.ExpiryPolicy != frames.ExpiryNever {
		t.Fatalf("attach %+v", a.Source)
	}
	c.send(0, &frames.Detach{Handle: 0, Closed: false}, nil)
	if d := expectFrame[*frames.Detach](c); d.Closed {
		t.Fatalf("detach answer %+v", d)
	}
	send(t, newSender(t, e.session(t), "raw/dur", nil), goamqp.NewMessage([]byte("kept")))

	// Unsubscribe, Qpid JMS style.
	c.send(0, &frames.Attach{Name: "mysub", Handle: 1, Role: frames.RoleReceiver, Target: &frames.Target{}}, nil)
	a := expectFrame[*frames.Attach](c)
	if a.Source == nil || a.Source.Address != "raw/dur" {
		t.Fatalf("lookup answer %+v", a.Source)
	}
	c.send(0, &frames.Flow{NextIncomingID: ptr(uint32(0)), IncomingWindow: 100, OutgoingWindow: 100,
		Handle: ptr(uint32(1)), DeliveryCount: ptr(uint32(0)), LinkCredit: ptr(uint32(10))}, nil)
	if tr := expectFrame[*frames.Transfer](c); tr.Handle != 1 {
		t.Fatalf("backlog transfer %+v", tr)
	}
	c.send(0, &frames.Detach{Handle: 1, Closed: true}, nil)
	expectFrame[*frames.Detach](c)
	eventually(t, "unsubscribed", func() bool { return e.router.Len() == 0 })

	c.send(0, &frames.Attach{Name: "nosuch", Handle: 2, Role: frames.RoleReceiver, Target: &frames.Target{}}, nil)
	if a := expectFrame[*frames.Attach](c); a.Source != nil {
		t.Fatalf("lookup of an unknown subscription answered with a source %+v", a.Source)
	}
	if d := expectFrame[*frames.Detach](c); d.Error == nil || d.Error.Condition != frames.ErrCondNotFound {
		t.Fatalf("detach %+v", d)
	}
}

// TestSharedSubscription: links of one shared subscription split the
// messages; a non-durable one ends with its last link.
func TestSharedSubscription(t *testing.T) {
	e := startServer(t)
	snd := newSender(t, e.session(t), "sh/1", nil)
	opts := func(name string) *goamqp.ReceiverOptions {
		return &goamqp.ReceiverOptions{Name: name, SourceCapabilities: []string{"topic", "shared", "global"}, Credit: 100}
	}
	_, s1 := dialAs(t, e, "app-1")
	_, s2 := dialAs(t, e, "app-2")
	r1 := newReceiver(t, s1, "sh/#", opts("work"))
	r2 := newReceiver(t, s2, "sh/#", opts("work|2"))
	if e.router.Len() != 1 {
		t.Fatalf("router has %d subscriptions, want one shared", e.router.Len())
	}
	const n = 20
	for i := range n {
		send(t, snd, goamqp.NewMessage([]byte(fmt.Sprint(i))))
	}
	got := map[string]int{}
	count := func(r *goamqp.Receiver, who string) {
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			m, err := r.Receive(ctx, nil)
			cancel()
			if err != nil {
				return
			}
			r.AcceptMessage(context.Background(), m)
			got[who]++
			got["all"]++
		}
	}
	count(r1, "r1")
	count(r2, "r2")
	if got["all"] != n || got["r1"] == 0 || got["r2"] == 0 {
		t.Fatalf("split %v, want %d in all and some to each", got, n)
	}
	r1.Close(ctx5(t))
	r2.Close(ctx5(t))
	eventually(t, "shared subscription gone", func() bool { return e.router.Len() == 0 })
}
