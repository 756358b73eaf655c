package queue

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tolsey/tolsey/core"
	"github.com/tolsey/tolsey/core/coretest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var ctx = context.Background()

func newEngine(t *testing.T, opts Options) (*Engine, *core.Router) {
	t.Helper()
	if opts.Router == nil {
		opts.Router = core.NewRouter(core.RouterOptions{Node: "n1"})
	}
	e, err := New(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e, opts.Router
}

func declare(t *testing.T, e *Engine, cfg Config) *Queue {
	t.Helper()
	q, err := e.Declare(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

func publish(r *core.Router, topic, payload string) core.PublishResult {
	return r.Publish(ctx, &core.Message{Topic: topic, Payload: []byte(payload), QoS: 1})
}

// consumer attaches a consumer whose notifications land in a channel.
func consumer(t *testing.T, q *Queue, browse bool) (*Consumer, chan struct{}) {
	t.Helper()
	return consumerWith(t, q, ConsumerOptions{Browse: browse})
}

// consumerWith attaches a consumer with opts, its notifications (opts'
// Notify replaced) landing in a channel.
func consumerWith(t *testing.T, q *Queue, opts ConsumerOptions) (*Consumer, chan struct{}) {
	t.Helper()
	ch := make(chan struct{}, 1)
	opts.Notify = func() {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	c, err := q.Consume(opts)
	if err != nil {
		t.Fatal(err)
	}
	return c, ch
}

// next waits for a delivery.
func next(t *testing.T, c *Consumer, wake chan struct{}) Delivery {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		if d, ok := c.Next(); ok {
			return d
		}
		select {
		case <-wake:
		case <-deadline:
			t.Fatal("no delivery")
		}
	}
}

// take receives and acknowledges n messages.
func take(t *testing.T, c *Consumer, wake chan struct{}, n int) string {
	t.Helper()
	var out []string
	for range n {
		d := next(t, c, wake)
		out = append(out, string(d.Msg.Payload))
		c.Ack(d.ID)
	}
	return fmt.Sprint(out)
}

func drain(c *Consumer) []string {
	var out []string
	for {
		d, ok := c.Next()
		if !ok {
			return out
		}
		out = append(out, string(d.Msg.Payload))
		c.Ack(d.ID)
	}
}

func TestSubscriptionsAndExceptions(t *testing.T) {
	e, r := newEngine(t, Options{})
	q := declare(t, e, Config{Name: "animals", Subscriptions: []string{"animals/f*", "!animals/fox"}})
	for _, topic := range []string{"animals/frog", "animals/fox", "animals/f", "animals/cat", "plants/fern"} {
		publish(r, topic, topic)
	}
	c, wake := consumer(t, q, false)
	coretest.Eventually(t, "two messages queued", 5*time.Second, func() bool { return q.Info().Messages == 2 })
	<-wake
	if got := fmt.Sprint(drain(c)); got != "[animals/frog animals/f]" {
		t.Fatalf("queue got %s", got)
	}
	if got := fmt.Sprint(e.MatchingQueues("animals/fox")); got != "[]" {
		t.Fatalf("animals/fox goes to %s", got)
	}
}

func TestEngineLeavesRouterWithoutSubscriptions(t *testing.T) {
	e, r := newEngine(t, Options{})
	declare(t, e, Config{Name: "plain"}) // no subscriptions: fed by direct puts only
	if r.Len() != 0 || r.Wants("a", core.ProtocolMQTT) {
		t.Fatalf("router has %d subscriptions with no queue subscription", r.Len())
	}
	declare(t, e, Config{Name: "subbed", Subscriptions: []string{"a/#"}})
	if r.Len() != 1 {
		t.Fatalf("router has %d subscriptions, want the engine's one", r.Len())
	}
	if err := e.Delete(ctx, "subbed"); err != nil {
		t.Fatal(err)
	}
	if r.Len() != 0 {
		t.Fatalf("router has %d subscriptions after the last subscribed queue went", r.Len())
	}
}

func TestFullQueueRefusesPublisher(t *testing.T) {
	e, r := newEngine(t, Options{})
	declare(t, e, Config{Name: "small", Subscriptions: []string{"s/#"}, MaxMessages: 2})
	declare(t, e, Config{Name: "big", Subscriptions: []string{"s/#"}})
	for i := range 2 {
		if res := publish(r, "s/x", fmt.Sprint(i)); res.Err != nil {
			t.Fatalf("publish %d: %v", i, res.Err)
		}
	}
	res := publish(r, "s/x", "3")
	if !errors.Is(res.Err, ErrFull) || res.Failed != 1 {
		t.Fatalf("third publish: %+v, want ErrFull", res)
	}
	// The other queue took it: exactly as a publish to each queue.
	big, _ := e.Queue("big")
	if n := big.Info().Messages; n != 3 {
		t.Fatalf("big holds %d", n)
	}
	small, _ := e.Queue("small")
	if in := small.Info().Counters.Refused; in != 1 {
		t.Fatalf("small refused %d", in)
	}
}

// gatedBackend delays every Append's done until the test opens the gate,
// as a group commit waiting for the disk does.
type gatedBackend struct {
	*Memory
	gate chan struct{}
}

func (b *gatedBackend) Open(ctx context.Context, cfg Config) (Log, error) {
	l, err := b.Memory.Open(ctx, cfg)
	return &gatedLog{Log: l, gate: b.gate}, err
}

type gatedLog struct {
	Log
	gate chan struct{}
}

func (l *gatedLog) Append(m *core.Message, done func(uint64, error)) {
	l.Log.Append(m, func(id uint64, err error) {
		go func() { <-l.gate; done(id, err) }()
	})
}

func TestPublisherAnsweredWhenDurable(t *testing.T) {
	b := &gatedBackend{Memory: NewMemory(), gate: make(chan struct{})}
	e, r := newEngine(t, Options{Backend: b})
	declare(t, e, Config{Name: "q", Subscriptions: []string{"d/#"}})
	got := make(chan core.PublishResult, 1)
	r.PublishAsync(ctx, &core.Message{Topic: "d/1", QoS: 1}, func(res core.PublishResult) { got <- res })
	select {
	case res := <-got:
		t.Fatalf("answered before the store: %+v", res)
	default:
	}
	close(b.gate)
	if res := <-got; res.Err != nil || res.Matched != 1 {
		t.Fatalf("result %+v", res)
	}
}

func TestExclusiveStandbyTakesOver(t *testing.T) {
	e, _ := newEngine(t, Options{})
	q := declare(t, e, Config{Name: "ex", Access: Exclusive})
	for i := range 4 {
		putWait(t, e, "ex", fmt.Sprint(i))
	}
	c1, w1 := consumer(t, q, false)
	c2, _ := consumer(t, q, false)
	d0 := next(t, c1, w1)
	if _, ok := c2.Next(); ok {
		t.Fatal("standby consumer received")
	}
	c1.Ack(d0.ID)
	d1 := next(t, c1, w1) // delivered, never settled
	c1.Close()
	d := next(t, c2, make(chan struct{}))
	if string(d.Msg.Payload) != "1" || d.ID != d1.ID || !d.Redelivered || d.DeliveryCount != 1 {
		t.Fatalf("standby got %+v (payload %s), want message 1 redelivered with count 1", d, d.Msg.Payload)
	}
	c2.Ack(d.ID)
	if got := fmt.Sprint(drain(c2)); got != "[2 3]" {
		t.Fatalf("standby then got %s", got)
	}
}

func putWait(t *testing.T, e *Engine, queue, payload string) {
	t.Helper()
	ch := make(chan error, 1)
	e.Put(queue, &core.Message{Topic: "t", Payload: []byte(payload), QoS: 1, Created: time.Now()}, func(err error) { ch <- err })
	if err := <-ch; err != nil {
		t.Fatal(err)
	}
}

func TestNonExclusiveSpreads(t *testing.T) {
	e, _ := newEngine(t, Options{})
	q := declare(t, e, Config{Name: "work", Access: NonExclusive})
	c1, w1 := consumer(t, q, false)
	c2, w2 := consumer(t, q, false)
	for i := range 4 {
		putWait(t, e, "work", fmt.Sprint(i))
	}
	a := next(t, c1, w1)
	b := next(t, c2, w2)
	if a.ID == b.ID {
		t.Fatal("both consumers got the same message")
	}
	// Each keeps its own until settled; a release goes to whoever pulls.
	c1.Release(a.ID)
	d := next(t, c2, w2)
	if d.ID != a.ID || !d.Redelivered || d.DeliveryCount != 0 {
		t.Fatalf("after release c2 got %+v, want message %d redelivered, count 0", d, a.ID)
	}
}

func TestModifyRejectDeadLetter(t *testing.T) {
	e, _ := newEngine(t, Options{})
	dlq := declare(t, e, Config{Name: "dlq"})
	q := declare(t, e, Config{Name: "q", DeadLetter: "dlq", MaxDeliveries: 2})
	declare(t, e, Config{Name: "nodl"})
	for _, p := range []string{"rejected", "failing", "skipped"} {
		putWait(t, e, "q", p)
	}
	c, w := consumer(t, q, false)
	other, ow := consumer(t, q, false)
	d := next(t, c, w)
	c.Reject(d.ID) // "rejected" → dlq
	d = next(t, c, w)
	c.Modify(d.ID, true, false) // "failing": 1 failure
	d = next(t, c, w)
	if string(d.Msg.Payload) != "failing" || d.DeliveryCount != 1 {
		t.Fatalf("got %s count %d, want failing count 1", d.Msg.Payload, d.DeliveryCount)
	}
	c.Modify(d.ID, true, false) // 2 failures = maxDeliveries → dlq
	d = next(t, c, w)
	if string(d.Msg.Payload) != "skipped" {
		t.Fatalf("got %s", d.Msg.Payload)
	}
	c.Modify(d.ID, false, true) // undeliverable here: only "other" may take it
	if d, ok := c.Next(); ok {
		t.Fatalf("undeliverable-here message came back to the same consumer: %s", d.Msg.Payload)
	}
	d = next(t, other, ow)
	if string(d.Msg.Payload) != "skipped" {
		t.Fatalf("other got %s", d.Msg.Payload)
	}
	other.Ack(d.ID)
	dc, dw := consumer(t, dlq, false)
	if got := take(t, dc, dw, 2); got != "[rejected failing]" {
		t.Fatalf("dead-letter queue holds %s", got)
	}
	info := q.Info()
	if info.Messages != 0 || info.Counters.DeadLettered != 2 || info.Counters.Acked != 1 {
		t.Fatalf("info %+v", info)
	}
	// Without a dead-letter queue a rejected message is dropped and counted.
	putWait(t, e, "nodl", "x")
	nq, _ := e.Queue("nodl")
	nc, nw := consumer(t, nq, false)
	nc.Reject(next(t, nc, nw).ID)
	if i := nq.Info(); i.Messages != 0 || i.Counters.Dropped != 1 {
		t.Fatalf("nodl info %+v", i)
	}
}

func TestWindowReadsTheRestFromTheLog(t *testing.T) {
	e, _ := newEngine(t, Options{Window: 8})
	q := declare(t, e, Config{Name: "deep"})
	const n = 100
	for i := range n {
		putWait(t, e, "deep", fmt.Sprint(i))
	}
	c, w := consumer(t, q, false)
	for i := range n {
		d := next(t, c, w)
		if string(d.Msg.Payload) != fmt.Sprint(i) {
			t.Fatalf("delivery %d is %s", i, d.Msg.Payload)
		}
		c.Ack(d.ID)
	}
	if i := q.Info(); i.Messages != 0 || i.Counters.Acked != n {
		t.Fatalf("info %+v", i)
	}
}

func TestTTLAndExpiry(t *testing.T) {
	var mu sync.Mutex
	now := time.Unix(1000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	e, _ := newEngine(t, Options{Now: clock})
	q := declare(t, e, Config{Name: "ttl", TTL: Duration(time.Minute)})
	put := func(p string, expiry time.Time) {
		ch := make(chan error, 1)
		e.Put("ttl", &core.Message{Topic: "t", Payload: []byte(p), Created: clock(), Expiry: expiry}, func(err error) { ch <- err })
		if err := <-ch; err != nil {
			t.Fatal(err)
		}
	}
	put("queue-ttl", time.Time{})
	put("own-expiry", now.Add(10*time.Second))
	put("later", now.Add(time.Hour))
	mu.Lock()
	now = now.Add(30 * time.Second)
	mu.Unlock()
	c, w := consumer(t, q, false)
	if d := next(t, c, w); string(d.Msg.Payload) != "queue-ttl" {
		t.Fatalf("got %s, want queue-ttl (own-expiry has expired)", d.Msg.Payload)
	}
	mu.Lock()
	now = now.Add(time.Minute) // past the queue's TTL for the rest
	mu.Unlock()
	if d, ok := c.Next(); ok {
		t.Fatalf("got %s after every TTL", d.Msg.Payload)
	}
	if i := q.Info(); i.Counters.Expired != 2 {
		t.Fatalf("expired %d, want 2", i.Counters.Expired)
	}
}

func TestBrowseDoesNotConsume(t *testing.T) {
	e, _ := newEngine(t, Options{Window: 2})
	q := declare(t, e, Config{Name: "b"})
	for i := range 5 {
		putWait(t, e, "b", fmt.Sprint(i))
	}
	c, w := consumer(t, q, false)
	taken := next(t, c, w) // in flight: a browser still sees it
	br, _ := consumer(t, q, true)
	var seen []string
	for {
		d, ok := br.Next()
		if !ok {
			break
		}
		seen = append(seen, string(d.Msg.Payload))
	}
	if fmt.Sprint(seen) != "[0 1 2 3 4]" {
		t.Fatalf("browsed %v", seen)
	}
	c.Ack(taken.ID)
	if n := q.Info().Messages; n != 4 {
		t.Fatalf("%d messages after browsing and one ack", n)
	}
}

// TestBrowseAfter: a browser given BrowseAfter starts after that message,
// as the admin API's paged list of a queue's messages needs.
func TestBrowseAfter(t *testing.T) {
	e, _ := newEngine(t, Options{Window: 2})
	q := declare(t, e, Config{Name: "b"})
	for i := range 5 {
		putWait(t, e, "b", fmt.Sprint(i))
	}
	all, _ := consumerWith(t, q, ConsumerOptions{Browse: true})
	var ids []uint64
	for d, ok := all.Next(); ok; d, ok = all.Next() {
		ids = append(ids, d.ID)
	}
	if len(ids) != 5 {
		t.Fatalf("browsed %d, want 5", len(ids))
	}
	br, _ := consumerWith(t, q, ConsumerOptions{Browse: true, BrowseAfter: ids[1]})
	var seen []string
	for d, ok := br.Next(); ok; d, ok = br.Next() {
		seen = append(seen, string(d.Msg.Payload))
	}
	if fmt.Sprint(seen) != "[2 3 4]" {
		t.Fatalf("browsed after the second: %v", seen)
	}
}

func TestTemporaryQueuesGoWithTheirOwner(t *testing.T) {
	e, _ := newEngine(t, Options{Limits: Limits{MaxTemporary: 2}})
	var deleted sync.WaitGroup
	for i := range 2 {
		q := declare(t, e, Config{Name: fmt.Sprintf("tmp%d", i), Temporary: true, Owner: "conn1"})
		deleted.Add(1)
		if _, err := q.Consume(ConsumerOptions{Deleted: deleted.Done}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.Declare(ctx, Config{Name: "tmp2", Temporary: true, Owner: "conn1"}); !errors.Is(err, ErrTooMany) {
		t.Fatalf("third temporary queue: %v", err)
	}
	declare(t, e, Config{Name: "other", Temporary: true, Owner: "conn2"})
	e.DeleteOwned(ctx, "conn1")
	deleted.Wait()
	if names := len(e.Queues()); names != 1 {
		t.Fatalf("%d queues left, want conn2's", names)
	}
}

func TestRestartKeepsMessages(t *testing.T) {
	b := NewMemory() // outlives the engines, as a store on disk does
	r := core.NewRouter(core.RouterOptions{})
	e1, err := New(ctx, Options{Backend: b, Router: r})
	if err != nil {
		t.Fatal(err)
	}
	q := declare(t, e1, Config{Name: "d", Subscriptions: []string{"d/#"}, Access: Exclusive})
	for i := range 3 {
		publish(r, "d/x", fmt.Sprint(i))
	}
	c, w := consumer(t, q, false)
	d := next(t, c, w)
	c.Ack(d.ID)
	next(t, c, w) // "1": delivered, not settled when the gateway stops
	e1.Close()
	e2, _ := newEngine(t, Options{Backend: b, Router: r})
	q2, ok := e2.Queue("d")
	if !ok || q2.cfg().Access != Exclusive {
		t.Fatalf("queue not back: %v %+v", ok, q2)
	}
	c2, w2 := consumer(t, q2, false)
	if got := take(t, c2, w2, 2); got != "[1 2]" {
		t.Fatalf("after restart: %s", got)
	}
	// The new engine took the router subscription.
	publish(r, "d/y", "3")
	if got := take(t, c2, w2, 1); got != "[3]" {
		t.Fatalf("after restart, new: %s", got)
	}
}

func TestDeclareRefusesBadConfig(t *testing.T) {
	e, _ := newEngine(t, Options{})
	for _, cfg := range []Config{
		{Name: ""},
		{Name: "a#"},
		{Name: "q", Access: "fifo"},
		{Name: "q", Subscriptions: []string{"a/#/b"}},
		{Name: "q", DeadLetter: "q"},
		{Name: "q", MaxMessages: -1},
	} {
		if _, err := e.Declare(ctx, cfg); !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: %v, want ErrInvalid", cfg, err)
		}
	}
}

func TestDeleteTellsConsumers(t *testing.T) {
	e, r := newEngine(t, Options{})
	q := declare(t, e, Config{Name: "gone", Subscriptions: []string{"g/#"}})
	done := make(chan struct{})
	c, err := q.Consume(ConsumerOptions{Deleted: func() { close(done) }})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Delete(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	<-done
	if _, ok := c.Next(); ok {
		t.Fatal("delivery from a deleted queue")
	}
	if res := publish(r, "g/1", "x"); res.Matched != 0 {
		t.Fatalf("publish after delete: %+v", res)
	}
	if err := e.Delete(ctx, "gone"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second delete: %v", err)
	}
}

// A consumer that leaves with the whole window in flight, each delivery at
// its last allowed failure, dead-letters them all: the queue reads on from
// its Log and tells the other consumer, rather than waiting for the next
// publish.
func TestDeadLetteringOnCloseRefillsTheWindow(t *testing.T) {
	e, _ := newEngine(t, Options{Window: 4})
	declare(t, e, Config{Name: "dlq"})
	q := declare(t, e, Config{Name: "q", DeadLetter: "dlq", MaxDeliveries: 1})
	for i := range 8 {
		putWait(t, e, "q", fmt.Sprint(i))
	}
	a, wa := consumer(t, q, false)
	for range 4 {
		next(t, a, wa)
	}
	b, wb := consumer(t, q, false)
	drainWake(wb)
	a.Close() // the 4 in flight reach maxDeliveries: dead-lettered
	// A front-end pulls when told (an AMQP link with credit waits for
	// Notify): b must be told.
	waitWake(t, wb)
	if got := take(t, b, wb, 4); got != "[4 5 6 7]" {
		t.Fatalf("after the dead-lettering close: %s", got)
	}
}

// The same with Modify: four failed deliveries dead-letter the window.
func TestDeadLetteringOnModifyRefillsTheWindow(t *testing.T) {
	e, _ := newEngine(t, Options{Window: 4})
	declare(t, e, Config{Name: "dlq"})
	q := declare(t, e, Config{Name: "q", DeadLetter: "dlq", MaxDeliveries: 1})
	for i := range 8 {
		putWait(t, e, "q", fmt.Sprint(i))
	}
	a, wa := consumer(t, q, false)
	var ds []Delivery
	for range 4 {
		ds = append(ds, next(t, a, wa))
	}
	drainWake(wa)
	for _, d := range ds {
		a.Modify(d.ID, true, false)
	}
	waitWake(t, wa)
	if got := take(t, a, wa, 4); got != "[4 5 6 7]" {
		t.Fatalf("after dead-lettering by Modify: %s", got)
	}
}

func drainWake(ch chan struct{}) {
	select {
	case <-ch:
	default:
	}
}

func waitWake(t *testing.T, ch chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("the consumer was not told that messages are ready")
	}
}

// TestCloseUncountedKeepsTheCount: a consumer the gateway detaches as it
// shuts down gives back what it held without a failed delivery counted
// (counts are stored: a few rolling restarts would otherwise dead-letter
// messages no client failed on); a consumer that goes away counts one.
func TestCloseUncountedKeepsTheCount(t *testing.T) {
	e, _ := newEngine(t, Options{})
	q := declare(t, e, Config{Name: "cu"})
	putWait(t, e, "cu", "m")
	for _, tc := range []struct {
		close func(*Consumer)
		want  uint32
	}{{(*Consumer).CloseUncounted, 0}, {(*Consumer).Close, 1}} {
		c, w := consumer(t, q, false)
		next(t, c, w)
		tc.close(c)
		c2, w2 := consumer(t, q, false)
		d := next(t, c2, w2)
		if d.DeliveryCount != tc.want || !d.Redelivered {
			t.Fatalf("after close: count %d redelivered %v, want count %d, redelivered", d.DeliveryCount, d.Redelivered, tc.want)
		}
		c2.CloseUncounted()
	}
}

// TestUndeliverableHerePastTheNamedCap: past maxSkipNames named marks on
// one message, a consumer that refuses it (undeliverable-here) is still
// not given it again; it was, at once, in a loop with delivery-failed
// false, which never counts towards maxDeliveries.
func TestUndeliverableHerePastTheNamedCap(t *testing.T) {
	e, _ := newEngine(t, Options{})
	q := declare(t, e, Config{Name: "uh"})
	putWait(t, e, "uh", "poison")
	for i := range maxSkipNames + 1 {
		c, w := consumerWith(t, q, ConsumerOptions{Name: fmt.Sprintf("link-%d", i)})
		d := next(t, c, w)
		c.Modify(d.ID, false, true)
		if d2, ok := c.Next(); ok {
			t.Fatalf("consumer %d refused the message (undeliverable-here) and got it again: %+v", i, d2.ID)
		}
		defer c.Close()
	}
}

// TestAckAll: AckAll removes the deliveries it names that are this
// consumer's, from the queue and from its Log (gone after a restart), and
// skips the others: another consumer's, one settled already, an unknown
// ID.
func TestAckAll(t *testing.T) {
	b := NewMemory() // outlives the engines, as a store on disk does
	r := core.NewRouter(core.RouterOptions{})
	e1, err := New(ctx, Options{Backend: b, Router: r})
	if err != nil {
		t.Fatal(err)
	}
	q := declare(t, e1, Config{Name: "a", Subscriptions: []string{"a/#"}})
	for i := range 5 {
		publish(r, "a/x", fmt.Sprint(i))
	}
	c, w := consumer(t, q, false)
	other, ow := consumer(t, q, false)
	d0, d1, d2 := next(t, c, w), next(t, c, w), next(t, c, w)
	o := next(t, other, ow)
	c.Ack(d2.ID)
	c.AckAll([]uint64{d0.ID, o.ID, d2.ID, 999, d1.ID})
	info := q.Info()
	if info.Messages != 2 || info.Counters.Acked != 3 || info.InFlight != 1 {
		t.Fatalf("after AckAll: %d messages, %d acked, %d in flight; want 2, 3, 1", info.Messages, info.Counters.Acked, info.InFlight)
	}
	other.Ack(o.ID) // still the other's to settle
	e1.Close()
	e2, _ := newEngine(t, Options{Backend: b, Router: r})
	q2, _ := e2.Queue("a")
	c2, w2 := consumer(t, q2, false)
	if got := take(t, c2, w2, 1); got != "[4]" {
		t.Fatalf("after a restart: %s, want [4] (the rest was acknowledged)", got)
	}
}

// TestNextNAndUnget: NextN takes several deliveries at once, in Next's
// order, and Unget puts those not sent back as they were: first in line
// again, not counted as delivered, not marked redelivered; a redelivered
// one stays marked.
func TestNextNAndUnget(t *testing.T) {
	e, r := newEngine(t, Options{Backend: NewMemory()})
	q := declare(t, e, Config{Name: "n", Subscriptions: []string{"n/#"}})
	for i := range 5 {
		publish(r, "n/x", fmt.Sprint(i))
	}
	c, w := consumer(t, q, false)
	first := next(t, c, w) // "0"
	c.Release(first.ID)    // back: redelivered next time
	ds := c.NextN(nil, 3)
	if len(ds) != 3 || string(ds[0].Msg.Payload) != "0" || !ds[0].Redelivered ||
		string(ds[1].Msg.Payload) != "1" || ds[1].Redelivered || string(ds[2].Msg.Payload) != "2" {
		t.Fatalf("NextN(3): %+v", ds)
	}
	c.Unget(ds[:2]) // "0" and "1" were not sent
	if info := q.Info(); info.InFlight != 1 || info.Counters.Out != 2 || info.Counters.Redelivered != 0 {
		t.Fatalf("after Unget: %d in flight, out %d, redelivered %d; want 1, 2, 0", info.InFlight, info.Counters.Out, info.Counters.Redelivered)
	}
	ds = c.NextN(ds[:0], 10)
	var got []string
	for _, d := range ds {
		got = append(got, fmt.Sprintf("%s:%v", d.Msg.Payload, d.Redelivered))
	}
	if fmt.Sprint(got) != "[0:true 1:false 3:false 4:false]" {
		t.Fatalf("after Unget, NextN: %v", got)
	}
	if ds := c.NextN(nil, 0); len(ds) != 0 {
		t.Fatalf("NextN(0) took %d", len(ds))
	}
}
