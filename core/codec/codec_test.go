package codec

import (
	"bytes"
	"errors"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/tolsey/tolsey/core"
)

func full() *core.Message {
	return &core.Message{
		Topic:           "sensors/room1/temp",
		Payload:         []byte("21.5"),
		QoS:             1,
		Retain:          true,
		ContentType:     "text/plain",
		CorrelationData: []byte{0, 1, 2},
		ResponseTopic:   "replies/x",
		UserProperties:  []core.UserProperty{{Key: "a", Value: "1"}, {Key: "a", Value: "2"}, {}},
		PayloadFormat:   1,
		Created:         time.Unix(1700000000, 123456789),
		Expiry:          time.Unix(1700003600, 987654321),
		Origin:          core.Origin{Protocol: core.ProtocolMQTT, Node: "n1", Client: "c1"},
	}
}

// equal compares messages field by field; times by instant, not location.
func equal(t *testing.T, want, got *core.Message) {
	t.Helper()
	if !want.Created.Equal(got.Created) || !want.Expiry.Equal(got.Expiry) {
		t.Fatalf("times: want %v/%v got %v/%v", want.Created, want.Expiry, got.Created, got.Expiry)
	}
	w, g := *want, *got
	w.Created, w.Expiry, g.Created, g.Expiry = time.Time{}, time.Time{}, time.Time{}, time.Time{}
	if len(w.Payload) == 0 && len(g.Payload) == 0 {
		w.Payload, g.Payload = nil, nil
	}
	if !reflect.DeepEqual(w, g) {
		t.Fatalf("round trip:\nwant %#v\ngot  %#v", w, g)
	}
}

func TestRoundTrip(t *testing.T) {
	cases := map[string]*core.Message{
		"full":    full(),
		"minimal": {Topic: "a", Payload: []byte{1}},
		"empty correlation and props": {Topic: "a", Payload: []byte{1},
			CorrelationData: []byte{}, UserProperties: []core.UserProperty{}},
		"far future":         {Topic: "$SYS/x", Payload: []byte("p"), Expiry: time.Date(9999, 1, 1, 0, 0, 0, 5, time.UTC)},
		"before epoch":       {Topic: "a/b", Payload: []byte("p"), Created: time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC)},
		"string correlation": {Topic: "a", Payload: []byte{1}, CorrelationData: []byte("req-1"), CorrelationKind: core.IDString},
		"ulong correlation":  {Topic: "a", Payload: []byte{1}, CorrelationData: []byte("42"), CorrelationKind: core.IDULong},
		"uuid correlation": {Topic: "a", Payload: []byte{1}, CorrelationKind: core.IDUUID,
			CorrelationData: []byte("0f8fad5b-d9cb-469f-a165-70867728950e")},
		"native": {Topic: "a", Payload: []byte("{}"), Native: core.Native{Protocol: core.ProtocolAMQP, Bytes: []byte{0, 0x53, 0x77, 0xc1, 1, 0}}},
		// The payload is the native bytes' tail: EncodeCompact writes it once.
		"native tail": {Topic: "a", Payload: []byte("{}"), Native: core.Native{Protocol: core.ProtocolAMQP, Bytes: []byte{0, 0x53, 0x75, 0xa0, 2, '{', '}'}}},
	}
	for name, m := range cases {
		for _, enc := range []struct {
			name   string
			encode func(*core.Message) []byte
		}{{"v1", Encode}, {"compact", EncodeCompact}} {
			t.Run(name+"/"+enc.name, func(t *testing.T) { roundTrip(t, m, enc.encode(m)) })
		}
	}
}

