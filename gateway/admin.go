package gateway

import (
	"container/heap"
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"slices"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tolsey/tolsey/core"
	"github.com/tolsey/tolsey/core/accept"
	"github.com/tolsey/tolsey/core/tlsconf"
	"github.com/tolsey/tolsey/gateway/console"
	"github.com/tolsey/tolsey/retain"
)

// adminServer is the admin HTTP API: /healthz, /readyz, /metrics and
// /api/v1/... (docs/admin-api.md, docs/openapi.yaml).
type adminServer struct {
	g   *Gateway
	ln  *accept.Listener // retries temporary accept errors; Err says if it died
	srv *http.Server
	mux *http.ServeMux // its routes (docs/openapi.yaml lists them)
	wg  sync.WaitGroup

	rates queueRates // GET /api/v1/queues's in and out rates
	qmu   sync.Mutex // one queue change (PUT, DELETE) at a time
}

func newAdminServer(g *Gateway) *adminServer {
	a := &adminServer{g: g}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", a.readyz)
	mux.Handle("GET /metrics", promhttp.HandlerFor(g.metrics.Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /api/v1/retained", a.listRetained)
	mux.HandleFunc("DELETE /api/v1/retained", a.deleteRetained)
	mux.HandleFunc("GET /api/v1/bridges", a.listBridges)
	mux.HandleFunc("GET /api/v1/cluster", a.clusterStatus)
	mux.HandleFunc("GET /api/v1/stats", a.stats)
	a.routeQueues(mux)
	a.routeSessions(mux)
	a.routeConnections(mux)
	mux.HandleFunc("GET /api/v1/subscriptions", a.listSubscriptions)
	mux.HandleFunc("GET /api/v1/topics", a.listTopics)
	mux.HandleFunc("POST /api/v1/publish", a.publish)
	mux.HandleFunc("POST /api/v1/reload", a.reload)
	// Profiles for performance work, as Caddy's admin API has them. The admin
	// API listens on loopback unless admin.listen says otherwise.
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	a.mux = mux
	// The web console's assets are outside the token check (they hold no
	// data); every API call they make goes through it.
	a.srv = &http.Server{Handler: a.guardBrowsers(console.Handler(a.protect(mux))), ReadHeaderTimeout: 10 * time.Second}
	return a
}

// start listens on addr; with t (admin.tls.*), HTTPS only.
func (a *adminServer) start(addr string, t *tlsconf.Config) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return &ConfigError{Key: "admin.listen", Msg: err.Error()}
	}
	a.ln = accept.New(ln, "admin", a.g.log)
	var serve net.Listener = a.ln
	if t != nil {
		serve = tls.NewListener(a.ln, t.TLSConfig())
		// net/http logs each failed handshake (a scanner, a client
		// that does not trust the certificate) on the standard logger:
		// ours, at debug, keeps them out of stderr's way.
		a.srv.ErrorLog = slog.NewLogLogger(a.g.log.Handler(), slog.LevelDebug)
	}
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		// Anything but stop ending Serve is the listener's failure:
		// logged at error level, and in Gateway.Ready. /readyz cannot
		// say so (it is served here), but probes of it then fail to
		// connect, which orchestrators read as not ready.
		if err := a.srv.Serve(serve); !errors.Is(err, http.ErrServerClosed) {
			a.ln.Fail(err)
		}
	}()
	return nil
}

func (a *adminServer) addr() string { return a.ln.Addr().String() }

func (a *adminServer) stop(ctx context.Context) error {
	err := a.srv.Shutdown(ctx)
	a.wg.Wait()
	return err
}

func (a *adminServer) readyz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if err := a.g.Ready(); err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte("not ready: " + err.Error() + "\n"))
		return
	}
	b := []byte("ready\n")
	for _, d := range a.g.BridgesDown() {
		b = append(b, d...)
		b = append(b, '\n')
	}
	if d := a.g.QueueStoreDegraded(); d != "" {
		b = append(b, d...)
		b = append(b, '\n')
	}
	_, _ = w.Write(b)
}

// retainedJSON is one retained message in the admin API. The payload is
// given as text when it is UTF-8, otherwise base64 in payloadBase64.
type retainedJSON struct {
	Topic          string            `json:"topic"`
	Payload        *string           `json:"payload,omitempty"`
	PayloadBase64  string            `json:"payloadBase64,omitempty"`
	Size           int               `json:"size"`
	QoS            byte              `json:"qos"`
	ContentType    string            `json:"contentType,omitempty"`
	UserProperties map[string]string `json:"userProperties,omitempty"`
	Created        time.Time         `json:"created"`
	Expiry         *time.Time        `json:"expiry,omitempty"`
	Origin         string            `json:"origin,omitempty"`
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func filterParam(w http.ResponseWriter, r *http.Request) (string, bool) {
	f := r.URL.Query().Get("filter")
	if f == "" {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "query parameter filter is required (a topic or an MQTT filter such as sensors/#)"})
		return "", false
	}
	if err := core.ValidateFilter(f); err != nil || core.IsShared(f) {
		msg := "shared subscription filters hold no retained messages"
		if err != nil {
			msg = err.Error()
		}
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid filter: " + msg})
		return "", false
	}
	return f, true
}

func storeStatus(err error) int {
	if errors.Is(err, context.DeadlineExceeded) {
		return http.StatusGatewayTimeout
	}
	return http.StatusServiceUnavailable
}

// started reports whether the gateway has made the parts the API reads
// (the retained store, the router), else writes 503 "starting": the admin
// API serves /readyz before them, and ready orders their reads.
func (a *adminServer) started(w http.ResponseWriter) bool { return a.mqttServer(w) != nil }

