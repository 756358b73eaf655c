package amqp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"

	"github.com/tolsey/tolsey/amqp/internal/buffer"
	"github.com/tolsey/tolsey/amqp/internal/encoding"
	"github.com/tolsey/tolsey/amqp/internal/frames"
	"github.com/tolsey/tolsey/core"
)

// TestTypedBodiesPassUnchanged: an amqp-value of every type go-amqp can
// send, an amqp-sequence and several data sections reach an AMQP receiver
// as they were sent (they were refused with amqp:decode-error before).
func TestTypedBodiesPassUnchanged(t *testing.T) {
	e := startServer(t)
	s := e.session(t)
	uuid := goamqp.UUID{0x0f, 0x8f, 0xad, 0x5b, 0xd9, 0xcb, 0x46, 0x9f, 0xa1, 0x65, 0x70, 0x86, 0x77, 0x28, 0x95, 0x0e}
	ts := time.UnixMilli(1714564800500).UTC()
	cases := []struct {
		name       string
		send, want any // want: what go-amqp decodes; nil means send
	}{
		{"boolean", true, nil},
		{"ubyte", uint8(200), nil},
		{"ushort", uint16(60000), nil},
		{"uint", uint32(4e9), nil},
		{"ulong", uint64(1 << 63), nil},
		{"byte", int8(-100), nil},
		{"short", int16(-30000), nil},
		{"int", int32(-2e9), nil},
		{"long", int64(-1 << 62), nil},
		{"float", float32(1.5), nil},
		{"double", 2.25, nil},
		{"timestamp", ts, nil},
		{"uuid", uuid, nil},
		{"symbol", goamqp.Symbol("sym"), "sym"}, // go-amqp reads a symbol as a string: TestNativeBytesUnchanged checks the type
		{"map", map[string]any{"k": "v", "n": int32(1)}, nil},
		{"map with other keys", map[any]any{int64(1): "v", "s": true}, nil},
		{"nested map", map[string]any{"m": map[string]any{"x": []any{int64(1), "two"}}}, nil},
		{"list", []any{int32(1), "two", 3.0, nil, true}, nil},
		{"array of int", []int32{1, 2, 3}, nil},
		{"array of string", []string{"a", "b"}, nil},
		{"array of symbol", []goamqp.Symbol{"a", "b"}, nil},
	}
	r := newReceiver(t, s, "typed", nil)
	snd := newSender(t, s, "typed", nil)
	for _, tc := range cases {
		send(t, snd, &goamqp.Message{Value: tc.send})
		got := receive(t, r)
		want := tc.want
		if want == nil {
			want = tc.send
		}
		if tm, ok := got.Value.(time.Time); ok {
			got.Value = tm.UTC()
		}
		if !reflect.DeepEqual(got.Value, want) {
			t.Errorf("%s: got %#v (%T), want %#v", tc.name, got.Value, got.Value, want)
		}
	}

	send(t, snd, &goamqp.Message{Sequence: [][]any{{"a", int64(1)}, {true}}})
	if got := receive(t, r); !reflect.DeepEqual(got.Sequence, [][]any{{"a", int64(1)}, {true}}) {
		t.Errorf("amqp-sequence: got %#v / value %#v", got.Sequence, got.Value)
	}
	send(t, snd, &goamqp.Message{Data: [][]byte{[]byte("one"), []byte("two")}})
	if got := receive(t, r); !reflect.DeepEqual(got.Data, [][]byte{[]byte("one"), []byte("two")}) {
		t.Errorf("data sections: got %q", got.Data)
	}
}

