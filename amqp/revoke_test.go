package amqp

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"

	"github.com/tolsey/tolsey/amqp/internal/frames"
	"github.com/tolsey/tolsey/core/auth"
	"github.com/tolsey/tolsey/core/queue"
)

const revokeBefore = `acl:
  - {allow: [publish, subscribe], topic: "feed/#"}
  - {allow: [publish, subscribe], topic: "$queue/jobs"}
default: deny
`

// revokeAfter denies alice feed/a/# and queue jobs, and makes her feed/#
// "allow partly".
const revokeAfter = `acl:
  - {allow: [publish, subscribe], topic: "feed/#"}
  - {allow: [publish, subscribe], topic: "$queue/jobs"}
  - {deny: [subscribe], topic: "feed/a/#", users: [alice]}
  - {deny: [subscribe], topic: "$queue/jobs", users: [alice]}
default: deny
`

// connCond is the remote error condition that closed a connection.
func connCond(err error) string {
	var ce *goamqp.ConnError
	if errors.As(err, &ce) && ce.RemoteErr != nil {
		return string(ce.RemoteErr.Condition)
	}
	return amqpCond(err)
}

// TestRevokeReceivingLinks: a sender sends feed/a/<n> and feed/b/<n> without
// pause while a reload denies alice feed/a/# and queue jobs. Her receiver
// on feed/a/# is detached with amqp:unauthorized-access and gets nothing
// sent after the swap; her queue://jobs receiver is detached the same way;
// her feed/# receiver, now "allow partly", gets every feed/b message, in
// order, and no feed/a one sent after the swap; her connection stays open.
// Before the revocation the links kept the decision of their attach.
func TestRevokeReceivingLinks(t *testing.T) {
	e := authEnv(t, false, revokeBefore)
	e.declare(t, queue.Config{Name: "jobs"})
	live := e.srv.opts.Auth
	s := aliceSession(t, e)
	ra := newReceiver(t, s, "feed/a/#", nil)
	rall := newReceiver(t, s, "feed/#", &goamqp.ReceiverOptions{Credit: 1000})
	rq := newReceiver(t, s, "queue://jobs", nil)

	relay := newSender(t, aliceSession(t, e), "", nil)
	var next atomic.Int64 // taken before the send
	stop, pubDone := make(chan struct{}), make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for {
			select {
			case <-stop:
				pubDone <- nil
				return
			default:
			}
			n := strconv.FormatInt(next.Add(1)-1, 10)
			for _, to := range []string{"feed/a/" + n, "feed/b/" + n} {
				to := to
				if err := relay.Send(ctx, &goamqp.Message{Data: [][]byte{[]byte(to)}, Properties: &goamqp.MessageProperties{To: &to}}, nil); err != nil {
					pubDone <- err
					return
				}
			}
		}
	}()
	seq := func(b string) int {
		n, _ := strconv.Atoi(b[strings.LastIndexByte(b, '/')+1:])
		return n
	}
	// feed/# under way before the reload.
	var gotAll []string
	for len(gotAll) < 40 {
		gotAll = append(gotAll, body(receive(t, rall)))
	}

	live.Swap(usersStore(t, usersYAML(t)+revokeAfter))
	from := int(next.Load())
	for next.Load() < int64(from+100) {
		gotAll = append(gotAll, body(receive(t, rall)))
	}
	close(stop)
	if err := <-pubDone; err != nil {
		t.Fatalf("sender: %v", err)
	}
	last := int(next.Load()) - 1
	for want := "feed/b/" + strconv.Itoa(last); gotAll[len(gotAll)-1] != want; {
		gotAll = append(gotAll, body(receive(t, rall)))
	}
	b := 0
	for _, m := range gotAll {
		if strings.HasPrefix(m, "feed/b/") {
			if seq(m) != b {
				t.Fatalf("feed/#: feed/b message %d is %s: a gap", b, m)
			}
			b++
		} else if seq(m) >= from {
			t.Fatalf("feed/#: received %s, sent after the reload made feed/a/# unreadable (from %d)", m, from)
		}
	}

	// feed/a/#: what was sent before the swap may still come, then the detach.
	for {
		m, err := ra.Receive(ctx5(t), nil)
		if err != nil {
			if amqpCond(err) != string(frames.ErrCondUnauthorizedAccess) {
				t.Fatalf("feed/a/# receiver: %v, want a detach with amqp:unauthorized-access", err)
			}
			break
		}
		if n := seq(body(m)); n >= from {
			t.Fatalf("feed/a/# received %s, sent after the reload (from %d)", body(m), from)
		}
		_ = ra.AcceptMessage(ctx5(t), m)
	}
	if _, err := rq.Receive(ctx5(t), nil); amqpCond(err) != string(frames.ErrCondUnauthorizedAccess) {
		t.Fatalf("queue://jobs receiver: %v, want a detach with amqp:unauthorized-access", err)
	}
	// The connection is still open.
	r := newReceiver(t, s, "feed/b/#", nil)
	sendTopics(t, newSender(t, s, "", nil), "feed/b/end")
	expectBodies(t, "feed/b/# after the reload", receiveUntil(t, r, "feed/b/end"), "feed/b/end")
	if got := e.authFailures("subscription_revoked"); got != 2 {
		t.Fatalf("subscription_revoked counted %v, want 2", got)
	}
}

// TestRevokeCloses: with acl.onRevoke: disconnect, a connection holding a
// receiving link a reload denies is closed with amqp:unauthorized-access;
// a connection whose user left the file is closed the same way whatever
// acl.onRevoke says.
func TestRevokeCloses(t *testing.T) {
	for _, tc := range []struct {
		name     string
		onRevoke auth.Revoke
		after    string
	}{
		{"denied", auth.RevokeDisconnect, usersYAMLPlaceholder + revokeAfter},
		{"user-removed", auth.RevokeUnsubscribe, "users: []\n" + revokeBefore},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := authEnv(t, false, revokeBefore)
			live := e.srv.opts.Auth
			live.OnRevoke = tc.onRevoke
			c := e.dial(t, &goamqp.ConnOptions{SASLType: goamqp.SASLTypePlain("alice", "secret")})
			s, err := c.NewSession(ctx5(t), nil)
			if err != nil {
				t.Fatal(err)
			}
			r := newReceiver(t, s, "feed/a/#", nil)
			live.Swap(usersStore(t, strings.Replace(tc.after, usersYAMLPlaceholder, usersYAML(t), 1)))
			if _, err := r.Receive(ctx5(t), nil); connCond(err) != string(frames.ErrCondUnauthorizedAccess) {
				t.Fatalf("receive: %v, want the connection closed with amqp:unauthorized-access", err)
			}
		})
	}
}

const usersYAMLPlaceholder = "#users\n"
