package amqp

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tolsey/tolsey/amqp/internal/buffer"
	"github.com/tolsey/tolsey/amqp/internal/encoding"
	"github.com/tolsey/tolsey/amqp/internal/frames"
	"github.com/tolsey/tolsey/core"
)

// Typed bodies and native messages (docs/architecture.md, decision "Native
// messages"; docs/mapping.md, "Typed bodies"). An AMQP message that the
// neutral core.Message fields cannot hold whole (a typed body, a priority,
// a message-id, typed application properties, other annotations, a footer)
// keeps its own encoding in core.Message.Native, which an AMQP receiver
// gets back section for section; every other protocol gets the neutral
// rendering: typed bodies as JSON, with their AMQP type in the user
// property propAMQPType so that an MQTT reply can restore it.

// propAMQPType names the AMQP type of a body rendered as JSON. Spelled as a
// JMS identifier (letters, digits, '_'), so that Qpid JMS can read it when
// a rendering comes back unrestored.
const propAMQPType = "tolsey_amqp_type"

const contentTypeJSON = "application/json"

// x-opt-jms-msg-type values for the bodies restored from JSON (Qpid JMS).
const (
	jmsMapMessage    int8 = 2
	jmsStreamMessage int8 = 4
)

// needsNative reports whether the neutral fields lose something of am, so
// that toCore keeps its encoding. Messages that only use what the neutral
// fields carry (the common data / string case) keep none: their path
// allocates as before.
func needsNative(am *frames.Message) bool {
	switch {
	case am.Sequence != nil, len(am.Data) > 1, am.Footer != nil:
		return true
	case am.Data != nil:
	case am.Value == nil:
		// An amqp-value null, or no body section at all: the rendering
		// would send an empty data section.
		return true
	default:
		// An amqp-value binary would go out as a data section: only a
		// string stays what it was (found by test/e2e/amqp/typed_matrix.py).
		if _, ok := am.Value.(string); !ok {
			return true
		}
	}
	if h := am.Header; h != nil && h.Priority != nil && *h.Priority != 4 {
		return true
	}
	if p := am.Properties; p != nil && (p.MessageID != nil || p.UserID != nil || p.Subject != "" ||
		p.ContentEncoding != "" || p.CreationTime != 0 || p.GroupID != "" || p.GroupSequence != nil || p.ReplyToGroupID != "") {
		return true
	}
	for _, a := range am.MessageAnnotations {
		switch a.Key {
		case annRetain, annJMSDest, annJMSReplyTo: // the gateway sets these itself
		case annJMSMsgType:
			if t, ok := toInt8(a.Value); !ok || t != jmsTextMessage && t != jmsBytesMessage {
				return true
			}
		default:
			return true
		}
	}
	for _, p := range am.ApplicationProperties {
		if _, ok := p.Value.(string); !ok {
			return true
		}
	}
	return false
}

// renderTyped sets m's neutral body for a typed AMQP body: JSON, with the
// AMQP type in a user property.
func renderTyped(m *core.Message, am *frames.Message) {
	var v any
	tag := "sequence"
	if am.Sequence != nil {
		var items []any
		for _, s := range am.Sequence {
			items = append(items, s...)
		}
		v = items
	} else {
		v, tag = am.Value, amqpTypeName(am.Value)
	}
	m.Payload = appendJSON(nil, v)
	m.ContentType = contentTypeJSON
	m.PayloadFormat = 1
	m.UserProperties = append(m.UserProperties, core.UserProperty{Key: propAMQPType, Value: tag})
}