// TestEverySectionPassesUnchanged: header priority, message annotations,
// typed application properties, every properties field and the footer
// reach an AMQP receiver as sent, on a topic and through a queue.
func TestEverySectionPassesUnchanged(t *testing.T) {
	e := startServer(t, func(o *Options) { o.AutoCreateQueues = true })
	s := e.session(t)
	prio := uint8(7)
	gseq := uint32(9)
	created := time.UnixMilli(1714564800000).UTC()
	ids := []any{"id-1", uint64(42), goamqp.UUID{1, 2, 3}, []byte{9, 8}}
	for _, node := range []string{"sections", "queue://sections"} {
		for i, id := range ids {
			dest := fmt.Sprintf("%s-%d", node, i) // a receiver of its own: a queue gives each message to one
			t.Run(fmt.Sprintf("%s/%T", node, id), func(t *testing.T) {
				r := newReceiver(t, s, dest, nil)
				snd := newSender(t, s, dest, nil)
				m := &goamqp.Message{
					Header:      &goamqp.MessageHeader{Durable: true, Priority: prio},
					Annotations: goamqp.Annotations{"x-custom": int64(5), "x-opt-jms-msg-type": int8(0)},
					Properties: &goamqp.MessageProperties{
						MessageID: id, UserID: []byte("alice"), Subject: ptr("order.created"),
						CorrelationID: ids[(i+1)%len(ids)], ContentEncoding: ptr("gzip"),
						CreationTime: &created, GroupID: ptr("g"), GroupSequence: &gseq, ReplyToGroupID: ptr("rg"),
					},
					ApplicationProperties: map[string]any{"i": int32(7), "l": int64(1 << 40), "b": true, "d": 2.5, "s": "str"},
					Value:                 map[string]any{"k": int16(3)},
					Footer:                goamqp.Annotations{"x-footer": "f"},
				}
				send(t, snd, m)
				got := receive(t, r)
				if got.Header == nil || got.Header.Priority != prio || !got.Header.Durable {
					t.Errorf("header %+v", got.Header)
				}
				if got.Annotations["x-custom"] != int64(5) || got.Annotations["x-opt-jms-msg-type"] != int8(0) {
					t.Errorf("annotations %v", got.Annotations)
				}
				p := got.Properties
				if p == nil || !reflect.DeepEqual(p.MessageID, id) || string(p.UserID) != "alice" || *p.Subject != "order.created" ||
					!reflect.DeepEqual(p.CorrelationID, m.Properties.CorrelationID) || p.ContentEncoding == nil || *p.ContentEncoding != "gzip" ||
					p.CreationTime == nil || !p.CreationTime.Equal(created) || *p.GroupID != "g" || *p.GroupSequence != gseq || *p.ReplyToGroupID != "rg" {
					t.Errorf("properties %+v", p)
				}
				if !reflect.DeepEqual(got.ApplicationProperties, m.ApplicationProperties) {
					t.Errorf("application properties %#v", got.ApplicationProperties)
				}
				if !reflect.DeepEqual(got.Value, map[string]any{"k": int16(3)}) {
					t.Errorf("body %#v", got.Value)
				}
				if got.Footer["x-footer"] != "f" {
					t.Errorf("footer %v", got.Footer)
				}
			})
		}
	}
}

