package amqp

import (
	"context"
	"strings"
	"testing"

	goamqp "github.com/Azure/go-amqp"

	"github.com/tolsey/tolsey/core"
)

// exceptOpts asks for the except filter with value v (a string or a list
// of strings), as go-amqp writes a vendor filter: name as key and
// descriptor.
func exceptOpts(name string, v any) *goamqp.ReceiverOptions {
	return &goamqp.ReceiverOptions{Name: name, Credit: 10,
		Filters: []goamqp.LinkFilter{goamqp.NewLinkFilter(string(exceptFilterName), 0, v)}}
}

// sendTopics sends, in order, one message to each topic through the
// anonymous relay, each with its topic as body; each is accepted before
// the next goes.
func sendTopics(t *testing.T, snd *goamqp.Sender, topics ...string) {
	t.Helper()
	for _, topic := range topics {
		to := topic
		send(t, snd, &goamqp.Message{Data: [][]byte{[]byte(topic)}, Properties: &goamqp.MessageProperties{To: &to}})
	}
}

// receiveUntil returns the bodies r receives up to and including last.
// Messages from one sender arrive in the order sent, so one sent before
// last and missing here was not delivered.
func receiveUntil(t *testing.T, r *goamqp.Receiver, last string) []string {
	t.Helper()
	var got []string
	for {
		b := body(receive(t, r))
		got = append(got, b)
		if b == last {
			return got
		}
	}
}

func expectBodies(t *testing.T, who string, got []string, want ...string) {
	t.Helper()
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("%s received %v, want %v", who, got, want)
	}
}

// TestExceptFilter: a receiver on animals/# with the except filter
// animals/fox gets animals/frog and not animals/fox, and its attach answer
// carries the filter (it was applied); a receiver without it gets both.
// A list of filters, in the queue grammar, works too.
func TestExceptFilter(t *testing.T) {
	e := startServer(t)
	s := e.session(t)
	snd := newSender(t, s, "", nil)

	except := newReceiver(t, s, "animals/#", exceptOpts("except", "animals/fox"))
	if v := except.LinkSourceFilterValue(string(exceptFilterName)); v != "animals/fox" {
		t.Fatalf("attach answer's except filter: %#v, want \"animals/fox\"", v)
	}
	plain := newReceiver(t, s, "animals/#", &goamqp.ReceiverOptions{Credit: 10})
	several := newReceiver(t, s, "animals/#", exceptOpts("several", []string{"animals/f*", "!animals/cat"}))

	sendTopics(t, snd, "animals/fox", "animals/frog", "animals/cat", "animals/dog")
	expectBodies(t, "except", receiveUntil(t, except, "animals/dog"), "animals/frog", "animals/cat", "animals/dog")
	expectBodies(t, "plain", receiveUntil(t, plain, "animals/dog"), "animals/fox", "animals/frog", "animals/cat", "animals/dog")
	expectBodies(t, "several", receiveUntil(t, several, "animals/dog"), "animals/dog")
}

// TestExceptFilterRetained: a late receiver's stored retained copies obey
// its except filter.
func TestExceptFilterRetained(t *testing.T) {
	e := startServer(t)
	for _, topic := range []string{"animals/fox", "animals/frog"} {
		if err := e.store.Set(context.Background(), &core.Message{Topic: topic, Payload: []byte(topic), Retain: true, QoS: 1}); err != nil {
			t.Fatal(err)
		}
	}
	s := e.session(t)
	r := newReceiver(t, s, "animals/#", exceptOpts("late", "animals/fox"))
	sendTopics(t, newSender(t, s, "", nil), "animals/zebra") // live: after the stored copies
	expectBodies(t, "late", receiveUntil(t, r, "animals/zebra"), "animals/frog", "animals/zebra")
}

// TestExceptFilterDurable: a durable subscription keeps its except filter
// while no link is attached; resumed with other exceptions it is a
// changed subscription (JMS replaces it), which takes the new ones.
func TestExceptFilterDurable(t *testing.T) {
	e := startServer(t)
	snd := newSender(t, e.session(t), "", nil)
	opts := func(v string) *goamqp.ReceiverOptions {
		o := durableOpts("sub")
		o.Filters = exceptOpts("", v).Filters
		return o
	}
	c1, s1 := dialAs(t, e, "jms")
	r := newReceiver(t, s1, "animals/#", opts("animals/fox"))
	sendTopics(t, snd, "animals/fox", "animals/frog")
	expectBodies(t, "first", receiveUntil(t, r, "animals/frog"), "animals/frog")
	c1.Close()
	eventually(t, "connection gone", func() bool { return e.srv.Connections() == 1 })
	sendTopics(t, snd, "animals/fox", "animals/frog") // kept for the subscription, fox excepted

	c2, s2 := dialAs(t, e, "jms")
	r = newReceiver(t, s2, "animals/#", opts("animals/fox"))
	expectBodies(t, "resumed", receiveUntil(t, r, "animals/frog"), "animals/frog")
	c2.Close() // not a closing detach: the subscription stays
	eventually(t, "connection gone", func() bool { return e.srv.Connections() == 1 })

	_, s3 := dialAs(t, e, "jms")
	r = newReceiver(t, s3, "animals/#", opts("animals/frog"))
	sendTopics(t, snd, "animals/fox", "animals/frog", "animals/dog")
	expectBodies(t, "changed", receiveUntil(t, r, "animals/dog"), "animals/fox", "animals/dog")
}

// TestExceptFilterInvalid: an except filter that is not a valid filter, or
// not a string, refuses the attach with amqp:invalid-field naming it.
func TestExceptFilterInvalid(t *testing.T) {
	e := startServer(t)
	s := e.session(t)
	for _, v := range []any{"animals/#/fox", int64(7), []string{}} {
		_, err := s.NewReceiver(ctx5(t), "animals/#", exceptOpts("bad", v))
		if amqpCond(err) != "amqp:invalid-field" || !strings.Contains(err.Error(), string(exceptFilterName)) {
			t.Fatalf("except filter %#v: %v, want amqp:invalid-field naming %s", v, err, exceptFilterName)
		}
	}
}
