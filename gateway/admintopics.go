package gateway

import (
	"context"
	"net/http"
	"time"

	"github.com/tolsey/tolsey/core"
)

// topicTableSize bounds GET /api/v1/topics's table: the topics published
// on most recently (core.TopicTable).
const topicTableSize = 10_000

// topicRateWindow is the span GET /api/v1/topics's rates are taken over
// (between one and two of them when it is polled more often).
const topicRateWindow = 10 * time.Second

// topicJSON is one topic seen recently in the admin API.
type topicJSON struct {
	ID            string    `json:"id"` // the topic
	Topic         string    `json:"topic"`
	Messages      uint64    `json:"messages"`
	RatePerSecond float64   `json:"ratePerSecond"`
	FirstSeen     time.Time `json:"firstSeen"`
	LastSeen      time.Time `json:"lastSeen"`
	// Retained says whether the retained store holds a message for the
	// topic; null when the store could not say (unavailable, slow).
	Retained *bool `json:"retained"`
}

// listTopics is GET /api/v1/topics: the topics published on recently
// (at most topicTableSize, the least recently published leave first),
// those matching ?filter= (an MQTT filter, default #), in topic order,
// paged by ?after=TOPIC&limit=N (default 1,000, at most 10,000), each with
// its messages since it entered the table, its rate, and whether a
// retained message is held for it (one store read per topic listed).
func (a *adminServer) listTopics(w http.ResponseWriter, r *http.Request) {
	limit, ok := limitParam(w, r, 1000, 10_000)
	if !ok {
		return
	}
	if !a.started(w) {
		return
	}
	q := r.URL.Query()
	filter := q.Get("filter")
	if filter == "" {
		filter = "#"
	}
	if err := core.ValidateFilter(filter); err != nil || core.IsShared(filter) {
		msg := "a shared subscription filter names no topics"
		if err != nil {
			msg = err.Error()
		}
		apiError(w, http.StatusBadRequest, "invalid filter: %s", msg)
		return
	}
	out := []topicJSON{}
	for _, s := range a.g.router.Topics().Topics(filter, time.Now(), topicRateWindow) {
		if s.Topic <= q.Get("after") {
			continue
		}
		out = append(out, topicJSON{ID: s.Topic, Topic: s.Topic, Messages: s.Messages, RatePerSecond: s.PerSecond,
			FirstSeen: s.First.UTC(), LastSeen: s.LastSeen.UTC()})
		if len(out) == limit {
			break
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	for i := range out {
		m, err := a.g.store.Get(ctx, out[i].Topic)
		if err != nil {
			a.g.metrics.StoreError("get")
			break // the rest stay unknown
		}
		held := m != nil
		out[i].Retained = &held
	}
	writeJSON(w, http.StatusOK, out)
}
