package gateway

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/tolsey/tolsey/amqp"
	"github.com/tolsey/tolsey/core/queue"
)

// The queue endpoints of the admin API (docs/queues.md, "Operating
// queues"): PUT, GET and DELETE /api/v1/queues/{name}, GET /api/v1/queues
// and GET /api/v1/queues/{name}/messages.

func (a *adminServer) routeQueues(mux *http.ServeMux) {
	mux.HandleFunc("GET /api/v1/queues", a.listQueues)
	mux.HandleFunc("GET /api/v1/queues/{name}", a.getQueue)
	mux.HandleFunc("PUT /api/v1/queues/{name}", a.putQueue)
	mux.HandleFunc("DELETE /api/v1/queues/{name}", a.deleteQueue)
	mux.HandleFunc("GET /api/v1/queues/{name}/messages", a.browseQueue)
	mux.HandleFunc("POST /api/v1/queues/{name}/purge", a.purgeQueue)
}

// queueJSON is one queue in the admin API.
type queueJSON struct {
	Name      string       `json:"name"`
	Config    queue.Config `json:"config"`
	Messages  int          `json:"messages"`
	Bytes     int64        `json:"bytes"`
	InFlight  int          `json:"inFlight"`
	Consumers int          `json:"consumers"`
	Counters  countersJSON `json:"counters"`
	Rates     ratesJSON    `json:"rates"`
	// Subscription marks the queue of a JMS durable subscription, which
	// the AMQP front-end declares and deletes (docs/jms.md, "Durable
	// subscriptions").
	Subscription bool `json:"subscription,omitempty"`
}

// countersJSON is queue.Counters with the API's field names.
type countersJSON struct {
	In           uint64 `json:"in"`
	Out          uint64 `json:"out"`
	Acked        uint64 `json:"acked"`
	Redelivered  uint64 `json:"redelivered"`
	Expired      uint64 `json:"expired"`
	DeadLettered uint64 `json:"deadLettered"`
	Dropped      uint64 `json:"dropped"`
	Refused      uint64 `json:"refused"`
}

// ratesJSON: messages stored (in) and delivered (out) per second over the
// last Seconds; Seconds is 0 on the first request that sees the queue.
type ratesJSON struct {
	In      float64 `json:"in"`
	Out     float64 `json:"out"`
	Seconds float64 `json:"seconds"`
}

// rateWindow is the span queue rates are computed over.
const rateWindow = 10 * time.Second

// queueRates keeps, per queue, its In and Out counters as the API saw
// them (one sample a second at most, over rateWindow), so that a listing
// gives rates over the last ten seconds without a goroutine sampling in
// the background. When requests are rarer than that, the rate is since the
// previous request. Keyed by *queue.Queue, so that a queue deleted and
// created again under its name starts afresh.
type queueRates struct {
	mu      sync.Mutex
	samples map[*queue.Queue][]rateSample
}

type rateSample struct {
	at      time.Time
	in, out uint64
}

func (r *queueRates) rate(q *queue.Queue, c queue.Counters, now time.Time) ratesJSON {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.samples == nil {
		r.samples = map[*queue.Queue][]rateSample{}
	}
	s := r.samples[q]
	// The reference is the newest sample at least rateWindow old, or the
	// oldest one when none is.
	for len(s) > 1 && now.Sub(s[1].at) >= rateWindow {
		s = s[1:]
	}
	var out ratesJSON
	if len(s) > 0 {
		ref := s[0]
		if dt := now.Sub(ref.at).Seconds(); dt > 0 {
			out = ratesJSON{In: float64(c.In-ref.in) / dt, Out: float64(c.Out-ref.out) / dt, Seconds: dt}
		}
	}
	if len(s) == 0 || now.Sub(s[len(s)-1].at) >= time.Second {
		s = append(s, rateSample{at: now, in: c.In, out: c.Out})
	}
	r.samples[q] = s
	return out
}

// keep forgets the queues not in live (deleted).
func (r *queueRates) keep(live map[*queue.Queue]bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for q := range r.samples {
		if !live[q] {
			delete(r.samples, q)
		}
	}
}

func (a *adminServer) queueView(q *queue.Queue, now time.Time) queueJSON {
	i := q.Info()
	k := i.Counters
	return queueJSON{
		Name: q.Name(), Config: i.Config, Messages: i.Messages, Bytes: i.Bytes, InFlight: i.InFlight, Consumers: i.Consumers,
		Counters: countersJSON{In: k.In, Out: k.Out, Acked: k.Acked, Redelivered: k.Redelivered, Expired: k.Expired,
			DeadLettered: k.DeadLettered, Dropped: k.Dropped, Refused: k.Refused},
		Rates:        a.rates.rate(q, k, now),
		Subscription: amqp.IsSubscriptionQueue(q.Name()),
	}
}

func apiError(w http.ResponseWriter, code int, format string, args ...any) {
	writeJSON(w, code, map[string]string{"error": fmt.Sprintf(format, args...)})
}

