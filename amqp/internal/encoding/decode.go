package encoding

import (
	"math"

	"github.com/tolsey/tolsey/amqp/internal/buffer"
)

// MaxZeroWidthElements bounds the element count of an array whose element
// constructor takes no bytes per element (null, true, false, uint0, ulong0,
// list0). It blocks memory amplification: "f0 00000005 ffffffff 40" is ten
// bytes claiming four billion nulls, and the usual bound (count against the
// bytes left) is useless when elements are zero bytes wide. It is small
// because such arrays nest: an array of array32 elements spends 9 bytes per
// inner array, so a larger cap would let each 9 input bytes cost cap×16
// bytes of []any. Real peers don't send long arrays of identical
// zero-width values (Proton writes boolean arrays with the 0x56 form).
const MaxZeroWidthElements = 16

// fixedWidth is the body size of each fixed-width constructor, -1 for
// variable-width or compound ones and -2 for unknown codes.
func fixedWidth(code byte) int {
	switch code {
	case codeNull, codeTrue, codeFalse, codeUint0, codeUlong0, codeList0:
		return 0
	case codeBool, codeUbyte, codeByte, codeSmallUint, codeSmallUlong, codeSmallInt, codeSmallLong:
		return 1
	case codeUshort, codeShort:
		return 2
	case codeUint, codeInt, codeFloat, codeChar, codeDecimal32:
		return 4
	case codeUlong, codeLong, codeDouble, codeTimestamp, codeDecimal64:
		return 8
	case codeUUID, codeDecimal128:
		return 16
	case codeVbin8, codeStr8, codeSym8, codeList8, codeMap8, codeArray8,
		codeVbin32, codeStr32, codeSym32, codeList32, codeMap32, codeArray32, codeDescribed:
		return -1
	}
	return -2
}

// minWidth is the fewest body bytes one value of the constructor can take:
// the length prefix for variable-width and compound encodings.
func minWidth(code byte) int {
	switch code {
	case codeVbin8, codeStr8, codeSym8:
		return 1
	case codeList8, codeMap8, codeArray8:
		return 2
	case codeVbin32, codeStr32, codeSym32:
		return 4
	case codeList32, codeMap32, codeArray32:
		return 8
	}
	return fixedWidth(code)
}

func readCode(r *buffer.Buffer) (byte, error) {
	c, err := r.ReadByte()
	if err != nil {
		return 0, ErrShort
	}
	return c, nil
}

func next(r *buffer.Buffer, n int) ([]byte, error) {
	p, err := r.Next(n)
	if err != nil {
		return nil, ErrShort
	}
	return p, nil
}

// readLength reads the length prefix of a variable-width or compound
// constructor (one byte for the 8-bit forms, four for the 32-bit forms) and
// checks it against the input left. A vbin32 or list32 may claim up to 4 GiB;
// the check means a peer can only make us hand out (or walk) bytes it has
// actually sent, never allocate for bytes it merely claims.
func readLength(r *buffer.Buffer, wide bool) (int, error) {
	var n int
	if wide {
		v, err := r.ReadUint32()
		if err != nil {
			return 0, ErrShort
		}
		if uint64(v) > uint64(r.Len()) {
			return 0, ErrTooLarge
		}
		n = int(v)
	} else {
		v, err := r.ReadByte()
		if err != nil {
			return 0, ErrShort
		}
		n = int(v)
	}
	if n > r.Len() {
		return 0, ErrTooLarge
	}
	return n, nil
}