// appendJSON renders an AMQP value as JSON: maps as objects (non-string keys
// as their text), lists and arrays as arrays, numbers and booleans as
// themselves, binary as base64, described values as {"descriptor", "value"},
// everything else as the string formatValue gives. Depth is bounded by the
// decoder (encoding.MaxDepth).
func appendJSON(dst []byte, v any) []byte {
	switch v := v.(type) {
	case nil:
		return append(dst, "null"...)
	case bool:
		return strconv.AppendBool(dst, v)
	case uint8, uint16, uint32, uint64, int8, int16, int32, int64:
		return fmt.Append(dst, v)
	case float32:
		if f := float64(v); math.IsNaN(f) || math.IsInf(f, 0) {
			return appendJSONString(dst, formatValue(v))
		}
		return strconv.AppendFloat(dst, float64(v), 'g', -1, 32)
	case float64:
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return appendJSONString(dst, formatValue(v))
		}
		return strconv.AppendFloat(dst, v, 'g', -1, 64)
	case []any:
		return appendJSONArray(dst, v)
	case encoding.Array:
		return appendJSONArray(dst, v.Values)
	case encoding.Map:
		dst = append(dst, '{')
		for i, e := range v {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendJSONString(dst, formatValue(e.Key))
			dst = append(dst, ':')
			dst = appendJSON(dst, e.Value)
		}
		return append(dst, '}')
	case encoding.Described:
		dst = append(dst, `{"descriptor":`...)
		dst = appendJSON(dst, v.Descriptor)
		dst = append(dst, `,"value":`...)
		dst = appendJSON(dst, v.Value)
		return append(dst, '}')
	}
	return appendJSONString(dst, formatValue(v))
}

func appendJSONArray(dst []byte, vs []any) []byte {
	dst = append(dst, '[')
	for i, e := range vs {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendJSON(dst, e)
	}
	return append(dst, ']')
}

// appendJSONString quotes s as a JSON string (RFC 8259 section 7); invalid
// UTF-8 becomes U+FFFD.
func appendJSONString(dst []byte, s string) []byte {
	const hexDigits = "0123456789abcdef"
	dst = append(dst, '"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			dst = append(dst, '\\', byte(r))
		case r < 0x20:
			dst = append(dst, '\\', 'u', '0', '0', hexDigits[r>>4], hexDigits[r&0xf])
		default:
			dst = utf8.AppendRune(dst, r)
		}
	}
	return append(dst, '"')
}

// typedBody is an AMQP body restored from a JSON rendering.
type typedBody struct {
	value   any  // the amqp-value, or the amqp-sequence's list
	seq     bool // an amqp-sequence section
	msgType int8 // x-opt-jms-msg-type, -1: none
}

// restoreTyped turns m's payload back into the AMQP type that tag names (the
// value of propAMQPType). A payload that does not parse as that type is
// not restored (ok false): it goes out as bytes or text, as any payload.
func restoreTyped(m *core.Message, tag string) (b typedBody, ok bool) {
	b.msgType = -1
	p := m.Payload
	switch tag {
	case "map", "list", "array", "sequence":
		v, err := parseJSON(p)
		if err != nil {
			return b, false
		}
		switch vv := v.(type) {
		case encoding.Map:
			if tag != "map" {
				return b, false
			}
			b.value, b.msgType = vv, jmsMapMessage
		case []any:
			if tag == "map" {
				return b, false
			}
			b.value, b.msgType, b.seq = vv, jmsStreamMessage, tag == "sequence"
		default:
			return b, false
		}
		return b, true
	}
	text := string(bytes.TrimSpace(p))
	if strings.HasPrefix(text, `"`) { // a JSON string: symbol, uuid, timestamp, NaN, …
		if json.Unmarshal(p, &text) != nil {
			return b, false
		}
	}
	b.value, ok = parseScalar(tag, text)
	return b, ok
}

