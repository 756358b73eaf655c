package amqp

import (
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tolsey/tolsey/amqp/internal/buffer"
	"github.com/tolsey/tolsey/amqp/internal/encoding"
	"github.com/tolsey/tolsey/amqp/internal/frames"
	"github.com/tolsey/tolsey/core"
)

// The mapping between AMQP messages and core.Message, both ways. The user
// documentation of every rule is docs/mapping.md: change both together.

// Message annotations we read or write.
const (
	annRetain     encoding.Symbol = "x-opt-retain"
	annJMSDest    encoding.Symbol = "x-opt-jms-dest"
	annJMSReplyTo encoding.Symbol = "x-opt-jms-reply-to"
	annJMSMsgType encoding.Symbol = "x-opt-jms-msg-type"
)

// x-opt-jms-msg-type values (Qpid JMS).
const (
	jmsBytesMessage int8 = 3
	jmsTextMessage  int8 = 5
)

// inbound is an AMQP message mapped to the core, with what routing needs.
type inbound struct {
	msg     *core.Message
	to      string // properties.to (anonymous relay)
	jmsDest int8   // x-opt-jms-dest, or -1 when absent
}

// toCore maps a decoded AMQP message, decoded from payload. Bytes kept by
// the result are copied (am and payload alias the frame or reassembly
// buffer). A message the neutral fields cannot hold whole also keeps
// payload as its native encoding (native.go). The error result is kept for
// bodies a later version may refuse; none is refused today.
func toCore(am *frames.Message, payload []byte, now time.Time) (inbound, error) {
	in := inbound{jmsDest: -1}
	m := &core.Message{Created: now}
	in.msg = m
	native := needsNative(am)
	typed := false
	switch {
	case am.Sequence != nil:
		typed = true
	case am.Data != nil:
		if native {
			nativeOf(m, am, payload) // a single data section's payload points into it
			if m.Payload != nil {
				break
			}
		}
		n := 0
		for _, d := range am.Data {
			n += len(d)
		}
		p := make([]byte, 0, n)
		for _, d := range am.Data {
			p = append(p, d...)
		}
		m.Payload = p
	case am.Value != nil:
		switch v := am.Value.(type) {
		case string:
			m.Payload = []byte(v)
			m.PayloadFormat = 1 // UTF-8 text [MQTT-3.3.2-4]
		case []byte:
			m.Payload = append([]byte(nil), v...)
		default:
			typed = true
		}
	default:
		m.Payload = []byte{}
	}
	if native && m.Native.Protocol == "" {
		nativeOf(m, am, payload)
	}
	if h := am.Header; h != nil {
		if h.Durable {
			m.QoS = 1
		}
		if h.TTL != nil && *h.TTL > 0 {
			m.Expiry = now.Add(time.Duration(*h.TTL) * time.Millisecond)
		}
	}
	if p := am.Properties; p != nil {
		m.ContentType = string(p.ContentType)
		m.ResponseTopic = strings.TrimPrefix(p.ReplyTo, prefixTopic)
		if q, ok := strings.CutPrefix(p.ReplyTo, prefixQueue); ok {
			// A queue's MQTT address, so that an MQTT responder's publish
			// to the Response Topic lands in it (a JMS temporary queue).
			m.ResponseTopic = queueTopic + q
		} else if p.ReplyTo != "" && p.ReplyTo == m.ResponseTopic && !isTemp(p.ReplyTo) && jmsReplyToQueue(am) {
			// Qpid JMS names a JMSReplyTo queue by its bare name and
			// says "queue" in x-opt-jms-reply-to.
			m.ResponseTopic = queueTopic + p.ReplyTo
		}
		in.to = p.To
		// core keeps the id as bytes and its AMQP type beside them, so an
		// AMQP receiver gets it back as sent (MQTT gets the bytes).
		switch id := p.CorrelationID.(type) {
		case []byte:
			m.CorrelationData = append([]byte(nil), id...)
		case string:
			m.CorrelationData, m.CorrelationKind = []byte(id), core.IDString
		case encoding.UUID:
			m.CorrelationData, m.CorrelationKind = []byte(id.String()), core.IDUUID
		case uint64:
			m.CorrelationData, m.CorrelationKind = strconv.AppendUint(nil, id, 10), core.IDULong
		}
		if p.AbsoluteExpiryTime != 0 {
			if t := p.AbsoluteExpiryTime.Time(); m.Expiry.IsZero() || t.Before(m.Expiry) {
				m.Expiry = t
			}
		}
	}
	if n := len(am.ApplicationProperties); n > 0 {
		extra := 0
		if native { // room for what the render functions below add
			extra = 2 + headerProps
		}
		m.UserProperties = make([]core.UserProperty, n, n+extra)
		for i, p := range am.ApplicationProperties {
			m.UserProperties[i] = core.UserProperty{Key: p.Key, Value: formatValue(p.Value)}
		}
	}
	if typed {
		renderTyped(m, am) // after the properties: its content type wins
	}
	if native || m.CorrelationKind != core.IDBinary {
		renderPropTypes(m, am)
	}
	if native {
		renderHeaders(m, am)
	}
	if v, ok := am.MessageAnnotations.Get(annRetain); ok {
		if b, ok := v.(bool); ok && b {
			m.Retain = true
		}
	}
	if v, ok := am.MessageAnnotations.Get(annJMSDest); ok {
		if d, ok := toInt8(v); ok {
			in.jmsDest = d
		}
	}
	return in, nil
}