// TestLargeTypedBodiesSmallFrames: a 1 MiB binary inside a map, and a list
// of 60,000 elements, pass unchanged when both ends use 512-byte frames.
func TestLargeTypedBodiesSmallFrames(t *testing.T) {
	e := startServer(t, func(o *Options) { o.MaxFrameSize = 512 })
	c := e.dial(t, &goamqp.ConnOptions{SASLType: goamqp.SASLTypeAnonymous(), MaxFrameSize: 512})
	s, err := c.NewSession(ctx5(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16)
	long := make([]any, 60_000) // go-amqp reads lists of up to 65,536
	for i := range long {
		long[i] = int64(i)
	}
	r := newReceiver(t, s, "large", nil)
	snd := newSender(t, s, "large", nil)
	send(t, snd, &goamqp.Message{Value: map[string]any{"big": big}})
	if got, ok := receive(t, r).Value.(map[string]any); !ok || !bytes.Equal(got["big"].([]byte), big) {
		t.Fatalf("1 MiB map body not unchanged")
	}
	send(t, snd, &goamqp.Message{Value: long})
	if got := receive(t, r).Value; !reflect.DeepEqual(got, long) {
		t.Fatalf("long list not unchanged")
	}
}

// TestTypedBodyRendering: what an MQTT subscriber (any non-AMQP consumer)
// gets for a typed body: JSON, application/json, and the AMQP type in the
// tolsey_amqp_type user property; the neutral fields of a plain message
// stay as they were, without a native copy.
func TestTypedBodyRendering(t *testing.T) {
	uuid := encoding.UUID{0x0f, 0x8f, 0xad, 0x5b, 0xd9, 0xcb, 0x46, 0x9f, 0xa1, 0x65, 0x70, 0x86, 0x77, 0x28, 0x95, 0x0e}
	for _, tc := range []struct {
		in         frames.Message
		json, kind string
	}{
		{frames.Message{Value: encoding.Map{{Key: "n", Value: int32(1)}, {Key: "s", Value: "x"}, {Key: encoding.Symbol("b"), Value: []byte{1, 2}}}},
			`{"n":1,"s":"x","b":"AQI="}`, "map"},
		{frames.Message{Value: []any{int64(1), "two", nil, 1.5, encoding.Map{}}}, `[1,"two",null,1.5,{}]`, "list"},
		{frames.Message{Sequence: [][]any{{int64(1)}, {"a\"b"}}}, `[1,"a\"b"]`, "sequence"},
		{frames.Message{Value: encoding.Array{Code: 0x71, Values: []any{int32(1), int32(2)}}}, `[1,2]`, "array"},
		{frames.Message{Value: int32(-7)}, `-7`, "int"},
		{frames.Message{Value: uint64(1 << 63)}, `9223372036854775808`, "ulong"},
		{frames.Message{Value: true}, `true`, "boolean"},
		{frames.Message{Value: float32(0.5)}, `0.5`, "float"},
		{frames.Message{Value: uuid}, `"0f8fad5b-d9cb-469f-a165-70867728950e"`, "uuid"},
		{frames.Message{Value: encoding.Symbol("sym")}, `"sym"`, "symbol"},
		{frames.Message{Value: encoding.Char('é')}, `"é"`, "char"},
		{frames.Message{Value: encoding.TimestampOf(time.UnixMilli(1714564800500))}, `"2024-05-01T12:00:00.5Z"`, "timestamp"},
		{frames.Message{Value: encoding.Described{Descriptor: encoding.Symbol("d"), Value: "v"}}, `{"descriptor":"d","value":"v"}`, "described"},
	} {
		in, err := roundTrip(t, &tc.in)
		if err != nil {
			t.Fatalf("%s: %v", tc.kind, err)
		}
		m := in.msg
		if string(m.Payload) != tc.json || m.ContentType != "application/json" || m.PayloadFormat != 1 {
			t.Errorf("%s: payload %s, content type %q, format %d; want %s", tc.kind, m.Payload, m.ContentType, m.PayloadFormat, tc.json)
		}
		if n := len(m.UserProperties); n == 0 || m.UserProperties[n-1] != (core.UserProperty{Key: propAMQPType, Value: tc.kind}) {
			t.Errorf("%s: user properties %v", tc.kind, m.UserProperties)
		}
		if m.Native.Protocol != core.ProtocolAMQP || len(m.Native.Bytes) == 0 {
			t.Errorf("%s: no native copy", tc.kind)
		}
	}
	in, err := roundTrip(t, &frames.Message{Data: [][]byte{[]byte("plain")}})
	if err != nil || in.msg.Native.Protocol != "" || string(in.msg.Payload) != "plain" {
		t.Fatalf("plain data message: %v, native %q, payload %q", err, in.msg.Native.Protocol, in.msg.Payload)
	}
}

// TestTypedBodyRestored: a JSON payload with tolsey_amqp_type (an MQTT
// reply echoing a rendering) goes to AMQP receivers as that type again, the
// property consumed; a payload that does not parse as its type goes as is.
func TestTypedBodyRestored(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		payload, kind string
		want          any
		seq           bool
	}{
		{`{"q":"question","n":2,"f":1.5,"l":[true,null],"o":{}}`, "map", encoding.Map{{Key: "q", Value: "question"}, {Key: "n", Value: int64(2)},
			{Key: "f", Value: 1.5}, {Key: "l", Value: []any{true, nil}}, {Key: "o", Value: encoding.Map{}}}, false},
		{`[1,"x"]`, "list", []any{int64(1), "x"}, false},
		{`[1,"x"]`, "sequence", []any{int64(1), "x"}, true},
		{`-7`, "int", int32(-7), false},
		{`200`, "ubyte", uint8(200), false},
		{`true`, "boolean", true, false},
		{`0.5`, "float", float32(0.5), false},
		{`"0f8fad5b-d9cb-469f-a165-70867728950e"`, "uuid", encoding.UUID{0x0f, 0x8f, 0xad, 0x5b, 0xd9, 0xcb, 0x46, 0x9f, 0xa1, 0x65, 0x70, 0x86, 0x77, 0x28, 0x95, 0x0e}, false},
		{`"sym"`, "symbol", encoding.Symbol("sym"), false},
		{`not json`, "map", "not json", false},
		{`300`, "ubyte", "300", false},
		{`[` + strings.Repeat("[", 100) + strings.Repeat("]", 101), "list", nil, false},
	} {
		m := &core.Message{Topic: "t", Payload: []byte(tc.payload), ContentType: "application/json",
			UserProperties: []core.UserProperty{{Key: "k", Value: "v"}, {Key: propAMQPType, Value: tc.kind}}}
		var enc encoder
		var b buffer.Buffer
		if err := enc.encode(&b, m, false, -1, -1, deliveryHeader{}, now); err != nil {
			t.Fatal(err)
		}
		var got frames.Message
		if err := got.Decode(b.Written()); err != nil {
			t.Fatal(err)
		}
		var body any = got.Value
		if tc.seq {
			if len(got.Sequence) != 1 {
				t.Fatalf("%s: sequence %v, value %v", tc.kind, got.Sequence, got.Value)
			}
			body = got.Sequence[0]
		}
		if tc.want == nil { // too deep: not restored, sent as text
			if _, ok := body.(string); !ok {
				t.Errorf("%s too deep: body %#v", tc.kind, body)
			}
			continue
		}
		if !reflect.DeepEqual(body, tc.want) {
			t.Errorf("%s %s: got %#v, want %#v", tc.kind, tc.payload, body, tc.want)
		}
		_, kept := got.ApplicationProperties.Get(propAMQPType)
		if _, restored := tc.want.(string); kept != restored {
			t.Errorf("%s %s: %s kept %v", tc.kind, tc.payload, propAMQPType, kept)
		}
	}
}

