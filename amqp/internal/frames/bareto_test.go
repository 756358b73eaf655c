package frames

import (
	"bytes"
	"testing"

	"github.com/tolsey/tolsey/amqp/internal/buffer"
	"github.com/tolsey/tolsey/amqp/internal/encoding"
)

// TestAppendBareWithTo: `to` is filled in where the sender left it out (no
// properties section, a null, an empty string, a list too short to hold
// it) and every other field and section stays byte for byte; a `to` the
// sender set, and any bare message when there is no topic to give, go out
// unchanged.
func TestAppendBareWithTo(t *testing.T) {
	body := []byte{0x00, 0x53, 0x77, 0xa1, 0x01, 'x'} // amqp-value "x"
	props := func(fields ...[]byte) []byte {
		var w buffer.Buffer
		encoding.WriteDescriptor(&w, codeProperties)
		if err := encoding.WriteRawList(&w, fields); err != nil {
			t.Fatal(err)
		}
		return w.Written()
	}
	str := func(s string) []byte {
		var w buffer.Buffer
		if err := encoding.WriteString(&w, s); err != nil {
			t.Fatal(err)
		}
		return w.Written()
	}
	null := []byte{0x40}
	id := []byte{0xa1, 0x02, 'i', 'd'}
	user := []byte{0xb0, 0, 0, 0, 1, 'u'} // vbin32: a long form, kept as it is
	subj := []byte{0xb1, 0, 0, 0, 1, 's'} // str32
	cat := func(ps ...[]byte) []byte { return bytes.Join(ps, nil) }
	long := string(bytes.Repeat([]byte("t"), 300))
	for _, tc := range []struct {
		name      string
		bare, out []byte
		to        string
	}{
		{"no properties", body, cat(props(null, null, str("a/b")), body), "a/b"},
		{"no sections", nil, props(null, null, str("a/b")), "a/b"},
		{"list0", cat([]byte{0x00, 0x53, 0x73, 0x45}, body), cat(props(null, null, str("a/b")), body), "a/b"},
		{"null to", cat(props(id, user, null, subj), body), cat(props(id, user, str("a/b"), subj), body), "a/b"},
		{"empty to", cat(props(id, user, str("")), body), cat(props(id, user, str("a/b")), body), "a/b"},
		{"short list", cat(props(id), body), cat(props(id, null, str("a/b")), body), "a/b"},
		{"long topic", cat(props(id, null, null, subj), body), cat(props(id, null, str(long), subj), body), long},
		{"to set", cat(props(id, null, str("x/y")), body), cat(props(id, null, str("x/y")), body), "a/b"},
		{"symbol descriptor", cat([]byte{0x00, 0xa3, 20}, []byte("amqp:properties:list"), []byte{0x45}, body),
			cat(props(null, null, str("a/b")), body), "a/b"},
		{"no topic", cat(props(id), body), cat(props(id), body), ""},
	} {
		var w buffer.Buffer
		w.AppendByte(0xee) // what the caller wrote before stays
		if err := AppendBareWithTo(&w, tc.bare, tc.to, nil); err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if got := w.Written(); !bytes.Equal(got, cat([]byte{0xee}, tc.out)) {
			t.Errorf("%s:\n got %x\nwant ee%x", tc.name, got, tc.out)
		}
		var m Message
		if err := m.Decode(w.Written()[1:]); err != nil {
			t.Errorf("%s: does not decode: %v", tc.name, err)
		} else if tc.to != "" && (m.Properties == nil || m.Properties.To != tc.to && tc.name != "to set") {
			t.Errorf("%s: decoded properties %+v", tc.name, m.Properties)
		}
	}
	// A properties list that does not decode is an error, not a guess.
	if err := AppendBareWithTo(new(buffer.Buffer), []byte{0x00, 0x53, 0x73, 0xc0, 0x05, 0x09}, "a/b", nil); err == nil {
		t.Error("a truncated properties list was accepted")
	}
}

// TestAppendBareWithToAllocs: passing on a bare message whose `to` is set
// (every Qpid JMS message) allocates nothing once scratch has grown.
func TestAppendBareWithToAllocs(t *testing.T) {
	var src buffer.Buffer
	m := Message{Properties: &MessageProperties{MessageID: "id", To: "a/b", Subject: "s"}, Value: "x"}
	if err := m.MarshalAMQP(&src); err != nil {
		t.Fatal(err)
	}
	bare := src.Written()
	var w buffer.Buffer
	var scratch BareScratch
	n := testing.AllocsPerRun(100, func() {
		w.Reset()
		if err := AppendBareWithTo(&w, bare, "a/b", &scratch); err != nil {
			t.Fatal(err)
		}
	})
	if n != 0 {
		t.Errorf("%v allocations per message", n)
	}
	if !bytes.Equal(w.Written(), bare) {
		t.Errorf("changed: %x", w.Written())
	}
}

// TestSplitHopNullMessageAnnotations: a message-annotations section whose
// value is null (no annotations: valid, and Message.Decode takes it)
// splits, with the bare message after it. SplitHop read the null, then
// tried to skip a value past it (found by FuzzAppendBareWithTo), so such a
// message from an AMQP sender could not be passed on to AMQP receivers.
func TestSplitHopNullMessageAnnotations(t *testing.T) {
	body := []byte{0x00, 0x53, 0x77, 0xa1, 0x02, 'h', 'i'} // amqp-value "hi"
	msg := append([]byte{0x00, 0x53, 0x72, 0x40}, body...)
	var m Message
	if err := m.Decode(msg); err != nil {
		t.Fatalf("decode: %v", err)
	}
	h, err := SplitHop(msg)
	if err != nil {
		t.Fatalf("split: %v", err)
	}
	if len(h.MessageAnnotations) != 0 || !bytes.Equal(h.Bare, body) {
		t.Fatalf("split: annotations %v, bare %x; want none and %x", h.MessageAnnotations, h.Bare, body)
	}
}

// TestPassOnAllocs: passing a stored message on (SplitHopWith, then
// AppendBareWithTo naming the queue in a `to` the sender left out, the
// path of every queue delivery over AMQP) allocates nothing once its
// scratch is warm. The reader, the header and the encoded `to` each
// allocated per message before they were kept in the scratch.
func TestPassOnAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts differ under -race")
	}
	var src buffer.Buffer
	m := Message{Header: &MessageHeader{Durable: true}, Properties: &MessageProperties{MessageID: "id"}, Data: [][]byte{[]byte("payload")}}
	if err := m.MarshalAMQP(&src); err != nil {
		t.Fatal(err)
	}
	enc := src.Written()
	var w buffer.Buffer
	var hs HopScratch
	var bs BareScratch
	pass := func() {
		w.Reset()
		h, err := SplitHopWith(enc, &hs)
		if err != nil || h.Header == nil || !h.Header.Durable {
			t.Fatalf("split: %v %+v", err, h.Header)
		}
		if err := AppendBareWithTo(&w, h.Bare, "queue://load", &bs); err != nil {
			t.Fatal(err)
		}
	}
	pass()
	var got Message
	if err := got.Decode(w.Written()); err != nil || got.Properties == nil || got.Properties.To != "queue://load" {
		t.Fatalf("decoded %v: %+v", err, got.Properties)
	}
	if n := testing.AllocsPerRun(100, pass); n != 0 {
		t.Errorf("%v allocations per message", n)
	}
}
