package encoding

import (
	"fmt"
	"math"
	"time"

	"github.com/tolsey/tolsey/amqp/internal/buffer"
)

// Every Write* function picks the smallest encoding the spec allows for the
// value (uint0 for 0, smalluint for < 256, str8 for short strings, list8
// for small lists, ...), so our output is canonical: encoding the same
// value always gives the same bytes.

// WriteNull writes null.
func WriteNull(w *buffer.Buffer) { w.AppendByte(codeNull) }

// WriteBool writes true or false (the one-byte forms).
func WriteBool(w *buffer.Buffer, v bool) {
	if v {
		w.AppendByte(codeTrue)
	} else {
		w.AppendByte(codeFalse)
	}
}

// WriteUbyte writes a ubyte.
func WriteUbyte(w *buffer.Buffer, v uint8) { w.AppendByte(codeUbyte); w.AppendByte(v) }

// WriteUshort writes a ushort.
func WriteUshort(w *buffer.Buffer, v uint16) { w.AppendByte(codeUshort); w.AppendUint16(v) }

// WriteUint writes a uint as uint0, smalluint or uint.
func WriteUint(w *buffer.Buffer, v uint32) {
	switch {
	case v == 0:
		w.AppendByte(codeUint0)
	case v <= math.MaxUint8:
		w.AppendByte(codeSmallUint)
		w.AppendByte(byte(v))
	default:
		w.AppendByte(codeUint)
		w.AppendUint32(v)
	}
}

// WriteUlong writes a ulong as ulong0, smallulong or ulong.
func WriteUlong(w *buffer.Buffer, v uint64) {
	switch {
	case v == 0:
		w.AppendByte(codeUlong0)
	case v <= math.MaxUint8:
		w.AppendByte(codeSmallUlong)
		w.AppendByte(byte(v))
	default:
		w.AppendByte(codeUlong)
		w.AppendUint64(v)
	}
}

// WriteByte writes a (signed) byte.
func WriteByte(w *buffer.Buffer, v int8) { w.AppendByte(codeByte); w.AppendByte(byte(v)) }

// WriteShort writes a short.
func WriteShort(w *buffer.Buffer, v int16) { w.AppendByte(codeShort); w.AppendUint16(uint16(v)) }

// WriteInt writes an int as smallint or int.
func WriteInt(w *buffer.Buffer, v int32) {
	if v >= math.MinInt8 && v <= math.MaxInt8 {
		w.AppendByte(codeSmallInt)
		w.AppendByte(byte(v))
		return
	}
	w.AppendByte(codeInt)
	w.AppendUint32(uint32(v))
}

// WriteLong writes a long as smalllong or long.
func WriteLong(w *buffer.Buffer, v int64) {
	if v >= math.MinInt8 && v <= math.MaxInt8 {
		w.AppendByte(codeSmallLong)
		w.AppendByte(byte(v))
		return
	}
	w.AppendByte(codeLong)
	w.AppendUint64(uint64(v))
}

// WriteFloat writes an IEEE 754 binary32.
func WriteFloat(w *buffer.Buffer, v float32) {
	w.AppendByte(codeFloat)
	w.AppendUint32(math.Float32bits(v))
}

// WriteDouble writes an IEEE 754 binary64.
func WriteDouble(w *buffer.Buffer, v float64) {
	w.AppendByte(codeDouble)
	w.AppendUint64(math.Float64bits(v))
}

// WriteChar writes a char (UTF-32BE).
func WriteChar(w *buffer.Buffer, v Char) { w.AppendByte(codeChar); w.AppendUint32(uint32(v)) }

// WriteTimestamp writes a timestamp.
func WriteTimestamp(w *buffer.Buffer, v Timestamp) {
	w.AppendByte(codeTimestamp)
	w.AppendUint64(uint64(v))
}

// WriteUUID writes a uuid.
func WriteUUID(w *buffer.Buffer, v UUID) { w.AppendByte(codeUUID); w.Append(v[:]) }

// WriteBinary writes a vbin8 or vbin32.
func WriteBinary(w *buffer.Buffer, v []byte) error {
	if err := writeVarHeader(w, codeVbin8, codeVbin32, len(v)); err != nil {
		return err
	}
	w.Append(v)
	return nil
}

// WriteString writes a str8-utf8 or str32-utf8.
func WriteString(w *buffer.Buffer, v string) error {
	if err := writeVarHeader(w, codeStr8, codeStr32, len(v)); err != nil {
		return err
	}
	w.AppendString(v)
	return nil
}