// TestNativeBytesUnchanged: the bare message and footer of an AMQP message
// (a body holding every AMQP type, described values, arrays and maps;
// typed application properties; every properties field) go out byte for
// byte as they came in; the header keeps its priority and the message
// annotations the sender's, while delivery annotations (this hop's) and a
// sender's x-opt-retain are dropped.
func TestNativeBytesUnchanged(t *testing.T) {
	prio := uint8(9)
	ttl := uint32(60000)
	gseq := uint32(3)
	every := []any{nil, true, uint8(1), uint16(2), uint32(3), uint64(4), int8(-1), int16(-2), int32(-3), int64(-4),
		float32(1.5), 2.5, encoding.Decimal32{1}, encoding.Decimal64{2}, encoding.Decimal128{3}, encoding.Char('x'),
		encoding.TimestampOf(time.UnixMilli(1714564800500)), encoding.UUID{7}, []byte{1}, "s", encoding.Symbol("y"),
		[]any{int64(1)}, encoding.Map{{Key: int64(1), Value: "one"}},
		encoding.Array{Code: 0x71, Values: []any{int32(1), int32(2)}},
		encoding.Described{Descriptor: encoding.Symbol("com.example:thing"), Value: []any{"a"}},
		encoding.Described{Descriptor: uint64(0x1234), Value: encoding.Map{}}}
	in := &frames.Message{
		Header:              &frames.MessageHeader{Durable: true, Priority: &prio, TTL: &ttl, DeliveryCount: 5},
		DeliveryAnnotations: encoding.Annotations{{Key: encoding.Symbol("x-hop"), Value: "h"}},
		MessageAnnotations: encoding.Annotations{{Key: encoding.Symbol("x-keep"), Value: every},
			{Key: annRetain, Value: true}, {Key: annJMSMsgType, Value: int8(2)}},
		Properties: &frames.MessageProperties{MessageID: encoding.UUID{9}, UserID: []byte("u"), To: "t", Subject: "subj",
			ReplyTo: "r", CorrelationID: uint64(5), ContentType: "ct", ContentEncoding: "ce",
			AbsoluteExpiryTime: encoding.TimestampOf(time.Now().Add(time.Hour)), CreationTime: encoding.TimestampOf(time.UnixMilli(1)),
			GroupID: "g", GroupSequence: &gseq, ReplyToGroupID: "rg"},
		ApplicationProperties: encoding.ApplicationProperties{{Key: "i", Value: int32(1)}, {Key: "f", Value: float32(0.5)}},
		Value:                 every,
		Footer:                encoding.Annotations{{Key: encoding.Symbol("x-f"), Value: encoding.Symbol("f")}},
	}
	var src buffer.Buffer
	if err := in.MarshalAMQP(&src); err != nil {
		t.Fatal(err)
	}
	payload := src.Written()
	want, got, sent := passOn(t, payload)
	if !bytes.Equal(got.Bare, want.Bare) {
		t.Fatalf("bare message changed:\n got %x\nwant %x", got.Bare, want.Bare)
	}
	if h := got.Header; h == nil || !h.Durable || h.Priority == nil || *h.Priority != prio || h.TTL == nil || *h.TTL > ttl || h.DeliveryCount != 0 {
		t.Errorf("header %+v", got.Header)
	}
	if v, _ := got.MessageAnnotations.Get("x-keep"); !reflect.DeepEqual(v, every) {
		t.Errorf("x-keep annotation %#v", v)
	}
	if _, ok := got.MessageAnnotations.Get(annRetain); ok {
		t.Error("a live message carries x-opt-retain")
	}
	if v, _ := got.MessageAnnotations.Get(annJMSDest); v != jmsTopic {
		t.Errorf("x-opt-jms-dest %v", v)
	}
	var dec frames.Message
	if err := dec.Decode(sent); err != nil {
		t.Fatal(err)
	}
	if dec.DeliveryAnnotations != nil {
		t.Errorf("delivery annotations passed on: %v", dec.DeliveryAnnotations)
	}
}

