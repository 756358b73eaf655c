package core

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

// recorder is a Subscriber that remembers what it was handed.
type recorder struct {
	name string
	err  error // returned from every Deliver

	mu   sync.Mutex
	got  []*Message
	dels []Delivery
}

func (s *recorder) Deliver(m *Message, d Delivery) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got = append(s.got, m)
	s.dels = append(s.dels, d)
	return s.err
}

func (s *recorder) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.got)
}

func (s *recorder) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got, s.dels = nil, nil
}

func (s *recorder) last() Delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dels[len(s.dels)-1]
}

func mustSubscribe(t testing.TB, r *Router, filter string, s Subscriber, o SubOptions) *Subscription {
	t.Helper()
	sub, err := r.Subscribe(filter, s, o)
	if err != nil {
		t.Fatalf("Subscribe(%q): %v", filter, err)
	}
	return sub
}

func publish(r *Router, topic string, qos byte) PublishResult {
	return r.Publish(context.Background(), &Message{Topic: topic, QoS: qos})
}

func TestRouterMatchCases(t *testing.T) {
	for _, tt := range matchCases {
		r := NewRouter(RouterOptions{})
		s := &recorder{}
		mustSubscribe(t, r, tt.filter, s, SubOptions{QoS: 2})
		res := publish(r, tt.topic, 1)
		if got := s.count() == 1; got != tt.want {
			t.Errorf("router: filter %q, topic %q: delivered %v, want %v", tt.filter, tt.topic, got, tt.want)
		}
		if want := 0; tt.want {
			want = 1
			if res.Matched != want {
				t.Errorf("router: filter %q, topic %q: Matched = %d", tt.filter, tt.topic, res.Matched)
			}
		}
	}
}

func TestRouterEveryMatchingSubscriberOnce(t *testing.T) {
	r := NewRouter(RouterOptions{})
	filters := []string{"a/b/c", "a/+/c", "a/#", "+/b/#", "#", "a/b/+", "+/+/+", "a/b/c/#", "x/#", "a/b", "$SYS/#"}
	subs := map[string]*recorder{}
	for _, f := range filters {
		s := &recorder{name: f}
		subs[f] = s
		mustSubscribe(t, r, f, s, SubOptions{QoS: 1})
	}
	res := publish(r, "a/b/c", 1)
	want := 0
	for _, f := range filters {
		n := subs[f].count()
		if Match(f, "a/b/c") {
			want++
			if n != 1 {
				t.Errorf("%q got %d deliveries, want 1", f, n)
			}
		} else if n != 0 {
			t.Errorf("%q got %d deliveries, want 0", f, n)
		}
	}
	if res.Matched != want || res.Failed != 0 || res.Err != nil {
		t.Fatalf("result = %+v, want Matched %d", res, want)
	}
	if p, d := r.Counts(); p != 1 || d != uint64(want) {
		t.Fatalf("Counts = %d, %d; want 1, %d", p, d, want)
	}
}

func TestRouterOverlappingFiltersDeliverOnceAtMaxQoS(t *testing.T) {
	r := NewRouter(RouterOptions{})
	s := &recorder{}
	mustSubscribe(t, r, "a/#", s, SubOptions{QoS: 0})
	hi := mustSubscribe(t, r, "a/+", s, SubOptions{QoS: 2})
	mustSubscribe(t, r, "a/b", s, SubOptions{QoS: 1})
	mustSubscribe(t, r, "#", s, SubOptions{QoS: 1})

	res := publish(r, "a/b", 2)
	if s.count() != 1 || res.Matched != 1 {
		t.Fatalf("got %d deliveries (Matched %d), want 1", s.count(), res.Matched)
	}
	if d := s.last(); d.QoS != 2 || d.Sub != hi {
		t.Fatalf("delivery = QoS %d via %q, want QoS 2 via a/+", d.QoS, d.Sub.Filter)
	}
	// Through the map path of dedupe: more than 16 overlapping matches.
	r2 := NewRouter(RouterOptions{})
	s2, other := &recorder{}, &recorder{}
	for i := range 20 {
		mustSubscribe(t, r2, "a/#", s2, SubOptions{QoS: byte(i % 2)})
		mustSubscribe(t, r2, "a/+", other, SubOptions{QoS: 0})
	}
	top := mustSubscribe(t, r2, "a/b", s2, SubOptions{QoS: 2})
	res = publish(r2, "a/b", 2)
	if s2.count() != 1 || other.count() != 1 || res.Matched != 2 {
		t.Fatalf("map dedupe: %d and %d deliveries (Matched %d), want 1 and 1", s2.count(), other.count(), res.Matched)
	}
	if d := s2.last(); d.QoS != 2 || d.Sub != top {
		t.Fatalf("map dedupe: QoS %d via %q, want 2 via a/b", d.QoS, d.Sub.Filter)
	}
}

