package amqp

import (
	"context"
	"strings"
	"testing"

	goamqp "github.com/Azure/go-amqp"

	"github.com/tolsey/tolsey/core/queue"
)

// Durable subscriptions in the queue engine (durable.go). The restart
// itself is tested with the whole gateway (gateway/durable_test.go) and
// with kill -9 (test/e2e/durable_kill_test.go).

// subQueue is the queue of the durable subscription container/name.
func (e *env) subQueue(t *testing.T, container, name string) *queue.Queue {
	t.Helper()
	q, ok := e.queues.Queue(subQueueName(container + "\x00" + name))
	if !ok {
		t.Fatalf("no queue for durable subscription %s/%s; queues: %v", container, name, e.queues.Queues())
	}
	return q
}

// TestDurableSubscriptionIsAQueue: a durable subscription is a durable
// queue holding its filter, exceptions, selector and no-local; what it
// does not select, what its own connection publishes and what it excepts
// are not stored.
func TestDurableSubscriptionIsAQueue(t *testing.T) {
	e := startServer(t)
	o := durableOpts("sub")
	o.Filters = append(exceptOpts("", "shop/hidden").Filters, goamqp.NewSelectorFilter("price > 10"),
		goamqp.NewLinkFilter(string(noLocalFilterName), noLocalFilterCode, []any{}))
	c, s := dialAs(t, e, "jms-q")
	r := newReceiver(t, s, "shop/#", o)
	if v := r.LinkSourceFilterValue(string(noLocalFilterName)); v == nil {
		t.Error("no-local not echoed")
	}
	if v := echoedSelector(r); v != "price > 10" {
		t.Errorf("selector echoed %#v", v)
	}
	q := e.subQueue(t, "jms-q", "sub")
	cfg := q.Info().Config
	if strings.Join(cfg.Subscriptions, " ") != "shop/# !shop/hidden" || cfg.Selector != "price > 10" || cfg.NoLocal != "jms-q" ||
		cfg.Overflow != queue.OverflowDrop || cfg.Access != queue.Exclusive {
		t.Fatalf("queue configuration %+v", cfg)
	}
	sendProps(t, newSender(t, s, "shop/items", nil), shop, "a", "b", "c", "d") // its own: no-local
	c.Close()
	eventually(t, "connection gone", func() bool { return e.srv.Connections() == 0 })
	other := e.session(t)
	sendProps(t, newSender(t, other, "shop/items", nil), shop, "a", "b", "c", "d")
	sendProps(t, newSender(t, other, "shop/hidden", nil), shop, "x", "hidden") // price 15: selected, excepted
	if n := q.Info().Messages; n != 3 {
		t.Fatalf("queue holds %d, want b c d", n)
	}
	_, s2 := dialAs(t, e, "jms-q")
	r = newReceiver(t, s2, "shop/#", o)
	expectBodies(t, "resumed", receiveUntil(t, r, "d"), "b", "c", "d")
}

