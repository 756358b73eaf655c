package frames

import (
	"bytes"
	"encoding/hex"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/tolsey/tolsey/amqp/internal/buffer"
	"github.com/tolsey/tolsey/amqp/internal/encoding"
)

func u16(v uint16) *uint16 { return &v }
func u32(v uint32) *uint32 { return &v }
func u8(v uint8) *uint8    { return &v }
func ssm(m SenderSettleMode) *SenderSettleMode {
	return &m
}
func rsm(m ReceiverSettleMode) *ReceiverSettleMode { return &m }

var testError = &Error{
	Condition:   ErrCondNotFound,
	Description: "no such node",
	Info:        encoding.Fields{{Key: "address", Value: "a/b"}},
}

// performatives: every performative and SASL body, minimal and full.
var performatives = []struct {
	name string
	p    Performative
}{
	{"open minimal", &Open{ContainerID: "c"}},
	{"open full", &Open{
		ContainerID: "gw", Hostname: "h", MaxFrameSize: 65536, ChannelMax: u16(0), IdleTimeOut: 30000,
		OutgoingLocales: []encoding.Symbol{"en-US"}, IncomingLocales: []encoding.Symbol{"en-US", "de"},
		OfferedCapabilities: []encoding.Symbol{"ANONYMOUS-RELAY"}, DesiredCapabilities: []encoding.Symbol{},
		Properties: encoding.Fields{{Key: "product", Value: "gateway"}, {Key: "n", Value: int64(1)}},
	}},
	{"begin minimal", &Begin{NextOutgoingID: 1, IncomingWindow: 2, OutgoingWindow: 3}},
	{"begin full", &Begin{
		RemoteChannel: u16(0), NextOutgoingID: 1 << 31, IncomingWindow: 0, OutgoingWindow: 0xffffffff,
		HandleMax: u32(0), OfferedCapabilities: []encoding.Symbol{"a"}, DesiredCapabilities: []encoding.Symbol{"b"},
		Properties: encoding.Fields{},
	}},
	{"attach minimal", &Attach{Name: "l", Handle: 0, Role: RoleSender}},
	{"attach full", &Attach{
		Name: "sub1", Handle: 9, Role: RoleReceiver,
		SndSettleMode: ssm(SenderSettleModeUnsettled), RcvSettleMode: rsm(ReceiverSettleModeSecond),
		Source: &Source{
			Address: "sensors/#", Durable: DurabilityUnsettledState, ExpiryPolicy: ExpiryNever, Timeout: 60,
			Dynamic: true, DynamicNodeProperties: encoding.Fields{{Key: "lifetime-policy", Value: encoding.Described{Descriptor: uint64(0x2b), Value: []any{}}}},
			DistributionMode: "copy",
			Filter: encoding.Fields{{Key: "apache.org:selector-filter:string", Value: encoding.Described{
				Descriptor: encoding.Symbol("apache.org:selector-filter:string"), Value: "unit = 'C'"}}},
			DefaultOutcome: &Modified{DeliveryFailed: true},
			Outcomes:       []encoding.Symbol{"amqp:accepted:list", "amqp:rejected:list"},
			Capabilities:   []encoding.Symbol{"topic"},
		},
		Target: &Target{Address: "t", Durable: DurabilityConfiguration, ExpiryPolicy: ExpiryLinkDetach, Timeout: 1,
			Dynamic: true, DynamicNodeProperties: encoding.Fields{}, Capabilities: []encoding.Symbol{"queue"}},
		Unsettled:            encoding.Map{{Key: []byte("tag1"), Value: encoding.Described{Descriptor: uint64(0x24), Value: []any{}}}},
		IncompleteUnsettled:  true,
		InitialDeliveryCount: u32(0),
		MaxMessageSize:       1 << 20,
		OfferedCapabilities:  []encoding.Symbol{"x"},
		DesiredCapabilities:  []encoding.Symbol{"y"},
		Properties:           encoding.Fields{{Key: "k", Value: nil}},
	}},
	{"flow session", &Flow{IncomingWindow: 100, NextOutgoingID: 1, OutgoingWindow: 100}},
	{"flow full", &Flow{
		NextIncomingID: u32(5), IncomingWindow: 2048, NextOutgoingID: 0, OutgoingWindow: 0xffffffff,
		Handle: u32(1), DeliveryCount: u32(0), LinkCredit: u32(1000), Available: u32(3), Drain: true, Echo: true,
		Properties: encoding.Fields{{Key: "p", Value: true}},
	}},
	{"transfer continuation", &Transfer{Handle: 1, More: true}},
	{"transfer full", &Transfer{
		Handle: 1, DeliveryID: u32(0), DeliveryTag: []byte{0, 1}, MessageFormat: u32(0), Settled: true, More: true,
		RcvSettleMode: rsm(ReceiverSettleModeFirst), State: &Received{SectionNumber: 1, SectionOffset: 1 << 33},
		Resume: true, Aborted: true, Batchable: true,
	}},
	{"disposition accepted", &Disposition{Role: RoleReceiver, First: 0, Settled: true, State: &Accepted{}}},
	{"disposition rejected", &Disposition{Role: RoleReceiver, First: 1, Last: u32(4), State: &Rejected{Error: testError}, Batchable: true}},
	{"disposition rejected no error", &Disposition{Role: RoleSender, First: 1, State: &Rejected{}}},
	{"disposition released", &Disposition{Role: RoleReceiver, First: 2, State: &Released{}}},
	{"disposition modified", &Disposition{Role: RoleReceiver, First: 3, State: &Modified{
		DeliveryFailed: true, UndeliverableHere: true, MessageAnnotations: encoding.Fields{{Key: "x-opt-reason", Value: "full"}}}}},
	{"disposition other state", &Disposition{Role: RoleReceiver, First: 3, State: &OtherState{encoding.Described{
		Descriptor: uint64(0x1234), Value: []any{[]byte("txn"), encoding.Described{Descriptor: uint64(0x24), Value: []any{}}}}}}},
	{"disposition declared", &Disposition{Role: RoleReceiver, First: 4, Settled: true, State: &Declared{TxnID: []byte{0, 1}}}},
	{"disposition transactional", &Disposition{Role: RoleReceiver, First: 5, Settled: true, State: &TransactionalState{TxnID: []byte("t"), Outcome: &Accepted{}}}},
	{"disposition transactional no outcome", &Disposition{Role: RoleSender, First: 5, State: &TransactionalState{TxnID: []byte("t")}}},
	{"attach coordinator", &Attach{Name: "txn", Handle: 1, Role: RoleSender, Source: &Source{},
		Target: &Target{Coordinator: true, Capabilities: []encoding.Symbol{TxnCapLocal}}, InitialDeliveryCount: u32(0)}},
	{"detach", &Detach{Handle: 3}},
	{"detach closed error", &Detach{Handle: 3, Closed: true, Error: testError}},
	{"end", &End{}},
	{"end error", &End{Error: &Error{Condition: ErrCondWindowViolation}}},
	{"close", &Close{}},
	{"close error", &Close{Error: testError}},
	{"sasl-mechanisms", &SASLMechanisms{SASLServerMechanisms: []encoding.Symbol{"ANONYMOUS", "PLAIN"}}},
	{"sasl-init", &SASLInit{Mechanism: "PLAIN", InitialResponse: []byte("\x00user\x00pass"), Hostname: "gw.example"}},
	{"sasl-init minimal", &SASLInit{Mechanism: "ANONYMOUS"}},
	{"sasl-challenge", &SASLChallenge{Challenge: []byte("c")}},
	{"sasl-response", &SASLResponse{Response: []byte{}}},
	{"sasl-outcome", &SASLOutcome{Code: SASLCodeAuth, AdditionalData: []byte("no")}},
}

