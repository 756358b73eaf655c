package bridge

import (
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"

	"github.com/tolsey/tolsey/core"
)

// The NATS headers a core.Message travels with (docs/bridge.md, "Headers").
// Ours start with "Tolsey-": NATS keeps "Nats-" for JetStream and its MQTT
// support uses "Nmqtt-". We never set "Nmqtt-Pub" (NATS's "this came from
// MQTT, at this QoS"): NATS's MQTT support then leaves the message to its
// JetStream path, which a core NATS publish never takes, and its QoS 1
// subscribers would never get it (headers_test.go shows it).
//
// Values are percent-encoded where a header cannot carry them as they are
// (escape below); Content-Type, Nats-Msg-Id and Tolsey-Response-Subject are
// written as they are, for NATS clients to read, and only when they can be.
const (
	HeaderContentType = "Content-Type" // as is, when header-safe
	// HeaderContentTypeEscaped replaces Content-Type for a content type a
	// header cannot carry as is (a control character, a space at an end).
	HeaderContentTypeEscaped = "Tolsey-Content-Type"
	HeaderCorrelationData    = "Tolsey-Correlation-Data" // standard base64, padded
	HeaderCorrelationKind    = "Tolsey-Correlation-Kind" // string, ulong, uuid; absent: binary
	// HeaderResponseSubject is the response topic as a subject
	// (TopicToSubject), for a NATS responder to publish to.
	HeaderResponseSubject = "Tolsey-Response-Subject"
	// HeaderResponseTopic carries a response topic that has no subject, or
	// whose subject is not ASCII, escaped.
	HeaderResponseTopic  = "Tolsey-Response-Topic"
	HeaderUserProperty   = "Tolsey-User-Property" // one value per property, in order: key=value
	HeaderPayloadFormat  = "Tolsey-Payload-Format"
	HeaderExpiry         = "Tolsey-Expiry" // seconds left when sent [MQTT-3.3.2-6]
	HeaderRetain         = "Tolsey-Retain" // "true"
	HeaderQoS            = "Tolsey-QoS"
	HeaderOriginProtocol = "Tolsey-Origin-Protocol"
	HeaderOriginNode     = "Tolsey-Origin-Node"
	HeaderOriginClient   = "Tolsey-Origin-Client"
	HeaderPath           = "Tolsey-Path" // one value per gateway passed, in order
	HeaderMsgID          = nats.MsgIdHdr // "Nats-Msg-Id": JetStream de-duplication
)

// MaxHops bounds a message's path: one that has passed this many gateways
// is treated as looping (Provenance.Loops), and a longer path is refused
// before it is decoded.
const MaxHops = 32

// ErrBadHeader: a header that should hold one of ours does not decode.
var ErrBadHeader = errors.New("bridge: malformed NATS header")

// Provenance is what a message carries across NATS besides its own fields:
// where it first entered a gateway, which gateways it has passed, and its
// JetStream de-duplication id.
//
// The path is how a loop is cut. A gateway that sends a message appends its
// node id; a gateway that receives one whose path holds its own id drops it
// (Loops). Two gateways bridging the same subjects both ways through one
// NATS: a message from A reaches B, and A's own copy comes back to A,
// which drops it: the loop is cut at the first hop back.
type Provenance struct {
	// Origin is where the message first entered a gateway (the protocol,
	// node and client of the publisher). It is not the Origin of the
	// core.Message a receiving gateway publishes: that one is NATS, on the
	// receiving node.
	Origin core.Origin
	// Path holds the node ids of the gateways the message has passed, in
	// order; the first is Origin.Node's.
	Path []string
	// MsgID is the JetStream de-duplication id (Nats-Msg-Id); "" for none.
	// See MessageID.
	MsgID string
}

// Loops reports whether node must drop the message: the message has passed
// node already, or more gateways than MaxHops.
func (p Provenance) Loops(node string) bool {
	return len(p.Path) >= MaxHops || slices.Contains(p.Path, node)
}

// MessageID is a JetStream de-duplication id for the seq-th message a rule
// sent: "node:rule:seq", the node id and rule name escaped. It is the same
// when the message is sent again after a crash, if seq is (the
// store-and-forward buffer keeps it), so JetStream drops the second copy
// within its duplicate window. seq must never be reused: a new message with
// an old id inside the window would be dropped as a duplicate.
func MessageID(node, rule string, seq uint64) string {
	b := make([]byte, 0, len(node)+len(rule)+24)
	b = appendEscaped(b, node, ":", true, false)
	b = append(b, ':')
	b = appendEscaped(b, rule, ":", false, false)
	b = append(b, ':')
	b = strconv.AppendUint(b, seq, 10)
	return string(b)
}

var correlationKinds = [...]string{
	core.IDBinary: "binary",
	core.IDString: "string",
	core.IDULong:  "ulong",
	core.IDUUID:   "uuid",
}

