package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
)

// TestAdminRetainedListWithoutPayloads: a listing or a count asks for no
// payloads (payload=false), and a page is bounded (limit at most 10,000).
// The console listed 1,000 and counted 10,000 messages with payloads: 20
// retained messages of 1 MB made a 120 MB answer. Found by review.
func TestAdminRetainedListWithoutPayloads(t *testing.T) {
	g := New(testConfig(t), quiet())
	if err := g.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer g.Stop(context.Background())
	big := strings.Repeat("x", 100_000)
	if resp, body := adminCall(t, g, "POST", "/api/v1/publish", "", `{"topic": "r/big", "payload": "`+big+`", "retain": true}`); resp.StatusCode != http.StatusOK {
		t.Fatalf("publish: %d %s", resp.StatusCode, body)
	}
	resp, body := adminCall(t, g, "GET", "/api/v1/retained?filter=r/%23&payload=false", "", "")
	var list []map[string]any
	if resp.StatusCode != http.StatusOK || json.Unmarshal([]byte(body), &list) != nil || len(list) != 1 {
		t.Fatalf("list: %d %s", resp.StatusCode, body)
	}
	if _, has := list[0]["payload"]; has || len(body) > 1000 || list[0]["size"] != float64(len(big)) {
		t.Fatalf("payload=false answered %d bytes: %.200s", len(body), body)
	}
	if resp, body := adminCall(t, g, "GET", "/api/v1/retained?filter=r/big&limit=1", "", ""); resp.StatusCode != http.StatusOK || !strings.Contains(body, big) {
		t.Fatalf("one message with its payload: %d, %d bytes", resp.StatusCode, len(body))
	}
	if resp, _ := adminCall(t, g, "GET", "/api/v1/retained?filter=%23&limit=10001", "", ""); resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("limit over 10,000: %d, want 400", resp.StatusCode)
	}
}

// TestAdminRetainedPaging: the retained list is in topic order and paged
// by ?after=TOPIC, like every list of the admin API (docs/admin-api.md,
// "Conventions"): following the pages gives every topic exactly once, in
// order. The list had no after and the store's order, so what lay beyond
// the first page could not be listed. Found by review.
func TestAdminRetainedPaging(t *testing.T) {
	g := New(testConfig(t), quiet())
	if err := g.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer g.Stop(context.Background())
	var want []string
	for i := range 23 {
		// Published in an order that is neither the topics' nor its reverse.
		topic := fmt.Sprintf("p/%02d/x", (i*7)%23)
		want = append(want, topic)
		publishRetained(t, g, topic)
	}
	publishRetained(t, g, "other")
	slices.Sort(want)
	var got []string
	after := ""
	for pages := 0; ; pages++ {
		if pages > 10 {
			t.Fatalf("more than 10 pages of 5: %v", got)
		}
		page := decode[[]retainedJSON](t, mustCall(t, g, "GET", "/api/v1/retained?filter=p/%23&limit=5&after="+url.QueryEscape(after), http.StatusOK))
		if len(page) > 5 {
			t.Fatalf("a page of %d, limit 5", len(page))
		}
		if len(page) == 0 {
			break
		}
		for _, m := range page {
			got = append(got, m.Topic)
		}
		after = page[len(page)-1].Topic
	}
	if !slices.Equal(got, want) {
		t.Errorf("pages gave\n%v\nwant\n%v", got, want)
	}
}

func publishRetained(t *testing.T, g *Gateway, topic string) {
	t.Helper()
	if code, body := call(t, g, "POST", "/api/v1/publish", fmt.Sprintf(`{"topic": %q, "payload": "p", "retain": true}`, topic)); code != http.StatusOK {
		t.Fatalf("publish %s: %d %s", topic, code, body)
	}
}
