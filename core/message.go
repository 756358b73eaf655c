package core

import (
	"bytes"
	"strconv"
	"time"
)

// Protocol names the front-end or bridge a message came from.
type Protocol string

// The protocols a message can come from.
const (
	ProtocolMQTT Protocol = "mqtt"
	ProtocolAMQP Protocol = "amqp"
	ProtocolNATS Protocol = "nats"
)

// Origin says where a message entered the topic space, so that it is never
// sent back where it came from (the MQTT front-end's own fan-out, the bridge).
type Origin struct {
	Protocol Protocol // front-end that received it
	Node     string   // node.id of the gateway that received it
	Client   string   // client id / container id of the publisher, if known
}

// IDKind is the AMQP type of a correlation id carried as bytes.
type IDKind uint8

// The kinds of correlation id, and how each is held in CorrelationData.
const (
	IDBinary IDKind = iota // the bytes themselves (MQTT 5 correlation data)
	IDString               // UTF-8 text
	IDULong                // decimal text, e.g. "42"
	IDUUID                 // canonical text, e.g. "0f8fad5b-d9cb-469f-a165-70867728950e"
)

// UserProperty is one MQTT 5 user property (an AMQP application property).
// Order and duplicates are significant in MQTT 5, so this is a slice, not a map.
type UserProperty struct {
	Key, Value string
}

// Native is a message as its source protocol encoded it, carried beside the
// protocol-neutral fields so that a front-end of the same protocol can send
// it on unchanged (an AMQP message's typed body, header, annotations, typed
// application properties and footer: docs/architecture.md, decision
// "Native messages"). The core never reads Bytes; the neutral fields hold the
// rendering every other protocol gets. A zero Native means there is none: the
// neutral fields say everything.
type Native struct {
	Protocol Protocol // the front-end that encoded Bytes
	Bytes    []byte   // opaque to the core; immutable once published
}

// User properties that carry the AMQP header fields behind JMSType,
// JMSPriority and JMSTimestamp (properties.subject, header.priority,
// properties.creation-time), which MQTT 5 has no property for: the AMQP
// front-end writes and reads them (amqp/headers.go), core/selector reads
// them for those JMS headers (docs/mapping.md, "JMS headers").
const (
	PropSubject      = "tolsey_amqp_subject"       // the text
	PropPriority     = "tolsey_amqp_priority"      // decimal 0..255; absent: 4
	PropCreationTime = "tolsey_amqp_creation_time" // RFC 3339 UTC, or milliseconds since the epoch
)

// Message is what every front-end publishes into and receives from the core.
// A Message handed to Router.Publish must not be modified afterwards: the
// router and subscribers may keep it (queues, retained store) and share it.
type Message struct {
	Topic   string
	Payload []byte
	QoS     byte
	// Retain is the publisher's retain flag. On delivery it is true only for
	// a stored copy sent to a late subscriber (docs/architecture.md, decision 1).
	Retain          bool
	ContentType     string
	CorrelationData []byte
	// CorrelationKind is the type CorrelationData had in AMQP, whose
	// correlation-id may be a string, ulong, uuid or binary; MQTT 5 has only
	// binary. An AMQP receiver gets the original type back.
	CorrelationKind IDKind
	ResponseTopic   string
	UserProperties  []UserProperty
	// PayloadFormat is the MQTT 5 payload format indicator (1 = UTF-8 text).
	PayloadFormat byte
	// Created is when the gateway received the message.
	Created time.Time
	// Expiry is when the message stops being deliverable; zero means never.
	Expiry time.Time
	Origin Origin
	// Native is the source protocol's own encoding, when the neutral fields
	// above lose something of it.
	Native Native
}

// Expired reports whether the message must no longer be delivered at now.
func (m *Message) Expired(now time.Time) bool {
	return !m.Expiry.IsZero() && !now.Before(m.Expiry)
}