func TestRouterQoSDowngrade(t *testing.T) {
	for pub := range byte(3) {
		for sub := range byte(3) {
			r := NewRouter(RouterOptions{})
			s := &recorder{}
			mustSubscribe(t, r, "t", s, SubOptions{QoS: sub})
			publish(r, "t", pub)
			if got, want := s.last().QoS, min(pub, sub); got != want {
				t.Errorf("pub QoS %d, sub QoS %d: delivered at %d, want %d", pub, sub, got, want)
			}
		}
	}
}

func TestRouterSkipOriginAndNoLocal(t *testing.T) {
	r := NewRouter(RouterOptions{Node: "n1"})
	mqttFE := &recorder{name: "mqtt"}
	bridge := &recorder{name: "nats"}
	plain := &recorder{name: "plain"}
	noLocal := &recorder{name: "nolocal"}
	mustSubscribe(t, r, "#", mqttFE, SubOptions{QoS: 1, SkipOrigin: ProtocolMQTT})
	mustSubscribe(t, r, "#", bridge, SubOptions{QoS: 1, SkipOrigin: ProtocolNATS})
	mustSubscribe(t, r, "#", plain, SubOptions{QoS: 1})
	mustSubscribe(t, r, "#", noLocal, SubOptions{QoS: 1, NoLocal: true, Client: "c1"})

	send := func(p Protocol, client string) PublishResult {
		for _, s := range []*recorder{mqttFE, bridge, plain, noLocal} {
			s.reset()
		}
		return r.Publish(context.Background(), &Message{Topic: "t", Origin: Origin{Protocol: p, Client: client}})
	}
	check := func(desc string, res PublishResult, want map[*recorder]int) {
		t.Helper()
		total := 0
		for _, s := range []*recorder{mqttFE, bridge, plain, noLocal} {
			total += want[s]
			if s.count() != want[s] {
				t.Errorf("%s: %s got %d, want %d", desc, s.name, s.count(), want[s])
			}
		}
		if res.Matched != total {
			t.Errorf("%s: Matched = %d, want %d (suppressed deliveries are not matches)", desc, res.Matched, total)
		}
	}
	check("from mqtt c1", send(ProtocolMQTT, "c1"), map[*recorder]int{bridge: 1, plain: 1})
	check("from nats c2", send(ProtocolNATS, "c2"), map[*recorder]int{mqttFE: 1, plain: 1, noLocal: 1})
	check("from amqp c1", send(ProtocolAMQP, "c1"), map[*recorder]int{mqttFE: 1, bridge: 1, plain: 1})
	check("from amqp, no client", send(ProtocolAMQP, ""), map[*recorder]int{mqttFE: 1, bridge: 1, plain: 1, noLocal: 1})

	// NoLocal without a Client never suppresses: an empty client id is no one.
	r2 := NewRouter(RouterOptions{})
	s := &recorder{}
	mustSubscribe(t, r2, "t", s, SubOptions{NoLocal: true})
	publish(r2, "t", 0)
	if s.count() != 1 {
		t.Fatalf("NoLocal with empty Client suppressed a message with empty Origin.Client")
	}
}

