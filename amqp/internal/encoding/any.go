package encoding

import (
	"fmt"
	"math"

	"github.com/tolsey/tolsey/amqp/internal/buffer"
)

// ReadAny decodes one value of any type. The mapping to Go types:
//
//	null → nil              boolean → bool
//	ubyte/ushort/uint/ulong → uint8/uint16/uint32/uint64
//	byte/short/int/long     → int8/int16/int32/int64
//	float/double            → float32/float64
//	decimal32/64/128        → Decimal32/Decimal64/Decimal128
//	char → Char             timestamp → Timestamp      uuid → UUID
//	binary → []byte (aliases the input)
//	string → string         symbol → Symbol
//	list → []any            map → Map
//	array of symbol → []Symbol, any other array → Array
//	described → Described
func ReadAny(r *buffer.Buffer) (any, error) { return readAny(r, 0) }

func readAny(r *buffer.Buffer, depth int) (any, error) {
	code, err := readCode(r)
	if err != nil {
		return nil, err
	}
	return readValue(r, code, depth)
}

// readValue decodes the body of a value whose constructor is code.
func readValue(r *buffer.Buffer, code byte, depth int) (any, error) {
	switch code {
	case codeNull:
		return nil, nil
	case codeTrue, codeFalse, codeBool:
		return readBoolBody(r, code)
	case codeUbyte:
		v, err := readUnsignedBody(r, code)
		return uint8(v), err
	case codeUshort:
		v, err := readUnsignedBody(r, code)
		return uint16(v), err
	case codeUint, codeSmallUint, codeUint0:
		v, err := readUnsignedBody(r, code)
		return uint32(v), err
	case codeUlong, codeSmallUlong, codeUlong0:
		return readUnsignedBody(r, code)
	case codeByte:
		b, err := r.ReadByte()
		return int8(b), shortErr(err)
	case codeShort:
		v, err := r.ReadUint16()
		return int16(v), shortErr(err)
	case codeSmallInt:
		b, err := r.ReadByte()
		return int32(int8(b)), shortErr(err)
	case codeInt:
		v, err := r.ReadUint32()
		return int32(v), shortErr(err)
	case codeSmallLong:
		b, err := r.ReadByte()
		return int64(int8(b)), shortErr(err)
	case codeLong:
		v, err := r.ReadUint64()
		return int64(v), shortErr(err)
	case codeFloat:
		v, err := r.ReadUint32()
		return math.Float32frombits(v), shortErr(err)
	case codeDouble:
		v, err := r.ReadUint64()
		return math.Float64frombits(v), shortErr(err)
	case codeDecimal32:
		var d Decimal32
		p, err := next(r, len(d))
		copy(d[:], p)
		return d, err
	case codeDecimal64:
		var d Decimal64
		p, err := next(r, len(d))
		copy(d[:], p)
		return d, err
	case codeDecimal128:
		var d Decimal128
		p, err := next(r, len(d))
		copy(d[:], p)
		return d, err
	case codeChar:
		v, err := r.ReadUint32()
		return Char(v), shortErr(err)
	case codeTimestamp:
		v, err := r.ReadUint64()
		return Timestamp(v), shortErr(err)
	case codeUUID:
		var u UUID
		p, err := next(r, len(u))
		copy(u[:], p)
		return u, err
	case codeVbin8, codeVbin32:
		return readVar(r, code, codeVbin8, codeVbin32, "binary")
	case codeStr8, codeStr32:
		p, err := readVar(r, code, codeStr8, codeStr32, "string")
		return string(p), err
	case codeSym8, codeSym32:
		p, err := readVar(r, code, codeSym8, codeSym32, "symbol")
		return Symbol(p), err
	case codeList0, codeList8, codeList32:
		return readList(r, code, depth)
	case codeMap8, codeMap32:
		r.Unread(1)
		return readMap(r, depth)
	case codeArray8, codeArray32:
		return readArray(r, code, depth)
	case codeDescribed:
		if depth > MaxDepth {
			return nil, ErrTooDeep
		}
		desc, err := readAny(r, depth+1)
		if err != nil {
			return nil, err
		}
		if err := checkDescriptor(desc); err != nil {
			return nil, err
		}
		v, err := readAny(r, depth+1)
		if err != nil {
			return nil, err
		}
		return Described{Descriptor: desc, Value: v}, nil
	}
	return nil, fmt.Errorf("%w %#02x", ErrUnknown, code)
}

