package session

import (
	"context"
	"testing"

	"github.com/tolsey/tolsey/retain/redistest"
)

// One batch holding ops of one client with two epochs: each op is judged
// by its own epoch against the stored one. Before, the script cached the
// first op's verdict per client and applied it to the next op whatever
// that op's epoch (found by review).
func TestMixedEpochBatch(t *testing.T) {
	rs := redistest.Start(t)
	r, err := OpenRedis(context.Background(), rs.URL(), "rv:")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	e, err := r.TakeEpoch("c") // 1
	if err != nil || e != 1 {
		t.Fatal(e, err)
	}
	// stale delete (epoch 0) then the new session (epoch 1), one batch
	if err := r.Apply([]Op{
		{Kind: DeleteSession, Client: "c", Epoch: 0},
		{Kind: PutClient, Client: "c", Value: []byte("new"), Epoch: 1},
	}); err != nil {
		t.Fatal(err)
	}
	var got string
	if _, err := r.TakeClient("c", func(k Kind, _ string, _, v []byte) error { got = string(v); return nil }); err != nil {
		t.Fatal(err)
	}
	if got != "new" {
		t.Errorf("write with the present epoch refused: got %q, want new", got)
	}
	// epoch now 2: a good op then a stale one in one batch
	if err := r.Apply([]Op{
		{Kind: PutClient, Client: "c", Value: []byte("good"), Epoch: 2},
		{Kind: PutClient, Client: "c", Value: []byte("stale"), Epoch: 1},
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.TakeClient("c", func(k Kind, _ string, _, v []byte) error { got = string(v); return nil }); err != nil {
		t.Fatal(err)
	}
	if got != "good" {
		t.Errorf("write with an older epoch went through: got %q, want good", got)
	}
}