// compoundHeader reads size and count of a list, map or array whose
// constructor has been consumed. It returns the element count and the read
// offset at which the compound ends. The count is checked against the
// declared size, which is checked against the input, so a list8 claiming 255
// elements in three bytes fails here instead of sizing a slice for 255.
func compoundHeader(r *buffer.Buffer, code byte) (count, end int, err error) {
	switch code {
	case codeList0:
		return 0, r.Offset(), nil
	case codeList8, codeMap8, codeArray8, codeList32, codeMap32, codeArray32:
	default:
		return 0, 0, &TypeError{Code: code, Want: "compound"}
	}
	wide := code == codeList32 || code == codeMap32 || code == codeArray32
	size, err := readLength(r, wide)
	if err != nil {
		return 0, 0, err
	}
	end = r.Offset() + size
	var c uint32
	if wide {
		if size < 4 {
			return 0, 0, ErrTooLarge
		}
		c, _ = r.ReadUint32()
		size -= 4
	} else {
		if size < 1 {
			return 0, 0, ErrTooLarge
		}
		b, _ := r.ReadByte()
		c = uint32(b)
		size--
	}
	// Each list or map element takes at least its one constructor byte; an
	// array's per-element minimum is checked again once its constructor is
	// known (readArray).
	if uint64(c) > uint64(size) && code != codeArray8 && code != codeArray32 {
		return 0, 0, ErrTooLarge
	}
	return int(c), end, nil
}

// finish checks that a compound's elements used exactly its declared size.
func finish(r *buffer.Buffer, end int) error {
	if r.Offset() != end {
		return ErrTooLarge
	}
	return nil
}

// IsNull consumes a null if one is next and reports whether it did.
func IsNull(r *buffer.Buffer) bool {
	if c, err := r.PeekByte(); err == nil && c == codeNull {
		r.Skip(1)
		return true
	}
	return false
}

// ReadBool reads a boolean (true, false or the one-byte boolean form).
func ReadBool(r *buffer.Buffer) (bool, error) {
	code, err := readCode(r)
	if err != nil {
		return false, err
	}
	return readBoolBody(r, code)
}

func readBoolBody(r *buffer.Buffer, code byte) (bool, error) {
	switch code {
	case codeTrue:
		return true, nil
	case codeFalse:
		return false, nil
	case codeBool:
		b, err := r.ReadByte()
		if err != nil {
			return false, ErrShort
		}
		if b > 1 {
			return false, &TypeError{Code: code, Want: "boolean 0 or 1"}
		}
		return b == 1, nil
	}
	return false, &TypeError{Code: code, Want: "boolean"}
}

// ReadUnsigned reads any unsigned integer encoding (ubyte, ushort, uint,
// ulong and their compact forms). Peers are not consistent about which
// width they use for a field, so fields accept any that fits.
func ReadUnsigned(r *buffer.Buffer) (uint64, error) {
	code, err := readCode(r)
	if err != nil {
		return 0, err
	}
	return readUnsignedBody(r, code)
}

func readUnsignedBody(r *buffer.Buffer, code byte) (uint64, error) {
	switch code {
	case codeUint0, codeUlong0:
		return 0, nil
	case codeUbyte, codeSmallUint, codeSmallUlong:
		b, err := r.ReadByte()
		return uint64(b), shortErr(err)
	case codeUshort:
		v, err := r.ReadUint16()
		return uint64(v), shortErr(err)
	case codeUint:
		v, err := r.ReadUint32()
		return uint64(v), shortErr(err)
	case codeUlong:
		v, err := r.ReadUint64()
		return v, shortErr(err)
	}
	return 0, &TypeError{Code: code, Want: "unsigned integer"}
}

func shortErr(err error) error {
	if err != nil {
		return ErrShort
	}
	return nil
}

func readUnsignedMax(r *buffer.Buffer, max uint64, want string) (uint64, error) {
	v, err := ReadUnsigned(r)
	if err == nil && v > max {
		return 0, &TypeError{Code: codeUlong, Want: want}
	}
	return v, err
}

// ReadUbyte reads an unsigned integer that must fit a ubyte.
func ReadUbyte(r *buffer.Buffer) (uint8, error) {
	v, err := readUnsignedMax(r, math.MaxUint8, "ubyte")
	return uint8(v), err
}

// ReadUshort reads an unsigned integer that must fit a ushort.
func ReadUshort(r *buffer.Buffer) (uint16, error) {
	v, err := readUnsignedMax(r, math.MaxUint16, "ushort")
	return uint16(v), err
}

// ReadUint reads an unsigned integer that must fit a uint.
func ReadUint(r *buffer.Buffer) (uint32, error) {
	v, err := readUnsignedMax(r, math.MaxUint32, "uint")
	return uint32(v), err
}

// ReadUlong reads an unsigned integer.
func ReadUlong(r *buffer.Buffer) (uint64, error) { return ReadUnsigned(r) }

