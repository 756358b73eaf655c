// Package httpauthtest is a real HTTP identity service for the tests of
// the HTTP auth hook (auth.http.url) in every front-end: it answers as
// docs/security.md ("HTTP auth hook") says a service does, counts the
// calls and keeps the last request. Production code must not import it.
package httpauthtest

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tolsey/tolsey/core/auth/httpauth"
)

// Request is the JSON body the hook POSTs.
type Request = httpauth.Request

// Service allows the users given to Allow with their password, answers
// {"allow": false} to a known user with another password and 401 to
// anyone else. It is closed when the test ends.
type Service struct {
	*httptest.Server
	calls atomic.Int64
	last  atomic.Pointer[Request]

	mu    sync.Mutex // guards users
	users map[string]account
}

type account struct {
	password string
	groups   []string
}

// New starts a Service.
func New(t testing.TB) *Service {
	s := &Service{users: map[string]account{}}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

// Allow lets user in with password, in groups.
func (s *Service) Allow(user, password string, groups ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.users[user] = account{password: password, groups: groups}
}

// Calls is the number of requests answered.
func (s *Service) Calls() int64 { return s.calls.Load() }

// Last is the last request, the zero Request before any.
func (s *Service) Last() Request {
	if r := s.last.Load(); r != nil {
		return *r
	}
	return Request{}
}

func (s *Service) serve(w http.ResponseWriter, r *http.Request) {
	s.calls.Add(1)
	var req Request
	if r.Method != http.MethodPost || json.NewDecoder(r.Body).Decode(&req) != nil {
		http.Error(w, "want a POST of JSON", http.StatusBadRequest)
		return
	}
	s.last.Store(&req)
	s.mu.Lock()
	a, ok := s.users[req.Username]
	s.mu.Unlock()
	switch {
	case !ok:
		w.WriteHeader(http.StatusUnauthorized)
	case a.password != req.Password:
		_, _ = w.Write([]byte(`{"allow": false}`))
	default:
		_ = json.NewEncoder(w).Encode(httpauth.Answer{Allow: true, Groups: a.groups})
	}
}
