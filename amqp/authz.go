package amqp

import (
	"strconv"
	"strings"

	"github.com/tolsey/tolsey/amqp/internal/frames"
	"github.com/tolsey/tolsey/core/auth"
)

// Authorisation (docs/security.md, "AMQP"): with Options.Auth holding a
// users file, every address a link or a message names is checked against
// the ACL in force for the identity SASL established, the container-id
// standing for %c:
//
//   - a sending link's target topic at attach (refused with
//     amqp:unauthorized-access when publishing there is denied), and every
//     message again (rejected with amqp:unauthorized-access), the
//     anonymous relay's "to" included: a reload applies to the next
//     message;
//   - a receiving link's source filter at attach (Store.Subscribe: Deny
//     refuses the attach; AllowPartly marks the link partial, and each
//     message, retained copies included, is checked as it is delivered);
//   - a queue as the topic "$queue/<name>": publish to put into it,
//     subscribe to consume or browse it.
//
// Temporary addresses are exempt: a dynamic node the connection created
// is its own, and a reply sent to someone's "$tmp/" or "$tmpq/" address
// (request-reply) needs no rule. Subscribing to a temporary topic the
// connection did not create goes through the ACL like any "$" topic.

// may reports whether the connection may perform action on topic under the
// rules in force; always true without Options.Auth or without a users
// file. The reader and publishers' goroutines (delivery) call it: the
// identity and container-id are fixed before any link exists.
func (c *conn) may(action auth.Action, topic string) bool {
	st := c.s.opts.Auth.Load()
	return st == nil || st.Allowed(c.ident, c.containerID, action, topic)
}

// subscribeDecision is the ACL's answer to a receiving link's filter.
func (c *conn) subscribeDecision(filter string) auth.Decision {
	st := c.s.opts.Auth.Load()
	if st == nil {
		return auth.Allow
	}
	return st.Subscribe(c.ident, c.containerID, filter)
}

// mayPublish reports whether a message may go to topic, or into queue
// qname when it is not "".
func (c *conn) mayPublish(topic, qname string) bool {
	if qname != "" {
		return strings.HasPrefix(qname, tmpQueuePrefix) || c.may(auth.Publish, queueTopic+qname)
	}
	return isTemp(topic) || c.may(auth.Publish, topic)
}

// mayConsume reports whether the connection may consume or browse queue
// qname.
func (c *conn) mayConsume(qname string) bool {
	return c.ownsTemp(tmpQueuePrefix, qname) || c.may(auth.Subscribe, queueTopic+qname)
}

// ownsTemp reports whether name is a temporary address (prefix tmpPrefix)
// or queue (tmpQueuePrefix) this connection created: newTemp and
// newTempQueue name them after the connection.
func (c *conn) ownsTemp(prefix, name string) bool {
	return strings.HasPrefix(name, prefix+c.s.opts.Node+"/"+strconv.FormatUint(c.id, 10)+"/")
}

// mayRead reports whether m's topic may be delivered on l: every topic is
// when its filter was allowed whole.
func (l *outLink) mayRead(topic string) bool {
	return !l.revoked.Load() && (!l.aclPartial.Load() || l.c.may(auth.Subscribe, topic))
}

// unauthorized is the refusal of an attach the ACL denies, counted as
// MQTT counts its refusals: tolsey_auth_failures_total{protocol="amqp",
// reason="publish_denied"} for a sending link, "subscribe_denied" for a
// receiving one.
func (c *conn) unauthorized(action auth.Action, format string, args ...any) *LinkError {
	c.s.opts.Metrics.AuthFailure("amqp", deniedReason(action))
	return linkErr(frames.ErrCondUnauthorizedAccess, format, args...)
}

func deniedReason(action auth.Action) string {
	if action == auth.Publish {
		return "publish_denied"
	}
	return "subscribe_denied"
}

// rejectUnauthorized is the outcome of a message its sender may not
// publish.
var rejectUnauthorized = &frames.Rejected{Error: wireError(frames.ErrCondUnauthorizedAccess, "not authorised to publish there")}