// ReadSigned reads any signed integer encoding.
func ReadSigned(r *buffer.Buffer) (int64, error) {
	code, err := readCode(r)
	if err != nil {
		return 0, err
	}
	switch code {
	case codeByte, codeSmallInt, codeSmallLong:
		b, err := r.ReadByte()
		return int64(int8(b)), shortErr(err)
	case codeShort:
		v, err := r.ReadUint16()
		return int64(int16(v)), shortErr(err)
	case codeInt:
		v, err := r.ReadUint32()
		return int64(int32(v)), shortErr(err)
	case codeLong:
		v, err := r.ReadUint64()
		return int64(v), shortErr(err)
	}
	return 0, &TypeError{Code: code, Want: "signed integer"}
}

// ReadTimestamp reads a timestamp.
func ReadTimestamp(r *buffer.Buffer) (Timestamp, error) {
	if err := expect(r, codeTimestamp, "timestamp"); err != nil {
		return 0, err
	}
	v, err := r.ReadUint64()
	return Timestamp(v), shortErr(err)
}

// ReadUUID reads a uuid.
func ReadUUID(r *buffer.Buffer) (UUID, error) {
	var u UUID
	if err := expect(r, codeUUID, "uuid"); err != nil {
		return u, err
	}
	p, err := next(r, 16)
	copy(u[:], p)
	return u, err
}

func expect(r *buffer.Buffer, want byte, name string) error {
	code, err := readCode(r)
	if err != nil {
		return err
	}
	if code != want {
		return &TypeError{Code: code, Want: name}
	}
	return nil
}

// readVar reads the body of a variable-width value whose constructor is
// one of code8/code32, returning it as a sub-slice of r.
func readVar(r *buffer.Buffer, code, code8, code32 byte, want string) ([]byte, error) {
	if code != code8 && code != code32 {
		return nil, &TypeError{Code: code, Want: want}
	}
	n, err := readLength(r, code == code32)
	if err != nil {
		return nil, err
	}
	return next(r, n)
}

// ReadBinary reads a vbin8/vbin32. The result aliases r's bytes (no copy);
// copy it if it must outlive them.
func ReadBinary(r *buffer.Buffer) ([]byte, error) {
	code, err := readCode(r)
	if err != nil {
		return nil, err
	}
	return readVar(r, code, codeVbin8, codeVbin32, "binary")
}

// ReadString reads a str8/str32 (copied into a Go string).
func ReadString(r *buffer.Buffer) (string, error) {
	code, err := readCode(r)
	if err != nil {
		return "", err
	}
	p, err := readVar(r, code, codeStr8, codeStr32, "string")
	return string(p), err
}

// ReadSymbol reads a sym8/sym32.
func ReadSymbol(r *buffer.Buffer) (Symbol, error) {
	code, err := readCode(r)
	if err != nil {
		return "", err
	}
	p, err := readVar(r, code, codeSym8, codeSym32, "symbol")
	return Symbol(p), err
}

// ReadSymbols reads a symbol field declared multiple="true": either a
// single symbol or an array of symbols (part 1 section 1.3: "a single value
// ... MAY be encoded as the value itself").
func ReadSymbols(r *buffer.Buffer) ([]Symbol, error) {
	code, err := r.PeekByte()
	if err != nil {
		return nil, ErrShort
	}
	switch code {
	case codeSym8, codeSym32:
		s, err := ReadSymbol(r)
		if err != nil {
			return nil, err
		}
		return []Symbol{s}, nil
	case codeArray8, codeArray32:
		v, err := ReadAny(r)
		if err != nil {
			return nil, err
		}
		if s, ok := v.([]Symbol); ok {
			return s, nil
		}
		return nil, &TypeError{Code: code, Want: "array of symbol"}
	}
	return nil, &TypeError{Code: code, Want: "symbol or array of symbol"}
}

