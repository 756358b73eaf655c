package frames

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/tolsey/tolsey/amqp/internal/buffer"
)

// captureSeeds returns every frame body and every transfer payload of the
// captures (the 300 KB payload cut to 4 KiB to keep the fuzzer quick).
func captureSeeds(tb testing.TB) (bodies, payloads [][]byte) {
	files, _ := filepath.Glob("testdata/*.bin")
	for _, f := range files {
		for _, u := range readCapture(tb, filepath.Base(f)) {
			if u.isHeader {
				continue
			}
			bodies = append(bodies, u.body[:min(len(u.body), 4096)])
			if u.payload != nil {
				payloads = append(payloads, u.payload[:min(len(u.payload), 4096)])
			}
		}
	}
	return bodies, payloads
}

// FuzzDecodeBody: never panic; whatever decodes re-encodes, and the
// re-encoding is a fixed point.
func FuzzDecodeBody(f *testing.F) {
	bodies, _ := captureSeeds(f)
	for _, b := range bodies {
		f.Add(b)
	}
	// Transactions (txn.go): no capture has them.
	for _, tc := range performatives {
		switch p := tc.p.(type) {
		case *Disposition:
			if _, ok := p.State.(*TransactionalState); !ok {
				if _, ok := p.State.(*Declared); !ok {
					continue
				}
			}
		case *Attach:
			if p.Target == nil || !p.Target.Coordinator {
				continue
			}
		default:
			continue
		}
		var w buffer.Buffer
		if err := AppendFrame(&w, tc.p.FrameType(), 0, tc.p, nil); err != nil {
			f.Fatal(err)
		}
		f.Add(w.Written()[HeaderSize:])
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		p, payload, err := DecodeBody(body)
		if err != nil || p == nil {
			return
		}
		if payload != nil {
			var m Message
			_ = m.Decode(payload)
		}
		var w1 buffer.Buffer
		if err := AppendFrame(&w1, p.FrameType(), 0, p, payload); err != nil {
			return // e.g. an array of described values, which we only decode
		}
		p2, payload2, err := DecodeBody(w1.Written()[HeaderSize:])
		if err != nil {
			t.Fatalf("re-encoding %x does not decode: %v", w1.Written(), err)
		}
		var w2 buffer.Buffer
		if err := AppendFrame(&w2, p2.FrameType(), 0, p2, payload2); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(w1.Written(), w2.Written()) {
			t.Fatalf("not a fixed point:\n%x\n%x", w1.Written(), w2.Written())
		}
	})
}

// FuzzMessage: never panic; decodable messages re-encode to a fixed point.
func FuzzMessage(f *testing.F) {
	_, payloads := captureSeeds(f)
	for _, p := range payloads {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		var m Message
		if err := m.Decode(payload); err != nil {
			return
		}
		var w1 buffer.Buffer
		if err := m.MarshalAMQP(&w1); err != nil {
			return
		}
		var m2 Message
		if err := m2.Decode(w1.Written()); err != nil {
			t.Fatalf("re-encoding %x does not decode: %v", w1.Written(), err)
		}
		var w2 buffer.Buffer
		if err := m2.MarshalAMQP(&w2); err != nil || !bytes.Equal(w1.Written(), w2.Written()) {
			t.Fatalf("not a fixed point (%v):\n%x\n%x", err, w1.Written(), w2.Written())
		}
	})
}

// FuzzReader: splitting an arbitrary stream never panics and never grows
// the read buffer beyond what MaxFrameSize allows.
func FuzzReader(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.bin")
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data[:min(len(data), 8192)])
	}
	const maxFrame = 4096
	f.Fuzz(func(t *testing.T, stream []byte) {
		r := NewReader(bytes.NewReader(stream), maxFrame)
		for {
			fr, err := r.Next()
			if cap(r.buf) > 2*maxFrame {
				t.Fatalf("read buffer grew to %d", cap(r.buf))
			}
			if err != nil {
				return
			}
			if !fr.IsProtocolHeader {
				_, _, _ = DecodeBody(fr.Body)
			}
		}
	})
}

// FuzzAppendBareWithTo: a message that decodes still decodes with `to`
// filled in, which then names the topic unless the sender set one, and
// every other properties field is what it was.
func FuzzAppendBareWithTo(f *testing.F) {
	_, payloads := captureSeeds(f)
	for _, p := range payloads {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		var m Message
		if err := m.Decode(payload); err != nil {
			return
		}
		h, err := SplitHop(payload)
		if err != nil {
			t.Fatalf("decodes but does not split: %v", err)
		}
		var w buffer.Buffer
		if err := AppendBareWithTo(&w, h.Bare, "a/b", nil); err != nil {
			t.Fatalf("%x decodes but its to cannot be set: %v", h.Bare, err)
		}
		var got Message
		if err := got.Decode(w.Written()); err != nil {
			t.Fatalf("%x became %x, which does not decode: %v", h.Bare, w.Written(), err)
		}
		var want MessageProperties
		if m.Properties != nil {
			want = *m.Properties
		}
		if want.To == "" {
			want.To = "a/b"
		}
		if got.Properties == nil || !reflect.DeepEqual(*got.Properties, want) {
			t.Fatalf("properties %+v, want %+v", got.Properties, want)
		}
	})
}
