package gateway

import (
	"errors"
	"net"
	"net/http"
	"strings"
)

// protect puts admin.tokens in front of every admin path but admin.open
// (docs/security.md, "Admin API"), and logs each mutating call with who
// made it: the token's id (tokenID), never the token, or the client
// certificate's subject.
func (a *adminServer) protect(next http.Handler) http.Handler {
	cfg := &a.g.cfg.Admin
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		who := "anonymous"
		if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 {
			who = "cert:" + r.TLS.VerifiedChains[0][0].Subject.String()
		}
		// Exact paths only: the mux's own cleaning (//healthz, /x/../healthz)
		// happens after this, so an odd spelling of an open path asks for a
		// token rather than slipping past one.
		if len(cfg.Tokens) > 0 && !cfg.OpenAll && !cfg.Open[r.URL.Path] {
			t, hasToken := bearer(r)
			id, ok := matchToken(cfg.Tokens, t)
			if !ok {
				challenge := `Bearer realm="tolsey admin"`
				msg := "this path needs Authorization: Bearer <token> (admin.tokens)"
				if hasToken {
					challenge += `, error="invalid_token"` // RFC 6750 §3
					msg = "the bearer token is not one of admin.tokens"
				}
				w.Header().Set("WWW-Authenticate", challenge)
				writeJSON(w, http.StatusUnauthorized, map[string]string{"error": msg})
				return
			}
			who = "token:" + id
		}
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			next.ServeHTTP(w, r)
			return
		}
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		next.ServeHTTP(sw, r)
		a.g.log.Info("admin call", "method", r.Method, "path", r.URL.Path, "query", r.URL.RawQuery,
			"by", who, "remote", r.RemoteAddr, "status", sw.code)
	})
}

// guardBrowsers refuses what a web page of another site can make an
// operator's browser send to the admin API (docs/security.md, "Admin
// API"), which the console invites to open at http://127.0.0.1:8088/:
//   - a cross-origin request that is not GET, HEAD or OPTIONS (a form, or a
//     fetch without a preflight, posting a publish or a purge): 403, by
//     Sec-Fetch-Site or Origin (http.CrossOriginProtection);
//   - without admin.tokens, over plain HTTP, a Host that is neither an IP
//     address nor localhost: 421. A page of evil.example whose name is
//     rebound to 127.0.0.1 is same-origin to the browser and would read
//     the API (DNS rebinding); a rebound name is never an IP literal, and
//     with tokens the browser has no token to send.
//
// Clients that are not browsers (curl, the command-line tool, Prometheus)
// send neither header and use the address they were given.
func (a *adminServer) guardBrowsers(next http.Handler) http.Handler {
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		apiError(w, http.StatusForbidden, "cross-origin request refused: the admin API takes changes only from its own pages and from clients that are not browsers")
	}))
	guarded := cop.Handler(next)
	tokens := len(a.g.cfg.Admin.Tokens) > 0
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !tokens && r.TLS == nil && !literalHost(r.Host) {
			apiError(w, http.StatusMisdirectedRequest, "host %q refused: without admin.tokens the admin API answers only requests addressed to an IP address or localhost", r.Host)
			return
		}
		guarded.ServeHTTP(w, r)
	})
}

// literalHost reports whether the Host header names an IP address or
// localhost (any port).
func literalHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	return host == "localhost" || strings.HasSuffix(host, ".localhost") || net.ParseIP(host) != nil
}

// bearer is the token of an Authorization: Bearer header (RFC 6750 §2.1;
// the scheme is case-insensitive, RFC 9110 §11.1).
func bearer(r *http.Request) (string, bool) {
	scheme, t, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	t = strings.TrimSpace(t)
	return t, t != ""
}

// statusWriter remembers the status a handler answered, for the log.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	w.code = code
	w.ResponseWriter.WriteHeader(code)
}

// reload is POST /api/v1/reload: Gateway.Reload. 200 when every file was
// read again; 400 with the errors when some file is wrong (the gateway
// keeps what it had loaded for those parts, and has reloaded the others);
// 500 for anything else.
func (a *adminServer) reload(w http.ResponseWriter, _ *http.Request) {
	if err := a.g.Reload(); err != nil {
		code := http.StatusInternalServerError
		var ce *ConfigError
		if errors.As(err, &ce) {
			code = http.StatusBadRequest
		}
		writeJSON(w, code, map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "reloaded"})
}