// TestRouterSuppressedOverlapStillDelivers: when one of a subscriber's
// overlapping subscriptions is suppressed (NoLocal, SkipOrigin) and another
// is not, the message is delivered through the other. Found by this test:
// the router used to pick the highest-QoS subscription first and then drop
// the message if that one was suppressed.
func TestRouterSuppressedOverlapStillDelivers(t *testing.T) {
	r := NewRouter(RouterOptions{})
	s := &recorder{}
	mustSubscribe(t, r, "a/#", s, SubOptions{QoS: 2, NoLocal: true, Client: "c1"})
	open := mustSubscribe(t, r, "a/b", s, SubOptions{QoS: 1})
	mustSubscribe(t, r, "+/b", s, SubOptions{QoS: 2, SkipOrigin: ProtocolMQTT})

	res := r.Publish(context.Background(), &Message{Topic: "a/b", QoS: 2, Origin: Origin{Protocol: ProtocolMQTT, Client: "c1"}})
	if s.count() != 1 || res.Matched != 1 {
		t.Fatalf("got %d deliveries (Matched %d), want 1 through a/b", s.count(), res.Matched)
	}
	if d := s.last(); d.Sub != open || d.QoS != 1 {
		t.Fatalf("delivered via %q at QoS %d, want a/b at 1", d.Sub.Filter, d.QoS)
	}
	// From another client the highest QoS wins again.
	s.reset()
	r.Publish(context.Background(), &Message{Topic: "a/b", QoS: 2, Origin: Origin{Protocol: ProtocolAMQP, Client: "c2"}})
	if s.count() != 1 || s.last().QoS != 2 {
		t.Fatalf("from c2: %d deliveries, want 1 at QoS 2", s.count())
	}
}

func TestRouterSharedGroups(t *testing.T) {
	r := NewRouter(RouterOptions{})
	const members = 3
	var g1 []*recorder
	for i := range members {
		s := &recorder{name: fmt.Sprint("g1-", i)}
		g1 = append(g1, s)
		sub := mustSubscribe(t, r, "$share/g1/sensors/+", s, SubOptions{QoS: 1})
		if sub.Filter != "sensors/+" || sub.Options.Group != "g1" {
			t.Fatalf("shared subscription = %q group %q", sub.Filter, sub.Options.Group)
		}
	}
	g2 := &recorder{name: "g2"}
	mustSubscribe(t, r, "$share/g2/sensors/#", g2, SubOptions{QoS: 1})
	// A group given through options is the same as $share.
	g2b := &recorder{name: "g2b"}
	mustSubscribe(t, r, "sensors/#", g2b, SubOptions{QoS: 1, Group: "g2"})
	plain := &recorder{name: "plain"}
	mustSubscribe(t, r, "sensors/#", plain, SubOptions{QoS: 1})
	// g1[0] also holds a plain subscription: the group pick is independent.
	mustSubscribe(t, r, "sensors/temp", g1[0], SubOptions{QoS: 0})

	const n = 30
	for range n {
		res := publish(r, "sensors/temp", 1)
		if res.Matched != 4 {
			t.Fatalf("Matched = %d, want one per group, plain and g1[0]'s own", res.Matched)
		}
	}
	// g1[0]'s plain subscription delivered every message at QoS 0.
	plainTo0 := 0
	g1[0].mu.Lock()
	for _, d := range g1[0].dels {
		if d.Sub.Options.Group == "" {
			plainTo0++
		}
	}
	g1[0].mu.Unlock()
	if plainTo0 != n {
		t.Errorf("g1[0] got %d plain deliveries, want %d", plainTo0, n)
	}
	for _, s := range g1 {
		want := n / members
		if s == g1[0] {
			want += n
		}
		if s.count() != want {
			t.Errorf("%s got %d, want %d (round robin)", s.name, s.count(), want)
		}
	}
	if got := g2.count() + g2b.count(); got != n || g2.count() != n/2 {
		t.Errorf("group g2: %d + %d deliveries, want %d split evenly", g2.count(), g2b.count(), n)
	}
	if plain.count() != n {
		t.Errorf("plain got %d, want %d", plain.count(), n)
	}
	// A topic only g2 matches goes to g2 alone.
	before := g1[1].count() + g1[2].count() + g1[0].count()
	res := publish(r, "sensors/a/b", 1)
	if res.Matched != 2 {
		t.Fatalf("sensors/a/b Matched = %d, want g2 + plain", res.Matched)
	}
	if g1[1].count()+g1[2].count()+g1[0].count() != before {
		t.Fatal("g1 got a message its filter does not match")
	}
}