func TestPerformativeRoundTrip(t *testing.T) {
	for _, tc := range performatives {
		t.Run(tc.name, func(t *testing.T) {
			var w buffer.Buffer
			payload := []byte(nil)
			if _, ok := tc.p.(*Transfer); ok {
				payload = []byte("payload")
			}
			if err := AppendFrame(&w, tc.p.FrameType(), 7, tc.p, payload); err != nil {
				t.Fatal(err)
			}
			h, err := ParseHeader(w.Written())
			if err != nil || h.Size != uint32(w.Size()) || h.Channel != 7 || h.Type != tc.p.FrameType() {
				t.Fatalf("header %+v: %v", h, err)
			}
			p, gotPayload, err := DecodeBody(w.Written()[HeaderSize:])
			if err != nil {
				t.Fatalf("DecodeBody(%x): %v", w.Written()[HeaderSize:], err)
			}
			if !reflect.DeepEqual(p, tc.p) {
				t.Fatalf("round trip\n got  %+v\n want %+v", p, tc.p)
			}
			if !bytes.Equal(gotPayload, payload) {
				t.Fatalf("payload %q, want %q", gotPayload, payload)
			}
			// Encoding is canonical: re-encoding the decoded value gives
			// the same bytes.
			var w2 buffer.Buffer
			if err := AppendFrame(&w2, p.FrameType(), 7, p, gotPayload); err != nil || !bytes.Equal(w.Written(), w2.Written()) {
				t.Fatalf("re-encoding differs: %v", err)
			}
		})
	}
}