// parseScalar reads text (formatValue's rendering) as the AMQP scalar type
// that tag names. null, described and the decimals are not restored.
func parseScalar(tag, text string) (any, bool) {
	var v any
	var err error
	switch tag {
	case "string":
		return text, true
	case "boolean":
		v, err = strconv.ParseBool(text)
	case "byte":
		var n int64
		n, err = strconv.ParseInt(text, 10, 8)
		v = int8(n)
	case "short":
		var n int64
		n, err = strconv.ParseInt(text, 10, 16)
		v = int16(n)
	case "int":
		var n int64
		n, err = strconv.ParseInt(text, 10, 32)
		v = int32(n)
	case "long":
		v, err = strconv.ParseInt(text, 10, 64)
	case "ubyte":
		var n uint64
		n, err = strconv.ParseUint(text, 10, 8)
		v = uint8(n)
	case "ushort":
		var n uint64
		n, err = strconv.ParseUint(text, 10, 16)
		v = uint16(n)
	case "uint":
		var n uint64
		n, err = strconv.ParseUint(text, 10, 32)
		v = uint32(n)
	case "ulong":
		v, err = strconv.ParseUint(text, 10, 64)
	case "float":
		var f float64
		f, err = strconv.ParseFloat(text, 32)
		v = float32(f)
	case "double":
		v, err = strconv.ParseFloat(text, 64)
	case "symbol":
		v = encoding.Symbol(text)
	case "char":
		r, n := utf8.DecodeRuneInString(text)
		if n == 0 || n != len(text) {
			return nil, false
		}
		v = encoding.Char(r)
	case "uuid":
		u, ok := parseUUID(text)
		return u, ok
	case "timestamp":
		var t time.Time
		t, err = time.Parse(time.RFC3339Nano, text)
		v = encoding.TimestampOf(t)
	case "binary":
		v, err = base64.StdEncoding.DecodeString(text)
	default:
		return nil, false
	}
	return v, err == nil
}

// propTypesKey is the user property that names the AMQP types of an AMQP
// message's non-string application properties, a JSON object of key →
// type name: MQTT user properties are strings, so this is how an MQTT
// responder that echoes them gives a JMS requester its int, long, boolean
// properties back (docs/mapping.md, "Typed application properties").
const propTypesKey = "tolsey_amqp_types"

// typesCorrelation is the propTypesKey entry that names the type of a
// correlation-id that is not binary (MQTT 5 correlation data is bytes): not
// a JMS identifier, so no application property can have it as its key.
const typesCorrelation = "$correlation-id"

var correlationKindNames = [...]string{core.IDBinary: "binary", core.IDString: "string", core.IDULong: "ulong", core.IDUUID: "uuid"}

// renderPropTypes adds propTypesKey for the typed application properties of
// am and a correlation-id that is not binary, if there are any.
func renderPropTypes(m *core.Message, am *frames.Message) {
	var dst []byte
	add := func(key, typ string) {
		if dst == nil {
			dst = append(dst, '{')
		} else {
			dst = append(dst, ',')
		}
		dst = appendJSONString(dst, key)
		dst = append(dst, ':')
		dst = appendJSONString(dst, typ)
	}
	for _, p := range am.ApplicationProperties {
		if _, ok := p.Value.(string); !ok {
			add(p.Key, amqpTypeName(p.Value))
		}
	}
	if k := m.CorrelationKind; k != core.IDBinary && int(k) < len(correlationKindNames) {
		add(typesCorrelation, correlationKindNames[k])
	}
	if dst != nil {
		m.UserProperties = append(m.UserProperties, core.UserProperty{Key: propTypesKey, Value: string(append(dst, '}'))})
	}
}

// correlationKindOf is the kind a propTypesKey object gives the
// correlation data, and whether it gives one.
func correlationKindOf(types map[string]string) (core.IDKind, bool) {
	for k, name := range correlationKindNames {
		if name == types[typesCorrelation] {
			return core.IDKind(k), true
		}
	}
	return core.IDBinary, false
}

// propTypesOf reads a propTypesKey value; nil when it is not a JSON object of
// strings.
func propTypesOf(v string) map[string]string {
	var types map[string]string
	if json.Unmarshal([]byte(v), &types) != nil {
		return nil
	}
	return types
}

var errJSONDepth = errors.New("JSON nested too deep")

