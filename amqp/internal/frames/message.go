package frames

import (
	"errors"
	"fmt"

	"github.com/tolsey/tolsey/amqp/internal/buffer"
	"github.com/tolsey/tolsey/amqp/internal/encoding"
)

/*
<type name="header" class="composite" source="list" provides="section">

	<descriptor name="amqp:header:list" code="0x00000000:0x00000070"/>
	<field name="durable" type="boolean" default="false"/>
	<field name="priority" type="ubyte" default="4"/>
	<field name="ttl" type="milliseconds"/>
	<field name="first-acquirer" type="boolean" default="false"/>
	<field name="delivery-count" type="uint" default="0"/>

</type>
*/
type MessageHeader struct {
	Durable       bool
	Priority      *uint8  // nil: absent, meaning 4
	TTL           *uint32 // milliseconds; nil: absent, no time to live
	FirstAcquirer bool
	DeliveryCount uint32
}

func (h *MessageHeader) MarshalAMQP(w *buffer.Buffer) error {
	return encoding.WriteComposite(w, codeHeader, []encoding.EncField{
		{Value: &h.Durable, Default: !h.Durable},
		{Value: &h.Priority, Omit: h.Priority == nil},
		{Value: &h.TTL, Omit: h.TTL == nil},
		{Value: &h.FirstAcquirer, Default: !h.FirstAcquirer},
		{Value: &h.DeliveryCount, Default: h.DeliveryCount == 0},
	})
}

func (h *MessageHeader) UnmarshalAMQP(r *buffer.Buffer) error {
	return encoding.ReadComposite(r, codeHeader, []encoding.DecField{
		{Value: &h.Durable, Name: "durable"},
		{Value: &h.Priority, Name: "priority"},
		{Value: &h.TTL, Name: "ttl"},
		{Value: &h.FirstAcquirer, Name: "first-acquirer"},
		{Value: &h.DeliveryCount, Name: "delivery-count"},
	})
}

/*
<type name="properties" class="composite" source="list" provides="section">

	<descriptor name="amqp:properties:list" code="0x00000000:0x00000073"/>
	<field name="message-id" type="*" requires="message-id"/>
	<field name="user-id" type="binary"/>
	<field name="to" type="*" requires="address"/>
	<field name="subject" type="string"/>
	<field name="reply-to" type="*" requires="address"/>
	<field name="correlation-id" type="*" requires="message-id"/>
	<field name="content-type" type="symbol"/>
	<field name="content-encoding" type="symbol"/>
	<field name="absolute-expiry-time" type="timestamp"/>
	<field name="creation-time" type="timestamp"/>
	<field name="group-id" type="string"/>
	<field name="group-sequence" type="sequence-no"/>
	<field name="reply-to-group-id" type="string"/>

</type>
*/
type MessageProperties struct {
	MessageID          any    // uint64, encoding.UUID, []byte or string
	UserID             []byte // aliases the payload when decoded
	To                 string
	Subject            string
	ReplyTo            string
	CorrelationID      any // uint64, encoding.UUID, []byte or string
	ContentType        encoding.Symbol
	ContentEncoding    encoding.Symbol
	AbsoluteExpiryTime encoding.Timestamp // 0: absent
	CreationTime       encoding.Timestamp // 0: absent
	GroupID            string
	GroupSequence      *uint32
	ReplyToGroupID     string
}

func (p *MessageProperties) MarshalAMQP(w *buffer.Buffer) error {
	return encoding.WriteComposite(w, codeProperties, []encoding.EncField{
		{Value: &p.MessageID, Omit: p.MessageID == nil},
		{Value: &p.UserID, Omit: p.UserID == nil},
		{Value: &p.To, Omit: p.To == ""},
		{Value: &p.Subject, Omit: p.Subject == ""},
		{Value: &p.ReplyTo, Omit: p.ReplyTo == ""},
		{Value: &p.CorrelationID, Omit: p.CorrelationID == nil},
		{Value: &p.ContentType, Omit: p.ContentType == ""},
		{Value: &p.ContentEncoding, Omit: p.ContentEncoding == ""},
		{Value: &p.AbsoluteExpiryTime, Omit: p.AbsoluteExpiryTime == 0},
		{Value: &p.CreationTime, Omit: p.CreationTime == 0},
		{Value: &p.GroupID, Omit: p.GroupID == ""},
		{Value: &p.GroupSequence, Omit: p.GroupSequence == nil},
		{Value: &p.ReplyToGroupID, Omit: p.ReplyToGroupID == ""},
	})
}

