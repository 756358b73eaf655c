package gateway

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/tolsey/tolsey/core/coretest"
)

// GET /api/v1/stats counts what real clients did: connections by
// protocol, messages in and delivered (MQTT to MQTT, which mochi delivers
// alone, included), retained count and bytes, queues and their messages,
// the store's health.
func TestAdminStats(t *testing.T) {
	g := startGateway(t, "--amqp.listen=127.0.0.1:0", `--queues.declare=[{"name":"orders","subscriptions":["orders/#"]}]`)
	sub := mqttClient(t, g, "sub")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := sub.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "a/#", QoS: 1}}}); err != nil {
		t.Fatal(err)
	}
	pub := mqttClient(t, g, "pub")
	for _, p := range []*paho.Publish{
		{Topic: "a/1", QoS: 1, Payload: []byte("x")},
		{Topic: "a/2", QoS: 1, Payload: []byte("hello"), Retain: true},
		{Topic: "orders/1", QoS: 1, Payload: []byte("o")},
	} {
		if _, err := pub.Publish(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	var s statsJSON
	coretest.Eventually(t, "two deliveries counted", 5*time.Second, func() bool {
		s = decode[statsJSON](t, mustCall(t, g, "GET", "/api/v1/stats", http.StatusOK))
		return s.Messages.Delivered >= 2
	})
	if !s.Ready || s.Node == "" || s.Version == "" || s.UptimeSeconds <= 0 || s.Time.IsZero() {
		t.Errorf("identity: %+v", s)
	}
	if s.Connections["mqtt"] != 2 || s.Connections["amqp"] != 0 {
		t.Errorf("connections %v, want mqtt 2, amqp 0", s.Connections)
	}
	if s.Messages.Received != 3 || s.Messages.Delivered != 2 {
		t.Errorf("messages %+v, want 3 received, 2 delivered", s.Messages)
	}
	if s.Retained.Count != 1 || s.Retained.Bytes < int64(len("hello")) {
		t.Errorf("retained %+v, want a/2's", s.Retained)
	}
	if s.Queues.Count != 1 || s.Queues.Messages != 1 {
		t.Errorf("queues %+v, want orders with one message", s.Queues)
	}
	if s.Store.Backend != "embedded" || !s.Store.Ready || s.Store.Error != "" {
		t.Errorf("store %+v", s.Store)
	}
	if s.Bridges == nil || len(s.Bridges) != 0 || s.Cluster.Enabled {
		t.Errorf("bridges %v, cluster %+v: none configured", s.Bridges, s.Cluster)
	}
}

// The console's page and assets are served at / without a token (they
// hold no data); /api/v1/stats, which they call, still needs one; a path
// under /console/ that climbs out is the console's 404, not an API path
// past the token check.
func TestConsoleServedBesideTheTokenCheck(t *testing.T) {
	token, entry := newToken(t)
	g := startGateway(t, "--admin.tokens="+entry)
	resp, body := adminCall(t, g, "GET", "/", "", "")
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `<script type="module" src="/console/js/app.js">`) {
		t.Fatalf("GET /: %d %.200s", resp.StatusCode, body)
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") {
		t.Errorf("GET /: Content-Security-Policy %q", csp)
	}
	if resp, _ := adminCall(t, g, "GET", "/console/js/app.js", "", ""); resp.StatusCode != http.StatusOK ||
		!strings.HasPrefix(resp.Header.Get("Content-Type"), "text/javascript") {
		t.Errorf("app.js: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if resp, _ := adminCall(t, g, "GET", "/api/v1/stats", "", ""); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET /api/v1/stats without a token: %d, want 401", resp.StatusCode)
	}
	if resp, _ := adminCall(t, g, "GET", "/api/v1/stats", token, ""); resp.StatusCode != http.StatusOK {
		t.Errorf("GET /api/v1/stats with the token: %d, want 200", resp.StatusCode)
	}
	for _, p := range []string{"/console/../api/v1/stats", "/console/%2e%2e/api/v1/stats", "/console/nothing.js"} {
		if resp, body := adminCall(t, g, "GET", p, "", ""); resp.StatusCode != http.StatusNotFound || strings.Contains(body, `"node"`) {
			t.Errorf("GET %s: %d %.100s, want the console's 404", p, resp.StatusCode, body)
		}
	}
	// Any other method on / is the API's, behind the token.
	if resp, _ := adminCall(t, g, "POST", "/", "", ""); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("POST / without a token: %d, want 401", resp.StatusCode)
	}
}