// WriteSymbol writes a sym8 or sym32.
func WriteSymbol(w *buffer.Buffer, v Symbol) error {
	if err := writeVarHeader(w, codeSym8, codeSym32, len(v)); err != nil {
		return err
	}
	w.AppendString(string(v))
	return nil
}

func writeVarHeader(w *buffer.Buffer, code8, code32 byte, n int) error {
	switch {
	case n <= math.MaxUint8:
		w.AppendByte(code8)
		w.AppendByte(byte(n))
	case uint64(n) <= math.MaxUint32:
		w.AppendByte(code32)
		w.AppendUint32(uint32(n))
	default:
		return fmt.Errorf("amqp encoding: value of %d bytes is too large", n)
	}
	return nil
}

// WriteDescriptor writes the descriptor constructor (0x00) and a numeric
// descriptor, which for every spec-defined type has domain 0 and so fits
// smallulong.
func WriteDescriptor(w *buffer.Buffer, code uint64) {
	w.AppendByte(codeDescribed)
	WriteUlong(w, code)
}

// A compound is a list, map or array being written: its header is written
// as the 8-bit form with placeholder size and count, and back-patched (and
// widened to the 32-bit form if needed) by end.
type compound struct {
	off    int  // write offset of the constructor
	code8  byte // list8, map8 or array8
	code32 byte
}

func beginCompound(w *buffer.Buffer, code8, code32 byte) compound {
	off := w.Size()
	w.AppendByte(code8)
	w.AppendByte(0) // size, patched by end
	w.AppendByte(0) // count, patched by end
	return compound{off: off, code8: code8, code32: code32}
}

// end back-patches size and count. count is the number of elements (for a
// map: keys plus values). A list with no elements becomes list0.
func (c compound) end(w *buffer.Buffer, count int) error {
	body := w.Size() - (c.off + 3)
	if count == 0 && c.code8 == codeList8 {
		w.Truncate(c.off)
		w.AppendByte(codeList0)
		return nil
	}
	if body+1 <= math.MaxUint8 && count <= math.MaxUint8 {
		w.PutByteAt(c.off+1, byte(body+1))
		w.PutByteAt(c.off+2, byte(count))
		return nil
	}
	if uint64(body)+4 > math.MaxUint32 || uint64(count) > math.MaxUint32 {
		return fmt.Errorf("amqp encoding: compound of %d bytes is too large", body)
	}
	// Widen the header from code8 size8 count8 to code32 size32 count32.
	w.InsertGap(c.off+1, 6)
	w.PutByteAt(c.off, c.code32)
	w.PutUint32At(c.off+1, uint32(body+4))
	w.PutUint32At(c.off+5, uint32(count))
	return nil
}

// WriteList writes v as a list, each element with WriteAny.
func WriteList(w *buffer.Buffer, v []any) error {
	c := beginCompound(w, codeList8, codeList32)
	for _, e := range v {
		if err := WriteAny(w, e); err != nil {
			return err
		}
	}
	return c.end(w, len(v))
}

// WriteMap writes an arbitrary-keyed map in entry order.
func WriteMap(w *buffer.Buffer, m Map) error {
	c := beginCompound(w, codeMap8, codeMap32)
	for _, e := range m {
		if err := WriteAny(w, e.Key); err != nil {
			return err
		}
		if err := WriteAny(w, e.Value); err != nil {
			return err
		}
	}
	return c.end(w, 2*len(m))
}

// WriteFields writes a symbol-keyed map in entry order.
func WriteFields(w *buffer.Buffer, m Fields) error {
	c := beginCompound(w, codeMap8, codeMap32)
	for _, e := range m {
		if err := WriteSymbol(w, e.Key); err != nil {
			return err
		}
		if err := WriteAny(w, e.Value); err != nil {
			return err
		}
	}
	return c.end(w, 2*len(m))
}

// WriteAnnotations writes an annotations map in entry order. Keys must be
// Symbol or uint64.
func WriteAnnotations(w *buffer.Buffer, m Annotations) error {
	c := beginCompound(w, codeMap8, codeMap32)
	for _, e := range m {
		switch k := e.Key.(type) {
		case Symbol:
			if err := WriteSymbol(w, k); err != nil {
				return err
			}
		case uint64:
			WriteUlong(w, k)
		default:
			return fmt.Errorf("amqp encoding: annotation key of type %T, want symbol or ulong", e.Key)
		}
		if err := WriteAny(w, e.Value); err != nil {
			return err
		}
	}
	return c.end(w, 2*len(m))
}

// WriteApplicationProperties writes a string-keyed map in entry order.
func WriteApplicationProperties(w *buffer.Buffer, m ApplicationProperties) error {
	c := beginCompound(w, codeMap8, codeMap32)
	for _, e := range m {
		if err := WriteString(w, e.Key); err != nil {
			return err
		}
		if err := WriteAny(w, e.Value); err != nil {
			return err
		}
	}
	return c.end(w, 2*len(m))
}

