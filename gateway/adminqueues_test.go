package gateway

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/tolsey/tolsey/core/queue"
)

// call sends method path with body (none when "") to the admin API on a
// connection of its own (none left idle for goleak).
func call(t *testing.T, g *Gateway, method, path, body string) (int, string) {
	t.Helper()
	resp, b := adminCall(t, g, method, path, "", body)
	return resp.StatusCode, b
}

func startGateway(t *testing.T, args ...string) *Gateway {
	t.Helper()
	g := New(testConfig(t, args...), quiet())
	if err := g.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := g.Stop(ctx); err != nil {
			t.Error(err)
		}
	})
	return g
}

func decode[T any](t *testing.T, body string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	return v
}

// The queue API end to end over HTTP: a queue created with PUT, changed,
// refused bad bodies with the field named; MQTT publishes land in it
// according to its subscriptions and exception; GET, the list, browsing
// (which takes nothing) and /metrics show them; DELETE removes it all.
func TestAdminQueues(t *testing.T) {
	g := startGateway(t)
	if code, body := call(t, g, "GET", "/api/v1/queues", ""); code != 200 || strings.TrimSpace(body) != "[]" {
		t.Fatalf("empty list: %d %s", code, body)
	}
	code, body := call(t, g, "PUT", "/api/v1/queues/foxes",
		`{"subscriptions": ["animals/f*", "!animals/fox"], "access": "exclusive", "maxMessages": 10000, "maxBytes": 10485760}`)
	if code != http.StatusCreated {
		t.Fatalf("create: %d %s", code, body)
	}
	q := decode[queueJSON](t, body)
	if q.Name != "foxes" || q.Config.Access != queue.Exclusive || q.Config.MaxMessages != 10000 || q.Config.MaxBytes != 10<<20 || len(q.Config.Subscriptions) != 2 {
		t.Fatalf("created: %+v", q)
	}
	if code, body = call(t, g, "PUT", "/api/v1/queues/foxes",
		`{"name": "foxes", "subscriptions": ["animals/f*", "!animals/fox"], "maxMessages": 500, "ttl": "1h"}`); code != http.StatusOK {
		t.Fatalf("change: %d %s", code, body)
	}
	if q = decode[queueJSON](t, body); q.Config.MaxMessages != 500 || q.Config.Access != queue.NonExclusive || q.Config.TTL != queue.Duration(time.Hour) {
		t.Fatalf("changed: %+v", q.Config)
	}
	for _, tc := range []struct{ body, want string }{
		{`{"access": "shared"}`, "access"},
		{`{"subscriptions": ["a/#/b"]}`, "subscriptions[0]"},
		{`{"maxBytes": "lots"}`, "maxBytes"},
		{`{"name": "other"}`, "name"},
		{`{"deadLetter": "nowhere"}`, "deadLetter"},
		{`{"colour": "red"}`, "colour"},
		{`not json`, "JSON object"},
	} {
		code, body := call(t, g, "PUT", "/api/v1/queues/foxes", tc.body)
		e := decode[map[string]string](t, body)
		if code != http.StatusBadRequest || !strings.Contains(e["error"], tc.want) {
			t.Errorf("PUT %s: %d %s, want 400 naming %s", tc.body, code, body, tc.want)
		}
	}
	if code, body := call(t, g, "PUT", "/api/v1/queues/a+b", `{}`); code != http.StatusBadRequest {
		t.Errorf("a wildcard in the name: %d %s", code, body)
	}

	c := mqttClient(t, g, "pub")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	binary := []byte{0xff, 0x00, 0xfe}
	for _, p := range []struct {
		topic   string
		payload []byte
	}{{"animals/frog", []byte("ribbit")}, {"animals/fox", []byte("no")}, {"animals/fish", binary}, {"plants/fern", []byte("no")}} {
		// QoS 1: PUBACK comes once every matching queue stored it.
		if pr, err := c.Publish(ctx, &paho.Publish{Topic: p.topic, QoS: 1, Payload: p.payload,
			Properties: &paho.PublishProperties{ContentType: "x/y", User: paho.UserProperties{{Key: "k", Value: "v"}}}}); err != nil || pr.ReasonCode >= 0x80 {
			t.Fatalf("publish %s: %+v %v", p.topic, pr, err)
		}
	}

	code, body = call(t, g, "GET", "/api/v1/queues/foxes/messages", "")
	msgs := decode[[]queuedMessageJSON](t, body)
	if code != 200 || len(msgs) != 2 {
		t.Fatalf("browse: %d %s", code, body)
	}
	if m := msgs[0]; m.Topic != "animals/frog" || m.Payload != "ribbit" || m.Encoding != "" || m.ContentType != "x/y" ||
		m.UserProperties["k"] != "v" || m.QoS != 1 || m.Origin != "mqtt" || m.Created.IsZero() || m.ID == 0 {
		t.Errorf("message 0: %+v", m)
	}
	if m := msgs[1]; m.Topic != "animals/fish" || m.Encoding != "base64" || m.Payload != base64.StdEncoding.EncodeToString(binary) || m.ID <= msgs[0].ID {
		t.Errorf("message 1 (binary): %+v", m)
	}
	if code, body = call(t, g, "GET", "/api/v1/queues/foxes/messages?limit=1", ""); code != 200 || len(decode[[]queuedMessageJSON](t, body)) != 1 {
		t.Errorf("browse limit=1: %d %s", code, body)
	}
	for _, l := range []string{"0", "1001", "x"} {
		if code, body := call(t, g, "GET", "/api/v1/queues/foxes/messages?limit="+l, ""); code != http.StatusBadRequest {
			t.Errorf("browse limit=%s: %d %s", l, code, body)
		}
	}

	// Browsing took nothing.
	code, body = call(t, g, "GET", "/api/v1/queues/foxes", "")
	q = decode[queueJSON](t, body)
	if code != 200 || q.Messages != 2 || q.Counters.In != 2 || q.Counters.Out != 0 || q.Consumers != 0 || q.Bytes == 0 {
		t.Fatalf("after browsing: %d %+v", code, q)
	}
	code, body = call(t, g, "GET", "/api/v1/queues", "")
	if list := decode[[]queueJSON](t, body); code != 200 || len(list) != 1 || list[0].Name != "foxes" || list[0].Messages != 2 {
		t.Fatalf("list: %d %s", code, body)
	}
	_, metrics := call(t, g, "GET", "/metrics", "")
	for _, want := range []string{`tolsey_queue_messages{queue="foxes"} 2`, `tolsey_queue_consumers{queue="foxes"} 0`,
		`tolsey_queue_messages_total{event="in",queue="foxes"} 2`, `tolsey_queue_messages_total{event="refused",queue="foxes"} 0`,
		`tolsey_queue_bytes{queue="foxes"} `} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}

	if code, body := call(t, g, "DELETE", "/api/v1/queues/foxes", ""); code != http.StatusNoContent {
		t.Fatalf("delete: %d %s", code, body)
	}
	for _, r := range []struct{ method, path string }{
		{"DELETE", "/api/v1/queues/foxes"}, {"GET", "/api/v1/queues/foxes"}, {"GET", "/api/v1/queues/foxes/messages"},
	} {
		if code, body := call(t, g, r.method, r.path, ""); code != http.StatusNotFound || !strings.Contains(body, "foxes") {
			t.Errorf("%s %s after delete: %d %s", r.method, r.path, code, body)
		}
	}
	if _, metrics = call(t, g, "GET", "/metrics", ""); strings.Contains(metrics, `queue="foxes"`) {
		t.Error("/metrics still shows the deleted queue")
	}
	// Deleting the last queue's subscriptions took the engine off the router.
	if g.Router().Wants("animals/frog", "mqtt") {
		t.Error("the router still feeds queues with none subscribed")
	}
}