// RemainingExpiry is the whole seconds left before expiry, rounded up, and
// whether the message expires at all. MQTT 5 sends this remaining interval
// [MQTT-3.3.2-6].
func (m *Message) RemainingExpiry(now time.Time) (uint32, bool) {
	if m.Expiry.IsZero() {
		return 0, false
	}
	d := m.Expiry.Sub(now)
	if d <= 0 {
		return 0, true
	}
	s := (d + time.Second - 1) / time.Second
	if s > 1<<32-1 {
		s = 1<<32 - 1
	}
	return uint32(s), true
}

// Size is the approximate number of bytes the message occupies, for limits
// and metrics. A payload that ends the native bytes (an AMQP message kept
// whole whose body is one data section or a binary or string amqp-value)
// is counted once, in those bytes.
func (m *Message) Size() int {
	n := len(m.Topic) + len(m.ContentType) + len(m.CorrelationData) + len(m.ResponseTopic) + len(m.Native.Bytes)
	if !m.PayloadIsNativeTail() {
		n += len(m.Payload)
	}
	for _, p := range m.UserProperties {
		n += len(p.Key) + len(p.Value)
	}
	return n
}

// PayloadIsNativeTail reports whether the native bytes end with the
// payload. Compared by content when the payload is not a slice of them,
// so that it holds, and Size is the same, for a message as received and
// as decoded from a store (a copy, or a slice of its native bytes): a
// queue subtracts a removed message's Size from the bytes it added.
func (m *Message) PayloadIsNativeTail() bool {
	nb, p := m.Native.Bytes, m.Payload
	if m.Native.Protocol == "" || len(p) == 0 || len(p) > len(nb) {
		return false
	}
	tail := nb[len(nb)-len(p):]
	return &tail[0] == &p[0] || bytes.Equal(tail, p)
}

// Clone returns a copy that shares no slices with m.
func (m *Message) Clone() *Message {
	c := *m
	c.Payload = append([]byte(nil), m.Payload...)
	if m.CorrelationData != nil {
		c.CorrelationData = append([]byte(nil), m.CorrelationData...)
	}
	if m.UserProperties != nil {
		c.UserProperties = append([]UserProperty(nil), m.UserProperties...)
	}
	if m.Native.Bytes != nil {
		c.Native.Bytes = append([]byte(nil), m.Native.Bytes...)
	}
	return &c
}

// DefaultPriority is the priority of a message that names none: AMQP's
// header default (AMQP 1.0 part 3 §3.2.1) and JMS's (JMSPriority 4). MQTT
// publishes have it unless they carry PropPriority.
const DefaultPriority = 4

// Priority is the message's priority: its first PropPriority user property
// when that parses (the AMQP front-end writes it for a header priority
// other than 4), DefaultPriority otherwise. Selectors (JMSPriority) and
// queues (which deliver higher priorities first) read it here, so both
// agree on what a message's priority is.
func (m *Message) Priority() uint8 {
	for _, u := range m.UserProperties {
		if u.Key == PropPriority {
			if n, ok := ParsePriority(u.Value); ok {
				return n
			}
			break
		}
	}
	return DefaultPriority
}

// ParsePriority reads a PropPriority value: decimal digits, 0..255.
func ParsePriority(v string) (uint8, bool) {
	if !allDigits(v) { // first: a failed ParseUint allocates its error
		return 0, false
	}
	n, err := strconv.ParseUint(v, 10, 8)
	return uint8(n), err == nil
}

// ParseCreationTime reads a PropCreationTime value, RFC 3339 or decimal
// milliseconds since the epoch, as milliseconds since the epoch (> 0).
func ParseCreationTime(v string) (int64, bool) {
	if allDigits(v) { // first: a failed ParseInt allocates its error
		ms, err := strconv.ParseInt(v, 10, 64)
		return ms, err == nil && ms > 0
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	return t.UnixMilli(), err == nil && t.UnixMilli() > 0
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}