func checkDescriptor(desc any) error {
	switch desc.(type) {
	case uint64, Symbol:
		return nil
	}
	return &TypeError{Code: codeDescribed, Want: "ulong or symbol descriptor"}
}

func readList(r *buffer.Buffer, code byte, depth int) ([]any, error) {
	if depth > MaxDepth {
		return nil, ErrTooDeep
	}
	count, end, err := compoundHeader(r, code)
	if err != nil {
		return nil, err
	}
	l := make([]any, count) // count is bounded by the bytes left (compoundHeader)
	for i := range l {
		if l[i], err = readAny(r, depth+1); err != nil {
			return nil, err
		}
	}
	return l, finish(r, end)
}

// wideCode maps an element constructor to the widest form of its type, the
// form Array.Code records.
func wideCode(code byte) byte {
	switch code {
	case codeUint0, codeSmallUint:
		return codeUint
	case codeUlong0, codeSmallUlong:
		return codeUlong
	case codeSmallInt:
		return codeInt
	case codeSmallLong:
		return codeLong
	case codeTrue, codeFalse:
		return codeBool
	case codeVbin8:
		return codeVbin32
	case codeStr8:
		return codeStr32
	case codeSym8:
		return codeSym32
	case codeList0, codeList8:
		return codeList32
	case codeMap8:
		return codeMap32
	case codeArray8:
		return codeArray32
	}
	return code
}

func readArray(r *buffer.Buffer, code byte, depth int) (any, error) {
	if depth > MaxDepth {
		return nil, ErrTooDeep
	}
	count, end, err := compoundHeader(r, code)
	if err != nil {
		return nil, err
	}
	ctor, err := readCode(r)
	if err != nil {
		return nil, err
	}
	var desc any
	if ctor == codeDescribed {
		if desc, err = readAny(r, depth+1); err != nil {
			return nil, err
		}
		if err := checkDescriptor(desc); err != nil {
			return nil, err
		}
		if ctor, err = readCode(r); err != nil {
			return nil, err
		}
		if ctor == codeDescribed {
			return nil, &TypeError{Code: ctor, Want: "array element constructor"}
		}
	}
	// Bound the count by what the elements must occupy before allocating:
	// an array32 claiming 2^32 ulongs must carry 2^35 bytes, which we check
	// against the bytes that remain rather than trusting the count. The
	// constructor itself may already lie past the declared size (size 4,
	// count "unit", constructor after it): then nothing remains.
	left := end - r.Offset()
	if left < 0 {
		return nil, ErrTooLarge
	}
	min := minWidth(ctor)
	switch {
	case min < 0:
		return nil, fmt.Errorf("%w %#02x", ErrUnknown, ctor)
	case min == 0:
		if count > MaxZeroWidthElements {
			return nil, ErrTooLarge
		}
	case uint64(count)*uint64(min) > uint64(left):
		return nil, ErrTooLarge
	}
	if ctor == codeSym8 || ctor == codeSym32 {
		if desc != nil {
			return nil, &TypeError{Code: ctor, Want: "undescribed symbol array"}
		}
		s := make([]Symbol, count)
		for i := range s {
			p, err := readVar(r, ctor, codeSym8, codeSym32, "symbol")
			if err != nil {
				return nil, err
			}
			s[i] = Symbol(p)
		}
		return s, finish(r, end)
	}
	a := Array{Code: wideCode(ctor), Values: make([]any, count)}
	if desc != nil {
		a.Code = codeDescribed
	}
	for i := range a.Values {
		v, err := readValue(r, ctor, depth+1)
		if err != nil {
			return nil, err
		}
		if desc != nil {
			v = Described{Descriptor: desc, Value: v}
		}
		a.Values[i] = v
	}
	return a, finish(r, end)
}

