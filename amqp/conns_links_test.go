package amqp

import (
	"context"
	"fmt"
	"testing"

	goamqp "github.com/Azure/go-amqp"
)

// TestLinkListedOnceAttached: a link is in the admin API's list of its
// connection's links (GET /api/v1/connections/{id}) as soon as its client
// has the attach answer, once, with a sender's credit granted; it was
// noted only after the answer had gone to the writer, so a client that
// asked at once could find it missing.
func TestLinkListedOnceAttached(t *testing.T) {
	e := startServer(t, func(o *Options) { o.AutoCreateQueues = true })
	s := e.session(t)
	conns := e.srv.ConnectionList()
	if len(conns) != 1 {
		t.Fatalf("connections %+v", conns)
	}
	id := conns[0].ID
	check := func(name, role string) {
		t.Helper()
		links, ok := e.srv.Links(id)
		if !ok {
			t.Fatal("the connection is not listed")
		}
		n := 0
		for _, l := range links {
			if l.Name == name {
				n++
				if l.Role != role {
					t.Errorf("link %q listed as a %s", name, l.Role)
				}
				if role == "sender" && l.Credit == 0 {
					t.Errorf("sender %q listed without the credit it was granted", name)
				}
			}
		}
		if n != 1 {
			t.Fatalf("link %q listed %d times right after its attach: %+v", name, n, links)
		}
	}
	for i := range 300 {
		name := fmt.Sprintf("r%d", i)
		r, err := s.NewReceiver(ctx5(t), fmt.Sprintf("listed/%d", i%5), &goamqp.ReceiverOptions{Name: name})
		if err != nil {
			t.Fatal(err)
		}
		check(name, "receiver")
		name = fmt.Sprintf("s%d", i)
		snd, err := s.NewSender(ctx5(t), fmt.Sprintf("listed/%d", i%5), &goamqp.SenderOptions{Name: name})
		if err != nil {
			t.Fatal(err)
		}
		check(name, "sender")
		name = fmt.Sprintf("q%d", i)
		q, err := s.NewReceiver(ctx5(t), "queue://listed", &goamqp.ReceiverOptions{Name: name})
		if err != nil {
			t.Fatal(err)
		}
		check(name, "receiver")
		for _, l := range []interface {
			Close(ctx context.Context) error
		}{r, snd, q} {
			if err := l.Close(ctx5(t)); err != nil {
				t.Fatal(err)
			}
		}
	}
}
