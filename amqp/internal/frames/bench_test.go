package frames

import (
	"bytes"
	"io"
	"testing"

	"github.com/tolsey/tolsey/amqp/internal/buffer"
)

func benchTransfer() *Transfer {
	id, format := uint32(1234), uint32(0)
	return &Transfer{Handle: 1, DeliveryID: &id, DeliveryTag: []byte("tag-0001"), MessageFormat: &format}
}

// Encoding a transfer frame into a reused buffer allocates nothing.
func BenchmarkEncodeTransfer(b *testing.B) {
	t := benchTransfer()
	payload := bytes.Repeat([]byte{'p'}, 64)
	var w buffer.Buffer
	b.ReportAllocs()
	for b.Loop() {
		w.Reset()
		if err := AppendFrame(&w, TypeAMQP, 0, t, payload); err != nil {
			b.Fatal(err)
		}
	}
}

// Writing a transfer through Writer (encode + one Write call).
func BenchmarkWriteTransfer(b *testing.B) {
	t := benchTransfer()
	payload := bytes.Repeat([]byte{'p'}, 64)
	w := NewWriter(io.Discard, 1<<20)
	b.ReportAllocs()
	for b.Loop() {
		if err := w.WriteFrame(0, t, payload); err != nil {
			b.Fatal(err)
		}
	}
}

// Decoding a transfer frame: at most 2 allocations (the Transfer with its
// optional-field storage, and the read cursor).
func BenchmarkDecodeTransfer(b *testing.B) {
	var w buffer.Buffer
	if err := AppendFrame(&w, TypeAMQP, 0, benchTransfer(), bytes.Repeat([]byte{'p'}, 64)); err != nil {
		b.Fatal(err)
	}
	body := w.Written()[HeaderSize:]
	b.ReportAllocs()
	for b.Loop() {
		p, payload, err := DecodeBody(body)
		if err != nil || len(payload) != 64 || p == nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncodeMessage(b *testing.B) {
	m := typicalMessage()
	var w buffer.Buffer
	b.ReportAllocs()
	for b.Loop() {
		w.Reset()
		if err := m.MarshalAMQP(&w); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeMessage(b *testing.B) {
	var w buffer.Buffer
	if err := typicalMessage().MarshalAMQP(&w); err != nil {
		b.Fatal(err)
	}
	payload := w.Written()
	b.ReportAllocs()
	for b.Loop() {
		var m Message
		if err := m.Decode(payload); err != nil {
			b.Fatal(err)
		}
	}
}

func TestTransferAllocationBudget(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("allocation counts differ under -race")
	}
	tr := benchTransfer()
	payload := bytes.Repeat([]byte{'p'}, 64)
	var w buffer.Buffer
	AppendFrame(&w, TypeAMQP, 0, tr, payload)
	if n := testing.AllocsPerRun(100, func() {
		w.Reset()
		AppendFrame(&w, TypeAMQP, 0, tr, payload)
	}); n != 0 {
		t.Errorf("encoding a transfer allocates %v times, want 0", n)
	}
	body := bytes.Clone(w.Written()[HeaderSize:])
	if n := testing.AllocsPerRun(100, func() { DecodeBody(body) }); n > 2 {
		t.Errorf("decoding a transfer allocates %v times, want <= 2", n)
	}
	// A connection's reader keeps its cursor: the Transfer alone.
	var r buffer.Buffer
	if n := testing.AllocsPerRun(100, func() { DecodeBodyWith(body, &r) }); n != 1 {
		t.Errorf("decoding a transfer with a kept cursor allocates %v times, want 1", n)
	}
	var dw buffer.Buffer
	AppendFrame(&dw, TypeAMQP, 0, &Disposition{Role: RoleReceiver, First: 7, Settled: true, State: &Accepted{}}, nil)
	disp := bytes.Clone(dw.Written()[HeaderSize:])
	if n := testing.AllocsPerRun(100, func() { DecodeBodyWith(disp, &r) }); n != 1 {
		t.Errorf("decoding an accepting disposition with a kept cursor allocates %v times, want 1", n)
	}
}