func (p *MessageProperties) UnmarshalAMQP(r *buffer.Buffer) error {
	return encoding.ReadComposite(r, codeProperties, []encoding.DecField{
		{Value: &p.MessageID, Name: "message-id"},
		{Value: &p.UserID, Name: "user-id"},
		{Value: &p.To, Name: "to"},
		{Value: &p.Subject, Name: "subject"},
		{Value: &p.ReplyTo, Name: "reply-to"},
		{Value: &p.CorrelationID, Name: "correlation-id"},
		{Value: &p.ContentType, Name: "content-type"},
		{Value: &p.ContentEncoding, Name: "content-encoding"},
		{Value: &p.AbsoluteExpiryTime, Name: "absolute-expiry-time"},
		{Value: &p.CreationTime, Name: "creation-time"},
		{Value: &p.GroupID, Name: "group-id"},
		{Value: &p.GroupSequence, Name: "group-sequence"},
		{Value: &p.ReplyToGroupID, Name: "reply-to-group-id"},
	})
}

// Message is an annotated message (part 3 section 3.2): the sections of a
// transfer payload, in this order on the wire:
//
//	header? delivery-annotations? message-annotations? properties?
//	application-properties? (data* | amqp-sequence* | amqp-value?) footer?
//
// Exactly one body kind is used: Data, Sequence or Value. A nil Value means
// "no amqp-value section" (so an amqp-value holding null decodes to a
// message without a body).
type Message struct {
	Header                *MessageHeader
	DeliveryAnnotations   encoding.Annotations
	MessageAnnotations    encoding.Annotations
	Properties            *MessageProperties
	ApplicationProperties encoding.ApplicationProperties
	Data                  [][]byte // data sections; alias the payload when decoded
	Sequence              [][]any  // amqp-sequence sections
	Value                 any      // the amqp-value section
	Footer                encoding.Annotations
}

// MarshalAMQP writes the message's sections.
func (m *Message) MarshalAMQP(w *buffer.Buffer) error {
	bodies := 0
	for _, set := range []bool{m.Data != nil, m.Sequence != nil, m.Value != nil} {
		if set {
			bodies++
		}
	}
	if bodies > 1 {
		return errors.New("amqp frames: message has more than one body kind")
	}
	if m.Header != nil {
		if err := m.Header.MarshalAMQP(w); err != nil {
			return err
		}
	}
	if err := writeAnnotations(w, codeDeliveryAnnotations, m.DeliveryAnnotations); err != nil {
		return err
	}
	if err := writeAnnotations(w, codeMessageAnnotations, m.MessageAnnotations); err != nil {
		return err
	}
	if m.Properties != nil {
		if err := m.Properties.MarshalAMQP(w); err != nil {
			return err
		}
	}
	if m.ApplicationProperties != nil {
		encoding.WriteDescriptor(w, codeApplicationProperties)
		if err := encoding.WriteApplicationProperties(w, m.ApplicationProperties); err != nil {
			return err
		}
	}
	for _, d := range m.Data {
		encoding.WriteDescriptor(w, codeData)
		if err := encoding.WriteBinary(w, d); err != nil {
			return err
		}
	}
	for _, s := range m.Sequence {
		encoding.WriteDescriptor(w, codeAMQPSequence)
		if err := encoding.WriteList(w, s); err != nil {
			return err
		}
	}
	if m.Value != nil {
		encoding.WriteDescriptor(w, codeAMQPValue)
		if err := encoding.WriteAny(w, m.Value); err != nil {
			return err
		}
	}
	return writeAnnotations(w, codeFooter, m.Footer)
}

func writeAnnotations(w *buffer.Buffer, code uint64, a encoding.Annotations) error {
	if a == nil {
		return nil
	}
	encoding.WriteDescriptor(w, code)
	return encoding.WriteAnnotations(w, a)
}

// sectionRank orders the sections; the three body kinds share a rank.
func sectionRank(code uint64) int {
	switch code {
	case codeHeader:
		return 0
	case codeDeliveryAnnotations:
		return 1
	case codeMessageAnnotations:
		return 2
	case codeProperties:
		return 3
	case codeApplicationProperties:
		return 4
	case codeData, codeAMQPSequence, codeAMQPValue:
		return 5
	case codeFooter:
		return 6
	}
	return -1
}

