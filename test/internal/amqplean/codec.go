package amqplean

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The few codes of the AMQP 1.0 type system (§1.6) this client writes or
// needs to read a field of; everything else it reads is skipped by its
// width class (value).
const (
	codeDescribed = 0x00
	codeNull      = 0x40
	codeTrue      = 0x41
	codeFalse     = 0x42
	codeUint0     = 0x43
	codeUlong0    = 0x44
	codeUbyte     = 0x50
	codeBoolean   = 0x56
	codeSmallUint = 0x52
	codeSmallUlng = 0x53
	codeUshort    = 0x60
	codeUint      = 0x70
	codeUlong     = 0x80
	codeVbin8     = 0xa0
	codeStr8      = 0xa1
	codeSym8      = 0xa3
	codeVbin32    = 0xb0
	codeStr32     = 0xb1
	codeSym32     = 0xb3
	codeList0     = 0x45
	codeList8     = 0xc0
	codeList32    = 0xd0
	codeArray8    = 0xe0
	codeArray32   = 0xf0
)

// Descriptors (the small-ulong codes) of the performatives (§2.7), the
// SASL frames (§5.3.3), the error, the delivery states (§3.4) and the
// message sections (§3.2).
const (
	descOpen        = 0x10
	descBegin       = 0x11
	descAttach      = 0x12
	descFlow        = 0x13
	descTransfer    = 0x14
	descDisposition = 0x15
	descDetach      = 0x16
	descEnd         = 0x17
	descClose       = 0x18
	descError       = 0x1d
	descReceived    = 0x23
	descAccepted    = 0x24
	descRejected    = 0x25
	descReleased    = 0x26
	descModified    = 0x27
	descSource      = 0x28
	descTarget      = 0x29
	descMechanisms  = 0x40
	descSASLInit    = 0x41
	descSASLOutcome = 0x44
	descHeader      = 0x70
	descData        = 0x75
)

var performativeNames = map[uint64]string{
	descOpen: "open", descBegin: "begin", descAttach: "attach", descFlow: "flow",
	descTransfer: "transfer", descDisposition: "disposition", descDetach: "detach",
	descEnd: "end", descClose: "close",
}

var errShort = errors.New("amqplean: value runs past the frame's end")

// value splits the encoded value at the start of b: its constructor's
// code (codeDescribed for a described value), its bytes (a fixed-width
// value's, a variable one's after its size: a string's characters, a
// list's count and items; a described value's whole encoding after the
// 0x00), and what follows it. Every size read is bounded by len(b): a
// size field announcing more than the frame holds is an error, not an
// allocation.
func value(b []byte) (code byte, v, rest []byte, err error) {
	if len(b) == 0 {
		return 0, nil, nil, errShort
	}
	code, b = b[0], b[1:]
	if code == codeDescribed {
		_, _, after, err := value(b) // the descriptor
		if err != nil {
			return 0, nil, nil, err
		}
		_, _, after, err = value(after) // the described value
		if err != nil {
			return 0, nil, nil, err
		}
		return code, b[:len(b)-len(after)], after, nil
	}
	var n int
	switch code >> 4 {
	case 0x4:
		n = 0
	case 0x5:
		n = 1
	case 0x6:
		n = 2
	case 0x7:
		n = 4
	case 0x8:
		n = 8
	case 0x9:
		n = 16
	case 0xa, 0xc, 0xe:
		if len(b) < 1 {
			return 0, nil, nil, errShort
		}
		n, b = int(b[0]), b[1:]
	case 0xb, 0xd, 0xf:
		if len(b) < 4 {
			return 0, nil, nil, errShort
		}
		size := binary.BigEndian.Uint32(b)
		if uint64(size) > uint64(len(b)-4) {
			return 0, nil, nil, errShort
		}
		n, b = int(size), b[4:]
	default:
		return 0, nil, nil, fmt.Errorf("amqplean: unknown type code %#x", code)
	}
	if n > len(b) {
		return 0, nil, nil, errShort
	}
	return code, b[:n], b[n:], nil
}

// described reads a described value's descriptor (a ulong; symbolic
// descriptors are not used by the servers for what this client reads)
// and its inner value.
func described(v []byte) (desc uint64, code byte, inner []byte, err error) {
	dc, dv, rest, err := value(v)
	if err != nil {
		return 0, 0, nil, err
	}
	desc, ok := ulongOf(dc, dv)
	if !ok {
		return 0, 0, nil, fmt.Errorf("amqplean: descriptor of type %#x", dc)
	}
	code, inner, _, err = value(rest)
	return desc, code, inner, err
}

// fields walks a list's items; past the last item every field is null
// (trailing nulls may be left out, §1.4).
type fields struct {
	b []byte
	n uint32
}

// listOf is the fields of a list value (code, v from value).
func listOf(code byte, v []byte) (fields, error) {
	switch code {
	case codeList0:
		return fields{}, nil
	case codeList8:
		if len(v) < 1 {
			return fields{}, errShort
		}
		return fields{b: v[1:], n: uint32(v[0])}, nil
	case codeList32:
		if len(v) < 4 {
			return fields{}, errShort
		}
		return fields{b: v[4:], n: binary.BigEndian.Uint32(v)}, nil
	}
	return fields{}, fmt.Errorf("amqplean: list of type %#x", code)
}