// TestDurableSubscriptionFullDrops: a full subscription (queues.maxMessages)
// drops, counted, what it cannot hold, and the publisher is accepted: a
// subscriber away does not refuse the devices publishing.
func TestDurableSubscriptionFullDrops(t *testing.T) {
	e := startServer(t, func(o *Options) {
		eng, err := queue.New(context.Background(), queue.Options{Router: o.Router, Logger: testLogger(), Limits: queue.Limits{MaxMessages: 2}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(eng.Close)
		o.Queues = eng
	})
	c, s := dialAs(t, e, "jms-f")
	newReceiver(t, s, "full/#", durableOpts("sub"))
	c.Close()
	eventually(t, "connection gone", func() bool { return e.srv.Connections() == 0 })
	snd := newSender(t, e.session(t), "full/x", nil)
	for _, b := range []string{"a", "b", "c"} {
		send(t, snd, goamqp.NewMessage([]byte(b))) // fails unless accepted
	}
	info := e.subQueue(t, "jms-f", "sub").Info()
	if info.Messages != 2 || info.Counters.Refused != 1 {
		t.Fatalf("queue holds %d, refused %d; want 2, 1", info.Messages, info.Counters.Refused)
	}
	_, s2 := dialAs(t, e, "jms-f")
	r := newReceiver(t, s2, "full/#", durableOpts("sub"))
	expectBodies(t, "resumed", receiveUntil(t, r, "b"), "a", "b")
	noMessage(t, r)
}

// TestSharedDurableSubscriptionIsAQueue: the links of a shared durable
// subscription ("sub", "sub|2") consume one queue; it stays when they
// leave, and an unsubscribe by the last one deletes it.
func TestSharedDurableSubscriptionIsAQueue(t *testing.T) {
	e := startServer(t)
	shared := func(name string) *goamqp.ReceiverOptions {
		o := durableOpts(name)
		o.SourceCapabilities = []string{"shared"}
		return o
	}
	c, s := dialAs(t, e, "jms-s")
	newReceiver(t, s, "sh/#", shared("sub"))
	newReceiver(t, s, "sh/#", shared("sub|2"))
	q := e.subQueue(t, "jms-s", "sub")
	if n := q.Info().Consumers; n != 2 {
		t.Fatalf("%d consumers, want 2", n)
	}
	c.Close()
	eventually(t, "connection gone", func() bool { return e.srv.Connections() == 0 })
	snd := newSender(t, e.session(t), "sh/x", nil)
	send(t, snd, goamqp.NewMessage([]byte("kept")))
	_, s2 := dialAs(t, e, "jms-s")
	r1 := newReceiver(t, s2, "sh/#", shared("sub"))
	if got := body(receive(t, r1)); got != "kept" {
		t.Fatalf("resumed %q", got)
	}
	r2 := newReceiver(t, s2, "sh/#", shared("sub|2"))
	if err := r1.Close(ctx5(t)); err != nil {
		t.Fatal(err)
	}
	if _, ok := e.queues.Queue(q.Name()); !ok {
		t.Fatal("unsubscribed while another link consumes it")
	}
	if err := r2.Close(ctx5(t)); err != nil {
		t.Fatal(err)
	}
	if _, ok := e.queues.Queue(q.Name()); ok {
		t.Fatal("the last link's unsubscribe left the queue")
	}
}

// TestSubQueueName: the names of subscription queues do not collide,
// whatever the container-ids and link names hold, and a long one is
// hashed into a valid queue name.
func TestSubQueueName(t *testing.T) {
	keys := []string{"a\x00b/c", "a/b\x00c", "a\x00b%2Fc", "\x00b", "a\x00b", "a\x00#", "a\x00%23",
		strings.Repeat("x", 200) + "\x00" + strings.Repeat("y", 100), strings.Repeat("x", 200) + "\x00" + strings.Repeat("y", 101)}
	seen := map[string]string{}
	for _, k := range keys {
		n := subQueueName(k)
		if err := queue.ValidName(n); err != nil {
			t.Errorf("%q: %v", k, err)
		}
		if !IsSubscriptionQueue(n) {
			t.Errorf("%q: %q not marked", k, n)
		}
		if o, dup := seen[n]; dup {
			t.Errorf("%q and %q share %q", o, k, n)
		}
		seen[n] = k
	}
	if got := subQueueName("jms-1\x00orders"); got != "$sub/jms-1/orders" {
		t.Errorf("readable name %q", got)
	}
}

// TestDurableSubscriptionPartialACL: a durable subscription on a filter the
// ACL allows only partly stores what its topic brings, and its link is
// sent only what its identity may read, live or stored while it was away;
// it needs no right on its queue's $queue/ name.
func TestDurableSubscriptionPartialACL(t *testing.T) {
	e := authEnv(t, false, aclRules)
	alice := func() *goamqp.Session {
		c := e.dial(t, &goamqp.ConnOptions{ContainerID: "alice-app", SASLType: goamqp.SASLTypePlain("alice", "secret")})
		s, err := c.NewSession(ctx5(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := alice()
	r := newReceiver(t, s, "public/#", durableOpts("dur"))
	e.subQueue(t, "alice-app", "dur")
	pub := newSender(t, alice(), "", nil)
	sendTopics(t, pub, "public/secret", "public/a")
	expectBodies(t, "live", receiveUntil(t, r, "public/a"), "public/a")
	if err := s.Close(ctx5(t)); err != nil { // the link ends with it, not closed: the subscription stays
		t.Fatal(err)
	}
	sendTopics(t, pub, "public/secret", "public/b")
	r = newReceiver(t, alice(), "public/#", durableOpts("dur"))
	expectBodies(t, "stored", receiveUntil(t, r, "public/b"), "public/b")
}