// jmsReplyToQueue reports whether am's x-opt-jms-reply-to says its
// reply-to is a queue (Qpid JMS: 0 a queue, 2 a temporary queue).
func jmsReplyToQueue(am *frames.Message) bool {
	v, ok := am.MessageAnnotations.Get(annJMSReplyTo)
	if !ok {
		return false
	}
	k, ok := toInt8(v)
	return ok && (k == jmsQueue || k == jmsTempQueue)
}

// correlationID is m's correlation data as the AMQP type it was sent with.
// Bytes that do not parse as their kind go out as they are.
func correlationID(d []byte, kind core.IDKind) any {
	switch kind {
	case core.IDString:
		if utf8.Valid(d) {
			return textBody(d)
		}
	case core.IDULong:
		if v, err := strconv.ParseUint(string(d), 10, 64); err == nil {
			return v
		}
	case core.IDUUID:
		if u, ok := parseUUID(string(d)); ok {
			return u
		}
	}
	return d
}

// parseUUID reads the canonical 8-4-4-4-12 hex form.
func parseUUID(s string) (encoding.UUID, bool) {
	var u encoding.UUID
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return u, false
	}
	h := s[0:8] + s[9:13] + s[14:18] + s[19:23] + s[24:]
	if _, err := hex.Decode(u[:], []byte(h)); err != nil {
		return u, false
	}
	return u, true
}

// formatValue renders a non-string application property as text.
func formatValue(v any) string {
	switch v := v.(type) {
	case nil:
		return ""
	case string:
		return v
	case encoding.Symbol:
		return string(v)
	case bool:
		return strconv.FormatBool(v)
	case uint8, uint16, uint32, uint64, int8, int16, int32, int64:
		return fmt.Sprint(v)
	case float32:
		return strconv.FormatFloat(float64(v), 'g', -1, 32)
	case float64:
		return strconv.FormatFloat(v, 'g', -1, 64)
	case encoding.Char:
		return string(rune(v))
	case encoding.Timestamp:
		return v.Time().Format(time.RFC3339Nano)
	case encoding.UUID:
		return v.String()
	case []byte:
		return base64.StdEncoding.EncodeToString(v)
	case encoding.Decimal32:
		return "0x" + hex.EncodeToString(v[:])
	case encoding.Decimal64:
		return "0x" + hex.EncodeToString(v[:])
	case encoding.Decimal128:
		return "0x" + hex.EncodeToString(v[:])
	}
	return fmt.Sprint(v)
}

func toInt8(v any) (int8, bool) {
	switch v := v.(type) {
	case int8:
		return v, true
	case uint8:
		return int8(v), true
	case int16:
		return int8(v), true
	case int32:
		return int8(v), true
	case int64:
		return int8(v), true
	}
	return 0, false
}

