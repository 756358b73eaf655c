package bridge

import (
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	goamqp "github.com/Azure/go-amqp"

	"github.com/tolsey/tolsey/core"
)

// The application properties a bridged AMQP message carries besides the
// mapping of docs/mapping.md. Application properties, not message
// annotations: a Tolsey gateway (and most brokers) keeps application
// properties end to end (ours turn them into MQTT user properties and
// back), where annotations are dropped, and the path must survive a hop
// through the remote's own server for loop prevention to work.
const (
	// AMQPTopicProperty holds the message's topic, as the subject does:
	// brokers that rewrite the subject (or routing key) leave it.
	AMQPTopicProperty = "Tolsey-Topic"
	// AMQPPathProperty holds the node ids the message has passed,
	// comma-separated, each escaped (',' and '%' percent-encoded).
	AMQPPathProperty = "Tolsey-Path"
)

// annotationRetain is the annotation a retained message carries
// (docs/mapping.md), so that the remote stores it.
const annotationRetain = "x-opt-retain"

// toAMQP maps m for the remote (docs/mapping.md, "MQTT → AMQP", with the
// differences docs/bridge.md lists): the topic in the subject and in
// Tolsey-Topic, path the node ids passed including ours.
func toAMQP(m *core.Message, path []string, now time.Time) *goamqp.Message {
	am := &goamqp.Message{}
	// The payload is an amqp-value string only when the publisher said it
	// is text (payload format 1): a remote Tolsey gateway reads that back
	// as format 1, and a data section as 0, so the indicator round-trips.
	if m.PayloadFormat == 1 && utf8.Valid(m.Payload) {
		am.Value = string(m.Payload)
	} else {
		am.Data = [][]byte{m.Payload}
	}
	topic := m.Topic
	am.Properties = &goamqp.MessageProperties{Subject: &topic}
	if m.QoS > 0 || !m.Expiry.IsZero() {
		am.Header = &goamqp.MessageHeader{Durable: m.QoS > 0}
	}
	if !m.Expiry.IsZero() {
		ttl := m.Expiry.Sub(now)
		if ttl < time.Millisecond {
			ttl = time.Millisecond
		}
		am.Header.TTL = ttl
		exp := m.Expiry
		am.Properties.AbsoluteExpiryTime = &exp
	}
	if m.ContentType != "" {
		ct := m.ContentType
		am.Properties.ContentType = &ct
	}
	if m.ResponseTopic != "" {
		rt := m.ResponseTopic
		am.Properties.ReplyTo = &rt
	}
	if m.CorrelationData != nil {
		am.Properties.CorrelationID = correlationOut(m)
	}
	if !m.Created.IsZero() {
		c := m.Created
		am.Properties.CreationTime = &c
	}
	ap := make(map[string]any, len(m.UserProperties)+2)
	for _, p := range m.UserProperties {
		if ourProperty(p.Key) {
			continue // a previous hop's, replaced below
		}
		if _, dup := ap[p.Key]; !dup { // AMQP map keys are unique: the first is kept
			ap[p.Key] = p.Value
		}
	}
	ap[AMQPTopicProperty] = m.Topic
	ap[AMQPPathProperty] = joinPath(path)
	am.ApplicationProperties = ap
	if m.Retain {
		am.Annotations = goamqp.Annotations{annotationRetain: true}
	}
	return am
}

func correlationOut(m *core.Message) any {
	s := string(m.CorrelationData)
	switch m.CorrelationKind {
	case core.IDString:
		return s
	case core.IDULong:
		if v, err := strconv.ParseUint(s, 10, 64); err == nil {
			return v
		}
	case core.IDUUID:
		if u, ok := parseUUID(s); ok {
			return u
		}
	}
	return append([]byte(nil), m.CorrelationData...)
}

func parseUUID(s string) (goamqp.UUID, bool) {
	var u goamqp.UUID
	h := strings.ReplaceAll(s, "-", "")
	if len(h) != 32 || len(s) != 36 {
		return u, false
	}
	for i := range 16 {
		v, err := strconv.ParseUint(h[2*i:2*i+2], 16, 8)
		if err != nil {
			return u, false
		}
		u[i] = byte(v)
	}
	return u, true
}

// ourProperty reports whether an application property (or the user
// property it became) is the bridge's own.
func ourProperty(k string) bool {
	return strings.EqualFold(k, AMQPTopicProperty) || strings.EqualFold(k, AMQPPathProperty)
}

func joinPath(path []string) string {
	var b []byte
	for i, n := range path {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendEscaped(b, n, ",", false, false)
	}
	return string(b)
}