// Skip consumes one value of any type without decoding it. It allocates
// nothing: compounds are skipped by their declared size.
func Skip(r *buffer.Buffer) error { return skip(r, 0) }

func skip(r *buffer.Buffer, depth int) error {
	for ; depth <= MaxDepth; depth++ {
		code, err := readCode(r)
		if err != nil {
			return err
		}
		switch w := fixedWidth(code); {
		case w >= 0:
			_, err := next(r, w)
			return err
		case w == -2:
			return fmt.Errorf("%w %#02x", ErrUnknown, code)
		}
		switch code {
		case codeDescribed:
			if err := skip(r, depth+1); err != nil { // the descriptor
				return err
			}
			continue // then the described value
		case codeVbin8, codeStr8, codeSym8, codeList8, codeMap8, codeArray8:
			n, err := readLength(r, false)
			if err != nil {
				return err
			}
			_, err = next(r, n)
			return err
		default: // the 32-bit variable and compound forms
			n, err := readLength(r, true)
			if err != nil {
				return err
			}
			_, err = next(r, n)
			return err
		}
	}
	return ErrTooDeep
}

// arrayConstructor picks the smallest element constructor for a.
func arrayConstructor(a Array) (byte, error) {
	fitsByte := func(ok func(v any) bool) bool {
		for _, v := range a.Values {
			if !ok(v) {
				return false
			}
		}
		return true
	}
	switch a.Code {
	case codeUint:
		if fitsByte(func(v any) bool { u, ok := v.(uint32); return ok && u == 0 }) && len(a.Values) > 0 {
			return codeUint0, nil
		}
		if fitsByte(func(v any) bool { u, ok := v.(uint32); return ok && u <= math.MaxUint8 }) {
			return codeSmallUint, nil
		}
	case codeUlong:
		if fitsByte(func(v any) bool { u, ok := v.(uint64); return ok && u == 0 }) && len(a.Values) > 0 {
			return codeUlong0, nil
		}
		if fitsByte(func(v any) bool { u, ok := v.(uint64); return ok && u <= math.MaxUint8 }) {
			return codeSmallUlong, nil
		}
	case codeInt:
		if fitsByte(func(v any) bool { i, ok := v.(int32); return ok && i == int32(int8(i)) }) {
			return codeSmallInt, nil
		}
	case codeLong:
		if fitsByte(func(v any) bool { i, ok := v.(int64); return ok && i == int64(int8(i)) }) {
			return codeSmallLong, nil
		}
	case codeVbin32:
		if fitsByte(func(v any) bool { b, ok := v.([]byte); return ok && len(b) <= math.MaxUint8 }) {
			return codeVbin8, nil
		}
	case codeStr32:
		if fitsByte(func(v any) bool { s, ok := v.(string); return ok && len(s) <= math.MaxUint8 }) {
			return codeStr8, nil
		}
	case codeSym32:
		if fitsByte(func(v any) bool { s, ok := v.(Symbol); return ok && len(s) <= math.MaxUint8 }) {
			return codeSym8, nil
		}
	case codeDescribed:
		return 0, fmt.Errorf("amqp encoding: writing arrays of described values is not supported")
	}
	if fixedWidth(a.Code) == -2 {
		return 0, fmt.Errorf("%w %#02x", ErrUnknown, a.Code)
	}
	return a.Code, nil
}

