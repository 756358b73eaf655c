package queue

import (
	"fmt"
	"github.com/tolsey/tolsey/core"
	"testing"
)

// selectOdd is a Select predicate: messages whose payload is an odd digit.
func selectOdd(m *core.Message) bool { return len(m.Payload) == 1 && (m.Payload[0]-'0')%2 == 1 }

// TestSelectLeavesOthersForOtherConsumers: a consumer with Select takes
// only what it selects, in order; a message it does not select, at the
// head of the queue or not, stays for the other consumers; a browser with
// Select sees only what it selects.
func TestSelectLeavesOthersForOtherConsumers(t *testing.T) {
	e, _ := newEngine(t, Options{})
	q := declare(t, e, Config{Name: "sel"})
	for i := range 6 {
		putWait(t, e, "sel", fmt.Sprint(i))
	}
	odd, ow := selecting(t, q, ConsumerOptions{Select: selectOdd})
	if got := take(t, odd, ow, 3); got != "[1 3 5]" {
		t.Fatalf("the selecting consumer took %s, want [1 3 5]", got)
	}
	if d, ok := odd.Next(); ok {
		t.Fatalf("the selecting consumer took %s too", d.Msg.Payload)
	}
	br, err := q.Consume(ConsumerOptions{Browse: true, Select: func(m *core.Message) bool { return string(m.Payload) != "2" }})
	if err != nil {
		t.Fatal(err)
	}
	defer br.Close()
	var seen []string
	for d, ok := br.Next(); ok; d, ok = br.Next() {
		seen = append(seen, string(d.Msg.Payload))
	}
	if fmt.Sprint(seen) != "[0 4]" {
		t.Fatalf("the selecting browser saw %v, want [0 4]", seen)
	}
	all, w := consumer(t, q, false)
	defer all.Close()
	if got := take(t, all, w, 3); got != "[0 2 4]" {
		t.Fatalf("the other consumer took %s, want [0 2 4]", got)
	}
	if n := q.Info().Messages; n != 0 {
		t.Fatalf("%d messages left", n)
	}
}

// TestSelectOnExclusiveQueueAndFallback: a selecting consumer, like a
// filtered one, is outside an exclusive queue's active/standby order, and
// a fallback consumer takes what no selecting consumer selects.
func TestSelectOnExclusiveQueueAndFallback(t *testing.T) {
	e, _ := newEngine(t, Options{})
	q := declare(t, e, Config{Name: "xsel", Access: Exclusive})
	putWait(t, e, "xsel", "1")
	putWait(t, e, "xsel", "2")
	fb, fw := selecting(t, q, ConsumerOptions{Fallback: true})
	odd, ow := selecting(t, q, ConsumerOptions{Select: selectOdd})
	if got := take(t, fb, fw, 1); got != "[2]" {
		t.Fatalf("the fallback took %s, want [2]", got)
	}
	if got := take(t, odd, ow, 1); got != "[1]" {
		t.Fatalf("the selecting consumer took %s, want [1]", got)
	}
}

// selecting attaches a consumer with opts whose notifications land in a
// channel.
func selecting(t *testing.T, q *Queue, opts ConsumerOptions) (*Consumer, chan struct{}) {
	t.Helper()
	ch := make(chan struct{}, 1)
	opts.Notify = func() {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	c, err := q.Consume(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c, ch
}
