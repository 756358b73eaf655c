// Package retaintest is the conformance suite every retain.Store backend
// passes: the semantics of docs/architecture.md, decision 1 (replace, empty
// payload deletes, expiry), the MQTT filter grammar of Match and Delete,
// Stats, Limits, concurrency and copy safety. Backends call Run from their
// own tests; the suite knows no backend.
package retaintest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tolsey/tolsey/core"
	"github.com/tolsey/tolsey/retain"
)

// Open returns a new, empty store with the given limits. It registers its own
// cleanup (closing the store); Close must be safe to call twice.
type Open func(t *testing.T, limits retain.Limits) retain.Store

// Run runs the whole suite, each case on a store of its own.
func Run(t *testing.T, open Open) {
	cases := []struct {
		name string
		fn   func(*testing.T, Open)
	}{
		{"SetGet", testSetGet},
		{"Replace", testReplace},
		{"EmptyPayloadDeletes", testEmptyPayloadDeletes},
		{"InvalidTopic", testInvalid},
		{"Expiry", testExpiry},
		{"ExpiredOnArrival", testExpiredOnArrival},
		{"Match", testMatch},
		{"MatchStopsEarly", testMatchStopsEarly},
		{"MatchTopics", testMatchTopics},
		{"Delete", testDelete},
		{"Stats", testStats},
		{"LimitPayload", testLimitPayload},
		{"LimitMessages", testLimitMessages},
		{"ConcurrentSetsOneTopic", testConcurrentOneTopic},
		{"ConcurrentSetsManyTopics", testConcurrentMany},
		{"CopiesAreSafe", testCopies},
		{"Closed", testClosed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.fn(t, open) })
	}
}

// Ctx is a context bounded for one test step.
func Ctx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// Msg is a retained message with every field set.
func Msg(topic, payload string) *core.Message {
	return &core.Message{
		Topic:           topic,
		Payload:         []byte(payload),
		QoS:             1,
		Retain:          true,
		ContentType:     "text/plain",
		CorrelationData: []byte("corr"),
		ResponseTopic:   "reply/" + topic,
		UserProperties:  []core.UserProperty{{Key: "k", Value: "v1"}, {Key: "k", Value: "v2"}},
		PayloadFormat:   1,
		Created:         time.Now().Round(0),
		Origin:          core.Origin{Protocol: core.ProtocolMQTT, Node: "n1", Client: "c1"},
	}
}

// Equal fails t unless got carries every field of want (times compared as
// instants).
func Equal(t testing.TB, want, got *core.Message) {
	t.Helper()
	if got == nil {
		t.Fatalf("got nil, want %q", want.Topic)
	}
	if !want.Created.Equal(got.Created) || !want.Expiry.Equal(got.Expiry) {
		t.Fatalf("%s: times want %v/%v got %v/%v", want.Topic, want.Created, want.Expiry, got.Created, got.Expiry)
	}
	w, g := *want, *got
	w.Created, w.Expiry, g.Created, g.Expiry = time.Time{}, time.Time{}, time.Time{}, time.Time{}
	if !reflect.DeepEqual(w, g) {
		t.Fatalf("message differs:\nwant %+v\ngot  %+v", w, g)
	}
}

// Eventually polls cond until it holds or 10 s pass.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Set sets m or fails t.
func Set(t testing.TB, s retain.Store, m *core.Message) {
	t.Helper()
	if err := s.Set(Ctx(t), m); err != nil {
		t.Fatalf("Set %q: %v", m.Topic, err)
	}
}

// Get gets topic or fails t.
func Get(t testing.TB, s retain.Store, topic string) *core.Message {
	t.Helper()
	m, err := s.Get(Ctx(t), topic)
	if err != nil {
		t.Fatalf("Get %q: %v", topic, err)
	}
	return m
}

// Topics returns the sorted topics matching filter, or fails t.
func Topics(t testing.TB, s retain.Store, filter string) []string {
	t.Helper()
	var out []string
	err := s.Match(Ctx(t), filter, func(m *core.Message) bool {
		out = append(out, m.Topic)
		return true
	})
	if err != nil {
		t.Fatalf("Match %q: %v", filter, err)
	}
	slices.Sort(out)
	return out
}

func testSetGet(t *testing.T, open Open) {
	s := open(t, retain.Limits{})
	if m := Get(t, s, "none"); m != nil {
		t.Fatalf("Get of an unset topic: %+v", m)
	}
	m := Msg("a/b", "hello")
	m.Expiry = time.Now().Add(time.Hour).Round(0)
	Set(t, s, m)
	Equal(t, m, Get(t, s, "a/b"))
	bare := &core.Message{Topic: "bare", Payload: []byte{0}}
	Set(t, s, bare)
	Equal(t, bare, Get(t, s, "bare"))
}

