package retain_test

import (
	"context"
	"testing"
	"time"

	"github.com/tolsey/tolsey/core"
	"github.com/tolsey/tolsey/retain"
)

// A retained message that entered gateway a reaches gateway b live from
// the cluster while a subscription on b is being made: the stored copy b's
// replay then reads is not sent again when b received the live one after
// the subscription began (b's router delivered it to it), and is sent when
// b received it before (it was not delivered live) or never. Judged by
// when b received it, on b's clock, not by a's Created (clock skew would
// turn a duplicate into a loss). Before, every stored copy from another
// gateway was sent: the subscriber got that message twice
// (docs/cluster.md, "Retained").
func TestReplaySkipsCopyReceivedLiveFromTheCluster(t *testing.T) {
	var now time.Time
	router := core.NewRouter(core.RouterOptions{Node: "b", Now: func() time.Time { return now }})
	r := retain.Replay{Node: "b", Live: router}
	// a's clock is an hour ahead of b's: its Created says nothing here.
	created := time.Date(2025, 1, 1, 13, 0, 0, 0, time.UTC)
	since := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	later := since.Add(time.Minute)
	stored := core.Message{Topic: "r/x", Retain: true, Created: created, Origin: core.Origin{Node: "a"}}

	if !r.Due(&stored, since, later) {
		t.Fatal("a stored copy b never received live was not sent")
	}
	now = since.Add(-time.Second) // received before the subscription: not delivered live to it
	live := stored
	router.Publish(context.Background(), &live)
	if !r.Due(&stored, since, later) {
		t.Fatal("a copy b received before the subscription began was not sent")
	}
	now = since.Add(time.Second) // received after: delivered live
	live = stored
	router.Publish(context.Background(), &live)
	if r.Due(&stored, since, later) {
		t.Fatal("a copy b received live after the subscription began was sent again")
	}
	newer := stored
	newer.Created = created.Add(time.Second) // another message on the topic: not the one received
	if !r.Due(&newer, since, later) {
		t.Fatal("a stored copy other than the one received live was not sent")
	}
}
