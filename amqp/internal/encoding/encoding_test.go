package encoding

import (
	"bytes"
	"encoding/hex"
	"errors"
	"math"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/tolsey/tolsey/amqp/internal/buffer"
)

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// canonical: value → the exact bytes WriteAny must produce (the smallest
// encoding), and ReadAny must turn back into the same value.
var canonical = []struct {
	name string
	v    any
	hex  string
}{
	{"null", nil, "40"},
	{"true", true, "41"},
	{"false", false, "42"},
	{"ubyte", uint8(7), "50 07"},
	{"ushort", uint16(0x1234), "60 1234"},
	{"uint0", uint32(0), "43"},
	{"smalluint", uint32(255), "52 ff"},
	{"uint", uint32(256), "70 00000100"},
	{"ulong0", uint64(0), "44"},
	{"smallulong", uint64(0x10), "53 10"},
	{"ulong", uint64(1 << 40), "80 0000010000000000"},
	{"byte", int8(-2), "51 fe"},
	{"short", int16(-2), "61 fffe"},
	{"smallint", int32(-128), "54 80"},
	{"int", int32(128), "71 00000080"},
	{"smalllong", int64(127), "55 7f"},
	{"long", int64(-129), "81 ffffffffffffff7f"},
	{"float", float32(1.5), "72 3fc00000"},
	{"double", float64(-2), "82 c000000000000000"},
	{"decimal32", Decimal32{1, 2, 3, 4}, "74 01020304"},
	{"decimal64", Decimal64{1, 2, 3, 4, 5, 6, 7, 8}, "84 0102030405060708"},
	{"decimal128", Decimal128{15: 9}, "94 00000000000000000000000000000009"},
	{"char", Char('€'), "73 000020ac"},
	{"timestamp", Timestamp(1700000000123), "83 0000018bcfe5687b"},
	{"uuid", UUID{0: 0xde, 15: 0xad}, "98 de0000000000000000000000000000ad"},
	{"vbin8", []byte{1, 2}, "a0 02 0102"},
	{"vbin8 empty", []byte{}, "a0 00"},
	{"vbin32", bytes.Repeat([]byte{7}, 256), "b0 00000100" + strings.Repeat("07", 256)},
	{"str8", "hé", "a1 03 68c3a9"},
	{"str32", strings.Repeat("x", 300), "b1 0000012c" + strings.Repeat("78", 300)},
	{"sym8", Symbol("topic"), "a3 05 746f706963"},
	{"sym32", Symbol(strings.Repeat("s", 256)), "b3 00000100" + strings.Repeat("73", 256)},
	{"list0", []any{}, "45"},
	{"list8", []any{uint32(1), "a", nil}, "c0 07 03 5201 a10161 40"},
	{"list32", []any{strings.Repeat("y", 260)}, "d0 0000010d 00000001 b1 00000104" + strings.Repeat("79", 260)},
	{"nested list", []any{[]any{}, []any{true}}, "c0 06 02 45 c0 02 01 41"},
	{"map8", Map{{Symbol("k"), int32(1)}, {"s", []byte{9}}}, "c1 0c 04 a3016b 5401 a10173 a00109"},
	{"map8 empty", Map{}, "c1 01 00"},
	{"map32", Map{{"k", strings.Repeat("z", 256)}}, "d1 0000010c 00000002 a1016b b1 00000100" + strings.Repeat("7a", 256)},
	{"array8 sym", []Symbol{"a", "bc"}, "e0 07 02 a3 0161 02 6263"},
	{"array8 sym empty", []Symbol{}, "e0 02 00 a3"},
	{"array sym32", []Symbol{Symbol(strings.Repeat("q", 256))}, "f0 00000109 00000001 b3 00000100" + strings.Repeat("71", 256)},
	{"array smalluint", Array{Code: codeUint, Values: []any{uint32(1), uint32(2)}}, "e0 04 02 52 0102"},
	{"array uint0", Array{Code: codeUint, Values: []any{uint32(0), uint32(0)}}, "e0 02 02 43"},
	{"array uint", Array{Code: codeUint, Values: []any{uint32(1), uint32(300)}}, "e0 0a 02 70 00000001 0000012c"},
	{"array ulong empty", Array{Code: codeUlong, Values: []any{}}, "e0 02 00 53"},
	{"array long", Array{Code: codeLong, Values: []any{int64(-1), int64(1000)}}, "e0 12 02 81 ffffffffffffffff 00000000000003e8"},
	{"array smalllong", Array{Code: codeLong, Values: []any{int64(-1)}}, "e0 03 01 55 ff"},
	{"array bool", Array{Code: codeBool, Values: []any{true, false}}, "e0 04 02 56 0100"},
	{"array str8", Array{Code: codeStr32, Values: []any{"ab", ""}}, "e0 06 02 a1 026162 00"},
	{"array double", Array{Code: codeDouble, Values: []any{float64(1)}}, "e0 0a 01 82 3ff0000000000000"},
	{"array uuid", Array{Code: codeUUID, Values: []any{UUID{}}}, "e0 12 01 98 00000000000000000000000000000000"},
	{"array list", Array{Code: codeList32, Values: []any{[]any{true}, []any{}}}, "e0 13 02 d0 00000005 00000001 41 00000004 00000000"},
	{"array map", Array{Code: codeMap32, Values: []any{Map{{"a", nil}}}}, "e0 0e 01 d1 00000008 00000002 a10161 40"},
	{"array array", Array{Code: codeArray32, Values: []any{[]Symbol{"x"}}}, "e0 0d 01 f0 00000007 00000001 a3 0178"},
	{"array null", Array{Code: codeNull, Values: []any{nil, nil}}, "e0 02 02 40"},
	{"described ulong", Described{Descriptor: uint64(0x77), Value: "v"}, "00 53 77 a1 01 76"},
	{"described symbol", Described{Descriptor: Symbol("x:y"), Value: uint64(1)}, "00 a3 03 783a79 53 01"},
	{"described nested", Described{Descriptor: uint64(1), Value: Described{Descriptor: uint64(2), Value: nil}}, "00 53 01 00 53 02 40"},
}