// TestTypedPropertiesRoundTrip: typed application properties become MQTT
// user properties as text plus tolsey_amqp_types (which also names a
// string correlation-id's type); an MQTT publish that echoes those user
// properties (a responder) reaches AMQP receivers with the types back.
// Properties the types object does not name stay strings.
func TestTypedPropertiesRoundTrip(t *testing.T) {
	props := encoding.ApplicationProperties{
		{Key: "s", Value: "v"}, {Key: "i", Value: int32(-3)}, {Key: "l", Value: int64(1 << 40)}, {Key: "y", Value: int8(-1)},
		{Key: "h", Value: int16(3)}, {Key: "u", Value: uint64(7)}, {Key: "b", Value: true}, {Key: "f", Value: float32(0.5)},
		{Key: "d", Value: 1.5}, {Key: "bin", Value: []byte{0xff}}, {Key: "ts", Value: encoding.Timestamp(1500)},
		{Key: "sym", Value: encoding.Symbol("q")}, {Key: "c", Value: encoding.Char('é')},
		{Key: "uuid", Value: encoding.UUID{1, 2}},
	}
	in, err := roundTrip(t, &frames.Message{ApplicationProperties: props, Value: "x",
		Properties: &frames.MessageProperties{CorrelationID: "c-1"}})
	if err != nil {
		t.Fatal(err)
	}
	// What an MQTT responder publishes: the same user properties, plus one
	// of its own, and the correlation data (bytes); no native encoding.
	echo := &core.Message{Topic: "reply", Payload: []byte("ok"), CorrelationData: []byte("c-1"),
		UserProperties: append(append([]core.UserProperty(nil), in.msg.UserProperties...), core.UserProperty{Key: "mine", Value: "7"})}
	var enc encoder
	var b buffer.Buffer
	if err := enc.encode(&b, echo, false, -1, -1, deliveryHeader{}, time.Now()); err != nil {
		t.Fatal(err)
	}
	var got frames.Message
	if err := got.Decode(b.Written()); err != nil {
		t.Fatal(err)
	}
	want := append(append(encoding.ApplicationProperties(nil), props...), encoding.Property{Key: "mine", Value: "7"})
	if !reflect.DeepEqual(got.ApplicationProperties, want) {
		t.Fatalf("application properties:\n got %#v\nwant %#v", got.ApplicationProperties, want)
	}
	if got.Properties.CorrelationID != "c-1" {
		t.Fatalf("correlation-id %#v, want the string back", got.Properties.CorrelationID)
	}
}

