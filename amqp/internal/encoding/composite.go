package encoding

import (
	"fmt"

	"github.com/tolsey/tolsey/amqp/internal/buffer"
)

// Composite types (part 1 section 1.4) are described lists whose elements
// are the type's fields in declared order. Performatives, terminus, error,
// outcome and message-section types are all composites, and are encoded and
// decoded here from field tables: one EncField or DecField per spec field.

// descriptorCodes maps the spec's symbolic descriptors to their numeric
// codes (domain 0x00000000), so a peer may use either form.
var descriptorCodes = map[Symbol]uint64{
	"amqp:open:list": 0x10, "amqp:begin:list": 0x11, "amqp:attach:list": 0x12,
	"amqp:flow:list": 0x13, "amqp:transfer:list": 0x14, "amqp:disposition:list": 0x15,
	"amqp:detach:list": 0x16, "amqp:end:list": 0x17, "amqp:close:list": 0x18,
	"amqp:error:list":    0x1d,
	"amqp:received:list": 0x23, "amqp:accepted:list": 0x24, "amqp:rejected:list": 0x25,
	"amqp:released:list": 0x26, "amqp:modified:list": 0x27,
	"amqp:source:list": 0x28, "amqp:target:list": 0x29,
	"amqp:delete-on-close:list": 0x2b, "amqp:delete-on-no-links:list": 0x2c,
	"amqp:delete-on-no-messages:list": 0x2d, "amqp:delete-on-no-links-or-messages:list": 0x2e,
	"amqp:sasl-mechanisms:list": 0x40, "amqp:sasl-init:list": 0x41,
	"amqp:sasl-challenge:list": 0x42, "amqp:sasl-response:list": 0x43,
	"amqp:sasl-outcome:list": 0x44,
	"amqp:header:list":       0x70, "amqp:delivery-annotations:map": 0x71,
	"amqp:message-annotations:map": 0x72, "amqp:properties:list": 0x73,
	"amqp:application-properties:map": 0x74, "amqp:data:binary": 0x75,
	"amqp:amqp-sequence:list": 0x76, "amqp:amqp-value:*": 0x77, "amqp:footer:map": 0x78,
}

// ReadDescriptor reads a descriptor constructor (0x00) and descriptor,
// returning its numeric code. Known symbolic descriptors are translated;
// unknown ones are an error.
func ReadDescriptor(r *buffer.Buffer) (uint64, error) {
	if err := expect(r, codeDescribed, "described type"); err != nil {
		return 0, err
	}
	code, err := r.PeekByte()
	if err != nil {
		return 0, ErrShort
	}
	if code == codeSym8 || code == codeSym32 {
		s, err := ReadSymbol(r)
		if err != nil {
			return 0, err
		}
		if c, ok := descriptorCodes[s]; ok {
			return c, nil
		}
		return 0, fmt.Errorf("amqp encoding: unknown descriptor %q", s)
	}
	return ReadUlong(r)
}

// PeekDescriptor returns the descriptor code of the described value at the
// cursor without consuming anything.
func PeekDescriptor(r *buffer.Buffer) (uint64, error) {
	off := r.Offset()
	code, err := ReadDescriptor(r)
	r.Unread(r.Offset() - off)
	return code, err
}

// EncField is one field of a composite being written.
//
// Value is a pointer to the field (*bool, *uint32, *string, *Symbol,
// *[]byte, *[]Symbol, *Fields, *any, **uint32, ...) or a Marshaler; a
// pointer-to-pointer (**uint32) is how a field without a usable zero value
// says "absent" (nil), and must then be marked Omit.
//
// Omit marks an absent field: written as null, or trimmed when no present
// field follows it. Default marks a field holding its spec default (false,
// 0): trimmed when nothing follows it, otherwise written as its value
// (42 for false, 43 for 0 — the same length as null, and what Proton
// writes). The two differ where a type's zero value is not its default:
// max-frame-size 0 must go out as null, never as 0.
type EncField struct {
	Value   any
	Omit    bool
	Default bool
}

// WriteComposite writes the descriptor and the field list, trimming trailing
// omitted or defaulted fields and back-patching the list size.
func WriteComposite(w *buffer.Buffer, code uint64, fields []EncField) error {
	WriteDescriptor(w, code)
	n := len(fields)
	for n > 0 && (fields[n-1].Omit || fields[n-1].Default) {
		n--
	}
	c := beginCompound(w, codeList8, codeList32)
	for i := range fields[:n] {
		if err := writeField(w, &fields[i]); err != nil {
			return err
		}
	}
	return c.end(w, n)
}

func writeField(w *buffer.Buffer, f *EncField) error {
	if f.Omit {
		WriteNull(w)
		return nil
	}
	switch v := f.Value.(type) {
	case *bool:
		WriteBool(w, *v)
	case *uint8:
		WriteUbyte(w, *v)
	case *uint16:
		WriteUshort(w, *v)
	case *uint32:
		WriteUint(w, *v)
	case *uint64:
		WriteUlong(w, *v)
	case *int32:
		WriteInt(w, *v)
	case *int64:
		WriteLong(w, *v)
	case **bool:
		WriteBool(w, **v)
	case **uint8:
		WriteUbyte(w, **v)
	case **uint16:
		WriteUshort(w, **v)
	case **uint32:
		WriteUint(w, **v)
	case **uint64:
		WriteUlong(w, **v)
	case *string:
		return WriteString(w, *v)
	case *Symbol:
		return WriteSymbol(w, *v)
	case *[]byte:
		return WriteBinary(w, *v)
	case *[]Symbol:
		return WriteSymbols(w, *v)
	case *Fields:
		return WriteFields(w, *v)
	case *Map:
		return WriteMap(w, *v)
	case *Annotations:
		return WriteAnnotations(w, *v)
	case *ApplicationProperties:
		return WriteApplicationProperties(w, *v)
	case *Timestamp:
		WriteTimestamp(w, *v)
	case *UUID:
		WriteUUID(w, *v)
	case *any:
		return WriteAny(w, *v)
	case Marshaler:
		return v.MarshalAMQP(w)
	default:
		return fmt.Errorf("amqp encoding: field of Go type %T not supported", f.Value)
	}
	return nil
}