// TestCompactWritesPayloadOnce: a payload that ends the native bytes is
// not written a second time, and reads back as it was.
func TestCompactWritesPayloadOnce(t *testing.T) {
	payload := bytes.Repeat([]byte{7}, 1024)
	native := append([]byte{0, 0x53, 0x75, 0xb0, 0, 0, 4, 0}, payload...)
	m := &core.Message{Topic: "$queue/load", Payload: native[8:], Native: core.Native{Protocol: core.ProtocolAMQP, Bytes: native}}
	v1, compact := Encode(m), EncodeCompact(m)
	if compact[0] != versionTail || len(compact) > len(v1)-len(payload)+2 {
		t.Fatalf("compact: version %d, %d bytes; v1 %d bytes", compact[0], len(compact), len(v1))
	}
	if cap(compact) > len(compact)+len(payload)/2 { // the hint, not twice the payload
		t.Fatalf("compact: %d bytes in a buffer of %d", len(compact), cap(compact))
	}
	got, err := Decode(compact)
	if err != nil {
		t.Fatal(err)
	}
	equal(t, m, got)
	// The payload is counted once, and the same decoded from either
	// version (a slice of the native bytes, or a copy of its own): a
	// queue subtracts a removed record's Size from the bytes it added.
	if got, want := m.Size(), len(m.Topic)+len(native); got != want {
		t.Fatalf("Size %d, want %d (the payload once)", got, want)
	}
	fromV1, err := Decode(v1)
	if err != nil {
		t.Fatal(err)
	}
	if got.Size() != m.Size() || fromV1.Size() != m.Size() {
		t.Fatalf("Size %d; decoded: compact %d, version 1 %d", m.Size(), got.Size(), fromV1.Size())
	}
	if len(v1) > EncodedSizeHint(m) {
		t.Fatalf("version 1: %d bytes, hint %d", len(v1), EncodedSizeHint(m))
	}
	// A payload that is not the tail (a footer follows it) is written whole.
	m.Native.Bytes = append(native[:len(native):len(native)], 0, 0x53, 0x78, 0xc1, 1, 0)
	if b := EncodeCompact(m); b[0] != Version || !bytes.Equal(b, Encode(m)) {
		t.Fatalf("not a tail: version %d", b[0])
	}
	if got, want := m.Size(), len(m.Topic)+len(m.Native.Bytes)+len(payload); got != want {
		t.Fatalf("Size %d, want %d (not a tail: the payload counted)", got, want)
	}
}

func roundTrip(t *testing.T, m *core.Message, b []byte) {
	t.Helper()
	if len(b) > EncodedSizeHint(m) {
		t.Fatalf("encoded %d bytes, hint %d", len(b), EncodedSizeHint(m))
	}
	got, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	equal(t, m, got)
	want := append([]byte(nil), got.Payload...)
	got2, err := DecodeString(string(b))
	if err != nil {
		t.Fatal(err)
	}
	equal(t, m, got2)
	meta, err := ReadMeta(b)
	if err != nil {
		t.Fatal(err)
	}
	if want := MetaOf(m); meta != want {
		t.Fatalf("meta %+v, want %+v", meta, want)
	}
	// The decoded payload must not alias the input.
	if len(got.Payload) > 0 {
		for i := range b {
			b[i] = 0xff
		}
		if !bytes.Equal(got.Payload, want) {
			t.Fatal("decoded payload aliases the input buffer")
		}
	}
}

func TestDecodeRejects(t *testing.T) {
	good := Encode(full())
	if _, err := Decode(nil); !errors.Is(err, ErrTruncated) {
		t.Errorf("nil: %v", err)
	}
	bad := append([]byte{}, good...)
	bad[0] = 3
	if _, err := Decode(bad); !errors.Is(err, ErrVersion) {
		t.Errorf("version: %v", err)
	}
	// Version 2 without native bytes, or with a tail longer than they are.
	bad[0] = versionTail
	if _, err := Decode(bad); !errors.Is(err, ErrCorrupt) {
		t.Errorf("tail without native: %v", err)
	}
	if _, err := ReadMeta(bad); !errors.Is(err, ErrCorrupt) {
		t.Errorf("meta, tail without native: %v", err)
	}
	long := []byte{versionTail, flagNative, 0, 0, 1, 'a', 3, 0, 0, 0, 0, 0, 0, 0, 1, 'x', 2, 'p', 'q'}
	if _, err := Decode(long); !errors.Is(err, ErrCorrupt) {
		t.Errorf("tail longer than native: %v", err)
	}
	if _, err := ReadMeta(long); !errors.Is(err, ErrCorrupt) {
		t.Errorf("meta, tail longer than native: %v", err)
	}
	long[6] = 2 // now it is the tail
	if m, err := Decode(long); err != nil || string(m.Payload) != "pq" {
		t.Errorf("tail: %v %v", m, err)
	}
	compact := EncodeCompact(&core.Message{Topic: "a", Payload: []byte("pq"), Native: core.Native{Protocol: "x", Bytes: []byte("pq")}})
	for i := range len(compact) {
		if _, err := Decode(compact[:i]); err == nil {
			t.Errorf("compact truncated at %d decoded", i)
		}
		if _, err := ReadMeta(compact[:i]); err == nil {
			t.Errorf("compact meta truncated at %d decoded", i)
		}
	}
	if _, err := Decode(append(append([]byte{}, good...), 0)); !errors.Is(err, ErrCorrupt) {
		t.Errorf("trailing: %v", err)
	}
	for i := range len(good) {
		if _, err := Decode(good[:i]); err == nil {
			t.Errorf("truncated at %d decoded", i)
		}
		if _, err := ReadMeta(good[:i]); err == nil {
			t.Errorf("meta truncated at %d decoded", i)
		}
	}
	// A length that claims far more than the value holds: the memory-bomb
	// attack. Must fail before allocating.
	bomb := []byte{Version, 0, 0, 0, 1, 'a', 0xff, 0xff, 0xff, 0xff, 0x0f}
	allocs := testing.AllocsPerRun(10, func() { _, _ = Decode(bomb) })
	if _, err := Decode(bomb); !errors.Is(err, ErrTruncated) {
		t.Errorf("bomb: %v", err)
	}
	if allocs > 2 {
		t.Errorf("bomb allocated %v times", allocs)
	}
	// A property count beyond what the bytes can hold.
	props := []byte{Version, flagProps, 0, 0, 1, 'a', 1, 'p', 0, 0, 0, 0xff, 0xff, 0x03, 0, 0}
	if _, err := Decode(props); !errors.Is(err, ErrCorrupt) {
		t.Errorf("props: %v", err)
	}
}

