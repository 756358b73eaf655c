package gateway

import (
	"context"
	"net/http"
	"regexp"
	"strconv"
	"testing"
)

// TestAdminPublishOrigin: a message published through the admin API has
// origin admin (gateway/adminpublish.go): it is counted under
// tolsey_messages_in_total{protocol="admin"}, and the retained list shows
// "origin":"admin" for a retained one.
func TestAdminPublishOrigin(t *testing.T) {
	g := New(testConfig(t), quiet())
	if err := g.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer g.Stop(context.Background())
	before := adminIn(t, g)
	publishRetained(t, g, "origin/a")
	if got := adminIn(t, g); got != before+1 {
		t.Errorf(`tolsey_messages_in_total{protocol="admin"}: %v after one publish, was %v`, got, before)
	}
	list := decode[[]retainedJSON](t, mustCall(t, g, "GET", "/api/v1/retained?filter=origin/a", http.StatusOK))
	if len(list) != 1 || list[0].Origin != "admin" {
		t.Errorf("retained list: %+v, want origin/a with origin admin", list)
	}
}

var adminInLine = regexp.MustCompile(`(?m)^tolsey_messages_in_total\{protocol="admin"\} (\S+)$`)

// adminIn is tolsey_messages_in_total{protocol="admin"} as /metrics shows
// it, 0 when the series is not there yet.
func adminIn(t *testing.T, g *Gateway) float64 {
	t.Helper()
	m := adminInLine.FindStringSubmatch(mustCall(t, g, "GET", "/metrics", http.StatusOK))
	if m == nil {
		return 0
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatalf("tolsey_messages_in_total{protocol=\"admin\"} %q: %v", m[1], err)
	}
	return v
}