func TestRouterSharedGroupSameSubscriberTwice(t *testing.T) {
	// Two groups picking the same subscriber are two deliveries, as two
	// shared subscriptions of one session would be [MQTT-4.8.2].
	r := NewRouter(RouterOptions{})
	s := &recorder{}
	mustSubscribe(t, r, "$share/a/t", s, SubOptions{QoS: 1})
	mustSubscribe(t, r, "$share/b/t", s, SubOptions{QoS: 1})
	if res := publish(r, "t", 1); res.Matched != 2 || s.count() != 2 {
		t.Fatalf("Matched = %d, deliveries = %d; want 2", res.Matched, s.count())
	}
}

func TestRouterUnsubscribe(t *testing.T) {
	r := NewRouter(RouterOptions{})
	a, b := &recorder{}, &recorder{}
	subA := mustSubscribe(t, r, "x/y/z", a, SubOptions{})
	subB := mustSubscribe(t, r, "x/+/z", b, SubOptions{})
	subA2 := mustSubscribe(t, r, "x/#", a, SubOptions{})
	g1 := mustSubscribe(t, r, "$share/g/x/y/z", a, SubOptions{})
	g2 := mustSubscribe(t, r, "$share/g/x/y/z", b, SubOptions{})
	if r.Len() != 5 {
		t.Fatalf("Len = %d, want 5", r.Len())
	}
	r.Unsubscribe(subA)
	r.Unsubscribe(subA) // harmless
	r.Unsubscribe(nil)  // harmless
	if r.Len() != 4 {
		t.Fatalf("Len = %d after double Unsubscribe, want 4", r.Len())
	}
	a.reset()
	publish(r, "x/y/z", 0)
	for _, d := range a.dels {
		if d.Sub == subA {
			t.Fatal("delivered through an unsubscribed subscription")
		}
	}
	r.Unsubscribe(g1)
	// The group now has only b.
	a.reset()
	b.reset()
	for range 4 {
		publish(r, "x/y/z", 0)
	}
	if b.count() != 8 || a.count() != 4 {
		t.Fatalf("after leaving the group: a %d, b %d; want 4, 8", a.count(), b.count())
	}
	for _, s := range []*Subscription{subB, subA2, g2, g1} {
		r.Unsubscribe(s)
	}
	if r.Len() != 0 {
		t.Fatalf("Len = %d, want 0", r.Len())
	}
	if n := r.root.kids.len(); n != 0 {
		t.Fatalf("root keeps %d children after unsubscribing everything", n)
	}
	a.reset()
	b.reset()
	if res := publish(r, "x/y/z", 0); res.Matched != 0 || a.count()+b.count() != 0 {
		t.Fatalf("delivered after unsubscribing everything: %+v", res)
	}
	// Re-subscribing after pruning works.
	mustSubscribe(t, r, "x/y/z", a, SubOptions{})
	if res := publish(r, "x/y/z", 0); res.Matched != 1 {
		t.Fatalf("Matched = %d after resubscribe", res.Matched)
	}
}

