package selector

import (
	"unicode/utf8"
	"unsafe"

	"github.com/tolsey/tolsey/core"
)

// Message is a core.Message as a selector Source:
//
//   - properties are its user properties (MQTT 5 user properties; AMQP
//     application properties as the AMQP front-end stores them), as
//     untyped Text; the first of several with one name counts, as a
//     JMS property has one value;
//   - JMSDeliveryMode is "PERSISTENT" for QoS 1 and 2 (an AMQP durable
//     message), "NON_PERSISTENT" for QoS 0;
//   - JMSType, JMSPriority and JMSTimestamp are what the AMQP front-end
//     (or an MQTT publisher) put in the user properties core.PropSubject,
//     core.PropPriority and core.PropCreationTime; without them JMSType
//     is NULL, JMSPriority 4 (the JMS default) and JMSTimestamp Created,
//     in milliseconds;
//   - JMSCorrelationID is the correlation data when it is text (an AMQP
//     string, ulong or uuid id, or MQTT 5 correlation data that is UTF-8);
//   - JMSMessageID is NULL: the core does not carry it.
func Message(m *core.Message) Source { return (*message)(m) }

// MatchMessage is s.Match(Message(m)).
func (s *Selector) MatchMessage(m *core.Message) bool {
	if s == nil || s.root == nil {
		return true
	}
	return s.Match((*message)(m))
}

type message core.Message

func (m *message) Header(h Header) Value {
	switch h {
	case JMSDeliveryMode:
		if m.QoS > 0 {
			return StringValue("PERSISTENT")
		}
		return StringValue("NON_PERSISTENT")
	case JMSType:
		if v, ok := m.userProperty(core.PropSubject); ok {
			return StringValue(v)
		}
		return Value{}
	case JMSPriority:
		return LongValue(int64((*core.Message)(m).Priority()))
	case JMSTimestamp:
		if v, ok := m.userProperty(core.PropCreationTime); ok {
			if ms, ok := core.ParseCreationTime(v); ok {
				return LongValue(ms)
			}
		}
		if m.Created.IsZero() {
			return Value{}
		}
		return LongValue(m.Created.UnixMilli())
	case JMSCorrelationID:
		d := m.CorrelationData
		if len(d) == 0 || m.CorrelationKind == core.IDBinary && !utf8.Valid(d) {
			return Value{}
		}
		// A string over the bytes, not a copy: evaluation allocates
		// nothing, and a published Message is never modified
		// (core.Message), so the bytes cannot change under the string,
		// which does not outlive the evaluation.
		return StringValue(unsafe.String(&d[0], len(d)))
	}
	return Value{}
}

func (m *message) Property(name string) Value {
	if v, ok := m.userProperty(name); ok {
		return TextValue(v)
	}
	return Value{}
}

// userProperty is the first user property named name.
func (m *message) userProperty(name string) (string, bool) {
	for i := range m.UserProperties {
		if p := &m.UserProperties[i]; p.Key == name {
			return p.Value, true
		}
	}
	return "", false
}