// TestMessageIDAlwaysPresent: a message published over MQTT reaches AMQP
// receivers with a message-id (Qpid JMS JMSMessageID), the same on every
// delivery of that message, different for another message.
func TestMessageIDAlwaysPresent(t *testing.T) {
	e := startServer(t)
	s := e.session(t)
	r1 := newReceiver(t, s, "ids/#", nil)
	r2 := newReceiver(t, s, "ids/+", nil)
	for _, topic := range []string{"ids/a", "ids/b"} {
		e.router.Publish(context.Background(), &core.Message{Topic: topic, Payload: []byte("x"), Created: time.Now(),
			Origin: core.Origin{Protocol: core.ProtocolMQTT, Node: "test-node"}})
	}
	var ids []any
	for _, r := range []*goamqp.Receiver{r1, r1, r2, r2} {
		m := receive(t, r)
		if m.Properties == nil || m.Properties.MessageID == nil {
			t.Fatalf("no message-id: %+v", m.Properties)
		}
		ids = append(ids, m.Properties.MessageID)
	}
	id, _ := ids[0].(string)
	if !strings.HasPrefix(id, "ID:tolsey:test-node:") || ids[0] != ids[2] || ids[1] != ids[3] || ids[0] == ids[1] {
		t.Fatalf("message-ids %q: want ID:tolsey:test-node:…, one per message, the same on each delivery", ids)
	}
}

// FuzzTypedBodies: MQTT publishers choose the payload and the
// tolsey_amqp_type / tolsey_amqp_types properties; restoring them must
// never panic, and what it restores must encode and decode as AMQP. A
// rendering (toCore of any decodable message) must be valid JSON.
func FuzzTypedBodies(f *testing.F) {
	for _, seed := range []struct{ payload, kind, types string }{
		{`{"a":1,"b":[true,null,{"c":"d"}]}`, "map", `{"i":"int"}`},
		{`[1,2.5,"x"]`, "sequence", `{"$correlation-id":"uuid"}`},
		{`"0f8fad5b-d9cb-469f-a165-70867728950e"`, "uuid", ``},
		{`[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]`, "list", `[]`},
		{`1e400`, "double", `{"i":"timestamp"}`},
	} {
		f.Add([]byte(seed.payload), seed.kind, seed.types)
	}
	f.Fuzz(func(t *testing.T, payload []byte, kind, types string) {
		m := &core.Message{Topic: "t", Payload: payload, CorrelationData: []byte("c"),
			UserProperties: []core.UserProperty{{Key: "i", Value: string(payload)}, {Key: propAMQPType, Value: kind}, {Key: propTypesKey, Value: types}}}
		var enc encoder
		var b buffer.Buffer
		if err := enc.encode(&b, m, false, -1, -1, deliveryHeader{}, time.Now()); err != nil {
			t.Fatalf("encode: %v", err)
		}
		var got frames.Message
		if err := got.Decode(b.Written()); err != nil {
			t.Fatalf("the restored message does not decode: %v", err)
		}
		if in, err := toCore(&got, b.Written(), time.Now()); err == nil && len(in.msg.UserProperties) > 0 &&
			in.msg.ContentType == contentTypeJSON && !json.Valid(in.msg.Payload) {
			t.Fatalf("rendering is not JSON: %s", in.msg.Payload)
		}
	})
}