func TestCanonicalRoundTrip(t *testing.T) {
	for _, tc := range canonical {
		t.Run(tc.name, func(t *testing.T) {
			want := unhex(t, tc.hex)
			var w buffer.Buffer
			if err := WriteAny(&w, tc.v); err != nil {
				t.Fatalf("WriteAny: %v", err)
			}
			if !bytes.Equal(w.Written(), want) {
				t.Fatalf("WriteAny(%#v)\n got  %x\n want %x", tc.v, w.Written(), want)
			}
			r := buffer.New(want)
			got, err := ReadAny(r)
			if err != nil {
				t.Fatalf("ReadAny: %v", err)
			}
			if r.Len() != 0 {
				t.Fatalf("ReadAny left %d bytes", r.Len())
			}
			if !reflect.DeepEqual(got, tc.v) {
				t.Fatalf("ReadAny = %#v, want %#v", got, tc.v)
			}
			// Skip must consume exactly the same bytes.
			r = buffer.New(want)
			if err := Skip(r); err != nil || r.Len() != 0 {
				t.Fatalf("Skip: err %v, %d bytes left", err, r.Len())
			}
		})
	}
}

// Go types with no AMQP type of their own encode to their nearest type.
func TestWriteAnyConversions(t *testing.T) {
	for _, tc := range []struct {
		v   any
		hex string
	}{
		{int(5), "55 05"},
		{uint(5), "53 05"},
		{Fields{{"k", true}}, "c1 05 02 a3016b 41"},
		{Annotations{{Symbol("k"), true}, {uint64(3), nil}}, "c1 08 04 a3016b 41 5303 40"},
		{ApplicationProperties{{"unit", "C"}}, "c1 0a 02 a104756e6974 a10143"},
		{&Described{Descriptor: uint64(1), Value: nil}, "00 53 01 40"},
	} {
		var w buffer.Buffer
		if err := WriteAny(&w, tc.v); err != nil {
			t.Fatalf("%T: %v", tc.v, err)
		}
		if want := unhex(t, tc.hex); !bytes.Equal(w.Written(), want) {
			t.Errorf("WriteAny(%#v) = %x, want %x", tc.v, w.Written(), want)
		}
	}
	var w buffer.Buffer
	for _, bad := range []any{struct{}{}, Annotations{{"string key", 1}}, Array{Code: 0x99}, Array{Code: codeUint, Values: []any{"x"}}} {
		if err := WriteAny(&w, bad); err == nil {
			t.Errorf("WriteAny(%#v) succeeded, want error", bad)
		}
	}
}

