package gateway

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/tolsey/tolsey/mqtt"
	"github.com/tolsey/tolsey/retain/redistest"
)

// TestAdminSessions: GET /api/v1/sessions lists an offline persistent
// session with its subscription and queued message; DELETE
// /api/v1/sessions/{clientId} removes it, from the store too (a gateway
// started again on the same data.dir does not bring it back); a second
// DELETE is a 404.
func TestAdminSessions(t *testing.T) {
	dir := t.TempDir()
	g := startGateway(t, "--data.dir="+dir)
	persistentSubscriber(t, g, "dev", "a/#")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	pub := mqttClient(t, g, "pub")
	if _, err := pub.Publish(ctx, &paho.Publish{Topic: "a/1", QoS: 1, Payload: []byte("m")}); err != nil {
		t.Fatal(err)
	}
	var list []mqtt.SessionInfo
	for _, s := range decode[[]mqtt.SessionInfo](t, mustCall(t, g, "GET", "/api/v1/sessions", http.StatusOK)) {
		if s.ClientID == "dev" {
			list = append(list, s)
		}
	}
	if len(list) != 1 || list[0].Connected || !list[0].Persistent || list[0].Queued != 1 ||
		strings.Join(list[0].Subscriptions, ",") != "a/#" || list[0].ExpirySeconds != 3600 {
		t.Fatalf("dev listed as %+v", list)
	}
	persistentSubscriber(t, g, "eve", "e/#")
	if page := decode[[]mqtt.SessionInfo](t, mustCall(t, g, "GET", "/api/v1/sessions?after=dev&limit=1", http.StatusOK)); len(page) != 1 || page[0].ClientID != "eve" {
		t.Fatalf("the page after dev: %+v", page)
	}
	// A prefix is applied by the API (the console's search found nothing
	// past the first 10,000 sessions when it filtered them itself).
	if got := decode[[]mqtt.SessionInfo](t, mustCall(t, g, "GET", "/api/v1/sessions?clientId=ev", http.StatusOK)); len(got) != 1 || got[0].ClientID != "eve" {
		t.Errorf("clientId=ev: %+v", got)
	}
	if body := mustCall(t, g, "DELETE", "/api/v1/sessions/dev", http.StatusOK); strings.TrimSpace(body) != `{"deleted":1}` {
		t.Fatalf("delete: %s", body)
	}
	mustCall(t, g, "DELETE", "/api/v1/sessions/dev", http.StatusNotFound)
	ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	if err := g.Stop(ctx2); err != nil {
		t.Fatal(err)
	}

	g2 := startGateway(t, "--data.dir="+dir)
	if body := mustCall(t, g2, "GET", "/api/v1/sessions", http.StatusOK); strings.Contains(body, `"dev"`) {
		t.Fatalf("the deleted session came back after a restart: %s", body)
	}
}

func mustCall(t *testing.T, g *Gateway, method, path string, want int) string {
	t.Helper()
	code, body := call(t, g, method, path, "")
	if code != want {
		t.Fatalf("%s %s: %d %s, want %d", method, path, code, body, want)
	}
	return body
}

// persistentSubscriber connects id with a session expiry of an hour,
// subscribes to filter at QoS 1 and disconnects.
func persistentSubscriber(t *testing.T, g *Gateway, id, filter string) {
	t.Helper()
	expiry := uint32(3600)
	c := mqttConnect(t, g, &paho.Connect{ClientID: id, CleanStart: true,
		Properties: &paho.ConnectProperties{SessionExpiryInterval: &expiry}})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: filter, QoS: 1}}}); err != nil {
		t.Fatal(err)
	}
	_ = c.Disconnect(&paho.Disconnect{})
	<-c.Done()
}

// TestSessionsInRedis: with mqtt.sessions.backend=redis a persistent
// session outlives its gateway: another gateway (its own data.dir) on the
// same Redis lists it with its subscription.
func TestSessionsInRedis(t *testing.T) {
	rs := redistest.Start(t)
	args := []string{"--mqtt.sessions.backend=redis", "--retain.redis.url=" + rs.URL()}
	g := startGateway(t, args...)
	persistentSubscriber(t, g, "dev", "r/#")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := g.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	g2 := startGateway(t, args...)
	var found []mqtt.SessionInfo
	for _, s := range decode[[]mqtt.SessionInfo](t, mustCall(t, g2, "GET", "/api/v1/sessions", http.StatusOK)) {
		if s.ClientID == "dev" {
			found = append(found, s)
		}
	}
	if len(found) != 1 || strings.Join(found[0].Subscriptions, ",") != "r/#" {
		t.Fatalf("dev after a restart on Redis: %+v", found)
	}
	// The shared store's refused writes are a metric (docs/cluster.md,
	// "Epochs"); none here.
	if _, metrics := call(t, g2, "GET", "/metrics", ""); !strings.Contains(metrics, "\ntolsey_mqtt_session_writes_refused_total 0\n") {
		t.Fatalf("metrics lack tolsey_mqtt_session_writes_refused_total 0:\n%s", metrics)
	}
}