// Exact bytes for a few frames, so the trimming and default rules are
// pinned down (and match what Proton writes for the same values).
func TestPerformativeBytes(t *testing.T) {
	for _, tc := range []struct {
		p   Performative
		hex string
	}{
		{&Disposition{Role: RoleReceiver, First: 0, Settled: true, State: &Accepted{}}, "005315 c0 09 05 41 43 40 41 00532445"},
		{&Transfer{Handle: 1, DeliveryID: u32(0), DeliveryTag: []byte("1"), MessageFormat: u32(0)}, "005314 c0 08 04 5201 43 a00131 43"},
		{&Close{}, "005318 45"},
		// max-frame-size absent must go out as null, not as 0.
		{&Open{ContainerID: "", ChannelMax: u16(32767)}, "005310 c0 08 04 a100 40 40 607fff"},
		{&Flow{IncomingWindow: 1, NextOutgoingID: 0, OutgoingWindow: 1, Drain: true}, "005313 c0 0c 09 40 5201 43 5201 40 40 40 40 41"},
		{&SASLOutcome{Code: SASLCodeOK}, "005344 c0 03 01 5000"},
	} {
		var w buffer.Buffer
		if err := tc.p.MarshalAMQP(&w); err != nil {
			t.Fatal(err)
		}
		want, _ := hex.DecodeString(strings.ReplaceAll(tc.hex, " ", ""))
		if !bytes.Equal(w.Written(), want) {
			t.Errorf("%T:\n got  %x\n want %x", tc.p, w.Written(), want)
		}
	}
}

func TestDecodeBodyErrors(t *testing.T) {
	for _, tc := range []struct{ name, hex string }{
		{"not described", "45"},
		{"unknown performative", "005399 45"},
		{"mandatory field missing (attach name)", "005312 45"},
		{"mandatory field null (transfer handle)", "005314 c0 02 01 40"},
		{"wrong field type (open container-id)", "005310 c0 03 01 5201"},
		{"bytes after a non-transfer body", "005318 45 00"},
		{"invalid snd-settle-mode", "005312 c0 08 04 a10161 43 42 5003"},
		{"list count beyond size", "005318 c0 01 05"},
		{"section as performative", "005370 45"},
	} {
		b, _ := hex.DecodeString(strings.ReplaceAll(tc.hex, " ", ""))
		if p, _, err := DecodeBody(b); err == nil {
			t.Errorf("%s: decoded %+v, want error", tc.name, p)
		}
	}
	if p, payload, err := DecodeBody(nil); p != nil || payload != nil || err != nil {
		t.Fatalf("empty body (heartbeat): %v %v %v", p, payload, err)
	}
	// Symbolic descriptors are accepted.
	b := append([]byte("\x00\xa3\x0famqp:close:list"), 0x45)
	if p, _, err := DecodeBody(b); err != nil || !reflect.DeepEqual(p, &Close{}) {
		t.Fatalf("symbolic descriptor: %+v %v", p, err)
	}
}

func TestProtocolHeaders(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want ProtocolHeader
		ok   bool
	}{
		{"AMQP\x00\x01\x00\x00", HeaderAMQP, true},
		{"AMQP\x03\x01\x00\x00", HeaderSASL, true},
		{"AMQP\x02\x01\x00\x00", ProtocolHeader{ProtocolID: ProtocolTLS, Major: 1}, false},
		{"AMQP\x00\x00\x09\x01", ProtocolHeader{Major: 0, Minor: 9, Revision: 1}, false},
		{"GET / HT", ProtocolHeader{}, false},
		{"\x10\x00\x00\x04MQTT", ProtocolHeader{}, false},
	} {
		h, err := ParseProtocolHeader([]byte(tc.in))
		var phe *ProtocolHeaderError
		if tc.ok != (err == nil) || (!tc.ok && !errors.As(err, &phe)) || h != tc.want {
			t.Errorf("%q: %+v, %v", tc.in, h, err)
		}
		if phe != nil && string(phe.Got[:]) != tc.in {
			t.Errorf("%q: error kept %q", tc.in, phe.Got)
		}
	}
	if b := HeaderSASL.Bytes(); string(b[:]) != "AMQP\x03\x01\x00\x00" {
		t.Fatalf("HeaderSASL.Bytes() = %q", b)
	}
	r := NewReader(strings.NewReader("HTTP/1.1"), 512)
	if f, err := r.Next(); err == nil {
		t.Fatalf("wrong header accepted as %+v", f)
	}
}

