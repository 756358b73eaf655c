// Package encoding owns the AMQP 1.0 type system (OASIS AMQP 1.0 part 1,
// "Types"): the primitive encodings, described types, lists, maps and
// arrays, and the field-table helpers the performatives are built from.
//
// It must not know about frames, performatives or messages; those live in
// package frames. Decoding hands out sub-slices of the input for binary
// values ([]byte) — a caller that keeps one beyond the life of the input
// must copy it. Strings and symbols are copied by the string conversion.
//
// Every count and length read off the wire is checked against the bytes
// actually left in the input before anything is allocated.
package encoding

import (
	"errors"
	"fmt"
	"time"

	"github.com/tolsey/tolsey/amqp/internal/buffer"
)

// Type codes, part 1 section 1.6 ("Type encodings").
const (
	codeDescribed  = 0x00
	codeNull       = 0x40
	codeBool       = 0x56
	codeTrue       = 0x41
	codeFalse      = 0x42
	codeUbyte      = 0x50
	codeUshort     = 0x60
	codeUint       = 0x70
	codeSmallUint  = 0x52
	codeUint0      = 0x43
	codeUlong      = 0x80
	codeSmallUlong = 0x53
	codeUlong0     = 0x44
	codeByte       = 0x51
	codeShort      = 0x61
	codeInt        = 0x71
	codeSmallInt   = 0x54
	codeLong       = 0x81
	codeSmallLong  = 0x55
	codeFloat      = 0x72
	codeDouble     = 0x82
	codeDecimal32  = 0x74
	codeDecimal64  = 0x84
	codeDecimal128 = 0x94
	codeChar       = 0x73
	codeTimestamp  = 0x83
	codeUUID       = 0x98
	codeVbin8      = 0xa0
	codeVbin32     = 0xb0
	codeStr8       = 0xa1
	codeStr32      = 0xb1
	codeSym8       = 0xa3
	codeSym32      = 0xb3
	codeList0      = 0x45
	codeList8      = 0xc0
	codeList32     = 0xd0
	codeMap8       = 0xc1
	codeMap32      = 0xd1
	codeArray8     = 0xe0
	codeArray32    = 0xf0
)

// MaxDepth bounds how deeply lists, maps, arrays and described values may
// nest. It blocks stack exhaustion: a few hundred kilobytes of nested
// "c0 ff ff c0 ff ff ..." would otherwise recurse once per three bytes.
const MaxDepth = 64

// Errors returned by decoding.
var (
	ErrShort     = errors.New("amqp encoding: value runs past end of input")
	ErrTooLarge  = errors.New("amqp encoding: declared size or count exceeds input")
	ErrTooDeep   = errors.New("amqp encoding: nesting too deep")
	ErrUnknown   = errors.New("amqp encoding: unknown type code")
	ErrWrongType = errors.New("amqp encoding: unexpected type")
)

// TypeError reports a value of the wrong type for a field.
type TypeError struct {
	Code byte   // constructor found on the wire
	Want string // what the field requires
}

func (e *TypeError) Error() string {
	return fmt.Sprintf("amqp encoding: got type code %#02x, want %s", e.Code, e.Want)
}

// Is lets errors.Is(err, ErrWrongType) match a *TypeError.
func (e *TypeError) Is(target error) bool { return target == ErrWrongType }

// Symbol is an AMQP symbol: ASCII, typically a constant name.
type Symbol string

// UUID is an RFC-4122 UUID, bytes in network order.
type UUID [16]byte

// String formats u in the canonical 8-4-4-4-12 form.
func (u UUID) String() string {
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}

// Timestamp is an AMQP timestamp: milliseconds since the Unix epoch, kept as
// an integer so that it round-trips exactly.
type Timestamp int64

// TimestampOf converts t, truncating to milliseconds.
func TimestampOf(t time.Time) Timestamp { return Timestamp(t.UnixMilli()) }

// Time converts ts to a time.Time in UTC.
func (ts Timestamp) Time() time.Time { return time.UnixMilli(int64(ts)).UTC() }

// Char is an AMQP char: one UTF-32BE code point.
type Char rune

// Decimal32, Decimal64 and Decimal128 are IEEE 754-2008 decimals kept as raw
// big-endian bytes; nothing in the gateway does decimal arithmetic.
type (
	Decimal32  [4]byte
	Decimal64  [8]byte
	Decimal128 [16]byte
)

// Described is a described value whose descriptor is not one this package
// or its caller recognises. Descriptor is a uint64 or a Symbol.
type Described struct {
	Descriptor any
	Value      any
}

// Array is an AMQP array of any element type other than symbol (arrays of
// symbol decode to []Symbol, the common case for capabilities). Code is the
// element constructor in its widest form (e.g. codeUint for smalluint) and
// fixes the element type of an empty array; Values hold the elements as
// ReadAny would return them.
type Array struct {
	Code   byte
	Values []any
}

// MapEntry is one key/value pair of a Map.
type MapEntry struct {
	Key, Value any
}

// Map is an AMQP map with arbitrary keys, kept in wire order. Keys may be
// values Go maps can't hold ([]byte, []any), which is why this is a slice.
// Lookups are linear; AMQP maps on the wire are small.
type Map []MapEntry

// Get returns the value of the first entry whose key equals key, which must
// be a comparable value (e.g. a Symbol, string or uint64).
func (m Map) Get(key any) (any, bool) {
	for _, e := range m {
		if keyEqual(e.Key, key) {
			return e.Value, true
		}
	}
	return nil, false
}

// Field is one entry of a Fields map.
type Field struct {
	Key   Symbol
	Value any
}

// Fields is the AMQP "fields" type (part 2 section 2.8.14): a map keyed by
// symbol, used for open/begin/attach properties and error info.
type Fields []Field

// Get returns the value stored under key.
func (f Fields) Get(key Symbol) (any, bool) {
	for _, e := range f {
		if e.Key == key {
			return e.Value, true
		}
	}
	return nil, false
}

// Annotation is one entry of an Annotations map. Key is a Symbol, or a
// uint64 (keys of that type are reserved by the spec but legal).
type Annotation struct {
	Key   any
	Value any
}

// Annotations is the AMQP "annotations" type (part 3 section 3.2.10), used
// for delivery-annotations, message-annotations and footer.
type Annotations []Annotation

// Get returns the value stored under the symbol key.
func (a Annotations) Get(key Symbol) (any, bool) {
	for _, e := range a {
		if k, ok := e.Key.(Symbol); ok && k == key {
			return e.Value, true
		}
	}
	return nil, false
}

// Property is one entry of ApplicationProperties.
type Property struct {
	Key   string
	Value any
}

// ApplicationProperties is the application-properties section (part 3
// section 3.2.5): a map keyed by string.
type ApplicationProperties []Property

// Get returns the value stored under key.
func (p ApplicationProperties) Get(key string) (any, bool) {
	for _, e := range p {
		if e.Key == key {
			return e.Value, true
		}
	}
	return nil, false
}

// keyEqual compares map keys without panicking on uncomparable dynamic
// types (a []byte key would make == panic).
func keyEqual(a, b any) (eq bool) {
	defer func() {
		if recover() != nil {
			eq = false
		}
	}()
	return a == b
}

// Marshaler is implemented by values that encode themselves, typically
// described composites.
type Marshaler interface {
	MarshalAMQP(w *buffer.Buffer) error
}

// Unmarshaler is implemented by values that decode themselves. A field
// table only calls UnmarshalAMQP for a non-null value.
type Unmarshaler interface {
	UnmarshalAMQP(r *buffer.Buffer) error
}