// Decode decodes a whole transfer payload into m, which should be zero.
// A delivery split over several transfer frames (more=true) is decoded
// from the concatenation of their payloads (see PayloadBuffer).
func (m *Message) Decode(payload []byte) error {
	return m.UnmarshalAMQP(buffer.New(payload))
}

// UnmarshalAMQP decodes sections until r is exhausted.
func (m *Message) UnmarshalAMQP(r *buffer.Buffer) error {
	last, lastCode := -1, uint64(0)
	for r.Len() > 0 {
		code, err := encoding.PeekDescriptor(r)
		if err != nil {
			return err
		}
		rank := sectionRank(code)
		switch {
		case rank < 0:
			return fmt.Errorf("amqp frames: %#02x is not a message section", code)
		case rank < last,
			rank == last && (code != lastCode || code == codeAMQPValue || rank != 5):
			return fmt.Errorf("amqp frames: message section %#02x out of order", code)
		}
		last, lastCode = rank, code
		if err := m.readSection(r, code); err != nil {
			return fmt.Errorf("amqp frames: message section %#02x: %w", code, err)
		}
	}
	return nil
}

func (m *Message) readSection(r *buffer.Buffer, code uint64) (err error) {
	switch code {
	case codeHeader:
		m.Header = new(MessageHeader)
		return m.Header.UnmarshalAMQP(r)
	case codeProperties:
		m.Properties = new(MessageProperties)
		return m.Properties.UnmarshalAMQP(r)
	}
	if _, err := encoding.ReadDescriptor(r); err != nil {
		return err
	}
	if encoding.IsNull(r) {
		return nil
	}
	switch code {
	case codeDeliveryAnnotations:
		m.DeliveryAnnotations, err = encoding.ReadAnnotations(r)
	case codeMessageAnnotations:
		m.MessageAnnotations, err = encoding.ReadAnnotations(r)
	case codeApplicationProperties:
		m.ApplicationProperties, err = encoding.ReadApplicationProperties(r)
	case codeData:
		var d []byte
		if d, err = encoding.ReadBinary(r); err == nil {
			m.Data = append(m.Data, d)
		}
	case codeAMQPSequence:
		var s []any
		if s, err = encoding.ReadList(r); err == nil {
			m.Sequence = append(m.Sequence, s)
		}
	case codeAMQPValue:
		m.Value, err = encoding.ReadAny(r)
	case codeFooter:
		m.Footer, err = encoding.ReadAnnotations(r)
	}
	return err
}

// ErrMessageTooLarge is returned by PayloadBuffer when a delivery grows past
// its limit.
var ErrMessageTooLarge = errors.New("amqp frames: message exceeds max-message-size")

// PayloadBuffer reassembles the payload of a delivery sent over several
// transfer frames. Max bounds the total, checked before each append: without
// it a peer could stream "more=true" transfers forever and grow the buffer
// without limit.
type PayloadBuffer struct {
	Max uint64 // the link's max-message-size; 0 means no limit
	b   []byte
}

// Append adds one transfer's payload (copying it: the frame it aliases is
// gone after the next read).
func (p *PayloadBuffer) Append(payload []byte) error {
	if p.Max != 0 && uint64(len(p.b))+uint64(len(payload)) > p.Max {
		return ErrMessageTooLarge
	}
	p.b = append(p.b, payload...)
	return nil
}

// Bytes returns the payload so far.
func (p *PayloadBuffer) Bytes() []byte { return p.b }

// Len is the number of payload bytes so far.
func (p *PayloadBuffer) Len() int { return len(p.b) }

// Reset empties the buffer, keeping its storage. Messages decoded from
// Bytes alias that storage, so reset only after they are done with.
func (p *PayloadBuffer) Reset() { p.b = p.b[:0] }

// Hop is a message split the way an intermediary may touch it (part 3
// section 3.2): the header and message annotations, which a node may change,
// decoded; delivery annotations, which are for this hop only, dropped; and
// the bare message with the footer (properties, application-properties,
// body, footer), which is immutable, kept as its bytes.
type Hop struct {
	Header             *MessageHeader
	MessageAnnotations encoding.Annotations
	Bare               []byte // aliases the input
}