// writeElement writes the body of one array element (no constructor).
func writeElement(w *buffer.Buffer, ctor byte, v any) error {
	bad := func() error {
		return fmt.Errorf("amqp encoding: array element of type %T does not match constructor %#02x", v, ctor)
	}
	switch ctor {
	case codeNull, codeUint0, codeUlong0:
		ok := v == nil
		if !ok {
			switch x := v.(type) {
			case uint32:
				ok = ctor == codeUint0 && x == 0
			case uint64:
				ok = ctor == codeUlong0 && x == 0
			}
		}
		if !ok {
			return bad()
		}
		return nil
	case codeBool, codeTrue, codeFalse:
		b, ok := v.(bool)
		if !ok {
			return bad()
		}
		if b {
			w.AppendByte(1)
		} else {
			w.AppendByte(0)
		}
		return nil
	case codeSmallUint, codeUint, codeSmallUlong, codeUlong, codeUbyte, codeUshort:
		var u uint64
		switch x := v.(type) {
		case uint8:
			u = uint64(x)
		case uint16:
			u = uint64(x)
		case uint32:
			u = uint64(x)
		case uint64:
			u = x
		default:
			return bad()
		}
		switch ctor {
		case codeSmallUint, codeSmallUlong, codeUbyte:
			w.AppendByte(byte(u))
		case codeUshort:
			w.AppendUint16(uint16(u))
		case codeUint:
			w.AppendUint32(uint32(u))
		default:
			w.AppendUint64(u)
		}
		return nil
	case codeByte, codeShort, codeSmallInt, codeInt, codeSmallLong, codeLong:
		var i int64
		switch x := v.(type) {
		case int8:
			i = int64(x)
		case int16:
			i = int64(x)
		case int32:
			i = int64(x)
		case int64:
			i = x
		default:
			return bad()
		}
		switch ctor {
		case codeByte, codeSmallInt, codeSmallLong:
			w.AppendByte(byte(i))
		case codeShort:
			w.AppendUint16(uint16(i))
		case codeInt:
			w.AppendUint32(uint32(i))
		default:
			w.AppendUint64(uint64(i))
		}
		return nil
	case codeVbin8, codeVbin32, codeStr8, codeStr32, codeSym8, codeSym32:
		var p string
		switch x := v.(type) {
		case []byte:
			p = string(x)
		case string:
			p = x
		case Symbol:
			p = string(x)
		default:
			return bad()
		}
		if ctor == codeVbin8 || ctor == codeStr8 || ctor == codeSym8 {
			w.AppendByte(byte(len(p)))
		} else {
			w.AppendUint32(uint32(len(p)))
		}
		w.AppendString(p)
		return nil
	case codeList32, codeMap32, codeArray32:
		// Write the value with its own constructor, then drop the
		// constructor byte and widen the header to the 32-bit form.
		off := w.Size()
		var err error
		switch x := v.(type) {
		case []any:
			if ctor == codeList32 {
				err = WriteList(w, x)
			} else {
				err = bad()
			}
		case Map:
			if ctor == codeMap32 {
				err = WriteMap(w, x)
			} else {
				err = bad()
			}
		case Array, []Symbol:
			if ctor == codeArray32 {
				err = WriteAny(w, x)
			} else {
				err = bad()
			}
		default:
			err = bad()
		}
		if err != nil {
			return err
		}
		return widenElement(w, off)
	}
	// Remaining fixed-width types: write normally, then drop the constructor.
	off := w.Size()
	if err := WriteAny(w, v); err != nil {
		return err
	}
	if w.Written()[off] != ctor {
		return bad()
	}
	copy(w.Written()[off:], w.Written()[off+1:])
	w.Truncate(w.Size() - 1)
	return nil
}

// widenElement rewrites the compound just written at off as a bare 32-bit
// body (size32 count32 ...), as array elements of list32/map32/array32 are.
func widenElement(w *buffer.Buffer, off int) error {
	b := w.Written()
	switch b[off] {
	case codeList0:
		w.Truncate(off)
		w.AppendUint32(4)
		w.AppendUint32(0)
		return nil
	case codeList8, codeMap8, codeArray8:
		size, count := uint32(b[off+1]), uint32(b[off+2])
		w.InsertGap(off+3, 5) // 3-byte header becomes 8 bytes
		w.PutUint32At(off, size+3)
		w.PutUint32At(off+4, count)
		return nil
	default: // already 32-bit: drop the constructor
		copy(b[off:], b[off+1:])
		w.Truncate(len(b) - 1)
		return nil
	}
}