// A queue name may hold '/', written %2F in the path; the list pages by
// name.
func TestAdminQueueNamesAndPaging(t *testing.T) {
	g := startGateway(t, `--queues.declare=[{"name":"declared","subscriptions":["d/#"]}]`)
	if code, body := call(t, g, "PUT", "/api/v1/queues/orders%2Feu", ""); code != http.StatusCreated || !strings.Contains(body, `"name":"orders/eu"`) {
		t.Fatalf("create orders/eu: %d %s", code, body)
	}
	if code, body := call(t, g, "GET", "/api/v1/queues/orders%2Feu", ""); code != 200 {
		t.Fatalf("get orders/eu: %d %s", code, body)
	}
	_, body := call(t, g, "GET", "/api/v1/queues", "")
	list := decode[[]queueJSON](t, body)
	if len(list) != 2 || list[0].Name != "declared" || list[0].Config.Subscriptions[0] != "d/#" || list[1].Name != "orders/eu" {
		t.Fatalf("list: %s", body)
	}
	_, body = call(t, g, "GET", "/api/v1/queues?limit=1", "")
	if l := decode[[]queueJSON](t, body); len(l) != 1 || l[0].Name != "declared" {
		t.Fatalf("page 1: %s", body)
	}
	_, body = call(t, g, "GET", "/api/v1/queues?limit=1&after=declared", "")
	if l := decode[[]queueJSON](t, body); len(l) != 1 || l[0].Name != "orders/eu" {
		t.Fatalf("page 2: %s", body)
	}
	// A dead-letter queue named in a PUT must exist.
	if code, body := call(t, g, "PUT", "/api/v1/queues/work", `{"deadLetter": "orders/eu"}`); code != http.StatusCreated {
		t.Fatalf("deadLetter to an existing queue: %d %s", code, body)
	}
}

