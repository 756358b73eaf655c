package cluster

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/tolsey/tolsey/core"
	"github.com/tolsey/tolsey/core/coretest"
)

// smallNATS is a nats-server whose max_payload is 4 KiB.
func smallNATS(t *testing.T) *natsserver.Server {
	t.Helper()
	s, err := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true, MaxPayload: 4096})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return s
}

// startInterestNode is a cluster member with its own router and a short
// interest period.
func startInterestNode(t *testing.T, s *natsserver.Server, node string) (*Cluster, *core.Router) {
	t.Helper()
	r := core.NewRouter(core.RouterOptions{Node: node})
	return startWith(t, Options{Conn: natsConn(t, s), Router: r, Node: node, InterestPeriod: time.Second}), r
}

type countSub struct {
	mu     sync.Mutex
	topics map[string]int
}

func (s *countSub) Deliver(m *core.Message, _ core.Delivery) error {
	s.mu.Lock()
	s.topics[m.Topic]++
	s.mu.Unlock()
	return nil
}

func (s *countSub) count(topic string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.topics[topic]
}

// filler makes filters long enough that 300 of them need several 4 KiB
// parts.
const filler = "0123456789abcdefghijklmnopqrstuvwxyz"

func manyFilters(set string) []string {
	out := make([]string, 300)
	for i := range out {
		out[i] = fmt.Sprintf("%s/%d/%s/#", set, i, filler)
	}
	return out
}

func topicOf(set string, i int) string { return fmt.Sprintf("%s/%d/%s/x", set, i, filler) }

// TestInterestSummaryInParts: b's summary (300 filters, ~14 KB) is larger
// than the server's 4 KiB max_payload; it is sent in parts that a puts
// together, so that a sends b the messages b's filters match and no other
// (before parts, b announced "#" and a sent it everything). When b's
// filters change, the new summary replaces the old one whole. A gateway
// of the version before parts sees "=#" each period (what it saw before)
// and ignores the parts.
func TestInterestSummaryInParts(t *testing.T) {
	s := smallNATS(t)
	raw := natsConn(t, s)
	type rawMsg struct {
		data   string
		header string
	}
	var rmu sync.Mutex
	var seen []rawMsg
	if _, err := raw.Subscribe("gw.interest.b", func(m *nats.Msg) {
		rmu.Lock()
		seen = append(seen, rawMsg{string(m.Data), m.Header.Get(partsHeader)})
		rmu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	a, ra := startInterestNode(t, s, "a")
	_, rb := startInterestNode(t, s, "b")
	got := &countSub{topics: map[string]int{}}
	var subs []*core.Subscription
	for _, f := range manyFilters("p") {
		sub, err := rb.Subscribe(f, got, core.SubOptions{})
		if err != nil {
			t.Fatal(err)
		}
		subs = append(subs, sub)
	}
	knows := func(set string, want bool) func() bool {
		return func() bool {
			for i := range 300 {
				if a.in_.index.Wants(topicOf(set, i), "") != want {
					return false
				}
			}
			return true
		}
	}
	// Each filter is announced at once ('+'); what is checked is the
	// first full summary a takes after them.
	t0 := time.Now()
	heard := func() time.Time {
		a.in_.mu.Lock()
		defer a.in_.mu.Unlock()
		if p := a.in_.peers["b"]; p != nil {
			return p.heard
		}
		return time.Time{}
	}
	coretest.Eventually(t, "a took a full summary of b's 300 filters and filters", 15*time.Second, func() bool {
		return a.Stats().Filtering && heard().After(t0) && knows("p", true)()
	})
	if a.wanted("other/x") {
		t.Fatal(`a would send b "other/x": b's summary was taken as "#"`)
	}

	// Forwarded: only what b's filters match.
	before := a.Stats()
	for i := range 5 {
		ra.Publish(context.Background(), &core.Message{Topic: "other/x", Payload: []byte(fmt.Sprint(i)), Origin: core.Origin{Node: "a"}})
	}
	ra.Publish(context.Background(), &core.Message{Topic: topicOf("p", 299), Payload: []byte("fence"), Origin: core.Origin{Node: "a"}})
	coretest.Eventually(t, "b got a's message on its filter", 15*time.Second, func() bool { return got.count(topicOf("p", 299)) == 1 })
	after := a.Stats()
	if d := after.Out - before.Out; d != 1 {
		t.Errorf("a sent %d messages to NATS, want 1 (the one b's filters match)", d)
	}
	if d := after.Skipped - before.Skipped; d != 5 {
		t.Errorf("a skipped %d messages, want 5", d)
	}

	// Changed: p/… replaced by q/…; nothing of p stays known.
	for _, f := range manyFilters("q") {
		if _, err := rb.Subscribe(f, got, core.SubOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, sub := range subs {
		rb.Unsubscribe(sub)
	}
	coretest.Eventually(t, "a knows q/… and no longer p/…", 30*time.Second, func() bool {
		return knows("q", true)() && knows("p", false)()
	})

	rmu.Lock()
	defer rmu.Unlock()
	var compat, parts, most int
	gens := map[string]int{}
	for _, m := range seen {
		switch {
		case m.data == "=#" && m.header == "parts":
			compat++
		case strings.HasPrefix(m.data, "*"):
			parts++
			head, _, _ := strings.Cut(m.data[1:], "\x00")
			gen, _, _ := strings.Cut(head, ":")
			gens[gen]++
			most = max(most, gens[gen])
		case strings.HasPrefix(m.data, "=") && len(m.data) > 4096:
			t.Errorf("a summary of %d bytes in one message", len(m.data))
		}
	}
	t.Logf("b sent %d parts in %d summaries, the largest in %d parts; %d \"=#\" for older gateways", parts, len(gens), most, compat)
	if most < 3 {
		t.Errorf("the largest summary took %d parts, want 3 or more", most)
	}
	if compat != len(gens) {
		t.Errorf("%d \"=#\" with the header for %d split summaries", compat, len(gens))
	}
}

// TestInterestPartsIncompleteDropped: parts of a summary that never
// complete (one lost) are not applied, and do not mix into the next
// summary; a part that does not begin a summary is ignored; the complete
// summary replaces the one before whole.
func TestInterestPartsIncompleteDropped(t *testing.T) {
	s := runNATS(t)
	a, _ := startInterestNode(t, s, "a")
	raw := natsConn(t, s)
	send := func(data string) {
		if err := raw.Publish("gw.interest.x", []byte(data)); err != nil {
			t.Fatal(err)
		}
	}
	send("=old/#")
	coretest.Eventually(t, "a knows x's summary", 10*time.Second, func() bool { return a.in_.index.Wants("old/1", "") })
	send("*7:0:3\x00stale/a/#")
	send("*7:1:3\x00stale/b/#") // part 2 of 3 lost
	send("*9:1:2\x00stray/#")   // no part 0 of 9
	send("*8:0:2\x00new/a/#")
	send("*8:1:2\x00new/b/#")
	send("+fence/#")
	coretest.Eventually(t, "a took summary 8", 10*time.Second, func() bool { return a.in_.index.Wants("fence/1", "") })
	for topic, want := range map[string]bool{"new/a/1": true, "new/b/1": true, "old/1": false, "stale/a/1": false, "stale/b/1": false, "stray/1": false} {
		if got := a.in_.index.Wants(topic, ""); got != want {
			t.Errorf("a wants %s for x: %v, want %v", topic, got, want)
		}
	}
}