func testReplace(t *testing.T, open Open) {
	s := open(t, retain.Limits{})
	Set(t, s, Msg("a", "1"))
	m2 := Msg("a", "22")
	m2.QoS = 0
	Set(t, s, m2)
	Equal(t, m2, Get(t, s, "a"))
	if st := s.Stats(); st.Count != 1 || st.Bytes != int64(m2.Size()) {
		t.Fatalf("stats %+v, want 1 message of %d bytes", st, m2.Size())
	}
}

func testEmptyPayloadDeletes(t *testing.T, open Open) {
	s := open(t, retain.Limits{})
	Set(t, s, Msg("a", "1"))
	Set(t, s, &core.Message{Topic: "a"})
	if m := Get(t, s, "a"); m != nil {
		t.Fatalf("empty payload did not delete: %+v", m)
	}
	if got := Topics(t, s, "#"); len(got) != 0 {
		t.Fatalf("Match after delete: %v", got)
	}
	Set(t, s, &core.Message{Topic: "never/set", Payload: []byte{}})
	if st := s.Stats(); st.Count != 0 || st.Bytes != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func testInvalid(t *testing.T, open Open) {
	s := open(t, retain.Limits{})
	for _, topic := range []string{"", "a/+", "a/#"} {
		if err := s.Set(Ctx(t), &core.Message{Topic: topic, Payload: []byte("x")}); err == nil {
			t.Errorf("Set(%q) accepted", topic)
		}
	}
	for _, f := range []string{"", "a/#/b", "a+"} {
		if err := s.Match(Ctx(t), f, func(*core.Message) bool { return true }); err == nil {
			t.Errorf("Match(%q) accepted", f)
		}
	}
}

// checkUnexpired fails when m had expired before the call that returned it
// began: a store may race the clock by a hair, never by a whole call.
func checkUnexpired(t *testing.T, m *core.Message, before time.Time) {
	t.Helper()
	if m != nil && m.Expired(before) {
		t.Fatalf("%q returned after its expiry %v (call began %v)", m.Topic, m.Expiry, before)
	}
}

func testExpiry(t *testing.T, open Open) {
	s := open(t, retain.Limits{})
	short := Msg("e/short", "x")
	short.Expiry = time.Now().Add(300 * time.Millisecond)
	Set(t, s, short)
	Set(t, s, Msg("e/forever", "y"))
	gone := false
	Eventually(t, "e/short to expire", func() bool {
		before := time.Now()
		m := Get(t, s, "e/short")
		checkUnexpired(t, m, before)
		before = time.Now()
		n := 0
		if err := s.Match(Ctx(t), "e/#", func(m *core.Message) bool {
			checkUnexpired(t, m, before)
			n++
			return true
		}); err != nil {
			t.Fatal(err)
		}
		gone = m == nil && n == 1
		return gone
	})
	// Never returned again, and eventually not counted.
	Eventually(t, "expired message to leave Stats", func() bool {
		if Get(t, s, "e/short") != nil {
			t.Fatal("expired message came back")
		}
		return s.Stats().Count == 1
	})
	if got := Topics(t, s, "#"); !slices.Equal(got, []string{"e/forever"}) {
		t.Fatalf("Match: %v", got)
	}
}

func testExpiredOnArrival(t *testing.T, open Open) {
	s := open(t, retain.Limits{})
	Set(t, s, Msg("a", "old"))
	m := Msg("a", "late")
	m.Expiry = time.Now().Add(-time.Second)
	Set(t, s, m)
	if got := Get(t, s, "a"); got != nil {
		t.Fatalf("message expired on arrival was stored: %+v", got)
	}
	Eventually(t, "stats to drop it", func() bool { return s.Stats().Count == 0 })
}

var matchTopics = []string{"a", "a/b", "a/b/c", "a/c", "b/b", "$SYS/x", "$SYS/y/z", "/lead", "a//empty"}

var matchCases = []struct {
	filter string
	want   []string
}{
	{"#", []string{"/lead", "a", "a//empty", "a/b", "a/b/c", "a/c", "b/b"}},
	{"+", []string{"a"}},
	{"a/#", []string{"a", "a//empty", "a/b", "a/b/c", "a/c"}},
	{"a/+", []string{"a/b", "a/c"}},
	{"+/b", []string{"a/b", "b/b"}},
	{"+/+", []string{"/lead", "a/b", "a/c", "b/b"}},
	{"+/x", nil},
	{"$SYS/#", []string{"$SYS/x", "$SYS/y/z"}},
	{"$SYS/+", []string{"$SYS/x"}},
	{"+/+/+", []string{"a//empty", "a/b/c"}},
	{"a/b", []string{"a/b"}},
	{"a/b/c/#", []string{"a/b/c"}},
	{"/+", []string{"/lead"}},
	{"a/+/empty", []string{"a//empty"}},
	{"nothing/#", nil},
}

func testMatch(t *testing.T, open Open) {
	s := open(t, retain.Limits{})
	for _, topic := range matchTopics {
		Set(t, s, Msg(topic, "p:"+topic))
	}
	for _, c := range matchCases {
		got := Topics(t, s, c.filter)
		if !slices.Equal(got, c.want) {
			t.Errorf("Match(%q) = %q, want %q", c.filter, got, c.want)
		}
	}
	// Payloads belong to their topics.
	err := s.Match(Ctx(t), "#", func(m *core.Message) bool {
		if string(m.Payload) != "p:"+m.Topic {
			t.Errorf("%q carries %q", m.Topic, m.Payload)
		}
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
}

// testMatchTopics: a store's topic listing (retain.TopicLister, which
// every store here implements) lists what Match hands over, expired
// messages left out, and stops when fn says so.
func testMatchTopics(t *testing.T, open Open) {
	s := open(t, retain.Limits{})
	tl, ok := s.(retain.TopicLister)
	if !ok {
		t.Fatalf("%T does not list topics (retain.TopicLister)", s)
	}
	for _, topic := range matchTopics {
		Set(t, s, Msg(topic, "p:"+topic))
	}
	gone := Msg("expired/x", "e")
	gone.Expiry = time.Now().Add(100 * time.Millisecond)
	Set(t, s, gone)
	Eventually(t, "expired/x to expire", func() bool { return Get(t, s, "expired/x") == nil })
	for _, c := range append(matchCases, struct {
		filter string
		want   []string
	}{"expired/#", nil}) {
		var got []string
		if err := tl.MatchTopics(Ctx(t), c.filter, func(topic string) bool { got = append(got, topic); return true }); err != nil {
			t.Fatalf("MatchTopics %q: %v", c.filter, err)
		}
		slices.Sort(got)
		if !slices.Equal(got, c.want) || !slices.Equal(got, Topics(t, s, c.filter)) {
			t.Errorf("MatchTopics(%q) = %q, want %q (as Match)", c.filter, got, c.want)
		}
	}
	calls := 0
	if err := tl.MatchTopics(Ctx(t), "#", func(string) bool { calls++; return false }); err != nil {
		t.Fatal(err)
	}
	if calls != 1 {
		t.Fatalf("fn called %d times after returning false", calls)
	}
}

func testMatchStopsEarly(t *testing.T, open Open) {
	s := open(t, retain.Limits{})
	for i := range 50 {
		Set(t, s, Msg(fmt.Sprintf("s/%d", i), "x"))
	}
	calls := 0
	if err := s.Match(Ctx(t), "s/+", func(*core.Message) bool { calls++; return false }); err != nil {
		t.Fatal(err)
	}
	if calls != 1 {
		t.Fatalf("fn called %d times after returning false", calls)
	}
}

func testDelete(t *testing.T, open Open) {
	s := open(t, retain.Limits{})
	for _, topic := range matchTopics {
		Set(t, s, Msg(topic, "x"))
	}
	del := func(filter string, want int) {
		t.Helper()
		n, err := s.Delete(Ctx(t), filter)
		if err != nil || n != want {
			t.Fatalf("Delete(%q) = %d, %v; want %d", filter, n, err, want)
		}
	}
	del("a/b", 1)
	del("a/b", 0)
	del("missing", 0)
	del("a/#", 4) // a, a/c, a/b/c, a//empty
	if got := Topics(t, s, "#"); !slices.Equal(got, []string{"/lead", "b/b"}) {
		t.Fatalf("after Delete(a/#): %v", got)
	}
	del("#", 2) // not $SYS [MQTT-4.7.2-1]
	if got := Topics(t, s, "$SYS/#"); len(got) != 2 {
		t.Fatalf("$SYS topics after Delete(#): %v", got)
	}
	del("$SYS/+", 1)
	if st := s.Stats(); st.Count != 1 {
		t.Fatalf("stats after deletes: %+v", st)
	}
	if n, err := s.Delete(Ctx(t), "a/#/b"); err == nil {
		t.Fatalf("invalid filter deleted %d", n)
	}
}

func testStats(t *testing.T, open Open) {
	s := open(t, retain.Limits{})
	var want int64
	for i := range 10 {
		m := Msg(fmt.Sprintf("st/%d", i), string(bytes.Repeat([]byte("x"), i+1)))
		want += int64(m.Size())
		Set(t, s, m)
	}
	if st := s.Stats(); st.Count != 10 || st.Bytes != want {
		t.Fatalf("stats %+v, want 10 and %d", st, want)
	}
	if _, err := s.Delete(Ctx(t), "st/#"); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st != (retain.Stats{}) {
		t.Fatalf("stats after delete %+v", st)
	}
}

func testLimitPayload(t *testing.T, open Open) {
	s := open(t, retain.Limits{MaxPayload: 4})
	Set(t, s, Msg("a", "1234"))
	err := s.Set(Ctx(t), Msg("a", "12345"))
	if !errors.Is(err, retain.ErrQuotaExceeded) {
		t.Fatalf("over MaxPayload: %v", err)
	}
	if m := Get(t, s, "a"); m == nil || string(m.Payload) != "1234" {
		t.Fatalf("refused Set changed the store: %+v", m)
	}
}

func testLimitMessages(t *testing.T, open Open) {
	s := open(t, retain.Limits{MaxMessages: 2})
	Set(t, s, Msg("a", "1"))
	Set(t, s, Msg("b", "1"))
	if err := s.Set(Ctx(t), Msg("c", "1")); !errors.Is(err, retain.ErrQuotaExceeded) {
		t.Fatalf("over MaxMessages: %v", err)
	}
	if Get(t, s, "c") != nil || s.Stats().Count != 2 {
		t.Fatal("refused Set stored something")
	}
	Set(t, s, Msg("a", "2")) // replacing at the limit is allowed
	Set(t, s, &core.Message{Topic: "a"})
	Set(t, s, Msg("c", "1"))
	if n, err := s.Delete(Ctx(t), "#"); err != nil || n != 2 {
		t.Fatalf("Delete at limit: %d %v", n, err)
	}
}

func testConcurrentOneTopic(t *testing.T, open Open) {
	s := open(t, retain.Limits{MaxMessages: 1})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 10 {
				m := Msg("one", fmt.Sprintf("%d-%d", g, i))
				if err := s.Set(Ctx(t), m); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	got := Get(t, s, "one")
	var matched []*core.Message
	if err := s.Match(Ctx(t), "#", func(m *core.Message) bool { matched = append(matched, m); return true }); err != nil {
		t.Fatal(err)
	}
	if len(matched) != 1 || got == nil || !bytes.Equal(matched[0].Payload, got.Payload) {
		t.Fatalf("Get %+v, Match %+v: want exactly one, the same", got, matched)
	}
	if st := s.Stats(); st.Count != 1 || st.Bytes != int64(got.Size()) {
		t.Fatalf("stats %+v, want 1 of %d bytes", st, got.Size())
	}
}

func testConcurrentMany(t *testing.T, open Open) {
	s := open(t, retain.Limits{})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 25 {
				if err := s.Set(Ctx(t), Msg(fmt.Sprintf("m/%d/%d", g, i), "x")); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if n := len(Topics(t, s, "m/#")); n != 200 {
		t.Fatalf("Match found %d of 200", n)
	}
	if st := s.Stats(); st.Count != 200 {
		t.Fatalf("stats %+v", st)
	}
}

func testCopies(t *testing.T, open Open) {
	s := open(t, retain.Limits{})
	m := Msg("c", "abc")
	Set(t, s, m)
	m.Payload[0] = 'X'
	m.CorrelationData[0] = 'X'
	m.UserProperties[0].Value = "X"
	want := Msg("c", "abc")
	want.Created = m.Created
	got := Get(t, s, "c")
	Equal(t, want, got)
	got.Payload[0] = 'Y'
	got.CorrelationData[0] = 'Y'
	got.UserProperties[0].Value = "Y"
	var kept *core.Message
	if err := s.Match(Ctx(t), "c", func(m *core.Message) bool { kept = m; return true }); err != nil {
		t.Fatal(err)
	}
	Equal(t, want, kept)
	kept.Payload[1] = 'Z'
	Equal(t, want, Get(t, s, "c"))
}

func testClosed(t *testing.T, open Open) {
	s := open(t, retain.Limits{})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Set(Ctx(t), Msg("a", "x")); !errors.Is(err, retain.ErrClosed) {
		t.Fatalf("Set after Close: %v", err)
	}
	if _, err := s.Get(Ctx(t), "a"); !errors.Is(err, retain.ErrClosed) {
		t.Fatalf("Get after Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}
