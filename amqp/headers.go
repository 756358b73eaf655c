package amqp

import (
	"strconv"
	"time"

	"github.com/tolsey/tolsey/amqp/internal/encoding"
	"github.com/tolsey/tolsey/amqp/internal/frames"
	"github.com/tolsey/tolsey/core"
)

// The AMQP fields behind JMSType, JMSPriority and JMSTimestamp
// (properties.subject, header.priority, properties.creation-time) have no
// MQTT 5 property. They travel to MQTT subscribers as user properties, so
// that an MQTT 5 responder that echoes the request's user properties (the
// usual MQTT 5 request/response) gives a JMS requester its headers back,
// and an MQTT publisher can set them for JMS consumers
// (docs/mapping.md, "JMS headers"). Spelled as JMS identifiers, like
// propAMQPType, so that Qpid JMS can read one that comes back unrestored.
// Their names are the core's: selectors read them too.
const (
	propSubject      = core.PropSubject      // JMSType
	propPriority     = core.PropPriority     // JMSPriority (JMS uses 0..9)
	propCreationTime = core.PropCreationTime // JMSTimestamp
)

// defaultPriority is the priority of a message whose header has none
// (AMQP 1.0 part 3 §3.2.1; the JMS default too).
const defaultPriority = 4

// headerProps is how many user properties renderHeaders adds at most.
const headerProps = 3

// renderHeaders adds the user properties for am's subject, priority (when
// not the default) and creation time, if it has them. Only messages kept
// native have them (needsNative), so the neutral path pays nothing.
func renderHeaders(m *core.Message, am *frames.Message) {
	if p := am.Properties; p != nil {
		if p.Subject != "" {
			m.UserProperties = append(m.UserProperties, core.UserProperty{Key: propSubject, Value: p.Subject})
		}
		if p.CreationTime != 0 {
			m.UserProperties = append(m.UserProperties, core.UserProperty{Key: propCreationTime, Value: p.CreationTime.Time().Format(time.RFC3339Nano)}) // formatValue's, without boxing it
		}
	}
	if h := am.Header; h != nil && h.Priority != nil && *h.Priority != defaultPriority {
		m.UserProperties = append(m.UserProperties, core.UserProperty{Key: propPriority, Value: strconv.Itoa(int(*h.Priority))})
	}
}

// restoredHeaders is what an MQTT message's header user properties give
// the AMQP message it becomes; the zero value gives nothing.
type restoredHeaders struct {
	subject  string
	created  encoding.Timestamp // 0: none
	priority uint8
	taken    uint8 // the takenX bits of the properties read
}

const (
	takenSubject uint8 = 1 << iota
	takenPriority
	takenCreated
)

// take reads u when it is one of the header user properties and its value
// parses, and reports whether it did: such a property is said by the
// header field it restores, not sent as an application property. One that
// does not parse stays an application property, as a typed property does.
func (r *restoredHeaders) take(u core.UserProperty) bool {
	switch u.Key {
	case propSubject:
		if r.taken&takenSubject == 0 {
			r.subject, r.taken = u.Value, r.taken|takenSubject
		}
		return true
	case propPriority:
		if n, ok := core.ParsePriority(u.Value); ok {
			r.priority, r.taken = n, r.taken|takenPriority
			return true
		}
	case propCreationTime:
		if ms, ok := core.ParseCreationTime(u.Value); ok {
			r.created, r.taken = encoding.Timestamp(ms), r.taken|takenCreated
			return true
		}
	}
	return false
}

// said reports whether key is a header property take read: its copies are
// not sent as application properties either.
func (r *restoredHeaders) said(key string) bool {
	switch key {
	case propSubject:
		return r.taken&takenSubject != 0
	case propPriority:
		return r.taken&takenPriority != 0
	case propCreationTime:
		return r.taken&takenCreated != 0
	}
	return false
}
