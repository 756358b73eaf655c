package retain_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/tolsey/tolsey/core"
	"github.com/tolsey/tolsey/core/metrics"
	"github.com/tolsey/tolsey/retain"
	"github.com/tolsey/tolsey/retain/memory"
)

// The rule both front-ends apply to a late subscriber's stored copies.
func TestReplayDue(t *testing.T) {
	since := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	now := since.Add(time.Minute)
	r := retain.Replay{Node: "here"}
	for _, tc := range []struct {
		name string
		m    core.Message
		due  bool
	}{
		{"stored before the subscription", core.Message{Created: since.Add(-time.Hour), Origin: core.Origin{Node: "here"}}, true},
		{"expired", core.Message{Created: since.Add(-time.Hour), Expiry: now.Add(-time.Second)}, false},
		{"expires at this instant", core.Message{Created: since.Add(-time.Hour), Expiry: now}, false},
		{"not yet expired", core.Message{Created: since.Add(-time.Hour), Expiry: now.Add(time.Second)}, true},
		{"live copy already sent: received here after the subscription", core.Message{Created: since.Add(time.Second), Origin: core.Origin{Node: "here"}}, false},
		{"received here at the subscription's instant", core.Message{Created: since, Origin: core.Origin{Node: "here"}}, true},
		{"received by another gateway after the subscription", core.Message{Created: since.Add(time.Second), Origin: core.Origin{Node: "there"}}, true},
	} {
		if got := r.Due(&tc.m, since, now); got != tc.due {
			t.Errorf("%s: due %v, want %v", tc.name, got, tc.due)
		}
	}
}

func TestReplayRun(t *testing.T) {
	store := memory.New(retain.Limits{})
	defer store.Close()
	since := time.Now()
	for _, m := range []*core.Message{
		{Topic: "a/old", Payload: []byte("1"), Created: since.Add(-time.Hour), Origin: core.Origin{Node: "here"}},
		{Topic: "a/live", Payload: []byte("2"), Created: since.Add(time.Second), Origin: core.Origin{Node: "here"}},
		{Topic: "a/remote", Payload: []byte("3"), Created: since.Add(time.Second), Origin: core.Origin{Node: "there"}},
		{Topic: "b/other", Payload: []byte("4"), Created: since.Add(-time.Hour)},
	} {
		if err := store.Set(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	met := metrics.New()
	var logs bytes.Buffer
	r := retain.Replay{Store: store, Node: "here", Metrics: met, Log: slog.New(slog.NewTextHandler(&logs, nil))}
	run := func(ctx context.Context, filter string, max int) (got []string) {
		r.Run(ctx, filter, since, func(m *core.Message) bool {
			got = append(got, m.Topic)
			return len(got) < max
		}, "client", "c1")
		return got
	}
	if got := strings.Join(run(context.Background(), "a/#", 10), " "); got != "a/old a/remote" && got != "a/remote a/old" {
		t.Errorf("a/#: replayed %q, want a/old and a/remote (a/live went live)", got)
	}
	if got := run(context.Background(), "a/#", 1); len(got) != 1 {
		t.Errorf("send said stop after one, Run went on: %q", got)
	}
	if got := run(context.Background(), "$share/g/a/#", 10); len(got) != 0 {
		t.Errorf("shared subscription got stored copies: %q", got)
	}
	matchErrors := func() float64 {
		var m dto.Metric
		_ = met.StoreErrors.WithLabelValues("match").Write(&m)
		return m.GetCounter().GetValue()
	}
	if matchErrors() != 0 || logs.Len() != 0 {
		t.Fatalf("errors counted or logged for good matches: %v, %q", matchErrors(), logs.String())
	}

	// A Match that ends with its context is no failure; a closed store is.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	run(ctx, "a/#", 10)
	if matchErrors() != 0 {
		t.Errorf("a cancelled replay was counted as a store error")
	}
	store.Close()
	run(context.Background(), "a/#", 10)
	if matchErrors() != 1 || !strings.Contains(logs.String(), "filter=a/#") || !strings.Contains(logs.String(), "client=c1") {
		t.Errorf("failed Match: counted %v, logged %q", matchErrors(), logs.String())
	}
}

// What a refused retained write means to its publisher, and how it is counted.
func TestRefused(t *testing.T) {
	for _, tc := range []struct {
		err                    error
		want                   retain.Refusal
		quota, store, setError float64
		logged                 bool
	}{
		{nil, retain.Stored, 0, 0, 0, false},
		{retain.ErrQuotaExceeded, retain.OverQuota, 1, 0, 0, false},
		{fmt.Errorf("topic a: %w", retain.ErrQuotaExceeded), retain.OverQuota, 1, 0, 0, false},
		{fmt.Errorf("%w: redis down", retain.ErrUnavailable), retain.StoreFailed, 0, 1, 1, true},
		{context.DeadlineExceeded, retain.StoreFailed, 0, 1, 1, true},
	} {
		met := metrics.New()
		var logs bytes.Buffer
		got := retain.Refused(tc.err, met, slog.New(slog.NewTextHandler(&logs, nil)), "topic", "a")
		value := func(f interface{ Write(*dto.Metric) error }) float64 {
			var m dto.Metric
			_ = f.Write(&m)
			return m.GetCounter().GetValue()
		}
		quota, store := value(met.RetainRefused.WithLabelValues("quota")), value(met.RetainRefused.WithLabelValues("store"))
		setError := value(met.StoreErrors.WithLabelValues("set"))
		if got != tc.want || quota != tc.quota || store != tc.store || setError != tc.setError {
			t.Errorf("%v: %v, refused quota=%v store=%v, store errors set=%v; want %v, %v %v %v",
				tc.err, got, quota, store, setError, tc.want, tc.quota, tc.store, tc.setError)
		}
		if logged := strings.Contains(logs.String(), "topic=a"); logged != tc.logged {
			t.Errorf("%v: logged %q, want a line: %v", tc.err, logs.String(), tc.logged)
		}
	}
}

// deadlineStore records the deadline of the context its Set is given.
type deadlineStore struct {
	retain.Store
	deadline time.Time
	ok       bool
}

func (s *deadlineStore) Set(ctx context.Context, m *core.Message) error {
	s.deadline, s.ok = ctx.Deadline()
	return s.Store.Set(ctx, m)
}

// Every retained write through the router is bounded by WriteTimeout, for
// every front-end alike.
func TestRetainerBoundsTheWrite(t *testing.T) {
	store := &deadlineStore{Store: memory.New(retain.Limits{})}
	defer store.Close()
	before := time.Now()
	if err := (retain.Retainer{Store: store}).Retain(context.Background(), &core.Message{Topic: "t", Payload: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if !store.ok || store.deadline.Before(before) || store.deadline.After(time.Now().Add(retain.WriteTimeout)) {
		t.Fatalf("Set's deadline %v (set: %v), want within %v of the call", store.deadline, store.ok, retain.WriteTimeout)
	}
}
