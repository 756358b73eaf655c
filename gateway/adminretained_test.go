package gateway

import (
	"context"
	"encoding/json"
	"net/http"
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