// SplitHop splits an encoded message for sending it on unchanged.
func SplitHop(b []byte) (Hop, error) {
	return SplitHopWith(b, new(HopScratch))
}

// HopScratch is what SplitHopWith reuses from one message to the next: a
// Hop's Header points into it, so it holds until the next split.
type HopScratch struct {
	r   buffer.Buffer
	hdr MessageHeader
}

// SplitHopWith is SplitHop without allocating the reader or the header
// (a connection's writer splits every message it passes on): the Hop's
// Header is sc's, valid until sc's next use.
func SplitHopWith(b []byte, sc *HopScratch) (Hop, error) {
	var h Hop
	r := &sc.r
	r.ResetBytes(b)
	for r.Len() > 0 {
		code, err := encoding.PeekDescriptor(r)
		if err != nil {
			return h, err
		}
		switch code {
		case codeHeader:
			sc.hdr = MessageHeader{}
			h.Header = &sc.hdr
			err = h.Header.UnmarshalAMQP(r)
		case codeDeliveryAnnotations:
			if _, err = encoding.ReadDescriptor(r); err == nil {
				err = encoding.Skip(r)
			}
		case codeMessageAnnotations:
			// IsNull takes a null value (no annotations) itself.
			if _, err = encoding.ReadDescriptor(r); err == nil && !encoding.IsNull(r) {
				h.MessageAnnotations, err = encoding.ReadAnnotations(r)
			}
		default:
			h.Bare = b[len(b)-r.Len():]
			return h, nil
		}
		if err != nil {
			return h, fmt.Errorf("amqp frames: message section %#02x: %w", code, err)
		}
	}
	return h, nil
}

// propTo is the index of `to` in the properties list (part 3 section
// 3.2.4).
const propTo = 2

// AppendBareWithTo appends bare (a Hop's Bare: properties,
// application-properties, body, footer) to w, with the properties' `to`
// set to to when the sender left it out (null, an empty string, or no
// properties section at all: one is written before the rest). Every other
// field and section goes out byte for byte; a bare message whose `to` is
// set goes out unchanged, and so does any when to is empty. What it
// needs besides is kept in scratch for the next call (nil: nothing kept).
func AppendBareWithTo(w *buffer.Buffer, bare []byte, to string, scratch *BareScratch) error {
	if scratch == nil {
		scratch = new(BareScratch)
	}
	if to == "" {
		w.Append(bare) // nothing to name
		return nil
	}
	fields, rest := scratch.fields[:0], bare
	r := &scratch.r
	r.ResetBytes(bare)
	if code, err := encoding.PeekDescriptor(r); err == nil && code == codeProperties {
		if _, err := encoding.ReadDescriptor(r); err != nil {
			return err
		}
		fields, err = encoding.ReadListRaw(r, fields)
		scratch.fields = fields
		if err != nil {
			return err
		}
		if len(fields) > propTo && !absentTo(fields[propTo]) {
			w.Append(bare)
			return nil
		}
		rest = bare[r.Offset():]
	}
	for len(fields) <= propTo {
		fields = append(fields, nullField)
	}
	scratch.fields = fields
	s := &scratch.to
	s.Reset()
	if err := encoding.WriteString(s, to); err != nil {
		return err
	}
	fields[propTo] = s.Written()
	encoding.WriteDescriptor(w, codeProperties)
	if err := encoding.WriteRawList(w, fields); err != nil {
		return err
	}
	w.Append(rest)
	return nil
}

// BareScratch is what AppendBareWithTo reuses from one message to the
// next: the properties' fields, the reader, the encoded `to`.
type BareScratch struct {
	fields [][]byte
	r      buffer.Buffer
	to     buffer.Buffer
}

// nullField is an encoded null, a properties field left out. Only read.
var nullField = []byte{0x40}

// absentTo reports whether the encoded `to` field b says nothing: a null
// or an empty string. Anything else (a value that is not a string
// included) is the sender's, and stays. Read from the bytes: a delivery
// of a message that has its `to` allocates nothing for it.
func absentTo(b []byte) bool {
	switch {
	case len(b) == 1:
		return b[0] == 0x40 // null
	case len(b) == 2:
		return b[0] == 0xa1 && b[1] == 0 // str8-utf8, empty
	case len(b) == 5:
		return b[0] == 0xb1 && b[1]|b[2]|b[3]|b[4] == 0 // str32-utf8, empty
	}
	return false
}