func TestExpiryNanos(t *testing.T) {
	if ExpiryNanos(time.Time{}) != 0 {
		t.Fatal("zero")
	}
	if ExpiryNanos(time.Unix(0, 0)) == 0 {
		t.Fatal("epoch must not read as never")
	}
	if ExpiryNanos(time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)) != math.MaxInt64 {
		t.Fatal("saturate")
	}
}

func TestMetaAllocs(t *testing.T) {
	b := Encode(full())
	s := string(b)
	if n := testing.AllocsPerRun(100, func() { _, _ = ReadMeta(b); _, _ = ReadMetaString(s) }); n != 0 {
		t.Fatalf("ReadMeta allocates %v", n)
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(Encode(full()))
	f.Add(Encode(&core.Message{Topic: "a", Payload: []byte{1}}))
	f.Add([]byte{Version, 0xff})
	f.Add(EncodeCompact(&core.Message{Topic: "a", Payload: []byte("pq"), Native: core.Native{Protocol: "x", Bytes: []byte("opq")}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Decode(b)
		meta, merr := ReadMeta(b)
		if (err == nil) != (merr == nil) {
			t.Fatalf("Decode err %v, ReadMeta err %v", err, merr)
		}
		if err != nil {
			return
		}
		if want := MetaOf(m); meta != want {
			t.Fatalf("meta %+v want %+v", meta, want)
		}
		// Whatever decodes re-encodes to something that decodes the same.
		for _, encode := range []func(*core.Message) []byte{Encode, EncodeCompact} {
			m2, err := Decode(encode(m))
			if err != nil {
				t.Fatal(err)
			}
			equal(t, m, m2)
		}
	})
}

func FuzzRoundTrip(f *testing.F) {
	f.Add("a/b", []byte("p"), byte(1), true, "ct", []byte{1}, "rt", "k", "v", int64(1700000000), int64(5), "n")
	f.Fuzz(func(t *testing.T, topic string, payload []byte, qos byte, retain bool, ct string, cd []byte,
		rt, k, v string, sec, nsec int64, node string) {
		m := &core.Message{Topic: topic, Payload: payload, QoS: qos, Retain: retain, ContentType: ct,
			CorrelationData: cd, ResponseTopic: rt, UserProperties: []core.UserProperty{{Key: k, Value: v}},
			Created: time.Unix(sec, nsec), Origin: core.Origin{Node: node}}
		if sec%2 == 0 {
			m.Expiry = time.Unix(sec/2, nsec)
		}
		if len(topic) > core.MaxTopicLength {
			return
		}
		got, err := Decode(Encode(m))
		if err != nil {
			t.Fatal(err)
		}
		equal(t, m, got)
	})
}

func BenchmarkEncode(b *testing.B) {
	m := full()
	buf := make([]byte, 0, 256)
	b.ReportAllocs()
	for b.Loop() {
		buf = Append(buf[:0], m)
	}
}

func BenchmarkDecodeString(b *testing.B) {
	s := string(Encode(full()))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeString(s); err != nil {
			b.Fatal(err)
		}
	}
}