// limitParam reads ?limit=N: def when absent, 400 outside 1..max.
func limitParam(w http.ResponseWriter, r *http.Request, def, max int) (int, bool) {
	s := r.URL.Query().Get("limit")
	if s == "" {
		return def, true
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > max {
		apiError(w, http.StatusBadRequest, "limit must be a whole number from 1 to %d", max)
		return 0, false
	}
	return n, true
}

// listQueues is GET /api/v1/queues[?after=NAME][&limit=N]: the queues in
// name order, a page of at most limit (default and most 10,000, the
// default queues.maxQueues) after the name given.
func (a *adminServer) listQueues(w http.ResponseWriter, r *http.Request) {
	limit, ok := limitParam(w, r, 10_000, 10_000)
	if !ok {
		return
	}
	e := a.engine(w)
	if e == nil {
		return
	}
	after := r.URL.Query().Get("after")
	all := e.Queues()
	now := time.Now()
	live := make(map[*queue.Queue]bool, len(all))
	out := []queueJSON{}
	for _, q := range all {
		live[q] = true
		if q.Name() > after && len(out) < limit {
			out = append(out, a.queueView(q, now))
		}
	}
	a.rates.keep(live)
	writeJSON(w, http.StatusOK, out)
}

// engine is the queue engine, or nil with a 503 written: the admin API
// starts before it.
func (a *adminServer) engine(w http.ResponseWriter) *queue.Engine {
	e := a.g.queues.Load()
	if e == nil {
		apiError(w, http.StatusServiceUnavailable, "starting")
	}
	return e
}

// namedQueue is the queue the path names, or false with a 404 (or 503)
// written.
func (a *adminServer) namedQueue(w http.ResponseWriter, r *http.Request) (*queue.Queue, bool) {
	e := a.engine(w)
	if e == nil {
		return nil, false
	}
	name := r.PathValue("name")
	q, ok := e.Queue(name)
	if !ok {
		apiError(w, http.StatusNotFound, "no queue %q", name)
	}
	return q, ok
}

func (a *adminServer) getQueue(w http.ResponseWriter, r *http.Request) {
	if q, ok := a.namedQueue(w, r); ok {
		writeJSON(w, http.StatusOK, a.queueView(q, time.Now()))
	}
}

// maxQueueBody bounds a PUT body: a queue's configuration is a few
// hundred bytes, and the admin API must not read without end.
const maxQueueBody = 1 << 20

// putQueue is PUT /api/v1/queues/{name}: creates the queue (201) or
// changes its configuration (200), keeping its messages. The body is the
// configuration without the name (the path's), fields as in
// queues.declare; an absent field takes its default. The queue is stored
// in queues.backend and outlives the gateway; queues.declare does not
// need to name it.
func (a *adminServer) putQueue(w http.ResponseWriter, r *http.Request) {
	e := a.engine(w)
	if e == nil {
		return
	}
	name := r.PathValue("name")
	if err := queue.ValidName(name); err != nil {
		apiError(w, http.StatusBadRequest, "%v", err)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxQueueBody))
	if err != nil {
		apiError(w, http.StatusBadRequest, "reading the body: %v", err)
		return
	}
	o := map[string]json.RawMessage{}
	if len(body) > 0 {
		if err := json.Unmarshal(body, &o); err != nil {
			apiError(w, http.StatusBadRequest, "the body must be a JSON object (the queue's configuration): %v", err)
			return
		}
	}
	if n, ok := o["name"]; ok {
		var s string
		if json.Unmarshal(n, &s) != nil || s != name {
			apiError(w, http.StatusBadRequest, "name: %s differs from the path's %q (the name may be left out)", n, name)
			return
		}
	}
	o["name"], _ = json.Marshal(name)
	cfg, ferr := parseQueueObject(o, a.g.router.TopicLimits())
	if ferr != nil {
		apiError(w, http.StatusBadRequest, "%v", ferr)
		return
	}
	// One change at a time, so that the answer's 201 or 200 is true.
	a.qmu.Lock()
	defer a.qmu.Unlock()
	if cfg.DeadLetter != "" {
		if _, ok := e.Queue(cfg.DeadLetter); !ok {
			apiError(w, http.StatusBadRequest, "deadLetter: no queue %q (create it first)", cfg.DeadLetter)
			return
		}
	}
	_, existed := e.Queue(name)
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	q, err := e.Declare(ctx, cfg)
	switch {
	case errors.Is(err, queue.ErrInvalid):
		apiError(w, http.StatusBadRequest, "%v", err)
		return
	case errors.Is(err, queue.ErrTooMany):
		apiError(w, http.StatusConflict, "%v", err)
		return
	case err != nil:
		apiError(w, storeStatus(err), "%v", err)
		return
	}
	code := http.StatusCreated
	if existed {
		code = http.StatusOK
	}
	a.g.log.Info("queue declared through the admin API", "queue", name, "created", !existed)
	writeJSON(w, code, a.queueView(q, time.Now()))
}

