// Package frames owns the AMQP 1.0 framing layer (OASIS AMQP 1.0 part 2
// sections 2.2-2.3 and part 5 section 5.3): protocol headers, the frame
// header, every performative and SASL frame body, the terminus, error and
// delivery-state composites, the message sections (part 3) and Message, and
// a Reader and Writer that move frames over a byte stream.
//
// It does not know about connections, sessions or links: it never decides
// what a frame means for protocol state. That belongs to the connection
// layer above it.
//
// Decoded values alias the frame they came from wherever they hold bytes
// (Transfer.DeliveryTag, SASLInit.InitialResponse, Message.Data, binary
// values inside maps): they are valid until the Reader reads the next
// frame. Copy what must outlive that.
package frames

import (
	"bytes"
	"errors"
	"fmt"
	"math"

	"github.com/tolsey/tolsey/amqp/internal/buffer"
	"github.com/tolsey/tolsey/amqp/internal/encoding"
)

// Type is the frame type (header byte 5).
type Type uint8

const (
	TypeAMQP Type = 0x00
	TypeSASL Type = 0x01
)

func (t Type) String() string {
	switch t {
	case TypeAMQP:
		return "AMQP"
	case TypeSASL:
		return "SASL"
	}
	return fmt.Sprintf("frame-type(%d)", uint8(t))
}

// HeaderSize is the size of the fixed frame header.
const HeaderSize = 8

// MinMaxFrameSize is MIN-MAX-FRAME-SIZE (part 2 section 2.7.1): the largest
// frame a peer may send before open has negotiated a limit, and the
// smallest max-frame-size a peer may ask for.
const MinMaxFrameSize = 512

// Header is the fixed frame header (part 2 section 2.3.1):
//
//	+0         +4      +5      +6       +8
//	| SIZE (4) | DOFF  | TYPE  | CHANNEL |  extended header  |  frame body  |
//
// SIZE is the whole frame including the header; DOFF is the offset of the
// body in 4-byte words (at least 2); CHANNEL is meaningful for AMQP frames
// and ignored for SASL frames.
type Header struct {
	Size       uint32
	DataOffset uint8
	Type       Type
	Channel    uint16
}

// ParseHeader parses and validates the 8 bytes of a frame header.
func ParseHeader(b []byte) (Header, error) {
	if len(b) < HeaderSize {
		return Header{}, errors.New("amqp frames: short frame header")
	}
	h := Header{
		Size:       uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3]),
		DataOffset: b[4],
		Type:       Type(b[5]),
		Channel:    uint16(b[6])<<8 | uint16(b[7]),
	}
	if h.Size < HeaderSize {
		return h, fmt.Errorf("amqp frames: frame size %d is below the header size", h.Size)
	}
	if h.DataOffset < 2 || uint32(h.DataOffset)*4 > h.Size {
		return h, fmt.Errorf("amqp frames: data offset %d invalid for frame of %d bytes", h.DataOffset, h.Size)
	}
	if h.Type != TypeAMQP && h.Type != TypeSASL {
		return h, fmt.Errorf("amqp frames: unknown frame type %d", h.Type)
	}
	return h, nil
}

// Protocol IDs of the protocol header (part 2 section 2.2, part 5 5.2.1, 5.3.1).
const (
	ProtocolAMQP uint8 = 0
	ProtocolTLS  uint8 = 2
	ProtocolSASL uint8 = 3
)

// ProtocolHeader is the 8-byte header that opens a connection (and, after
// SASL, the AMQP layer): "AMQP" followed by protocol id, major, minor and
// revision.
type ProtocolHeader struct {
	ProtocolID uint8
	Major      uint8
	Minor      uint8
	Revision   uint8
}

// Headers the gateway speaks.
var (
	HeaderAMQP = ProtocolHeader{ProtocolID: ProtocolAMQP, Major: 1}
	HeaderSASL = ProtocolHeader{ProtocolID: ProtocolSASL, Major: 1}
	// HeaderTLS asks for TLS on a plain connection [5.2.1]. It parses as a
	// *ProtocolHeaderError: whether it is spoken is the connection's
	// decision, not the wire's.
	HeaderTLS = ProtocolHeader{ProtocolID: ProtocolTLS, Major: 1}
)

// Bytes is the wire form of h.
func (h ProtocolHeader) Bytes() [8]byte {
	return [8]byte{'A', 'M', 'Q', 'P', h.ProtocolID, h.Major, h.Minor, h.Revision}
}

