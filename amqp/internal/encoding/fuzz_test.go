package encoding

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/tolsey/tolsey/amqp/internal/buffer"
)

// captureBodies splits the capture files kept by package frames into frame
// bodies (with a splitter of its own, to keep this package free of frames).
func captureBodies(tb testing.TB) [][]byte {
	files, err := filepath.Glob("../frames/testdata/*.bin")
	if err != nil || len(files) == 0 {
		tb.Fatalf("no captures: %v", err)
	}
	var out [][]byte
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			tb.Fatal(err)
		}
		for len(data) >= 8 {
			if bytes.HasPrefix(data, []byte("AMQP")) {
				data = data[8:]
				continue
			}
			size := int(binary.BigEndian.Uint32(data))
			doff := int(data[4]) * 4
			if size > len(data) || doff > size {
				tb.Fatalf("%s: bad frame", f)
			}
			if body := data[doff:size]; len(body) > 0 {
				out = append(out, body[:min(len(body), 4096)])
			}
			data = data[size:]
		}
	}
	return out
}

func TestCaptureBodiesDecode(t *testing.T) {
	bodies := captureBodies(t)
	if len(bodies) < 50 {
		t.Fatalf("only %d frame bodies", len(bodies))
	}
	for _, b := range bodies {
		r := buffer.New(b)
		v, err := ReadAny(r)
		if err != nil {
			t.Fatalf("%x: %v", b, err)
		}
		if _, ok := v.(Described); !ok {
			t.Fatalf("frame body decoded to %T, want Described", v)
		}
	}
}

// FuzzReadAny decodes values until the input runs out or fails. It must
// never panic; whatever decodes must re-encode, and re-encoding is a fixed
// point (decode∘encode gives the same bytes again); Skip must agree with
// ReadAny on where each value ends.
func FuzzReadAny(f *testing.F) {
	for _, b := range captureBodies(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		r := buffer.New(in)
		for r.Len() > 0 {
			start := r.Offset()
			v, err := ReadAny(r)
			if err != nil {
				return
			}
			s := buffer.New(in[start:])
			if err := Skip(s); err != nil || s.Offset() != r.Offset()-start {
				t.Fatalf("Skip disagrees with ReadAny: %v, %d vs %d", err, s.Offset(), r.Offset()-start)
			}
			var w1 buffer.Buffer
			if err := WriteAny(&w1, v); err != nil {
				continue // e.g. arrays of described values are decode-only
			}
			v2, err := ReadAny(buffer.New(w1.Written()))
			if err != nil {
				t.Fatalf("re-encoded %x does not decode: %v", w1.Written(), err)
			}
			var w2 buffer.Buffer
			if err := WriteAny(&w2, v2); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(w1.Written(), w2.Written()) {
				t.Fatalf("encoding not a fixed point:\n%x\n%x", w1.Written(), w2.Written())
			}
		}
	})
}
