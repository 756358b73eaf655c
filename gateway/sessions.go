package gateway

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/tolsey/tolsey/mqtt"
	"github.com/tolsey/tolsey/mqtt/session"
)

// openSessions opens the store of persistent MQTT sessions that
// mqtt.sessions.backend names (auto: memory with retain.backend=memory,
// else embedded): nil for memory (sessions die with the
// process, as before the store existed). The MQTT front-end owns it from
// here and closes it at its Shutdown.
func (g *Gateway) openSessions(ctx context.Context) (session.Backend, error) {
	backend := g.cfg.MQTT.SessionsBackend
	if backend == "auto" {
		// retain.backend=memory says nothing goes to disk (tests, benchmarks,
		// several gateways side by side in one directory): sessions
		// neither.
		backend = "embedded"
		if g.cfg.RetainBackend == "memory" {
			backend = "memory"
		}
	}
	switch backend {
	case "memory":
		return nil, nil
	case "redis":
		b, err := session.OpenRedis(ctx, g.cfg.RedisURL, g.cfg.RedisPrefix+"mqttsess:")
		if err != nil {
			return nil, fmt.Errorf("mqtt session store (retain.redis.url): %w", err)
		}
		return b, nil
	}
	b, err := session.OpenBolt(g.cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("mqtt session store (data.dir %s): %w", g.cfg.DataDir, err)
	}
	return b, nil
}

// The session endpoints of the admin API (docs/mqtt-frontend.md,
// "Persistent sessions"): GET /api/v1/sessions lists the MQTT sessions,
// DELETE /api/v1/sessions/{clientId} ends one.
func (a *adminServer) routeSessions(mux *http.ServeMux) {
	mux.HandleFunc("GET /api/v1/sessions", a.listSessions)
	mux.HandleFunc("DELETE /api/v1/sessions/{clientId}", a.deleteSession)
}

// mqttServer is the MQTT front-end once the gateway is ready, else nil
// (after writing 503): the admin API serves /readyz before the front-end
// exists, and ready, set after it is, orders the read of g.mqtt.
func (a *adminServer) mqttServer(w http.ResponseWriter) *mqtt.Server {
	if !a.g.ready.Load() {
		apiError(w, http.StatusServiceUnavailable, "starting")
		return nil
	}
	return a.g.mqtt
}

// listSessions pages as GET /api/v1/queues does: ?after=CLIENTID&limit=N
// (default and most 10,000), in client id order; ?clientId= keeps the
// client ids with that prefix.
func (a *adminServer) listSessions(w http.ResponseWriter, r *http.Request) {
	limit, ok := limitParam(w, r, 10_000, 10_000)
	if !ok {
		return
	}
	m := a.mqttServer(w)
	if m == nil {
		return
	}
	after, prefix := r.URL.Query().Get("after"), r.URL.Query().Get("clientId")
	out := []mqtt.SessionInfo{}
	for _, s := range m.Sessions() {
		if s.ClientID > after && strings.HasPrefix(s.ClientID, prefix) && len(out) < limit {
			out = append(out, s)
		}
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *adminServer) deleteSession(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("clientId")
	m := a.mqttServer(w)
	if m == nil {
		return
	}
	if !m.DeleteSession(id) {
		apiError(w, http.StatusNotFound, "no MQTT session for client id %q", id)
		return
	}
	writeJSON(w, http.StatusOK, map[string]int{"deleted": 1})
}