// parseJSON reads JSON keeping the order of object members (a JMS
// MapMessage keeps none, but an AMQP map does): objects become
// encoding.Map with string keys, arrays []any, integers int64 (long),
// other numbers float64 (double).
func parseJSON(p []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(p))
	d.UseNumber()
	tok, err := d.Token()
	if err != nil {
		return nil, err
	}
	v, err := jsonValue(d, tok, 0)
	if err != nil {
		return nil, err
	}
	if _, err := d.Token(); err == nil {
		return nil, errors.New("trailing data after the JSON value")
	}
	return v, nil
}

func jsonValue(d *json.Decoder, tok json.Token, depth int) (any, error) {
	// The payload is an MQTT publisher's: bound the recursion as the AMQP
	// decoder does, so that [[[[...]]]] cannot exhaust the stack.
	if depth > encoding.MaxDepth {
		return nil, errJSONDepth
	}
	switch t := tok.(type) {
	case json.Delim:
		var m encoding.Map
		var l []any
		for d.More() {
			var key string
			if t == '{' {
				k, err := d.Token()
				if err != nil {
					return nil, err
				}
				key, _ = k.(string)
			}
			vt, err := d.Token()
			if err != nil {
				return nil, err
			}
			v, err := jsonValue(d, vt, depth+1)
			if err != nil {
				return nil, err
			}
			if t == '{' {
				m = append(m, encoding.MapEntry{Key: key, Value: v})
			} else {
				l = append(l, v)
			}
		}
		if _, err := d.Token(); err != nil { // the closing delimiter
			return nil, err
		}
		if t == '{' {
			if m == nil {
				m = encoding.Map{}
			}
			return m, nil
		}
		if l == nil {
			l = []any{}
		}
		return l, nil
	case json.Number:
		if n, err := t.Int64(); err == nil {
			return n, nil
		}
		return t.Float64()
	}
	return tok, nil // string, bool, nil
}

// encodeNative writes a message that came in over AMQP as it came, section
// for section: the bare message and footer verbatim (part 3 section 3.2:
// immutable) but for a `to` the sender left out, which gets the topic; the
// header with this delivery's ttl, first-acquirer and delivery-count; the
// message annotations with the gateway's own (x-opt-jms-dest,
// x-opt-retain) put in place of the sender's.
func (e *encoder) encodeNative(w *buffer.Buffer, m *core.Message, retained bool, dest int8, dh deliveryHeader, now time.Time) error {
	h, err := frames.SplitHopWith(m.Native.Bytes, &e.hop)
	if err != nil {
		return err // toCore decoded these bytes: not reached
	}
	e.msg = frames.Message{}
	e.hdr = frames.MessageHeader{Durable: m.QoS > 0, DeliveryCount: dh.count, FirstAcquirer: dh.firstAcquirer}
	if h.Header != nil {
		e.hdr.Durable, e.hdr.Priority = h.Header.Durable, h.Header.Priority
	}
	// The time left, when the sender gave a ttl: one that gave only an
	// absolute-expiry-time (in the bare message, unchanged) gets no ttl
	// it did not send (found by test/e2e/amqp/typed_matrix.py).
	if !m.Expiry.IsZero() && h.Header != nil && h.Header.TTL != nil {
		ms := max(m.Expiry.Sub(now).Milliseconds(), 1)
		e.ttl = uint32(min(ms, int64(^uint32(0))))
		e.hdr.TTL = &e.ttl
	}
	if e.hdr != (frames.MessageHeader{}) {
		e.msg.Header = &e.hdr
	}
	e.ann = e.ann[:0]
	for _, a := range h.MessageAnnotations {
		if a.Key == annRetain || dest >= 0 && a.Key == annJMSDest {
			continue
		}
		e.ann = append(e.ann, a)
	}
	if dest >= 0 {
		e.ann = append(e.ann, encoding.Annotation{Key: annJMSDest, Value: dest})
	}
	if retained {
		e.ann = append(e.ann, encoding.Annotation{Key: annRetain, Value: true})
	}
	if len(e.ann) > 0 {
		e.msg.MessageAnnotations = e.ann
	}
	err = e.msg.MarshalAMQP(w)
	e.msg = frames.Message{}
	if err != nil {
		return err
	}
	// A sender that named the topic in its link's target only left `to`
	// out: the receiver (a wildcard one, Qpid JMS reading JMSDestination)
	// gets the topic there, as a rendered message does; the rest of the
	// bare message is passed as it came.
	to := m.Topic
	if q, ok := strings.CutPrefix(to, queueTopic); ok {
		to = prefixQueue + q // put straight into a queue: its address
	}
	return frames.AppendBareWithTo(w, h.Bare, to, &e.bare)
}