func TestRouterUnsubscribePrunesWide(t *testing.T) {
	r := NewRouter(RouterOptions{})
	s := &recorder{}
	var subs []*Subscription
	for i := range 4 * smallFanout {
		subs = append(subs,
			mustSubscribe(t, r, fmt.Sprintf("site/%d/dev/+/temp", i), s, SubOptions{}),
			mustSubscribe(t, r, fmt.Sprintf("site/%d/#", i), s, SubOptions{}),
			mustSubscribe(t, r, fmt.Sprintf("$share/g%d/site/%d", i%3, i), s, SubOptions{}))
	}
	if res := publish(r, "site/20/dev/1/temp", 0); res.Matched != 1 {
		t.Fatalf("Matched = %d, want 1", res.Matched)
	}
	if res := publish(r, "site/20", 0); res.Matched != 2 {
		t.Fatalf("Matched = %d, want 2 (site/20/# and the group)", res.Matched)
	}
	for _, sub := range slices.Backward(subs) {
		r.Unsubscribe(sub)
	}
	if r.Len() != 0 || r.root.kids.len() != 0 {
		t.Fatalf("Len = %d, root children = %d after unsubscribing all", r.Len(), r.root.kids.len())
	}
}

func TestRouterSubscribeInvalid(t *testing.T) {
	r := NewRouter(RouterOptions{})
	for _, f := range []string{"", "a/#/b", "sport+", "$share/g", "$share//f", "$share/g+/f", "a\x00"} {
		sub, err := r.Subscribe(f, &recorder{}, SubOptions{})
		if sub != nil || !errors.Is(err, ErrInvalidFilter) {
			t.Errorf("Subscribe(%q) = %v, %v; want ErrInvalidFilter", f, sub, err)
		}
	}
	if _, err := r.Subscribe("a/#/b", &recorder{}, SubOptions{}); !errors.Is(err, ErrFilterHash) {
		t.Errorf("Subscribe error %v does not wrap ErrFilterHash", err)
	}
	if r.Len() != 0 || r.root.kids.len() != 0 {
		t.Fatal("a refused subscription left state behind")
	}
}

func TestRouterSubscriberErrors(t *testing.T) {
	r := NewRouter(RouterOptions{})
	errFull, errClosed := errors.New("queue full"), errors.New("link closed")
	ok1, ok2 := &recorder{}, &recorder{}
	bad1, bad2 := &recorder{err: errFull}, &recorder{err: errClosed}
	for _, s := range []*recorder{ok1, bad1, ok2, bad2} {
		mustSubscribe(t, r, "t/#", s, SubOptions{QoS: 1})
	}
	res := publish(r, "t/x", 1)
	if res.Matched != 4 || res.Failed != 2 {
		t.Fatalf("Matched %d Failed %d, want 4 and 2", res.Matched, res.Failed)
	}
	if !errors.Is(res.Err, errFull) || !errors.Is(res.Err, errClosed) {
		t.Fatalf("Err = %v, want both refusals", res.Err)
	}
	if ok1.count() != 1 || ok2.count() != 1 {
		t.Fatal("a refusal stopped delivery to the others")
	}
	if _, d := r.Counts(); d != 2 {
		t.Fatalf("delivered count = %d, want 2", d)
	}
	if res := publish(r, "other", 1); res.Matched != 0 || res.Failed != 0 || res.Err != nil {
		t.Fatalf("no match: %+v", res)
	}
}

type retainerFunc func(ctx context.Context, m *Message) error

func (f retainerFunc) Retain(ctx context.Context, m *Message) error { return f(ctx, m) }