// purgeQueue is POST /api/v1/queues/{name}/purge: the queue's ready
// messages are removed (queue.Queue.Purge; those in flight to consumers
// stay); 200 with {"purged": N}, 404, or 503/504 when the store failed
// part way (with how many went).
func (a *adminServer) purgeQueue(w http.ResponseWriter, r *http.Request) {
	q, ok := a.namedQueue(w, r)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 60*time.Second)
	defer cancel()
	n, err := q.Purge(ctx)
	switch {
	case errors.Is(err, queue.ErrNotFound):
		apiError(w, http.StatusNotFound, "no queue %q", q.Name())
		return
	case err != nil:
		writeJSON(w, storeStatus(err), map[string]any{"error": err.Error(), "purged": n})
		return
	}
	a.g.log.Info("queue purged through the admin API", "queue", q.Name(), "purged", n)
	writeJSON(w, http.StatusOK, map[string]int{"purged": n})
}

// deleteQueue is DELETE /api/v1/queues/{name}: the queue, its
// subscriptions and its messages; its consumers are detached.
func (a *adminServer) deleteQueue(w http.ResponseWriter, r *http.Request) {
	e := a.engine(w)
	if e == nil {
		return
	}
	name := r.PathValue("name")
	a.qmu.Lock()
	defer a.qmu.Unlock()
	ctx, cancel := context.WithTimeout(r.Context(), 60*time.Second)
	defer cancel()
	if err := e.Delete(ctx, name); err != nil {
		if errors.Is(err, queue.ErrNotFound) {
			apiError(w, http.StatusNotFound, "no queue %q", name)
			return
		}
		apiError(w, storeStatus(err), "%v", err)
		return
	}
	a.g.log.Info("queue deleted through the admin API", "queue", name)
	w.WriteHeader(http.StatusNoContent)
}

// queuedMessageJSON is one message of a queue in the admin API: the
// payload as text when it is UTF-8, otherwise base64 with encoding
// "base64".
type queuedMessageJSON struct {
	ID              uint64            `json:"id"`
	Topic           string            `json:"topic"`
	Payload         string            `json:"payload"`
	Encoding        string            `json:"encoding,omitempty"`
	Size            int               `json:"size"`
	QoS             byte              `json:"qos"`
	ContentType     string            `json:"contentType,omitempty"`
	ResponseTopic   string            `json:"responseTopic,omitempty"`
	CorrelationData []byte            `json:"correlationData,omitempty"` // base64, as JSON gives []byte
	UserProperties  map[string]string `json:"userProperties,omitempty"`
	Created         time.Time         `json:"created"`
	Expiry          *time.Time        `json:"expiry,omitempty"`
	Origin          string            `json:"origin,omitempty"`
	DeliveryCount   uint32            `json:"deliveryCount,omitempty"`
	Redelivered     bool              `json:"redelivered,omitempty"`
}

// browseQueue is GET /api/v1/queues/{name}/messages[?after=ID][&limit=N]:
// the first limit (default 100, at most 1,000) messages stored after the
// message of that id (ids increase in store order), oldest first, read by
// a browsing consumer that takes nothing, so in-flight messages are
// listed too.
func (a *adminServer) browseQueue(w http.ResponseWriter, r *http.Request) {
	q, ok := a.namedQueue(w, r)
	if !ok {
		return
	}
	limit, ok := limitParam(w, r, 100, 1000)
	if !ok {
		return
	}
	var after uint64
	if s := r.URL.Query().Get("after"); s != "" {
		var err error
		if after, err = strconv.ParseUint(s, 10, 64); err != nil {
			apiError(w, http.StatusBadRequest, "after must be a message id (a whole number)")
			return
		}
	}
	c, err := q.Consume(queue.ConsumerOptions{Browse: true, BrowseAfter: after})
	if err != nil { // deleted meanwhile
		apiError(w, http.StatusNotFound, "%v", err)
		return
	}
	defer c.Close()
	out := []queuedMessageJSON{}
	for len(out) < limit {
		d, ok := c.Next()
		if !ok {
			break
		}
		m := d.Msg
		j := queuedMessageJSON{ID: d.ID, Topic: m.Topic, Size: len(m.Payload), QoS: m.QoS, ContentType: m.ContentType,
			ResponseTopic: m.ResponseTopic, CorrelationData: m.CorrelationData, Created: m.Created.UTC(),
			Origin: string(m.Origin.Protocol), DeliveryCount: d.DeliveryCount, Redelivered: d.Redelivered,
			UserProperties: userPropertiesJSON(m.UserProperties), Expiry: expiryJSON(m.Expiry)}
		if utf8.Valid(m.Payload) {
			j.Payload = string(m.Payload)
		} else {
			j.Payload, j.Encoding = base64.StdEncoding.EncodeToString(m.Payload), "base64"
		}
		out = append(out, j)
	}
	writeJSON(w, http.StatusOK, out)
}
