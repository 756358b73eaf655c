package httpauth_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tolsey/tolsey/core/auth"
	"github.com/tolsey/tolsey/core/auth/httpauth"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// service is a real HTTP identity service: alice/secret is allowed in
// group devices, bob/secret is refused with allow:false, carol with 403,
// "broken" gets a 500, "garbage" a 200 that is not JSON, "slow" no answer
// until the request ends.
type service struct {
	*httptest.Server
	calls atomic.Int64
	last  atomic.Pointer[map[string]string]
}

func newService(t *testing.T) *service {
	s := &service{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.calls.Add(1)
		var req map[string]string
		if r.Method != http.MethodPost || json.NewDecoder(r.Body).Decode(&req) != nil {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		s.last.Store(&req)
		switch {
		case req["username"] == "alice" && req["password"] == "secret":
			_, _ = w.Write([]byte(`{"allow": true, "groups": ["devices"]}`))
		case req["username"] == "renamed":
			_, _ = w.Write([]byte(`{"allow": true, "user": "dev-7", "groups": ["fleet"]}`))
		case req["username"] == "carol":
			w.WriteHeader(http.StatusForbidden)
		case req["username"] == "broken":
			w.WriteHeader(http.StatusInternalServerError)
		case req["username"] == "garbage":
			_, _ = w.Write([]byte(`<html>`))
		case req["username"] == "slow":
			<-r.Context().Done()
		default:
			_, _ = w.Write([]byte(`{"allow": false}`))
		}
	}))
	t.Cleanup(s.Close)
	return s
}

func newClient(t *testing.T, o httpauth.Options) *httpauth.Client {
	c, err := httpauth.New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func TestAnswers(t *testing.T) {
	svc := newService(t)
	c := newClient(t, httpauth.Options{URL: svc.URL, Timeout: 500 * time.Millisecond})
	ctx := context.Background()

	id, err := c.Authenticate(ctx, auth.Credentials{Username: "alice", Password: "secret", ClientID: "c1",
		Protocol: "mqtt", CertSubject: "CN=alice", RemoteAddr: "10.0.0.1:5000"})
	if err != nil || id.User != "alice" || len(id.Groups) != 1 || id.Groups[0] != "devices" {
		t.Fatalf("alice: %+v %v", id, err)
	}
	got := *svc.last.Load()
	want := map[string]string{"username": "alice", "password": "secret", "clientId": "c1",
		"protocol": "mqtt", "certSubject": "CN=alice", "remoteAddr": "10.0.0.1:5000"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("request %s = %q, want %q", k, got[k], v)
		}
	}
	if id, err := c.Authenticate(ctx, auth.Credentials{Username: "renamed"}); err != nil || id.User != "dev-7" || id.Groups[0] != "fleet" {
		t.Errorf("renamed: %+v %v", id, err)
	}
	for _, u := range []string{"bob", "carol"} {
		if _, err := c.Authenticate(ctx, auth.Credentials{Username: u, Password: "secret"}); !errors.Is(err, auth.ErrDenied) {
			t.Errorf("%s: %v, want ErrDenied", u, err)
		}
	}
	for _, u := range []string{"broken", "garbage", "slow"} {
		if _, err := c.Authenticate(ctx, auth.Credentials{Username: u}); !errors.Is(err, auth.ErrUnavailable) {
			t.Errorf("%s: %v, want ErrUnavailable", u, err)
		}
	}
}

func TestServiceDown(t *testing.T) {
	svc := newService(t)
	url := svc.URL
	svc.Close()
	c := newClient(t, httpauth.Options{URL: url, CacheTTL: time.Hour})
	for range 2 {
		_, err := c.Authenticate(context.Background(), auth.Credentials{Username: "alice", Password: "secret"})
		if !errors.Is(err, auth.ErrUnavailable) {
			t.Fatalf("err = %v, want ErrUnavailable", err)
		}
	}
	if n := c.Cached(); n != 0 {
		t.Errorf("an outage was cached: %d entries", n)
	}
}

func TestCache(t *testing.T) {
	svc := newService(t)
	c := newClient(t, httpauth.Options{URL: svc.URL, CacheTTL: time.Hour})
	ctx := context.Background()
	alice := auth.Credentials{Username: "alice", Password: "secret", ClientID: "c1", RemoteAddr: "10.0.0.1:1"}
	for i := range 3 {
		alice.RemoteAddr = "10.0.0.1:" + string(rune('1'+i)) // another connection, the same credentials
		if _, err := c.Authenticate(ctx, alice); err != nil {
			t.Fatal(err)
		}
	}
	if n := svc.calls.Load(); n != 1 {
		t.Errorf("the service saw %d calls for three logins, want 1", n)
	}
	// Another password is another question.
	wrong := alice
	wrong.Password = "guess"
	for range 2 {
		if _, err := c.Authenticate(ctx, wrong); !errors.Is(err, auth.ErrDenied) {
			t.Fatalf("wrong password: %v", err)
		}
	}
	if n := svc.calls.Load(); n != 2 {
		t.Errorf("the service saw %d calls, want 2 (a deny is cached for a while too)", n)
	}
	// No cache: every login asks.
	nc := newClient(t, httpauth.Options{URL: svc.URL})
	before := svc.calls.Load()
	for range 2 {
		if _, err := nc.Authenticate(ctx, alice); err != nil {
			t.Fatal(err)
		}
	}
	if n := svc.calls.Load() - before; n != 2 {
		t.Errorf("without cacheTTL the service saw %d calls for two logins, want 2", n)
	}
}

func TestCacheBounded(t *testing.T) {
	svc := newService(t)
	c := newClient(t, httpauth.Options{URL: svc.URL, CacheTTL: time.Hour, CacheSize: 20})
	for i := range 100 {
		_, _ = c.Authenticate(context.Background(), auth.Credentials{Username: "u", Password: string(rune('a' + i))})
		if n := c.Cached(); n > 20 {
			t.Fatalf("cache holds %d answers, bound 20", n)
		}
	}
}

// BenchmarkAuthenticate: a login answered by the service (a loopback HTTP
// round trip) and one answered from the cache.
func BenchmarkAuthenticate(b *testing.B) {
	svc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"allow": true, "groups": ["devices"]}`))
	}))
	defer svc.Close()
	cr := auth.Credentials{Username: "alice", Password: "secret", ClientID: "c1", Protocol: "mqtt"}
	for _, tc := range []struct {
		name string
		ttl  time.Duration
	}{{"service", 0}, {"cached", time.Hour}} {
		b.Run(tc.name, func(b *testing.B) {
			c, err := httpauth.New(httpauth.Options{URL: svc.URL, CacheTTL: tc.ttl})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.Authenticate(context.Background(), cr); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
