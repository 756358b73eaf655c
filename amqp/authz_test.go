package amqp

import (
	"testing"

	goamqp "github.com/Azure/go-amqp"

	"github.com/tolsey/tolsey/amqp/internal/frames"
	"github.com/tolsey/tolsey/core/queue"
)

// aclRules: alice (group devices) may use devices/alice/#, read public/#
// but public/secret, publish to public/#, and use queue jobs; everything
// else is denied.
const aclRules = `acl:
  - {allow: [publish, subscribe], topic: "devices/%u/#", groups: [devices]}
  - {allow: [subscribe], topic: "public/#"}
  - {deny: [subscribe], topic: "public/secret"}
  - {allow: [publish], topic: "public/#", users: [alice]}
  - {allow: [publish, subscribe], topic: "$queue/jobs", users: [alice]}
default: deny
`

func aliceSession(t *testing.T, e *env) *goamqp.Session {
	t.Helper()
	c := e.dial(t, &goamqp.ConnOptions{SASLType: goamqp.SASLTypePlain("alice", "secret")})
	s, err := c.NewSession(ctx5(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestACLPublish: a sender to a denied topic is refused at attach; the
// anonymous relay's messages to one are rejected, each, with
// amqp:unauthorized-access, and the allowed ones go through.
func TestACLPublish(t *testing.T) {
	e := authEnv(t, false, aclRules)
	s := aliceSession(t, e)
	if _, err := s.NewSender(ctx5(t), "secret/x", nil); amqpCond(err) != string(frames.ErrCondUnauthorizedAccess) {
		t.Fatalf("sender to secret/x: %v, want amqp:unauthorized-access", err)
	}
	r := newReceiver(t, s, "devices/alice/#", nil)
	newSender(t, s, "devices/alice/t", nil) // allowed: attaches

	relay := newSender(t, s, "", nil)
	to := "secret/x"
	err := relay.Send(ctx5(t), &goamqp.Message{Data: [][]byte{[]byte("no")}, Properties: &goamqp.MessageProperties{To: &to}}, nil)
	if amqpCond(err) != string(frames.ErrCondUnauthorizedAccess) {
		t.Fatalf("relay to secret/x: %v, want rejected amqp:unauthorized-access", err)
	}
	sendTopics(t, relay, "devices/alice/a")
	expectBodies(t, "devices/alice/#", receiveUntil(t, r, "devices/alice/a"), "devices/alice/a")
}

// TestACLSubscribe: a denied filter is refused at attach; a filter allowed
// only partly gets the topics it may read, live and retained.
func TestACLSubscribe(t *testing.T) {
	e := authEnv(t, false, aclRules)
	s := aliceSession(t, e)
	if _, err := s.NewReceiver(ctx5(t), "secret/#", nil); amqpCond(err) != string(frames.ErrCondUnauthorizedAccess) {
		t.Fatalf("receiver on secret/#: %v, want amqp:unauthorized-access", err)
	}
	if _, err := s.NewReceiver(ctx5(t), "public/secret", nil); amqpCond(err) != string(frames.ErrCondUnauthorizedAccess) {
		t.Fatalf("receiver on public/secret: %v, want amqp:unauthorized-access", err)
	}

	// Retained copies first: the late subscriber must not get secret's.
	for _, topic := range []string{"public/secret", "public/r"} {
		snd := newSender(t, s, topic, nil)
		send(t, snd, retainedMsg(topic))
	}
	r := newReceiver(t, s, "public/#", nil)
	sendTopics(t, newSender(t, s, "", nil), "public/secret", "public/b")
	expectBodies(t, "public/#", receiveUntil(t, r, "public/b"), "public/r", "public/b")

	// A durable subscription (a group, retained replay on creation) filters
	// the same way.
	d := newReceiver(t, s, "public/#", &goamqp.ReceiverOptions{Name: "dur", Durability: goamqp.DurabilityUnsettledState, ExpiryPolicy: goamqp.ExpiryPolicyNever})
	sendTopics(t, newSender(t, s, "", nil), "public/secret", "public/c")
	expectBodies(t, "durable public/#", receiveUntil(t, d, "public/c"), "public/r", "public/c")
}

// TestACLQueues: a queue is the topic $queue/<name> to the ACL.
func TestACLQueues(t *testing.T) {
	e := authEnv(t, false, aclRules)
	e.declare(t, queue.Config{Name: "jobs"})
	e.declare(t, queue.Config{Name: "other"})
	s := aliceSession(t, e)
	for _, addr := range []string{"queue://other"} {
		if _, err := s.NewSender(ctx5(t), addr, nil); amqpCond(err) != string(frames.ErrCondUnauthorizedAccess) {
			t.Fatalf("sender to %s: %v, want amqp:unauthorized-access", addr, err)
		}
		if _, err := s.NewReceiver(ctx5(t), addr, nil); amqpCond(err) != string(frames.ErrCondUnauthorizedAccess) {
			t.Fatalf("receiver on %s: %v, want amqp:unauthorized-access", addr, err)
		}
	}
	relay := newSender(t, s, "", nil)
	to := "queue://other"
	if err := relay.Send(ctx5(t), &goamqp.Message{Data: [][]byte{[]byte("no")}, Properties: &goamqp.MessageProperties{To: &to}}, nil); amqpCond(err) != string(frames.ErrCondUnauthorizedAccess) {
		t.Fatalf("relay to queue://other: %v, want rejected amqp:unauthorized-access", err)
	}
	send(t, newSender(t, s, "queue://jobs", nil), goamqp.NewMessage([]byte("job")))
	if got := body(receive(t, newReceiver(t, s, "queue://jobs", nil))); got != "job" {
		t.Fatalf("queue://jobs: %q", got)
	}
}
