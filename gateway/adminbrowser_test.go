package gateway

import (
	"context"
	"net/http"
	"testing"
)

// browserCall is a request to g's admin API as a browser page could make
// it: with headers set (Origin, Sec-Fetch-Site) and Host as given.
func browserCall(t *testing.T, g *Gateway, method, path, host, body string, header map[string]string) int {
	t.Helper()
	resp, _ := adminRequest(t, g, method, path, body, func(req *http.Request) {
		if host != "" {
			req.Host = host
		}
		for k, v := range header {
			req.Header.Set(k, v)
		}
	})
	return resp.StatusCode
}

// TestAdminRefusesOtherSites: with the default loopback admin API and no
// tokens (what the console invites an operator to open), a page of
// another site made the operator's browser publish, purge or reload (a
// form or a fetch without preflight: 200), and a page whose name was
// rebound to 127.0.0.1 read everything. Found by review.
func TestAdminRefusesOtherSites(t *testing.T) {
	g := New(testConfig(t), quiet())
	if err := g.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer g.Stop(context.Background())
	publish := `{"topic": "csrf/x", "payload": "p"}`

	for name, h := range map[string]map[string]string{
		"Sec-Fetch-Site": {"Sec-Fetch-Site": "cross-site", "Content-Type": "text/plain"},
		"Origin":         {"Origin": "https://evil.example", "Content-Type": "text/plain"},
	} {
		if code := browserCall(t, g, "POST", "/api/v1/publish", "", publish, h); code != http.StatusForbidden {
			t.Errorf("cross-origin publish (%s): %d, want 403", name, code)
		}
		if code := browserCall(t, g, "POST", "/api/v1/reload", "", "", h); code != http.StatusForbidden {
			t.Errorf("cross-origin reload (%s): %d, want 403", name, code)
		}
	}
	if code := browserCall(t, g, "GET", "/api/v1/sessions", "evil.example:8088", "", nil); code != http.StatusMisdirectedRequest {
		t.Errorf("GET with a rebound host name: %d, want 421", code)
	}

	// Its own pages, and clients that are not browsers, go on as before.
	own := "http://" + g.AdminAddr()
	if code := browserCall(t, g, "POST", "/api/v1/publish", "", publish,
		map[string]string{"Origin": own, "Sec-Fetch-Site": "same-origin", "Content-Type": "application/json"}); code != http.StatusOK {
		t.Errorf("same-origin publish: %d, want 200", code)
	}
	if code := browserCall(t, g, "POST", "/api/v1/publish", "", publish, nil); code != http.StatusOK {
		t.Errorf("publish from a client that is not a browser: %d, want 200", code)
	}
	for _, host := range []string{"localhost:8088", "127.0.0.1", "[::1]:8088"} {
		if code := browserCall(t, g, "GET", "/api/v1/sessions", host, "", nil); code != http.StatusOK {
			t.Errorf("GET with Host %s: %d, want 200", host, code)
		}
	}
}

// With admin.tokens the host is not checked: the browser has no token to
// send, and names (a Kubernetes Service) are how it is reached.
func TestAdminWithTokensAnswersNames(t *testing.T) {
	token, entry := newToken(t)
	g := New(testConfig(t, "--admin.tokens="+entry), quiet())
	if err := g.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer g.Stop(context.Background())
	if code := browserCall(t, g, "GET", "/api/v1/sessions", "gateway.default.svc:8088", "",
		map[string]string{"Authorization": "Bearer " + token}); code != http.StatusOK {
		t.Errorf("GET by name with the token: %d, want 200", code)
	}
}