// ProtocolHeaderError reports a protocol header we don't speak. Per part 2
// section 2.2 the server answers such a header with the header it does
// support and closes the socket.
type ProtocolHeaderError struct {
	Got [8]byte
}

func (e *ProtocolHeaderError) Error() string {
	return fmt.Sprintf("amqp frames: unsupported protocol header %q", e.Got[:])
}

// ParseProtocolHeader parses an 8-byte protocol header. Anything other than
// "AMQP" with protocol id 0 or 3 and version 1.0.0 returns a
// *ProtocolHeaderError (along with the fields, when the prefix is "AMQP").
func ParseProtocolHeader(b []byte) (ProtocolHeader, error) {
	var got [8]byte
	copy(got[:], b)
	if len(b) < 8 || !bytes.Equal(b[:4], []byte("AMQP")) {
		return ProtocolHeader{}, &ProtocolHeaderError{Got: got}
	}
	h := ProtocolHeader{ProtocolID: b[4], Major: b[5], Minor: b[6], Revision: b[7]}
	if (h.ProtocolID != ProtocolAMQP && h.ProtocolID != ProtocolSASL) || h.Major != 1 || h.Minor != 0 || h.Revision != 0 {
		return h, &ProtocolHeaderError{Got: got}
	}
	return h, nil
}

// DecodeBody decodes a frame body: the bytes after the frame header (and
// any extended header). It returns the performative and, for a transfer,
// the payload as a sub-slice of body (not copied). An empty body is a
// heartbeat and returns a nil performative.
//
// A transfer costs one allocation (the Transfer with storage for its
// delivery-id and message-format), plus one for the read cursor
// (DecodeBodyWith reuses the caller's).
func DecodeBody(body []byte) (Performative, []byte, error) {
	return DecodeBodyWith(body, new(buffer.Buffer))
}

// DecodeBodyWith is DecodeBody reading through r, which a connection's
// reader keeps from one frame to the next: the cursor escapes (it goes
// through the performatives' UnmarshalAMQP), so DecodeBody allocates one
// per frame. r is left reading body.
func DecodeBodyWith(body []byte, r *buffer.Buffer) (Performative, []byte, error) {
	if len(body) == 0 {
		return nil, nil, nil
	}
	r.ResetBytes(body)
	code, err := encoding.PeekDescriptor(r)
	if err != nil {
		return nil, nil, err
	}
	var p Performative
	switch code {
	case codeTransfer:
		box := new(struct {
			t                 Transfer
			id, messageFormat uint32
		})
		if err := box.t.unmarshal(r, &box.id, &box.messageFormat); err != nil {
			return nil, nil, err
		}
		return &box.t, r.Bytes(), nil
	case codeOpen:
		p = new(Open)
	case codeBegin:
		p = new(Begin)
	case codeAttach:
		p = new(Attach)
	case codeFlow:
		p = new(Flow)
	case codeDisposition:
		p = new(Disposition)
	case codeDetach:
		p = new(Detach)
	case codeEnd:
		p = new(End)
	case codeClose:
		p = new(Close)
	case codeSASLMechanisms:
		p = new(SASLMechanisms)
	case codeSASLInit:
		p = new(SASLInit)
	case codeSASLChallenge:
		p = new(SASLChallenge)
	case codeSASLResponse:
		p = new(SASLResponse)
	case codeSASLOutcome:
		p = new(SASLOutcome)
	default:
		return nil, nil, fmt.Errorf("amqp frames: unknown performative %#02x", code)
	}
	if err := p.UnmarshalAMQP(r); err != nil {
		return nil, nil, err
	}
	if r.Len() != 0 {
		return nil, nil, fmt.Errorf("amqp frames: %d bytes after a %T body", r.Len(), p)
	}
	return p, nil, nil
}

// AppendFrame appends a complete frame to w: header (size back-patched),
// body and, for a transfer, payload. A nil body writes an empty frame
// (heartbeat). It allocates nothing once w has grown to size.
func AppendFrame(w *buffer.Buffer, typ Type, channel uint16, body Performative, payload []byte) error {
	start := w.Size()
	w.AppendUint32(0) // size, patched below
	w.AppendByte(2)   // doff: no extended header
	w.AppendByte(byte(typ))
	w.AppendUint16(channel)
	if body != nil {
		if err := body.MarshalAMQP(w); err != nil {
			w.Truncate(start)
			return err
		}
	}
	w.Append(payload)
	size := w.Size() - start
	if uint64(size) > math.MaxUint32 {
		w.Truncate(start)
		return errors.New("amqp frames: frame too large")
	}
	w.PutUint32At(start, uint32(size))
	return nil
}