// EncodeHeaders gives the NATS headers for m and p: every field of m but
// its topic and payload (the subject and data of the NATS message), its
// Created time and its Origin (p.Origin travels instead). now is when it is
// sent: the expiry travels as the seconds left then.
func EncodeHeaders(m *core.Message, p Provenance, now time.Time) nats.Header {
	h := make(nats.Header, 8)
	// The single values share one array, a slice of it per key, capped so
	// that a later Header.Add copies instead of writing over the next key.
	one := make([]string, 0, 8)
	set := func(key, value string) {
		one = append(one, value)
		n := len(one)
		h[key] = one[n-1 : n : n]
	}
	if ct := m.ContentType; ct != "" {
		if headerSafe(ct) {
			set(HeaderContentType, ct)
		} else {
			set(HeaderContentTypeEscaped, escape(ct))
		}
	}
	if m.CorrelationData != nil {
		set(HeaderCorrelationData, base64.StdEncoding.EncodeToString(m.CorrelationData))
		if k := m.CorrelationKind; k != core.IDBinary && int(k) < len(correlationKinds) {
			set(HeaderCorrelationKind, correlationKinds[k])
		}
	}
	if rt := m.ResponseTopic; rt != "" {
		if s, err := TopicToSubject(rt); err == nil && headerSafe(s) {
			set(HeaderResponseSubject, s)
		} else {
			set(HeaderResponseTopic, escape(rt))
		}
	}
	if len(m.UserProperties) > 0 {
		vs := make([]string, len(m.UserProperties))
		for i, up := range m.UserProperties {
			b := make([]byte, 0, len(up.Key)+len(up.Value)+1)
			b = appendEscaped(b, up.Key, "=", true, false)
			b = append(b, '=')
			b = appendEscaped(b, up.Value, "", false, true)
			vs[i] = string(b)
		}
		h[HeaderUserProperty] = vs
	}
	if m.PayloadFormat != 0 {
		set(HeaderPayloadFormat, strconv.Itoa(int(m.PayloadFormat)))
	}
	if left, ok := m.RemainingExpiry(now); ok {
		set(HeaderExpiry, strconv.FormatUint(uint64(left), 10))
	}
	if m.Retain {
		set(HeaderRetain, "true")
	}
	if m.QoS > 0 {
		set(HeaderQoS, strconv.Itoa(int(m.QoS)))
	}
	if o := p.Origin.Protocol; o != "" {
		set(HeaderOriginProtocol, escape(string(o)))
	}
	if o := p.Origin.Node; o != "" {
		set(HeaderOriginNode, escape(o))
	}
	if o := p.Origin.Client; o != "" {
		set(HeaderOriginClient, escape(o))
	}
	if len(p.Path) > 0 {
		vs := make([]string, len(p.Path))
		for i, n := range p.Path {
			vs[i] = escape(n)
		}
		h[HeaderPath] = vs
	}
	if id := p.MsgID; id != "" {
		if !headerSafe(id) {
			id = escape(id)
		}
		set(HeaderMsgID, id)
	}
	return h
}