// BenchmarkNativePath: map one AMQP message in (toCore) and encode it for
// one AMQP receiver: a plain data message (the neutral path), a Qpid JMS
// style TextMessage (message-id, creation-time, JMS annotations: native),
// and a MapMessage of 10 entries (native, rendered as JSON).
func BenchmarkNativePath(b *testing.B) {
	jmsProps := &frames.MessageProperties{MessageID: "ID:abc:1:1:1-1", To: "t", CreationTime: encoding.TimestampOf(time.Now())}
	jmsAnn := encoding.Annotations{{Key: annJMSDest, Value: int8(1)}, {Key: annJMSMsgType, Value: int8(2)}}
	mapBody := encoding.Map{}
	for i := range 10 {
		mapBody = append(mapBody, encoding.MapEntry{Key: fmt.Sprint("k", i), Value: int32(i)})
	}
	for _, bc := range []struct {
		name string
		m    frames.Message
	}{
		{"data", frames.Message{Data: [][]byte{bytes.Repeat([]byte("x"), 256)}}},
		{"jms-text", frames.Message{MessageAnnotations: jmsAnn[:1], Properties: jmsProps, Value: string(bytes.Repeat([]byte("x"), 256))}},
		{"jms-map", frames.Message{MessageAnnotations: jmsAnn, Properties: jmsProps, Value: mapBody}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var src buffer.Buffer
			if err := bc.m.MarshalAMQP(&src); err != nil {
				b.Fatal(err)
			}
			payload := src.Written()
			var enc encoder
			var out buffer.Buffer
			now := time.Now()
			b.ReportAllocs()
			for b.Loop() {
				var am frames.Message
				if err := am.Decode(payload); err != nil {
					b.Fatal(err)
				}
				in, err := toCore(&am, payload, now)
				if err != nil {
					b.Fatal(err)
				}
				out.Reset()
				if err := enc.encode(&out, in.msg, false, jmsTopic, -1, deliveryHeader{}, now); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestBodyKindAndTTLUnchanged: an amqp-value binary or null (or no body
// at all) reaches AMQP receivers as it was sent, not as a data section,
// and a message whose sender gave only an absolute-expiry-time gets no
// header ttl (docs/jms.md, found by test/e2e/amqp/typed_matrix.py).
func TestBodyKindAndTTLUnchanged(t *testing.T) {
	expiry := encoding.TimestampOf(time.Now().Add(time.Hour))
	for name, in := range map[string]*frames.Message{
		"binary value": {Value: []byte{0, 0xff}},
		"null value":   {},
		"no body":      {Header: &frames.MessageHeader{Durable: true}},
		"absolute-expiry-time only": {Properties: &frames.MessageProperties{MessageID: "id", AbsoluteExpiryTime: expiry},
			Value: encoding.Map{}},
	} {
		var src buffer.Buffer
		if err := in.MarshalAMQP(&src); err != nil {
			t.Fatal(err)
		}
		if name == "null value" { // MarshalAMQP leaves out a nil Value: write the section
			src.Append([]byte{0x00, 0x53, 0x77, 0x40})
		}
		want, got, _ := passOn(t, src.Written())
		if !bytes.Equal(got.Bare, want.Bare) {
			t.Errorf("%s: bare message changed:\n got %x\nwant %x", name, got.Bare, want.Bare)
		}
		if got.Header != nil && got.Header.TTL != nil {
			t.Errorf("%s: header ttl %d, the sender gave none", name, *got.Header.TTL)
		}
	}
}

// passOn takes an AMQP message's payload in (toCore) and out again to a
// topic receiver (encode), and splits both at the bare message.
func passOn(t *testing.T, payload []byte) (in, out frames.Hop, sent []byte) {
	t.Helper()
	var am frames.Message
	if err := am.Decode(payload); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	ib, err := toCore(&am, payload, now)
	if err != nil {
		t.Fatal(err)
	}
	var enc encoder
	var b buffer.Buffer
	if err := enc.encode(&b, ib.msg, false, jmsTopic, -1, deliveryHeader{}, now); err != nil {
		t.Fatal(err)
	}
	if in, err = frames.SplitHop(payload); err != nil {
		t.Fatal(err)
	}
	if out, err = frames.SplitHop(b.Written()); err != nil {
		t.Fatal(err)
	}
	return in, out, b.Written()
}

// TestNativeBodyCountedOnce: a message kept whole (core.Native) whose body
// is also its payload (a binary amqp-value, always kept; a data section or
// a string amqp-value beside a message-id) has its body counted once in
// core.Message.Size, which queues.maxBytes and the queue byte counts use:
// it was counted twice, in the payload and in the native bytes.
func TestNativeBodyCountedOnce(t *testing.T) {
	body := bytes.Repeat([]byte("b"), 1000)
	props := &frames.MessageProperties{MessageID: "ID:1"}
	for _, tc := range []struct {
		name string
		m    frames.Message
	}{
		{"binary amqp-value", frames.Message{Value: body}},
		{"data with a message-id", frames.Message{Properties: props, Data: [][]byte{body}}},
		{"string amqp-value with a message-id", frames.Message{Properties: props, Value: string(body)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var src buffer.Buffer
			if err := tc.m.MarshalAMQP(&src); err != nil {
				t.Fatal(err)
			}
			payload := src.Written()
			var am frames.Message
			if err := am.Decode(payload); err != nil {
				t.Fatal(err)
			}
			in, err := toCore(&am, payload, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			m := in.msg
			if m.Native.Protocol == "" || !bytes.Equal(m.Payload, body) {
				t.Fatalf("not kept native with the body as payload: native %q, payload %d bytes", m.Native.Protocol, len(m.Payload))
			}
			if size, native := m.Size(), len(m.Native.Bytes); size >= native+len(body) {
				t.Fatalf("Size %d: the %d-byte body is counted twice (native bytes %d)", size, len(body), native)
			}
		})
	}
}