// readMapHeader reads a map constructor, size and count, returning the
// number of entries (pairs).
func readMapHeader(r *buffer.Buffer) (pairs, end int, err error) {
	code, err := readCode(r)
	if err != nil {
		return 0, 0, err
	}
	if code != codeMap8 && code != codeMap32 {
		return 0, 0, &TypeError{Code: code, Want: "map"}
	}
	count, end, err := compoundHeader(r, code)
	if err != nil {
		return 0, 0, err
	}
	if count%2 != 0 {
		return 0, 0, &TypeError{Code: code, Want: "map with an even element count"}
	}
	return count / 2, end, nil
}

// ReadMap reads a map with arbitrary keys, keeping wire order.
func ReadMap(r *buffer.Buffer) (Map, error) { return readMap(r, 0) }

func readMap(r *buffer.Buffer, depth int) (Map, error) {
	if depth > MaxDepth {
		return nil, ErrTooDeep
	}
	n, end, err := readMapHeader(r)
	if err != nil {
		return nil, err
	}
	m := make(Map, n) // n is bounded by the bytes left (compoundHeader)
	for i := range m {
		if m[i].Key, err = readAny(r, depth+1); err != nil {
			return nil, err
		}
		if m[i].Value, err = readAny(r, depth+1); err != nil {
			return nil, err
		}
	}
	return m, finish(r, end)
}

// ReadFields reads a symbol-keyed map.
func ReadFields(r *buffer.Buffer) (Fields, error) {
	n, end, err := readMapHeader(r)
	if err != nil {
		return nil, err
	}
	m := make(Fields, n) // n is bounded by the bytes left (compoundHeader)
	for i := range m {
		if m[i].Key, err = ReadSymbol(r); err != nil {
			return nil, err
		}
		if m[i].Value, err = readAny(r, 1); err != nil {
			return nil, err
		}
	}
	return m, finish(r, end)
}

// ReadAnnotations reads an annotations map (keys symbol or ulong).
func ReadAnnotations(r *buffer.Buffer) (Annotations, error) {
	n, end, err := readMapHeader(r)
	if err != nil {
		return nil, err
	}
	m := make(Annotations, n) // n is bounded by the bytes left (compoundHeader)
	for i := range m {
		code, err := r.PeekByte()
		if err != nil {
			return nil, ErrShort
		}
		switch code {
		case codeSym8, codeSym32:
			m[i].Key, err = ReadSymbol(r)
		default:
			m[i].Key, err = ReadUlong(r)
		}
		if err != nil {
			return nil, err
		}
		if m[i].Value, err = readAny(r, 1); err != nil {
			return nil, err
		}
	}
	return m, finish(r, end)
}

// ReadApplicationProperties reads a string-keyed map.
func ReadApplicationProperties(r *buffer.Buffer) (ApplicationProperties, error) {
	n, end, err := readMapHeader(r)
	if err != nil {
		return nil, err
	}
	m := make(ApplicationProperties, n) // n is bounded by the bytes left (compoundHeader)
	for i := range m {
		if m[i].Key, err = ReadString(r); err != nil {
			return nil, err
		}
		if m[i].Value, err = readAny(r, 1); err != nil {
			return nil, err
		}
	}
	return m, finish(r, end)
}

// ReadList reads a list into a []any.
func ReadList(r *buffer.Buffer) ([]any, error) {
	v, err := ReadAny(r)
	if err != nil {
		return nil, err
	}
	if l, ok := v.([]any); ok || v == nil {
		return l, nil
	}
	return nil, ErrWrongType
}

// ReadListRaw reads a list and appends the encoding of each of its
// elements to dst, as sub-slices of r's bytes: nothing is decoded or
// copied, so a caller can write the list again with one element replaced
// and every other byte for byte (WriteRawList).
func ReadListRaw(r *buffer.Buffer, dst [][]byte) ([][]byte, error) {
	code, err := readCode(r)
	if err != nil {
		return dst, err
	}
	if code != codeList0 && code != codeList8 && code != codeList32 {
		return dst, &TypeError{Code: code, Want: "list"}
	}
	count, end, err := compoundHeader(r, code)
	if err != nil {
		return dst, err
	}
	for range count {
		rest, start := r.Bytes(), r.Offset()
		if err := Skip(r); err != nil {
			return dst, err
		}
		n := r.Offset() - start
		dst = append(dst, rest[:n:n])
	}
	return dst, finish(r, end)
}