// DecodeHeaders sets m's fields from h, as EncodeHeaders wrote them, and
// returns the provenance h carries; now is when the message arrived (its
// expiry is now plus the seconds left). Every field EncodeHeaders carries
// is set, to its zero value when its header is absent; m's topic, payload,
// Created and Origin are left to the receiver.
//
// Headers that are not ours (a NATS client's own; not "Nats-…",
// "Nmqtt-…" or "Tolsey-…") become user properties after ours, ordered by
// key (a NATS header is a map: its order is lost), each key's values in
// order. A header of ours that does not decode, or a value that is no
// MQTT string (not UTF-8, or U+0000 [MQTT-1.5.4-2]), is an error wrapping
// ErrBadHeader, and m is then unchanged.
func DecodeHeaders(h nats.Header, m *core.Message, now time.Time) (Provenance, error) {
	var p Provenance
	// Every field the headers carry is set, to its zero value when absent.
	d := *m
	d.ContentType, d.CorrelationData, d.CorrelationKind, d.ResponseTopic = "", nil, core.IDBinary, ""
	d.UserProperties, d.PayloadFormat, d.Expiry, d.Retain, d.QoS = nil, 0, time.Time{}, false, 0
	if len(h) == 0 {
		// A NATS client's plain message: nothing to look up.
		*m = d
		return p, nil
	}
	bad := func(key, why string) (Provenance, error) {
		return Provenance{}, fmt.Errorf("%w %s: %s", ErrBadHeader, key, why)
	}
	if v, ok := first(h, HeaderContentTypeEscaped); ok {
		s, err := text(v)
		if err != nil {
			return bad(HeaderContentTypeEscaped, err.Error())
		}
		d.ContentType = s
	} else if v, ok := first(h, HeaderContentType); ok {
		if err := mqttString(v); err != nil {
			return bad(HeaderContentType, err.Error())
		}
		d.ContentType = v
	}
	if v, ok := first(h, HeaderCorrelationData); ok {
		b, err := base64.StdEncoding.DecodeString(v)
		if err != nil {
			return bad(HeaderCorrelationData, err.Error())
		}
		d.CorrelationData = b
		if v, ok := first(h, HeaderCorrelationKind); ok {
			k := slices.Index(correlationKinds[:], v)
			if k < 0 {
				return bad(HeaderCorrelationKind, fmt.Sprintf("unknown kind %q", v))
			}
			d.CorrelationKind = core.IDKind(k)
		}
	}
	if v, ok := first(h, HeaderResponseTopic); ok {
		s, err := text(v)
		if err != nil {
			return bad(HeaderResponseTopic, err.Error())
		}
		d.ResponseTopic = s
	} else if v, ok := first(h, HeaderResponseSubject); ok {
		s, err := SubjectToTopic(v)
		if err != nil {
			return bad(HeaderResponseSubject, err.Error())
		}
		d.ResponseTopic = s
	}
	if vs := h[HeaderUserProperty]; len(vs) > 0 {
		d.UserProperties = make([]core.UserProperty, 0, len(vs))
		for _, v := range vs {
			k, val, ok := strings.Cut(v, "=")
			if !ok {
				return bad(HeaderUserProperty, fmt.Sprintf("%q has no '='", v))
			}
			var err error
			if k, err = text(k); err == nil {
				val, err = text(val)
			}
			if err != nil {
				return bad(HeaderUserProperty, err.Error())
			}
			d.UserProperties = append(d.UserProperties, core.UserProperty{Key: k, Value: val})
		}
	}
	var foreign []string
	for k := range h {
		if !ours(k) {
			foreign = append(foreign, k)
		}
	}
	slices.Sort(foreign)
	for _, k := range foreign {
		if err := mqttString(k); err != nil {
			return bad(k, err.Error())
		}
		for _, v := range h[k] {
			if err := mqttString(v); err != nil {
				return bad(k, err.Error())
			}
			d.UserProperties = append(d.UserProperties, core.UserProperty{Key: k, Value: v})
		}
	}
	if v, ok := first(h, HeaderPayloadFormat); ok {
		if v != "0" && v != "1" {
			return bad(HeaderPayloadFormat, fmt.Sprintf("%q is not 0 or 1", v))
		}
		d.PayloadFormat = v[0] - '0'
	}
	if v, ok := first(h, HeaderExpiry); ok {
		s, err := strconv.ParseUint(v, 10, 32)
		if err != nil {
			return bad(HeaderExpiry, err.Error())
		}
		d.Expiry = now.Add(time.Duration(s) * time.Second)
	}
	if v, ok := first(h, HeaderRetain); ok {
		if v != "true" && v != "false" {
			return bad(HeaderRetain, fmt.Sprintf("%q is not true or false", v))
		}
		d.Retain = v == "true"
	}
	if v, ok := first(h, HeaderQoS); ok {
		if v != "0" && v != "1" && v != "2" {
			return bad(HeaderQoS, fmt.Sprintf("%q is not 0, 1 or 2", v))
		}
		d.QoS = v[0] - '0'
	}
	// Each origin field on its own: a loop over their addresses would
	// move p to the heap, an allocation for every message brought in.
	var err error
	if p.Origin.Node, err = optText(h, HeaderOriginNode); err != nil {
		return bad(HeaderOriginNode, err.Error())
	}
	if p.Origin.Client, err = optText(h, HeaderOriginClient); err != nil {
		return bad(HeaderOriginClient, err.Error())
	}
	proto, err := optText(h, HeaderOriginProtocol)
	if err != nil {
		return bad(HeaderOriginProtocol, err.Error())
	}
	p.Origin.Protocol = core.Protocol(proto)
	if vs := h[HeaderPath]; len(vs) > 0 {
		if len(vs) > MaxHops {
			return bad(HeaderPath, fmt.Sprintf("%d gateways, over MaxHops (%d)", len(vs), MaxHops))
		}
		p.Path = make([]string, len(vs))
		for i, v := range vs {
			s, err := text(v)
			if err != nil {
				return bad(HeaderPath, err.Error())
			}
			p.Path[i] = s
		}
	}
	p.MsgID, _ = first(h, HeaderMsgID)
	*m = d
	return p, nil
}

// first is the first value of key, and whether there is one.
func first(h nats.Header, key string) (string, bool) {
	if vs := h[key]; len(vs) > 0 {
		return vs[0], true
	}
	return "", false
}

// optText is the first value of key unescaped (text), "" when there is none.
func optText(h nats.Header, key string) (string, error) {
	if v, ok := first(h, key); ok {
		return text(v)
	}
	return "", nil
}