// Peers use wider encodings than necessary (rhea and go-amqp send list32 and
// uint for everything); all of them must decode to the same values.
func TestNonCanonicalDecodes(t *testing.T) {
	for _, tc := range []struct {
		hex string
		v   any
	}{
		{"70 00000001", uint32(1)},
		{"80 0000000000000000", uint64(0)},
		{"56 01", true},
		{"56 00", false},
		{"71 00000001", int32(1)},
		{"81 0000000000000001", int64(1)},
		{"b0 00000001 ff", []byte{0xff}},
		{"b1 00000001 61", "a"},
		{"b3 00000001 61", Symbol("a")},
		{"d0 00000004 00000000", []any{}},
		{"c0 01 00", []any{}},
		{"d0 00000006 00000002 41 42", []any{true, false}},
		{"d1 00000008 00000002 a10161 41", Map{{"a", true}}},
		{"f0 0000000b 00000001 b3 00000002 6162", []Symbol{"ab"}},
		{"e0 03 01 a3 00", []Symbol{""}},
		{"e0 02 02 41", Array{Code: codeBool, Values: []any{true, true}}},
		{"00 53 01 00 53 02 e0 03 01 53 07", Described{uint64(1), Described{uint64(2), Array{Code: codeUlong, Values: []any{uint64(7)}}}}},
		{"e0 07 02 00 53 09 52 01 02", Array{Code: codeDescribed, Values: []any{Described{uint64(9), uint32(1)}, Described{uint64(9), uint32(2)}}}},
	} {
		got, err := ReadAny(buffer.New(unhex(t, tc.hex)))
		if err != nil {
			t.Errorf("%s: %v", tc.hex, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.v) {
			t.Errorf("%s: got %#v, want %#v", tc.hex, got, tc.v)
		}
	}
}

func TestTypedReaders(t *testing.T) {
	r := buffer.New(unhex(t, "60 0102 52 ff 50 05 70 00000001 83 0000000000000001 98 000102030405060708090a0b0c0d0e0f a3 03 616263 e0 06 02 a3 0161 0162 c1 05 02 a3 016b 41"))
	if v, err := ReadUshort(r); err != nil || v != 0x102 {
		t.Fatalf("ReadUshort = %v, %v", v, err)
	}
	if v, err := ReadUbyte(r); err != nil || v != 0xff {
		t.Fatalf("ReadUbyte = %v, %v", v, err)
	}
	if v, err := ReadUint(r); err != nil || v != 5 {
		t.Fatalf("ReadUint(ubyte) = %v, %v", v, err)
	}
	if v, err := ReadUlong(r); err != nil || v != 1 {
		t.Fatalf("ReadUlong(uint) = %v, %v", v, err)
	}
	if v, err := ReadTimestamp(r); err != nil || v != 1 || !v.Time().Equal(TimestampOf(v.Time()).Time()) {
		t.Fatalf("ReadTimestamp = %v, %v", v, err)
	}
	if v, err := ReadUUID(r); err != nil || v.String() != "00010203-0405-0607-0809-0a0b0c0d0e0f" {
		t.Fatalf("ReadUUID = %v, %v", v, err)
	}
	if v, err := ReadSymbols(r); err != nil || !reflect.DeepEqual(v, []Symbol{"abc"}) {
		t.Fatalf("ReadSymbols(single) = %v, %v", v, err)
	}
	if v, err := ReadSymbols(r); err != nil || !reflect.DeepEqual(v, []Symbol{"a", "b"}) {
		t.Fatalf("ReadSymbols(array) = %v, %v", v, err)
	}
	f, err := ReadFields(r)
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := f.Get("k"); !ok || v != true {
		t.Fatalf("Fields.Get = %v %v", v, ok)
	}
	// Range and type errors.
	for _, tc := range []struct {
		hex  string
		read func(*buffer.Buffer) error
	}{
		{"60 0100", func(r *buffer.Buffer) error { _, err := ReadUbyte(r); return err }},
		{"80 0000000100000000", func(r *buffer.Buffer) error { _, err := ReadUint(r); return err }},
		{"a1 01 61", func(r *buffer.Buffer) error { _, err := ReadSymbol(r); return err }},
		{"a3 01 61", func(r *buffer.Buffer) error { _, err := ReadString(r); return err }},
		{"56 02", func(r *buffer.Buffer) error { _, err := ReadBool(r); return err }},
		{"e0 03 01 52 01", func(r *buffer.Buffer) error { _, err := ReadSymbols(r); return err }},
		{"c1 03 01 40 40", func(r *buffer.Buffer) error { _, err := ReadMap(r); return err }}, // odd count
		{"c1 03 02 a1 00", func(r *buffer.Buffer) error { _, err := ReadAnnotations(r); return err }},
	} {
		if err := tc.read(buffer.New(unhex(t, tc.hex))); err == nil {
			t.Errorf("%s: decoded, want error", tc.hex)
		}
	}
}

func TestLookups(t *testing.T) {
	m := Map{{[]byte{1}, 1}, {Symbol("a"), 2}}
	if v, ok := m.Get(Symbol("a")); !ok || v != 2 {
		t.Fatalf("Map.Get = %v %v", v, ok)
	}
	if _, ok := m.Get("missing"); ok {
		t.Fatal("Map.Get found a missing key")
	}
	a := Annotations{{uint64(1), 1}, {Symbol("x-opt-retain"), true}}
	if v, ok := a.Get("x-opt-retain"); !ok || v != true {
		t.Fatalf("Annotations.Get = %v %v", v, ok)
	}
	p := ApplicationProperties{{"unit", "C"}}
	if v, ok := p.Get("unit"); !ok || v != "C" {
		t.Fatalf("ApplicationProperties.Get = %v %v", v, ok)
	}
}

// Hostile inputs: every claimed count or length is checked against the
// bytes actually present before anything is allocated.
func TestBoundsBeforeAllocation(t *testing.T) {
	for _, tc := range []struct {
		name, hex string
		want      error
	}{
		{"list8 claims 255 elements in 3 bytes", "c0 ff ff 40 40", ErrTooLarge},
		{"list8 count exceeds its size", "c0 02 05 40", ErrTooLarge},
		{"list32 claims 4 GiB", "d0 ffffffff ffffffff", ErrTooLarge},
		{"list32 count exceeds size", "d0 00000005 7fffffff 40", ErrTooLarge},
		{"map32 claims 2^31 pairs", "d1 00000008 fffffffe 4040 4040", ErrTooLarge},
		{"vbin32 claims 4 GiB", "b0 ffffffff 00", ErrTooLarge},
		{"str8 runs past the end", "a1 05 6162", ErrTooLarge},
		{"array32 of 2^32 nulls", "f0 00000005 ffffffff 40", ErrTooLarge},
		{"array32 of 2^32 ulongs", "f0 00000005 ffffffff 80", ErrTooLarge},
		{"array8 of 200 uuids", "e0 03 c8 98 00", ErrTooLarge},
		{"array of list8 elements", "e0 03 ff c0 00", ErrTooLarge},
		{"array8 of 17 nulls", "e0 02 11 40", ErrTooLarge},
		// Nested amplification: an array of array32 elements, each 9 bytes
		// claiming 2^32 nulls.
		{"array of arrays of nulls", "e0 14 02 f0 00000005 ffffffff 40 00000005 ffffffff 40", ErrTooLarge},
		// Found by FuzzReader: the element constructor lies past the
		// declared size, and "bytes left" went negative.
		{"array32 constructor past its size", "f0 00000004 756e6974 a1 0143 0000", ErrTooLarge},
		{"array8 descriptor past its size", "e0 01 ff 00 53 01 a1 00", ErrTooLarge},
		{"list size below count width", "d0 00000002 0000", ErrTooLarge},
		{"list elements overrun size", "c0 02 01 a1 05 6162636465", ErrTooLarge},
		{"truncated ulong", "80 0001", ErrShort},
		{"unknown code", "ff", ErrUnknown},
		{"deep nesting", strings.Repeat("c0 ff 01 ", 300), ErrTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := unhex(t, tc.hex)
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, err := ReadAny(buffer.New(in))
			runtime.ReadMemStats(&after)
			if err == nil {
				t.Fatal("decoded, want error")
			}
			if !errors.Is(err, tc.want) && !errors.Is(err, ErrTooDeep) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if n := after.TotalAlloc - before.TotalAlloc; n > 64*1024 {
				t.Fatalf("allocated %d bytes for a %d-byte input", n, len(in))
			}
			if err := Skip(buffer.New(in)); err == nil && tc.want != ErrTooLarge {
				t.Fatalf("Skip accepted %s", tc.hex)
			}
		})
	}
}