func TestFrameHeaderValidation(t *testing.T) {
	for _, tc := range []struct{ name, hex string }{
		{"size below header", "00000007 02 00 0000"},
		{"doff below 2", "00000008 01 00 0000"},
		{"doff past size", "00000008 03 00 0000"},
		{"unknown type", "00000008 02 07 0000"},
	} {
		b, _ := hex.DecodeString(strings.ReplaceAll(tc.hex, " ", ""))
		if _, err := ParseHeader(b); err == nil {
			t.Errorf("%s: accepted", tc.name)
		}
	}
}

// The reader must refuse an oversized frame from its header alone: it never
// reads (or makes room for) the body a peer merely announces.
func TestReaderMaxFrameSizeBeforeAllocation(t *testing.T) {
	// A frame header claiming 2 GiB, followed by nothing.
	in := append([]byte("AMQP\x00\x01\x00\x00"), 0x7f, 0xff, 0xff, 0xff, 2, 0, 0, 0)
	r := NewReader(bytes.NewReader(in), 64*1024)
	if f, err := r.Next(); err != nil || !f.IsProtocolHeader {
		t.Fatalf("header: %+v %v", f, err)
	}
	_, err := r.Next()
	if !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("err = %v, want ErrFrameTooLarge", err)
	}
	if cap(r.buf) > 64*1024 {
		t.Fatalf("reader grew its buffer to %d", cap(r.buf))
	}
	// After the SASL→AMQP switch, "AMQP" where a frame is expected is a
	// 1 GiB frame size, not a header.
	r = NewReader(bytes.NewReader([]byte("AMQP\x00\x01\x00\x00\x00\x00\x00\x08\x02\x00\x00\x00AMQP\x00\x01\x00\x00")), 512)
	r.Next()
	if f, err := r.Next(); err != nil || f.IsProtocolHeader || len(f.Body) != 0 {
		t.Fatalf("heartbeat: %+v %v", f, err)
	}
	if _, err := r.Next(); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("header in AMQP frame stream: %v", err)
	}
}