func TestRouterRetainer(t *testing.T) {
	var retained []*Message
	var fail error
	r := NewRouter(RouterOptions{Retainer: retainerFunc(func(ctx context.Context, m *Message) error {
		if ctx == nil {
			t.Error("Retain got a nil context")
		}
		retained = append(retained, m)
		return fail
	})})
	s := &recorder{}
	mustSubscribe(t, r, "t", s, SubOptions{QoS: 1})

	res := r.Publish(context.Background(), &Message{Topic: "t", Payload: []byte("live")})
	if len(retained) != 0 || res.Retained || res.RetainErr != nil {
		t.Fatalf("non-retained message reached the retainer: %+v", res)
	}
	m := &Message{Topic: "t", Payload: []byte("keep"), Retain: true}
	res = r.Publish(context.Background(), m)
	if len(retained) != 1 || retained[0] != m || !res.Retained || res.RetainErr != nil {
		t.Fatalf("retained publish: %+v, retainer saw %d", res, len(retained))
	}
	if s.count() != 2 {
		t.Fatalf("subscriber got %d, want 2", s.count())
	}

	fail = errors.New("store down")
	res = r.Publish(context.Background(), &Message{Topic: "t", Retain: true})
	if !errors.Is(res.RetainErr, fail) || res.Retained {
		t.Fatalf("RetainErr = %v, Retained = %v; want the store error", res.RetainErr, res.Retained)
	}
	if res.Matched != 1 || s.count() != 3 || res.Err != nil {
		t.Fatalf("a retain failure stopped live delivery: %+v", res)
	}
	// Retained with nobody subscribed still reaches the store.
	fail = nil
	res = r.Publish(context.Background(), &Message{Topic: "nobody", Retain: true})
	if !res.Retained || res.Matched != 0 || len(retained) != 3 {
		t.Fatalf("retain without subscribers: %+v", res)
	}
	// Without a Retainer, Retain is accepted and not reported stored.
	r2 := NewRouter(RouterOptions{})
	if res := r2.Publish(context.Background(), &Message{Topic: "t", Retain: true}); res.Retained || res.RetainErr != nil {
		t.Fatalf("no retainer: %+v", res)
	}
}

func TestRouterStampsMessage(t *testing.T) {
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	r := NewRouter(RouterOptions{Node: "node-a", Now: func() time.Time { return now }})
	m := &Message{Topic: "t"}
	r.Publish(context.Background(), m)
	if !m.Created.Equal(now) || m.Origin.Node != "node-a" {
		t.Fatalf("Created %v Node %q; want stamped", m.Created, m.Origin.Node)
	}
	earlier := now.Add(-time.Hour)
	m = &Message{Topic: "t", Created: earlier, Origin: Origin{Node: "node-b"}}
	r.Publish(context.Background(), m)
	if !m.Created.Equal(earlier) || m.Origin.Node != "node-b" {
		t.Fatalf("Publish overwrote Created %v / Node %q", m.Created, m.Origin.Node)
	}
}

// reentrant subscribes and unsubscribes from inside Deliver: the router
// must not hold its lock while delivering.
type reentrant struct {
	r   *Router
	sub *Subscription
}

func (s *reentrant) Deliver(m *Message, d Delivery) error {
	if s.sub != nil {
		s.r.Unsubscribe(s.sub)
		s.sub = nil
		return nil
	}
	sub, err := s.r.Subscribe("re/+", s, SubOptions{})
	s.sub = sub
	return err
}