// amqpTypeName is the AMQP 1.0 type name of a decoded value (part 1
// section 1.6), the value of propAMQPType.
func amqpTypeName(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case uint8:
		return "ubyte"
	case uint16:
		return "ushort"
	case uint32:
		return "uint"
	case uint64:
		return "ulong"
	case int8:
		return "byte"
	case int16:
		return "short"
	case int32:
		return "int"
	case int64:
		return "long"
	case float32:
		return "float"
	case float64:
		return "double"
	case encoding.Decimal32:
		return "decimal32"
	case encoding.Decimal64:
		return "decimal64"
	case encoding.Decimal128:
		return "decimal128"
	case encoding.Char:
		return "char"
	case encoding.Timestamp:
		return "timestamp"
	case encoding.UUID:
		return "uuid"
	case []byte:
		return "binary"
	case string:
		return "string"
	case encoding.Symbol:
		return "symbol"
	case encoding.Map:
		return "map"
	case []any:
		return "list"
	case encoding.Array, []encoding.Symbol:
		return "array"
	case encoding.Described:
		return "described"
	}
	return fmt.Sprintf("%T", v)
}

// isTextual reports whether a content type names text (so that Qpid JMS
// should see a TextMessage): text/*, JSON, XML and JavaScript types.
func isTextual(ct string) bool {
	if ct == "" {
		return false
	}
	if i := strings.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	ct = strings.ToLower(strings.TrimSpace(ct))
	switch {
	case strings.HasPrefix(ct, "text/"),
		strings.HasSuffix(ct, "+json"), strings.HasSuffix(ct, "+xml"):
		return true
	}
	switch ct {
	case "application/json", "application/xml", "application/javascript", "application/ecmascript":
		return true
	}
	return false
}

// textBody writes its bytes as an AMQP string without converting them to
// a Go string first (the payload is shared and never modified).
type textBody []byte

func (t textBody) MarshalAMQP(w *buffer.Buffer) error {
	if len(t) <= 255 {
		w.AppendByte(0xa1) // str8-utf8
		w.AppendByte(byte(len(t)))
	} else {
		w.AppendByte(0xb1) // str32-utf8
		w.AppendUint32(uint32(len(t)))
	}
	w.Append(t)
	return nil
}

// encoder writes core messages as AMQP messages. It is owned by one
// connection's writer goroutine and reuses its section structs, so that
// encoding a delivery allocates little.
type encoder struct {
	hdr   frames.MessageHeader
	ttl   uint32
	prio  uint8
	props frames.MessageProperties
	ann   encoding.Annotations
	app   encoding.ApplicationProperties
	msg   frames.Message
	data  [1][]byte
	seq   [1][]any
	mid   messageID
	// What encodeNative reuses from one message to the next: the split
	// of the stored message, the rewrite of its properties.
	hop  frames.HopScratch
	bare frames.BareScratch
}

// deliveryHeader is what the header says about one delivery of a queued
// message (its delivery-count and first-acquirer [3.2.1]); zero for a
// topic delivery.
type deliveryHeader struct {
	count         uint32
	firstAcquirer bool
}