// WriteSymbols writes v as an array of symbol, the encoding of a
// symbol-typed field with multiple="true".
func WriteSymbols(w *buffer.Buffer, v []Symbol) error {
	wide := false
	for _, s := range v {
		wide = wide || len(s) > math.MaxUint8
	}
	c := beginCompound(w, codeArray8, codeArray32)
	if wide {
		w.AppendByte(codeSym32)
	} else {
		w.AppendByte(codeSym8)
	}
	for _, s := range v {
		if wide {
			w.AppendUint32(uint32(len(s)))
		} else {
			w.AppendByte(byte(len(s)))
		}
		w.AppendString(string(s))
	}
	return c.end(w, len(v))
}

// WriteArray writes a. The element constructor is the smallest form that
// holds every element (smalluint when all fit a byte, sym8 when all are
// short, ...); compound elements always use their 32-bit form. Arrays of
// described values are not supported for writing.
func WriteArray(w *buffer.Buffer, a Array) error {
	ctor, err := arrayConstructor(a)
	if err != nil {
		return err
	}
	c := beginCompound(w, codeArray8, codeArray32)
	w.AppendByte(ctor)
	for _, v := range a.Values {
		if err := writeElement(w, ctor, v); err != nil {
			return err
		}
	}
	return c.end(w, len(a.Values))
}

// WriteDescribed writes a described value with an arbitrary descriptor.
func WriteDescribed(w *buffer.Buffer, d Described) error {
	w.AppendByte(codeDescribed)
	switch desc := d.Descriptor.(type) {
	case uint64:
		WriteUlong(w, desc)
	case Symbol:
		if err := WriteSymbol(w, desc); err != nil {
			return err
		}
	default:
		return fmt.Errorf("amqp encoding: descriptor of type %T, want ulong or symbol", d.Descriptor)
	}
	return WriteAny(w, d.Value)
}

// WriteAny writes v, choosing the AMQP type from its Go type (see ReadAny
// for the mapping). Go int and uint are written as long and ulong.
func WriteAny(w *buffer.Buffer, v any) error {
	switch v := v.(type) {
	case nil:
		WriteNull(w)
	case bool:
		WriteBool(w, v)
	case uint8:
		WriteUbyte(w, v)
	case uint16:
		WriteUshort(w, v)
	case uint32:
		WriteUint(w, v)
	case uint64:
		WriteUlong(w, v)
	case uint:
		WriteUlong(w, uint64(v))
	case int8:
		WriteByte(w, v)
	case int16:
		WriteShort(w, v)
	case int32:
		WriteInt(w, v)
	case int64:
		WriteLong(w, v)
	case int:
		WriteLong(w, int64(v))
	case float32:
		WriteFloat(w, v)
	case float64:
		WriteDouble(w, v)
	case Decimal32:
		w.AppendByte(codeDecimal32)
		w.Append(v[:])
	case Decimal64:
		w.AppendByte(codeDecimal64)
		w.Append(v[:])
	case Decimal128:
		w.AppendByte(codeDecimal128)
		w.Append(v[:])
	case Char:
		WriteChar(w, v)
	case Timestamp:
		WriteTimestamp(w, v)
	case time.Time:
		WriteTimestamp(w, TimestampOf(v))
	case UUID:
		WriteUUID(w, v)
	case []byte:
		return WriteBinary(w, v)
	case string:
		return WriteString(w, v)
	case Symbol:
		return WriteSymbol(w, v)
	case []any:
		return WriteList(w, v)
	case Map:
		return WriteMap(w, v)
	case Fields:
		return WriteFields(w, v)
	case Annotations:
		return WriteAnnotations(w, v)
	case ApplicationProperties:
		return WriteApplicationProperties(w, v)
	case []Symbol:
		return WriteSymbols(w, v)
	case Array:
		return WriteArray(w, v)
	case Described:
		return WriteDescribed(w, v)
	case *Described:
		return WriteDescribed(w, *v)
	case Marshaler:
		return v.MarshalAMQP(w)
	default:
		return fmt.Errorf("amqp encoding: cannot encode Go type %T", v)
	}
	return nil
}

// WriteRawList writes a list of elements that are already encoded (as
// ReadListRaw returns them).
func WriteRawList(w *buffer.Buffer, elems [][]byte) error {
	c := beginCompound(w, codeList8, codeList32)
	for _, e := range elems {
		w.Append(e)
	}
	return c.end(w, len(elems))
}