// Pipelined bytes arriving one at a time, and an extended header (doff > 2)
// that must be skipped.
func TestReaderPipelinedAndExtendedHeader(t *testing.T) {
	var s bytes.Buffer
	w := NewWriter(&s, 1<<16)
	w.WriteProtocolHeader(HeaderSASL)
	w.WriteFrame(0, &SASLInit{Mechanism: "ANONYMOUS"}, nil)
	w.WriteProtocolHeader(HeaderAMQP)
	// An open with a 4-byte extended header (doff = 3).
	var b buffer.Buffer
	AppendFrame(&b, TypeAMQP, 0, &Open{ContainerID: "x"}, nil)
	fr := b.Written()
	ext := append(append(append([]byte{}, fr[:8]...), 0xde, 0xad, 0xbe, 0xef), fr[8:]...)
	ext[3] += 4
	ext[4] = 3
	s.Write(ext)
	w.WriteFrame(5, nil, nil) // heartbeat

	r := NewReader(iotest.OneByteReader(bytes.NewReader(s.Bytes())), 512)
	var got []string
	for {
		f, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if f.IsProtocolHeader {
			got = append(got, "header")
			continue
		}
		p, _, err := DecodeBody(f.Body)
		if err != nil {
			t.Fatal(err)
		}
		switch p := p.(type) {
		case nil:
			got = append(got, "heartbeat")
		case *SASLInit:
			got = append(got, "sasl-init:"+string(p.Mechanism))
		case *Open:
			got = append(got, "open:"+p.ContainerID)
		}
	}
	want := []string{"header", "sasl-init:ANONYMOUS", "header", "open:x", "heartbeat"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

func TestMessageRoundTrip(t *testing.T) {
	for _, m := range []*Message{
		typicalMessage(),
		{
			Header:              &MessageHeader{Durable: true, Priority: u8(0), TTL: u32(0), FirstAcquirer: true, DeliveryCount: 2},
			DeliveryAnnotations: encoding.Annotations{{Key: uint64(7), Value: "x"}},
			MessageAnnotations:  encoding.Annotations{{Key: encoding.Symbol("x-opt-retain"), Value: true}},
			Properties: &MessageProperties{
				MessageID: encoding.UUID{1}, UserID: []byte("u"), To: "a", Subject: "s", ReplyTo: "r",
				CorrelationID: uint64(9), ContentType: "application/json", ContentEncoding: "gzip",
				AbsoluteExpiryTime: 1, CreationTime: 1700000000000, GroupID: "g", GroupSequence: u32(0), ReplyToGroupID: "rg",
			},
			Sequence: [][]any{{"a", int32(1)}, {}},
			Footer:   encoding.Annotations{{Key: encoding.Symbol("hash"), Value: []byte{1}}},
		},
		{Value: encoding.Map{{Key: "k", Value: []any{1.5}}}},
		{Data: [][]byte{{}, []byte("two")}},
		{},
	} {
		var w buffer.Buffer
		if err := m.MarshalAMQP(&w); err != nil {
			t.Fatal(err)
		}
		var got Message
		if err := got.Decode(w.Written()); err != nil {
			t.Fatalf("decode %x: %v", w.Written(), err)
		}
		if !reflect.DeepEqual(&got, m) {
			t.Fatalf("round trip\n got  %+v\n want %+v", got, *m)
		}
	}
	var w buffer.Buffer
	if err := (&Message{Value: "v", Data: [][]byte{nil}}).MarshalAMQP(&w); err == nil {
		t.Fatal("two body kinds accepted")
	}
}

func TestMessageSectionOrder(t *testing.T) {
	for _, tc := range []struct{ name, hex string }{
		{"properties before header", "005373 45 005370 45"},
		{"two headers", "005370 45 005370 45"},
		{"data then value", "005375 a000 005377 40"},
		{"two values", "005377 40 005377 40"},
		{"section after footer", "005378 c1 01 00 005375 a000"},
		{"not a section", "005314 45"},
		{"truncated data", "005375 a005 6162"},
	} {
		b, _ := hex.DecodeString(strings.ReplaceAll(tc.hex, " ", ""))
		var m Message
		if err := m.Decode(b); err == nil {
			t.Errorf("%s: accepted", tc.name)
		}
	}
	b, _ := hex.DecodeString("005375a00161005375a00162")
	var m Message
	if err := m.Decode(b); err != nil || len(m.Data) != 2 {
		t.Fatalf("repeated data sections: %v %v", m.Data, err)
	}
}

func typicalMessage() *Message {
	return &Message{
		Properties: &MessageProperties{
			MessageID:   "id-1",
			To:          "sensors/room1/temp",
			ContentType: "text/plain",
		},
		ApplicationProperties: encoding.ApplicationProperties{
			{Key: "unit", Value: "C"},
			{Key: "sensor", Value: int64(42)},
		},
		Data: [][]byte{bytes.Repeat([]byte("x"), 64)},
	}
}

// TestOwnState: a state decoded from a frame aliases it; OwnState's copy
// survives the frame's bytes being overwritten, nested (a transactional
// state's outcome) included.
func TestOwnState(t *testing.T) {
	states := []DeliveryState{
		&TransactionalState{TxnID: []byte("txn-1"), Outcome: &Rejected{Error: &Error{Condition: "app:x", Info: encoding.Fields{{Key: "b", Value: []byte("info")}}}}},
		&Modified{DeliveryFailed: true, MessageAnnotations: encoding.Fields{{Key: "x-opt-b", Value: []byte("ann")}}},
	}
	for _, want := range states {
		var w buffer.Buffer
		if err := want.MarshalAMQP(&w); err != nil {
			t.Fatal(err)
		}
		frame := w.Written()
		st, err := readDeliveryState(buffer.New(frame))
		if err != nil {
			t.Fatal(err)
		}
		own, err := OwnState(st)
		if err != nil {
			t.Fatal(err)
		}
		for i := range frame {
			frame[i] = 0xff // the reader reads on into the buffer
		}
		if !reflect.DeepEqual(own, want) {
			t.Fatalf("owned %#v, want %#v", own, want)
		}
	}
	acc := &Accepted{}
	if own, err := OwnState(acc); err != nil || own != acc {
		t.Fatalf("accepted owned as %#v, %v: want it as it is (it holds no bytes)", own, err)
	}
}
