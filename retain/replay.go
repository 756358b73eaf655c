package retain

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/tolsey/tolsey/core"
	"github.com/tolsey/tolsey/core/metrics"
)

// What every front-end does with the retained store, written once here so
// that MQTT, AMQP and the bridge answer alike (docs/architecture.md,
// "Retained write and late-subscriber replay" and "The acknowledgement back
// to the publisher"): which stored copies a late subscriber gets, and what
// a refused retained write means to its publisher. How a front-end puts
// either on its wire (RETAIN=1, x-opt-retain, a reason code, an outcome)
// stays in the front-end: this package knows no protocol.

// Matcher is the part of a Store a late subscriber's replay reads. The
// front-ends take a Matcher, not a Store: they never write the store
// themselves (the router does, through Retainer) and never delete from it.
type Matcher interface {
	// Match calls fn for every unexpired retained message whose topic
	// matches filter (a valid MQTT filter, wildcards allowed), until fn
	// returns false. Messages handed to fn are not modified by the store
	// afterwards and may be kept. Its cost grows with the matches, not with
	// the number of messages stored.
	Match(ctx context.Context, filter string, fn func(*core.Message) bool) error
}

// Replay is the rule for replaying stored copies to a late subscriber
// (docs/architecture.md, decision 1). A value is cheap: build one where it
// is used.
type Replay struct {
	Store   Matcher
	Node    string           // this gateway's node.id
	Metrics *metrics.Metrics // counts a Match that failed; may be nil
	Log     *slog.Logger     // logs a Match that failed
	// Live, when set, tells which stored copies from another gateway this
	// one received from the cluster after a subscription began
	// (core.Router.ReceivedLiveAfter): they went to it live.
	Live interface {
		ReceivedLiveAfter(m *core.Message, since time.Time) bool
	}
}

// Replayable reports whether a subscription to filter gets stored copies
// at all: a shared subscription gets none (MQTT 5 §4.8.2). Run applies it;
// a front-end may ask first to skip the work of starting one.
func Replayable(filter string) bool { return !core.IsShared(filter) }

// Due reports whether stored copy m goes, at now, to a subscriber whose
// subscription has been in place since since:
//   - not once it has expired [MQTT-3.3.2-5];
//   - not when this gateway received it after since: the router delivered
//     it to that subscription live, and the stored copy would be a second
//     one. For a message that entered another gateway of the cluster,
//     Live says when this gateway received it (that gateway's Created is
//     on its own clock); without Live it is sent.
func (r *Replay) Due(m *core.Message, since, now time.Time) bool {
	if m.Expired(now) {
		return false
	}
	if m.Origin.Node == r.Node {
		return !m.Created.After(since)
	}
	return r.Live == nil || !r.Live.ReceivedLiveAfter(m, since)
}

// Run hands send, in the store's order, every stored copy of filter due to
// a subscriber in place since since, until send returns false (the
// subscriber is gone) or ctx ends. send must put each copy on the wire
// marked as a stored copy, in its protocol's one way of saying so: MQTT
// RETAIN=1 [MQTT-3.3.1-9], AMQP message annotation x-opt-retain = true. A
// live delivery never carries that mark (docs/architecture.md, decision 1), so a subscriber can
// tell "the last known state, from the store" from "a change, now".
//
// A Match that fails (Redis down) is counted in
// tolsey_retained_store_errors_total{op="match"} and logged with args; the
// subscription stands. Ending ctx is no failure. Run and send run on the
// caller's goroutine; send may block (for acknowledgements, for room in a
// queue), which holds the store's iteration, not a lock.
func (r *Replay) Run(ctx context.Context, filter string, since time.Time, send func(*core.Message) bool, args ...any) {
	if !Replayable(filter) {
		return
	}
	err := r.Store.Match(ctx, filter, func(m *core.Message) bool {
		if !r.Due(m, since, time.Now()) {
			return true
		}
		return send(m)
	})
	if err != nil && ctx.Err() == nil {
		r.Metrics.StoreError("match")
		r.Log.Warn("retained messages not delivered", append([]any{"filter", filter, "error", err}, args...)...)
	}
}

// Refusal says why a retained publish was not stored, as its publisher is
// told. The message was delivered live all the same.
type Refusal uint8

const (
	// Stored: the store took it (or there was nothing to store).
	Stored Refusal = iota
	// OverQuota: ErrQuotaExceeded (retain.maxPayload, retain.maxMessages),
	// the client's doing. MQTT 5: reason 0x97 Quota exceeded; AMQP:
	// rejected with amqp:resource-limit-exceeded.
	OverQuota
	// StoreFailed: any other error (ErrUnavailable, the WriteTimeout), the
	// gateway's. MQTT 5: reason 0x80 Unspecified error; AMQP: rejected with
	// amqp:internal-error.
	StoreFailed
)

// Refused classifies err, a core.PublishResult.RetainErr, and counts it:
// tolsey_retained_refused_total{reason="quota"} for OverQuota;
// tolsey_retained_store_errors_total{op="set"} and
// tolsey_retained_refused_total{reason="store"} for StoreFailed, which is
// also logged with args (the topic, the client). A nil err is Stored.
func Refused(err error, met *metrics.Metrics, log *slog.Logger, args ...any) Refusal {
	switch {
	case err == nil:
		return Stored
	case errors.Is(err, ErrQuotaExceeded):
		met.Refused("quota")
		return OverQuota
	}
	met.StoreError("set")
	met.Refused("store")
	log.Warn("retained message not stored", append(args[:len(args):len(args)], "error", err)...)
	return StoreFailed
}
