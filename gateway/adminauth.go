package gateway

import (
	"errors"
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