// next is the next field (codeNull once the list is done).
func (f *fields) next() (byte, []byte, error) {
	if f.n == 0 {
		return codeNull, nil, nil
	}
	f.n--
	code, v, rest, err := value(f.b)
	f.b = rest
	return code, v, err
}

// performative reads a frame body's described list: its descriptor and
// fields, and the bytes after it (a transfer's payload).
func performative(body []byte) (uint64, fields, []byte, error) {
	code, v, rest, err := value(body)
	if err != nil {
		return 0, fields{}, nil, err
	}
	if code != codeDescribed {
		return 0, fields{}, nil, fmt.Errorf("amqplean: frame body of type %#x", code)
	}
	desc, lc, lv, err := described(v)
	if err != nil {
		return 0, fields{}, nil, err
	}
	f, err := listOf(lc, lv)
	return desc, f, rest, err
}

func uintOf(code byte, v []byte) (uint32, bool) {
	switch code {
	case codeUint0:
		return 0, true
	case codeSmallUint, codeUbyte:
		return uint32(v[0]), true
	case codeUshort:
		return uint32(binary.BigEndian.Uint16(v)), true
	case codeUint:
		return binary.BigEndian.Uint32(v), true
	}
	return 0, false
}

func ulongOf(code byte, v []byte) (uint64, bool) {
	switch code {
	case codeUlong0:
		return 0, true
	case codeSmallUlng:
		return uint64(v[0]), true
	case codeUlong:
		return binary.BigEndian.Uint64(v), true
	}
	u, ok := uintOf(code, v)
	return uint64(u), ok
}

func boolOf(code byte, v []byte) bool {
	return code == codeTrue || code == codeBoolean && v[0] != 0
}

// Error is a refusal or an end the peer sent: the frame that carried it
// (detach, end, close, or a disposition's outcome) and its error's
// condition and description.
type Error struct {
	Frame       string
	Condition   string
	Description string
}

func (e *Error) Error() string {
	if e.Description == "" {
		return fmt.Sprintf("amqplean: %s: %s", e.Frame, e.Condition)
	}
	return fmt.Sprintf("amqplean: %s: %s: %s", e.Frame, e.Condition, e.Description)
}

// errorOf reads an error (§2.8.14) field: nil when the field is null.
func errorOf(frame string, code byte, v []byte) (*Error, error) {
	if code == codeNull {
		return nil, nil
	}
	if code != codeDescribed {
		return nil, fmt.Errorf("amqplean: %s error of type %#x", frame, code)
	}
	desc, lc, lv, err := described(v)
	if err != nil {
		return nil, err
	}
	if desc != descError {
		return nil, fmt.Errorf("amqplean: %s error with descriptor %#x", frame, desc)
	}
	f, err := listOf(lc, lv)
	if err != nil {
		return nil, err
	}
	e := &Error{Frame: frame}
	_, cond, err := f.next()
	if err != nil {
		return nil, err
	}
	_, d, err := f.next()
	if err != nil {
		return nil, err
	}
	e.Condition, e.Description = string(cond), string(d)
	return e, nil
}

// Encoding. Performatives are written as go-amqp writes them (a described
// list32, its size and count patched at the end, fields up to the last one
// set), so that the servers parse the same bytes from either client.

// beginFrame appends a frame header (§2.3.1: size, doff 2, type, channel)
// whose size end patches; it returns where the frame starts.
func beginFrame(b []byte, typ byte) ([]byte, int) {
	return append(b, 0, 0, 0, 0, 2, typ, 0, 0), len(b)
}

func endFrame(b []byte, at int) []byte {
	binary.BigEndian.PutUint32(b[at:], uint32(len(b)-at))
	return b
}

// beginList appends a described list32 with descriptor desc; endList
// patches its size and count.
func beginList(b []byte, desc byte) ([]byte, int) {
	b = append(b, codeDescribed, codeSmallUlng, desc, codeList32, 0, 0, 0, 0, 0, 0, 0, 0)
	return b, len(b) - 8
}

func endList(b []byte, at int, count uint32) []byte {
	binary.BigEndian.PutUint32(b[at:], uint32(len(b)-at-4))
	binary.BigEndian.PutUint32(b[at+4:], count)
	return b
}

func appendUint(b []byte, n uint32) []byte {
	switch {
	case n == 0:
		return append(b, codeUint0)
	case n < 256:
		return append(b, codeSmallUint, byte(n))
	}
	return binary.BigEndian.AppendUint32(append(b, codeUint), n)
}

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, codeTrue)
	}
	return append(b, codeFalse)
}

func appendVar(b []byte, small, large byte, s []byte) []byte {
	if len(s) < 256 {
		return append(append(b, small, byte(len(s))), s...)
	}
	return append(binary.BigEndian.AppendUint32(append(b, large), uint32(len(s))), s...)
}

func appendString(b []byte, s string) []byte { return appendVar(b, codeStr8, codeStr32, []byte(s)) }
func appendSymbol(b []byte, s string) []byte { return appendVar(b, codeSym8, codeSym32, []byte(s)) }
func appendBinary(b, p []byte) []byte        { return appendVar(b, codeVbin8, codeVbin32, p) }