// ours reports whether a header is one of ours or NATS's, not a NATS
// client's own.
func ours(key string) bool {
	if key == HeaderContentType {
		return true
	}
	for _, pre := range [...]string{"Tolsey-", "Nats-", "Nmqtt-"} {
		if len(key) >= len(pre) && strings.EqualFold(key[:len(pre)], pre) {
			return true
		}
	}
	return false
}

// headerSafe reports whether s goes into a NATS header value as it is:
// printable ASCII (ADR-4: header values are ASCII) with no space at either
// end (nats.go trims the value when it writes it, and turns CR and LF
// into spaces).
func headerSafe(s string) bool {
	if s == "" {
		return true
	}
	if s[0] == ' ' || s[len(s)-1] == ' ' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] >= 0x7f {
			return false
		}
	}
	return true
}

// escape percent-encodes a whole header value (appendEscaped).
func escape(s string) string {
	if headerSafe(s) && strings.IndexByte(s, '%') < 0 {
		return s
	}
	return string(appendEscaped(make([]byte, 0, len(s)+8), s, "", true, true))
}

const hexDigits = "0123456789ABCDEF"

// appendEscaped percent-encodes s onto dst: every byte outside printable
// ASCII (UTF-8 too: ADR-4 wants ASCII values, as nats.go's writeHeaderValue
// notes; nats.go is lenient, other clients need not be), '%', the bytes of
// also, and a space at the start (start: s begins the header value) or at
// the end (end: s ends it), which nats.go would trim.
func appendEscaped(dst []byte, s, also string, start, end bool) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c >= 0x7f || c == '%' || strings.IndexByte(also, c) >= 0 ||
			(c == ' ' && (start && i == 0 || end && i == len(s)-1)) {
			dst = append(dst, '%', hexDigits[c>>4], hexDigits[c&15])
		} else {
			dst = append(dst, c)
		}
	}
	return dst
}

// text undoes appendEscaped and checks that the result is an MQTT string.
func text(v string) (string, error) {
	s := v
	if strings.IndexByte(v, '%') >= 0 {
		b := make([]byte, 0, len(v))
		for i := 0; i < len(v); i++ {
			if v[i] != '%' {
				b = append(b, v[i])
				continue
			}
			if i+2 >= len(v) {
				return "", fmt.Errorf("%q: '%%' without two hex digits", v)
			}
			hi, lo := unhex(v[i+1]), unhex(v[i+2])
			if hi < 0 || lo < 0 {
				return "", fmt.Errorf("%q: '%%' without two hex digits", v)
			}
			b = append(b, byte(hi<<4|lo))
			i += 2
		}
		s = string(b)
	}
	if err := mqttString(s); err != nil {
		return "", err
	}
	return s, nil
}

func unhex(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'A' <= c && c <= 'F':
		return int(c-'A') + 10
	case 'a' <= c && c <= 'f':
		return int(c-'a') + 10
	}
	return -1
}

// mqttString checks what MQTT requires of a string [MQTT-1.5.4-1]
// [MQTT-1.5.4-2]: UTF-8 without U+0000.
func mqttString(s string) error {
	if !utf8.ValidString(s) {
		return errors.New("not UTF-8")
	}
	if strings.IndexByte(s, 0) >= 0 {
		return errors.New("holds U+0000")
	}
	return nil
}

// headerCache keeps the headers of plain messages (no property but their
// QoS: a device's reading, the usual QoS 0 message) by QoS, which is all
// they depend on, so that the bridge's writer does not build the same map
// for every message. A plain message carries its path alone (and its QoS
// when it has one): the path is what loop prevention needs; the origin
// headers travel with messages that carry headers of their own. Each
// header value costs nats.go an encoding and nats-server a scan on every
// publish, and a NATS subscriber a parse: with the three origin headers a
// plain message's headers were the largest part of the bridge's own cost
// per message (docs/benchmarks.md, "Bridge, the per-message path").
// Owned by one goroutine; the maps it hands out are shared: read them,
// never change them.
type headerCache struct {
	byQoS [3]nats.Header
}

// get is the headers of m with Path path (the same path at every call), or
// nil when m is not plain.
func (c *headerCache) get(m *core.Message, path []string) nats.Header {
	if m.ContentType != "" || m.CorrelationData != nil || m.ResponseTopic != "" || len(m.UserProperties) > 0 ||
		m.PayloadFormat != 0 || !m.Expiry.IsZero() || m.Retain || int(m.QoS) >= len(c.byQoS) {
		return nil
	}
	if h := c.byQoS[m.QoS]; h != nil {
		return h
	}
	h := EncodeHeaders(m, Provenance{Path: path}, time.Time{})
	c.byQoS[m.QoS] = h
	return h
}