// nativeOf keeps payload (the transfer payload am was decoded from, which
// the caller reuses) as m's native encoding, and points a single data
// section's payload, or an amqp-value's that ends it, into that copy
// rather than holding it twice.
func nativeOf(m *core.Message, am *frames.Message, payload []byte) {
	nb := append([]byte(nil), payload...)
	m.Native = core.Native{Protocol: core.ProtocolAMQP, Bytes: nb}
	if len(am.Data) == 1 {
		d := am.Data[0]
		// The decoder hands out sub-slices of payload: d's offset in it is
		// the difference of their capacities.
		if off := cap(payload) - cap(d); len(d) > 0 && off >= 0 && off+len(d) <= len(payload) && &payload[off] == &d[0] {
			m.Payload = nb[off : off+len(d) : off+len(d)]
		}
	}
	// A binary or string amqp-value (and no footer) ends the bytes too:
	// the payload, a copy of it, points there instead.
	if p := m.Payload; len(p) > 0 && m.PayloadIsNativeTail() {
		m.Payload = nb[len(nb)-len(p) : len(nb) : len(nb)]
	}
}

// messageID is the message-id the gateway gives a message that comes
// without one (published over MQTT or the bridge), so that every AMQP
// message has one (a JMS JMSMessageID). It is derived from the message, not
// drawn from a counter, so every delivery of the message (to each
// receiver, from a queue, again after a restart: Created and the origin
// are stored with it) carries the same id:
//
//	ID:tolsey:<receiving node>:<receive time, unix ns, 16 hex>:<FNV-1a of topic and payload length, 8 hex>
//
// Two messages get the same id only when one node receives them on the
// same topic with the same payload length in the same nanosecond.
// MarshalAMQP writes the string without building it (the encoder reuses
// one messageID, so encoding a delivery allocates nothing more).
type messageID struct {
	node  string
	nanos int64
	sum   uint32
}

const messageIDPrefix = "ID:tolsey:"

func (id *messageID) set(m *core.Message) {
	id.node, id.nanos = m.Origin.Node, 0
	if !m.Created.IsZero() {
		id.nanos = m.Created.UnixNano()
	}
	h := uint32(2166136261) // FNV-1a offset basis
	for i := 0; i < len(m.Topic); i++ {
		h = (h ^ uint32(m.Topic[i])) * 16777619
	}
	for n := len(m.Payload); n > 0; n >>= 8 {
		h = (h ^ uint32(n&0xff)) * 16777619
	}
	id.sum = h
}

func (id *messageID) MarshalAMQP(w *buffer.Buffer) error {
	n := len(messageIDPrefix) + len(id.node) + 1 + 16 + 1 + 8
	if n <= 255 {
		w.AppendByte(0xa1) // str8-utf8
		w.AppendByte(byte(n))
	} else {
		w.AppendByte(0xb1) // str32-utf8
		w.AppendUint32(uint32(n))
	}
	w.AppendString(messageIDPrefix)
	w.AppendString(id.node)
	w.AppendByte(':')
	appendHex(w, uint64(id.nanos), 16)
	w.AppendByte(':')
	appendHex(w, uint64(id.sum), 8)
	return nil
}

// appendHex writes the low digits*4 bits of v as fixed-width lower-case hex.
func appendHex(w *buffer.Buffer, v uint64, digits int) {
	const hexDigits = "0123456789abcdef"
	for i := digits - 1; i >= 0; i-- {
		w.AppendByte(hexDigits[(v>>(4*uint(i)))&0xf])
	}
}