// DecField is one field of a composite being read.
//
// Value is a pointer to where the field goes (the same pointer types as
// EncField.Value) or an Unmarshaler. A null or absent field leaves the
// destination untouched, so defaults are whatever the caller put there.
type DecField struct {
	Value    any
	Name     string // the spec's field name, for errors
	Required bool   // mandatory="true": null or absent is an error
	// Scratch, for a **uint32 Value, is storage the field is pointed at
	// instead of allocating a new uint32 (the transfer hot path uses it).
	Scratch *uint32
}

// FieldError reports which field of which composite failed to decode.
type FieldError struct {
	Code  uint64 // descriptor of the composite
	Field string
	Err   error
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("amqp encoding: composite %#02x field %s: %v", e.Code, e.Field, e.Err)
}

func (e *FieldError) Unwrap() error { return e.Err }

var errRequired = fmt.Errorf("amqp encoding: mandatory field missing")

// ReadComposite reads a described list with descriptor code into fields.
// Fields beyond the table (from a later protocol version) are skipped.
func ReadComposite(r *buffer.Buffer, code uint64, fields []DecField) error {
	got, err := ReadDescriptor(r)
	if err != nil {
		return err
	}
	if got != code {
		return fmt.Errorf("amqp encoding: descriptor %#02x, want %#02x", got, code)
	}
	lc, err := readCode(r)
	if err != nil {
		return err
	}
	if lc != codeList0 && lc != codeList8 && lc != codeList32 {
		return &TypeError{Code: lc, Want: "list"}
	}
	count, end, err := compoundHeader(r, lc)
	if err != nil {
		return err
	}
	for i := 0; i < count; i++ {
		if i >= len(fields) {
			if err := Skip(r); err != nil {
				return err
			}
			continue
		}
		f := &fields[i]
		if IsNull(r) {
			if f.Required {
				return &FieldError{Code: code, Field: f.Name, Err: errRequired}
			}
			continue
		}
		if err := readField(r, f); err != nil {
			return &FieldError{Code: code, Field: f.Name, Err: err}
		}
	}
	for i := count; i < len(fields); i++ {
		if fields[i].Required {
			return &FieldError{Code: code, Field: fields[i].Name, Err: errRequired}
		}
	}
	return finish(r, end)
}

func readField(r *buffer.Buffer, f *DecField) (err error) {
	switch v := f.Value.(type) {
	case *bool:
		*v, err = ReadBool(r)
	case *uint8:
		*v, err = ReadUbyte(r)
	case *uint16:
		*v, err = ReadUshort(r)
	case *uint32:
		*v, err = ReadUint(r)
	case *uint64:
		*v, err = ReadUlong(r)
	case **uint32:
		var x uint32
		if x, err = ReadUint(r); err == nil {
			p := f.Scratch
			if p == nil {
				p = new(uint32)
			}
			*p = x
			*v = p
		}
	case **uint64:
		var x uint64
		if x, err = ReadUlong(r); err == nil {
			*v = &x
		}
	case **bool:
		var x bool
		if x, err = ReadBool(r); err == nil {
			*v = &x
		}
	case **uint8:
		var x uint8
		if x, err = ReadUbyte(r); err == nil {
			*v = &x
		}
	case **uint16:
		var x uint16
		if x, err = ReadUshort(r); err == nil {
			*v = &x
		}
	case *int32:
		var x int64
		if x, err = ReadSigned(r); err == nil {
			*v = int32(x)
			if int64(*v) != x {
				err = &TypeError{Code: codeLong, Want: "int"}
			}
		}
	case *int64:
		*v, err = ReadSigned(r)
	case *string:
		*v, err = ReadString(r)
	case *Symbol:
		*v, err = ReadSymbol(r)
	case *[]byte:
		*v, err = ReadBinary(r)
	case *[]Symbol:
		*v, err = ReadSymbols(r)
	case *Fields:
		*v, err = ReadFields(r)
	case *Map:
		*v, err = ReadMap(r)
	case *Annotations:
		*v, err = ReadAnnotations(r)
	case *ApplicationProperties:
		*v, err = ReadApplicationProperties(r)
	case *Timestamp:
		*v, err = ReadTimestamp(r)
	case *UUID:
		*v, err = ReadUUID(r)
	case *any:
		*v, err = ReadAny(r)
	case Unmarshaler:
		err = v.UnmarshalAMQP(r)
	default:
		err = fmt.Errorf("amqp encoding: field of Go type %T not supported", f.Value)
	}
	return err
}

// Optional adapts a pointer-to-pointer field whose element type decodes
// itself, so that a present value is allocated and a null leaves it nil:
//
//	{Value: encoding.Optional(&t.SndSettleMode)}
func Optional[T any, PT interface {
	*T
	Unmarshaler
}](p **T) Unmarshaler {
	return optional[T, PT]{p}
}

type optional[T any, PT interface {
	*T
	Unmarshaler
}] struct{ p **T }

func (o optional[T, PT]) UnmarshalAMQP(r *buffer.Buffer) error {
	v := new(T)
	if err := PT(v).UnmarshalAMQP(r); err != nil {
		return err
	}
	*o.p = v
	return nil
}