func TestNestingDepthLimit(t *testing.T) {
	// MaxDepth+2 nested well-formed lists: each c0 <size> 01 wraps the next.
	in := []byte{0x45}
	for range 30 {
		in = append([]byte{0xc0, byte(len(in) + 1), 1}, in...)
	}
	deep := []byte{0x45}
	for range MaxDepth + 2 {
		deep = append(append([]byte{0xd0}, be32(len(deep)+4)...), append(be32(1), deep...)...)
	}
	if _, err := ReadAny(buffer.New(deep)); !errors.Is(err, ErrTooDeep) {
		t.Fatalf("err = %v, want ErrTooDeep", err)
	}
	if _, err := ReadAny(buffer.New(in)); err != nil {
		t.Fatalf("shallow nesting: %v", err)
	}
	chain := bytes.Repeat([]byte{0x00}, 2*MaxDepth)
	chain = append(chain, 0x40)
	if err := Skip(buffer.New(chain)); !errors.Is(err, ErrTooDeep) {
		t.Fatalf("Skip of descriptor chain: %v", err)
	}
}

func be32(n int) []byte { return []byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)} }

// A compound whose 8-bit size overflows is widened to the 32-bit form in
// place (the back-patching path of compound.end).
func TestCompoundWidening(t *testing.T) {
	for _, n := range []int{253, 254, 255, 256, 300} {
		v := []any{strings.Repeat("a", n-2)} // element = a1 len + n-2 bytes = n bytes
		var w buffer.Buffer
		w.Append([]byte{0xee}) // something before, to check offsets
		if err := WriteAny(&w, v); err != nil {
			t.Fatal(err)
		}
		r := buffer.New(w.Written()[1:])
		got, err := ReadAny(r)
		if err != nil || !reflect.DeepEqual(got, v) || r.Len() != 0 {
			t.Fatalf("n=%d: %v %v", n, err, r.Len())
		}
		wantCode := byte(codeList8)
		if n+1 > math.MaxUint8 {
			wantCode = codeList32
		}
		if w.Written()[1] != wantCode {
			t.Fatalf("n=%d: constructor %#x, want %#x", n, w.Written()[1], wantCode)
		}
	}
}