// Rates are over the last ten seconds of requests, or since the previous
// one when requests are rarer.
func TestQueueRates(t *testing.T) {
	e, err := queue.New(context.Background(), queue.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	q, err := e.Declare(context.Background(), queue.Config{Name: "r"})
	if err != nil {
		t.Fatal(err)
	}
	var r queueRates
	t0 := time.Unix(1000, 0)
	if got := r.rate(q, queue.Counters{In: 7}, t0); got != (ratesJSON{}) {
		t.Errorf("first: %+v", got)
	}
	if got := r.rate(q, queue.Counters{In: 17, Out: 5}, t0.Add(2*time.Second)); got != (ratesJSON{In: 5, Out: 2.5, Seconds: 2}) {
		t.Errorf("after 2 s: %+v", got)
	}
	// t0 is older than the window and so is t0+2s: the newest of those is
	// the reference.
	if got := r.rate(q, queue.Counters{In: 47, Out: 5}, t0.Add(12*time.Second)); got != (ratesJSON{In: 3, Out: 0, Seconds: 10}) {
		t.Errorf("after 12 s: %+v", got)
	}
	if got := r.rate(q, queue.Counters{In: 147, Out: 5}, t0.Add(112*time.Second)); got != (ratesJSON{In: 1, Seconds: 100}) {
		t.Errorf("after a long pause: %+v", got)
	}
	// Samples at t1, t1+5s, t1+11s: at t1+12s the newest sample at least
	// ten seconds old is t1's, so the rate spans 12 s, never less than the
	// window while the history is there.
	t1 := t0.Add(200 * time.Second)
	r.rate(q, queue.Counters{In: 0}, t1)
	r.rate(q, queue.Counters{In: 50}, t1.Add(5*time.Second))
	r.rate(q, queue.Counters{In: 110}, t1.Add(11*time.Second))
	if got := r.rate(q, queue.Counters{In: 120}, t1.Add(12*time.Second)); got != (ratesJSON{In: 10, Seconds: 12}) {
		t.Errorf("within the window: %+v", got)
	}
	r.keep(nil)
	if len(r.samples) != 0 {
		t.Error("keep(nil) kept samples")
	}
}

// A create beyond queues.maxQueues is refused with 409 naming the key; a
// change of an existing queue is not a create.
func TestAdminQueueLimit(t *testing.T) {
	g := startGateway(t, "--queues.maxQueues=1")
	if code, body := call(t, g, "PUT", "/api/v1/queues/a", ""); code != http.StatusCreated {
		t.Fatalf("first: %d %s", code, body)
	}
	if code, body := call(t, g, "PUT", "/api/v1/queues/b", ""); code != http.StatusConflict || !strings.Contains(body, "queues.maxQueues") {
		t.Fatalf("second: %d %s, want 409 naming queues.maxQueues", code, body)
	}
	if code, body := call(t, g, "PUT", "/api/v1/queues/a", `{"maxMessages": 3}`); code != http.StatusOK {
		t.Fatalf("change at the limit: %d %s", code, body)
	}
}

// TestAdminQueueBrowsePaging: browsing a queue is paged by ?after=ID (the
// id of the last message seen): following the pages gives every message
// exactly once, oldest first. Browsing had no after, so a queue of more
// than 1,000 messages could not be listed past the first 1,000. Found by
// review.
func TestAdminQueueBrowsePaging(t *testing.T) {
	g := startGateway(t)
	if code, body := call(t, g, "PUT", "/api/v1/queues/pages", `{"subscriptions": ["pg/#"]}`); code != http.StatusCreated {
		t.Fatalf("create: %d %s", code, body)
	}
	var want []string
	for i := range 8 {
		p := fmt.Sprint(i)
		want = append(want, p)
		if code, body := call(t, g, "POST", "/api/v1/publish", `{"topic": "pg/t", "qos": 1, "payload": "`+p+`"}`); code != http.StatusOK {
			t.Fatalf("publish: %d %s", code, body)
		}
	}
	var got []string
	after := ""
	for pages := 0; ; pages++ {
		if pages > 5 {
			t.Fatalf("more than 5 pages of 3: %v", got)
		}
		page := decode[[]queuedMessageJSON](t, mustCall(t, g, "GET", "/api/v1/queues/pages/messages?limit=3&after="+after, http.StatusOK))
		if len(page) == 0 {
			break
		}
		for _, m := range page {
			got = append(got, m.Payload)
		}
		after = fmt.Sprint(page[len(page)-1].ID)
	}
	if !slices.Equal(got, want) {
		t.Errorf("pages gave %v, want %v", got, want)
	}
	if code, body := call(t, g, "GET", "/api/v1/queues/pages/messages?after=x", ""); code != http.StatusBadRequest {
		t.Errorf("after=x: %d %s", code, body)
	}
}
