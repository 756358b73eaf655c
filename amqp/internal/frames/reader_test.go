package frames

import (
	"bytes"
	"io"
	"testing"
)

// countingReader counts the Reads a Reader makes of the stream.
type countingReader struct {
	r     io.Reader
	reads int
}

func (c *countingReader) Read(p []byte) (int, error) {
	c.reads++
	return c.r.Read(p)
}

// TestReaderReadsAheadForBusyPeers: a stream with many frames waiting (a
// sender pipelining 1 KiB messages) is read in large reads once the
// buffer has been found full, not 4 KiB at a time; every frame still comes
// out whole and in order.
func TestReaderReadsAheadForBusyPeers(t *testing.T) {
	var s bytes.Buffer
	w := NewWriter(&s, 1<<16)
	payload := bytes.Repeat([]byte{'x'}, 1100)
	const n = 200
	for i := range n {
		id := uint32(i)
		if err := w.WriteFrame(0, &Transfer{Handle: 0, DeliveryID: &id}, payload); err != nil {
			t.Fatal(err)
		}
	}
	cr := &countingReader{r: bytes.NewReader(s.Bytes())}
	r := NewReader(cr, 1<<16)
	for i := range n {
		f, err := r.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		p, rest, err := DecodeBody(f.Body)
		if err != nil {
			t.Fatal(err)
		}
		if tr, ok := p.(*Transfer); !ok || tr.DeliveryID == nil || *tr.DeliveryID != uint32(i) || !bytes.Equal(rest, payload) {
			t.Fatalf("frame %d: %+v, %d payload bytes", i, p, len(rest))
		}
	}
	if _, err := r.ReadFrame(); err != io.EOF {
		t.Fatalf("after the last frame: %v", err)
	}
	// 200 frames of ~1.1 KiB are ~225 KiB: 55 reads of 4 KiB, 10 or so
	// once the buffer has grown to maxReadAhead.
	if total := s.Len(); cr.reads > total/maxReadAhead+8 {
		t.Fatalf("%d reads for %d bytes", cr.reads, total)
	}
	if len(r.buf) > maxReadAhead {
		t.Fatalf("buffer grew to %d", len(r.buf))
	}
}