// encode appends m as an AMQP message to w. retained marks a stored copy
// sent to a late subscriber (x-opt-retain = true; live messages never carry
// it: docs/architecture.md, decision 1). dest and replyTo are
// x-opt-jms-dest and x-opt-jms-reply-to (-1: omit).
func (e *encoder) encode(w *buffer.Buffer, m *core.Message, retained bool, dest, replyTo int8, dh deliveryHeader, now time.Time) error {
	if m.Native.Protocol == core.ProtocolAMQP {
		return e.encodeNative(w, m, retained, dest, dh, now)
	}
	e.msg = frames.Message{}

	// A JSON rendering of a typed AMQP body (an MQTT reply echoing it)
	// goes back as that type (docs/mapping.md, "Typed bodies"), and the
	// header user properties go back to their fields (headers.go).
	var typed typedBody
	var propTypes map[string]string // typed application properties: nil for most messages
	var hdrs restoredHeaders
	restored := false
	for _, u := range m.UserProperties {
		switch u.Key {
		case propAMQPType:
			typed, restored = restoreTyped(m, u.Value)
		case propTypesKey:
			propTypes = propTypesOf(u.Value)
		default:
			hdrs.take(u)
		}
	}

	if m.QoS > 0 || !m.Expiry.IsZero() || dh != (deliveryHeader{}) || hdrs.taken&takenPriority != 0 {
		e.hdr = frames.MessageHeader{Durable: m.QoS > 0, DeliveryCount: dh.count, FirstAcquirer: dh.firstAcquirer}
		if left := m.Expiry.Sub(now); !m.Expiry.IsZero() {
			ms := max(left.Milliseconds(), 1)
			e.ttl = uint32(min(ms, int64(^uint32(0))))
			e.hdr.TTL = &e.ttl
		}
		if hdrs.taken&takenPriority != 0 {
			e.prio = hdrs.priority
			e.hdr.Priority = &e.prio
		}
		e.msg.Header = &e.hdr
	}
	text := !restored && (m.PayloadFormat == 1 || isTextual(m.ContentType)) && utf8.Valid(m.Payload)
	e.ann = e.ann[:0]
	if dest >= 0 {
		e.ann = append(e.ann, encoding.Annotation{Key: annJMSDest, Value: dest})
	}
	switch {
	case restored:
		if typed.msgType >= 0 {
			e.ann = append(e.ann, encoding.Annotation{Key: annJMSMsgType, Value: typed.msgType})
		}
	case text:
		e.ann = append(e.ann, encoding.Annotation{Key: annJMSMsgType, Value: jmsTextMessage})
	default:
		e.ann = append(e.ann, encoding.Annotation{Key: annJMSMsgType, Value: jmsBytesMessage})
	}
	if replyTo >= 0 && m.ResponseTopic != "" {
		e.ann = append(e.ann, encoding.Annotation{Key: annJMSReplyTo, Value: replyTo})
	}
	if retained {
		e.ann = append(e.ann, encoding.Annotation{Key: annRetain, Value: true})
	}
	e.msg.MessageAnnotations = e.ann

	to := m.Topic
	if q, ok := strings.CutPrefix(to, queueTopic); ok {
		to = prefixQueue + q // put straight into a queue: its address
	}
	e.mid.set(m)
	replyAddr := m.ResponseTopic
	if q, ok := strings.CutPrefix(replyAddr, queueTopic); ok {
		replyAddr = prefixQueue + q // a queue's AMQP address
	}
	e.props = frames.MessageProperties{
		MessageID:   &e.mid, // every AMQP message has one (JMSMessageID)
		To:          to,
		ReplyTo:     replyAddr,
		ContentType: encoding.Symbol(m.ContentType),
		Subject:     hdrs.subject,
	}
	if m.CorrelationData != nil {
		kind := m.CorrelationKind
		if k, ok := correlationKindOf(propTypes); ok && kind == core.IDBinary {
			kind = k // an MQTT responder echoed an AMQP id: its type again
		}
		e.props.CorrelationID = correlationID(m.CorrelationData, kind)
	}
	if hdrs.created != 0 {
		e.props.CreationTime = hdrs.created // the JMS requester's JMSTimestamp, echoed
	} else if !m.Created.IsZero() {
		e.props.CreationTime = encoding.TimestampOf(m.Created)
	}
	if !m.Expiry.IsZero() {
		e.props.AbsoluteExpiryTime = encoding.TimestampOf(m.Expiry)
	}
	e.msg.Properties = &e.props

	if len(m.UserProperties) > 0 {
		e.app = e.app[:0]
	next:
		for _, u := range m.UserProperties {
			if restored && u.Key == propAMQPType || propTypes != nil && u.Key == propTypesKey || hdrs.said(u.Key) {
				continue // said by the body's and the properties' types, and the header fields, now
			}
			// AMQP map keys are unique; MQTT allows repeats: keep the first.
			for _, have := range e.app {
				if have.Key == u.Key {
					continue next
				}
			}
			var v any = u.Value
			if t, ok := propTypes[u.Key]; ok {
				if tv, ok := parseScalar(t, u.Value); ok {
					v = tv
				}
			}
			e.app = append(e.app, encoding.Property{Key: u.Key, Value: v})
		}
		e.msg.ApplicationProperties = e.app
	}

	switch {
	case restored && typed.seq:
		e.seq[0] = typed.value.([]any)
		e.msg.Sequence = e.seq[:]
	case restored:
		e.msg.Value = typed.value
	case text:
		e.msg.Value = textBody(m.Payload)
	default:
		e.data[0] = m.Payload
		e.msg.Data = e.data[:]
	}
	err := e.msg.MarshalAMQP(w)
	e.data[0], e.seq[0] = nil, nil
	e.msg = frames.Message{}
	return err
}