func splitPath(s string) ([]string, error) {
	if s == "" {
		return nil, nil
	}
	parts := strings.Split(s, ",")
	for i, p := range parts {
		t, err := text(p)
		if err != nil {
			return nil, err
		}
		parts[i] = t
	}
	return parts, nil
}

// pathOf is the hop path a message carries (in user properties, when it
// came in through a remote Tolsey gateway's AMQP server or one of our
// bridges).
func pathOf(m *core.Message) []string {
	for _, p := range m.UserProperties {
		if strings.EqualFold(p.Key, AMQPPathProperty) {
			path, err := splitPath(p.Value)
			if err != nil {
				return nil
			}
			return path
		}
	}
	return nil
}

var errAMQPBody = errors.New("body is not data or an amqp-value string or binary")

// fromAMQP maps a remote message into m (all but the topic and origin:
// the caller's), and returns the topic it names (subject, else
// Tolsey-Topic; "" for none), its path and ok=false with why when it
// cannot be mapped (docs/mapping.md, "AMQP → MQTT").
func fromAMQP(am *goamqp.Message, m *core.Message, now time.Time) (topic string, path []string, err error) {
	switch {
	case am.Value != nil:
		switch v := am.Value.(type) {
		case string:
			m.Payload = []byte(v)
			m.PayloadFormat = 1
		case []byte:
			m.Payload = v
		default:
			return "", nil, fmt.Errorf("%w: amqp-value %T", errAMQPBody, am.Value)
		}
	case len(am.Sequence) > 0:
		return "", nil, fmt.Errorf("%w: amqp-sequence", errAMQPBody)
	default:
		for _, d := range am.Data {
			m.Payload = append(m.Payload, d...)
		}
	}
	if h := am.Header; h != nil {
		if h.Durable {
			m.QoS = 1
		}
		if h.TTL > 0 {
			m.Expiry = now.Add(h.TTL)
		}
	}
	if p := am.Properties; p != nil {
		if p.AbsoluteExpiryTime != nil && !p.AbsoluteExpiryTime.IsZero() &&
			(m.Expiry.IsZero() || p.AbsoluteExpiryTime.Before(m.Expiry)) {
			m.Expiry = *p.AbsoluteExpiryTime
		}
		if p.ContentType != nil {
			m.ContentType = *p.ContentType
		}
		if p.ReplyTo != nil {
			m.ResponseTopic = strings.TrimPrefix(*p.ReplyTo, "topic://")
		}
		switch c := p.CorrelationID.(type) {
		case nil:
		case []byte:
			m.CorrelationData = c
		case string:
			m.CorrelationData, m.CorrelationKind = []byte(c), core.IDString
		case uint64:
			m.CorrelationData, m.CorrelationKind = strconv.AppendUint(nil, c, 10), core.IDULong
		case goamqp.UUID:
			m.CorrelationData, m.CorrelationKind = []byte(c.String()), core.IDUUID
		default:
			m.CorrelationData = fmt.Append(nil, c)
		}
		if p.Subject != nil {
			topic = *p.Subject
		}
	}
	keys := make([]string, 0, len(am.ApplicationProperties))
	for k := range am.ApplicationProperties {
		keys = append(keys, k)
	}
	// An AMQP map's order is lost in go-amqp's Go map: sorted, so the
	// order is at least the same every time.
	slices.Sort(keys)
	for _, k := range keys {
		v := am.ApplicationProperties[k]
		switch {
		case strings.EqualFold(k, AMQPTopicProperty):
			if s, ok := v.(string); ok && topic == "" {
				topic = s
			}
			continue
		case strings.EqualFold(k, AMQPPathProperty):
			if s, ok := v.(string); ok {
				if path, err = splitPath(s); err != nil {
					return "", nil, fmt.Errorf("bad %s: %w", AMQPPathProperty, err)
				}
			}
			continue
		}
		m.UserProperties = append(m.UserProperties, core.UserProperty{Key: k, Value: propertyText(v)})
	}
	if r, ok := am.Annotations[annotationRetain].(bool); ok && r {
		m.Retain = true
	}
	return topic, path, nil
}

// propertyText is an application property's value as text, as
// docs/mapping.md writes each type.
func propertyText(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case bool:
		return strconv.FormatBool(x)
	case float32:
		return strconv.FormatFloat(float64(x), 'g', -1, 32)
	case float64:
		if math.IsInf(x, 0) || math.IsNaN(x) {
			return fmt.Sprint(x)
		}
		return strconv.FormatFloat(x, 'g', -1, 64)
	case time.Time:
		return x.UTC().Format("2006-01-02T15:04:05.999Z07:00")
	case []byte:
		return base64.StdEncoding.EncodeToString(x)
	case goamqp.UUID:
		return x.String()
	case goamqp.Symbol:
		return string(x)
	default:
		return fmt.Sprint(x)
	}
}
