package amqp

import (
	"testing"

	goamqp "github.com/Azure/go-amqp"
)

// TestKeptMessageGetsTo: a kept (native) AMQP message whose sender set no
// `to` (it named the topic in its link's target) reaches a wildcard
// receiver, a late receiver (its stored retained copy) and a queue's
// consumer with properties.to naming its topic, which Qpid JMS reads as
// JMSDestination (docs/mapping.md, "AMQP -> AMQP"); the rest of the
// properties as sent. A message without a properties section gains one.
func TestKeptMessageGetsTo(t *testing.T) {
	e := startServer(t, func(o *Options) { o.AutoCreateQueues = true })
	s := e.session(t)
	live := newReceiver(t, s, "a/+", nil)
	subj := "kept"
	for _, tc := range []struct {
		target string
		m      *goamqp.Message
	}{
		// a message-id and a subject: kept, with a properties section
		{"a/b", &goamqp.Message{Properties: &goamqp.MessageProperties{MessageID: "id-1", Subject: &subj},
			Annotations: goamqp.Annotations{"x-opt-retain": true}, Value: "one"}},
		// a typed body and no properties section at all
		{"a/c", &goamqp.Message{Value: int32(7)}},
	} {
		send(t, newSender(t, s, tc.target, nil), tc.m)
		got := receive(t, live)
		if got.Properties == nil || got.Properties.To == nil || *got.Properties.To != tc.target {
			t.Errorf("live delivery of a message sent to %q: properties %+v", tc.target, got.Properties)
		}
		if tc.m.Properties != nil {
			if got.Properties == nil || got.Properties.MessageID != "id-1" || got.Properties.Subject == nil || *got.Properties.Subject != subj {
				t.Errorf("properties not kept: %+v", got.Properties)
			}
		}
	}

	late := newReceiver(t, e.session(t), "a/+", nil)
	got := receive(t, late)
	if got.Annotations["x-opt-retain"] != true {
		t.Fatalf("late receiver got a live message: %+v", got.Annotations)
	}
	if got.Properties == nil || got.Properties.To == nil || *got.Properties.To != "a/b" {
		t.Errorf("retained copy: properties %+v", got.Properties)
	}

	// Put straight into a queue: its address, as a rendered message gets.
	send(t, newSender(t, s, "queue://kept", nil), &goamqp.Message{Properties: &goamqp.MessageProperties{MessageID: "id-2"}, Value: "q"})
	got = receive(t, newReceiver(t, s, "queue://kept", nil))
	if got.Properties == nil || got.Properties.To == nil || *got.Properties.To != "queue://kept" {
		t.Errorf("queued message: properties %+v", got.Properties)
	}
}