// listRetained is GET /api/v1/retained?filter=F: the unexpired retained
// messages matching F in topic order, paged by ?after=TOPIC&limit=N
// (default 1,000, at most 10,000). The stores list matching topics from
// their index in no order (retain.TopicLister), so every page walks the
// index's matches, keeping only the limit smallest topics after ?after (a
// heap of topics), then reads those messages alone: memory is bounded by
// limit, time grows with the matching topics, not with their payloads
// (docs/admin-api.md).
func (a *adminServer) listRetained(w http.ResponseWriter, r *http.Request) {
	f, ok := filterParam(w, r)
	if !ok || !a.started(w) {
		return
	}
	limit, ok := limitParam(w, r, 1000, 10_000)
	if !ok {
		return
	}
	after := r.URL.Query().Get("after")
	// ?payload=false: topics and sizes only, for a listing or a count (a
	// page of large payloads is most of the answer's memory, JSON's escapes
	// growing it further).
	withPayload := r.URL.Query().Get("payload") != "false"
	now := time.Now()
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	out := make([]retainedJSON, 0, min(limit, 64))
	add := func(m *core.Message) {
		if m == nil || m.Expired(now) {
			return // gone or expired since it was listed
		}
		j := retainedJSON{Topic: m.Topic, Size: len(m.Payload), QoS: m.QoS, ContentType: m.ContentType,
			Created: m.Created.UTC(), Origin: string(m.Origin.Protocol)}
		switch {
		case !withPayload:
		case utf8.Valid(m.Payload):
			s := string(m.Payload)
			j.Payload = &s
		default:
			j.PayloadBase64 = base64.StdEncoding.EncodeToString(m.Payload)
		}
		j.Expiry = expiryJSON(m.Expiry)
		j.UserProperties = userPropertiesJSON(m.UserProperties)
		out = append(out, j)
	}
	page := &topicPage{limit: limit}
	var err error
	tl, listed := a.g.store.(retain.TopicLister)
	if listed {
		err = tl.MatchTopics(ctx, f, func(t string) bool {
			if t > after {
				page.offer(t)
			}
			return true
		})
		for _, t := range page.sorted() {
			if err != nil {
				break
			}
			var m *core.Message
			if m, err = a.g.store.Get(ctx, t); err == nil {
				add(m)
			}
		}
	} else {
		// A store without an index of its own: the messages themselves,
		// kept by topic (the store may keep them: retain.Matcher).
		byTopic := map[string]*core.Message{}
		err = a.g.store.Match(ctx, f, func(m *core.Message) bool {
			if m.Topic > after && !m.Expired(now) {
				if out := page.offer(m.Topic); out != "" {
					delete(byTopic, out)
				}
				if page.has(m.Topic) {
					byTopic[m.Topic] = m
				}
			}
			return true
		})
		for _, t := range page.sorted() {
			add(byTopic[t])
		}
	}
	if err != nil {
		a.g.metrics.StoreError("match")
		writeJSON(w, storeStatus(err), map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// topicPage keeps the limit smallest topics offered: a max-heap, its root
// the first to leave when a smaller one comes.
type topicPage struct {
	limit int
	h     []string
	in    map[string]struct{} // what h holds, for has; made on first use
}

func (p *topicPage) Len() int           { return len(p.h) }
func (p *topicPage) Less(i, j int) bool { return p.h[i] > p.h[j] }
func (p *topicPage) Swap(i, j int)      { p.h[i], p.h[j] = p.h[j], p.h[i] }
func (p *topicPage) Push(x any)         { p.h = append(p.h, x.(string)) }
func (p *topicPage) Pop() any {
	t := p.h[len(p.h)-1]
	p.h = p.h[:len(p.h)-1]
	return t
}

// offer keeps t if it is among the limit smallest so far, and returns the
// topic it put out to make room ("" if none).
func (p *topicPage) offer(t string) (out string) {
	if p.in == nil {
		p.in = map[string]struct{}{}
	}
	switch {
	case len(p.h) < p.limit:
		heap.Push(p, t)
	case t < p.h[0]:
		out = p.h[0]
		delete(p.in, out)
		p.h[0] = t
		heap.Fix(p, 0)
	default:
		return ""
	}
	p.in[t] = struct{}{}
	return out
}

// has reports whether the page holds t.
func (p *topicPage) has(t string) bool { _, ok := p.in[t]; return ok }

// sorted is the page in topic order.
func (p *topicPage) sorted() []string {
	slices.Sort(p.h)
	return p.h
}

func (a *adminServer) deleteRetained(w http.ResponseWriter, r *http.Request) {
	f, ok := filterParam(w, r)
	if !ok || !a.started(w) {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 60*time.Second)
	defer cancel()
	n, err := a.g.store.Delete(ctx, f)
	if err != nil {
		a.g.metrics.StoreError("delete")
		writeJSON(w, storeStatus(err), map[string]any{"error": err.Error(), "deleted": n})
		return
	}
	a.g.log.Info("retained messages cleared", "filter", f, "deleted", n)
	writeJSON(w, http.StatusOK, map[string]int{"deleted": n})
}

// expiryJSON is a message's expiry for the API: nil when it has none.
func expiryJSON(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}

// userPropertiesJSON is a message's user properties for the API (the last
// value of a repeated key), nil when it has none.
func userPropertiesJSON(ps []core.UserProperty) map[string]string {
	if len(ps) == 0 {
		return nil
	}
	out := make(map[string]string, len(ps))
	for _, p := range ps {
		out[p.Key] = p.Value
	}
	return out
}