func TestRouterReentrantDeliver(t *testing.T) {
	r := NewRouter(RouterOptions{})
	s := &reentrant{r: r}
	mustSubscribe(t, r, "re/#", s, SubOptions{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 4 {
			publish(r, "re/x", 0)
		}
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Publish deadlocked with a Deliver that subscribes")
	}
	if r.Len() != 1 {
		t.Fatalf("Len = %d, want 1", r.Len())
	}
}

func TestRouterConcurrent(t *testing.T) {
	r := NewRouter(RouterOptions{Retainer: retainerFunc(func(context.Context, *Message) error { return nil })})
	stable := &recorder{}
	mustSubscribe(t, r, "c/#", stable, SubOptions{QoS: 1})
	const workers, rounds = 4, 300
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(2)
		go func() {
			defer wg.Done()
			s := &recorder{}
			var subs []*Subscription
			for i := range rounds {
				f := fmt.Sprintf("c/%d/+", i%7)
				if i%4 == 0 {
					f = fmt.Sprintf("$share/g%d/c/#", w%2)
				}
				sub, err := r.Subscribe(f, s, SubOptions{QoS: byte(i % 3)})
				if err != nil {
					t.Error(err)
					return
				}
				subs = append(subs, sub)
				if i%2 == 1 {
					r.Unsubscribe(subs[0])
					subs = subs[1:]
				}
			}
			for _, sub := range subs {
				r.Unsubscribe(sub)
			}
		}()
		go func() {
			defer wg.Done()
			for i := range rounds {
				res := r.Publish(context.Background(), &Message{
					Topic:  fmt.Sprintf("c/%d/%d", i%7, w),
					QoS:    1,
					Retain: i%10 == 0,
					Origin: Origin{Protocol: ProtocolAMQP, Client: fmt.Sprint(w)},
				})
				if res.Matched < 1 || res.Err != nil {
					t.Errorf("concurrent publish: %+v", res)
					return
				}
			}
		}()
	}
	wg.Wait()
	if stable.count() != workers*rounds {
		t.Fatalf("stable subscriber got %d, want %d", stable.count(), workers*rounds)
	}
	if r.Len() != 1 {
		t.Fatalf("Len = %d, want 1", r.Len())
	}
	if n := r.root.kids.len(); n != 1 {
		t.Fatalf("root has %d children, want only c", n)
	}
}

// subscriberFunc is an adapter of the kind a front-end might write. Func
// values are not comparable, so the router cannot tell two of them apart.
type subscriberFunc func(m *Message, d Delivery) error

func (f subscriberFunc) Deliver(m *Message, d Delivery) error { return f(m, d) }

// TestRouterRefusesUncomparableSubscriber: the router merges a subscriber's
// overlapping subscriptions with ==, which panics on uncomparable dynamic
// types. Found by this test: Publish panicked on the publisher's goroutine;
// Subscribe now refuses such a subscriber (and a nil one) up front.
func TestRouterRefusesUncomparableSubscriber(t *testing.T) {
	r := NewRouter(RouterOptions{})
	f := subscriberFunc(func(*Message, Delivery) error { return nil })
	if _, err := r.Subscribe("t", f, SubOptions{}); err == nil {
		t.Fatal("Subscribe accepted an uncomparable subscriber")
	}
	if _, err := r.Subscribe("t", nil, SubOptions{}); err == nil {
		t.Fatal("Subscribe accepted a nil subscriber")
	}
	if r.Len() != 0 {
		t.Fatalf("Len = %d, want 0", r.Len())
	}
	mustSubscribe(t, r, "t", &recorder{}, SubOptions{})
	mustSubscribe(t, r, "#", &recorder{}, SubOptions{})
	if res := publish(r, "t", 0); res.Matched != 2 {
		t.Fatalf("Matched = %d, want 2", res.Matched)
	}
}

// TestRouterPoolHoldsNoSubscriptions: the pooled match slice must not keep
// subscriptions (and their subscribers) alive after Publish returns. It
// used to clear only the deduplicated prefix. sync.Pool may hand back a
// fresh slice, so this catches a regression most runs, not every run.
func TestRouterPoolHoldsNoSubscriptions(t *testing.T) {
	r := NewRouter(RouterOptions{})
	s := &recorder{}
	for _, f := range []string{"a/b", "a/+", "a/#", "+/b", "#"} {
		mustSubscribe(t, r, f, s, SubOptions{})
	}
	mustSubscribe(t, r, "a/b", &recorder{}, SubOptions{SkipOrigin: ProtocolAMQP})
	r.Publish(context.Background(), &Message{Topic: "a/b", Origin: Origin{Protocol: ProtocolAMQP}})
	mp := matchPool.Get().(*[]*Subscription)
	defer matchPool.Put(mp)
	for i, x := range (*mp)[:cap(*mp)] {
		if x != nil {
			t.Fatalf("pooled slice keeps a subscription at %d (%q)", i, x.Filter)
		}
	}
}
