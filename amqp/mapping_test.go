package amqp

import (
	"bytes"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/tolsey/tolsey/amqp/internal/buffer"
	"github.com/tolsey/tolsey/amqp/internal/encoding"
	"github.com/tolsey/tolsey/amqp/internal/frames"
	"github.com/tolsey/tolsey/core"
)

// roundTrip encodes am and decodes it back, as the server does.
func roundTrip(t *testing.T, am *frames.Message) (inbound, error) {
	t.Helper()
	var b buffer.Buffer
	if err := am.MarshalAMQP(&b); err != nil {
		t.Fatal(err)
	}
	var got frames.Message
	if err := got.Decode(b.Written()); err != nil {
		t.Fatal(err)
	}
	return toCore(&got, b.Written(), time.Unix(1000, 0))
}

func TestToCore(t *testing.T) {
	ttl := uint32(1500)
	uuid := encoding.UUID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	cases := []struct {
		name  string
		in    frames.Message
		check func(t *testing.T, in inbound)
	}{
		{"data section", frames.Message{Data: [][]byte{[]byte("abc")}}, func(t *testing.T, in inbound) {
			if string(in.msg.Payload) != "abc" || in.msg.PayloadFormat != 0 || in.msg.QoS != 0 || in.msg.Retain {
				t.Fatalf("%+v", in.msg)
			}
		}},
		{"several data sections are concatenated", frames.Message{Data: [][]byte{[]byte("ab"), []byte("cd")}}, func(t *testing.T, in inbound) {
			if string(in.msg.Payload) != "abcd" {
				t.Fatalf("%q", in.msg.Payload)
			}
		}},
		{"amqp-value string is UTF-8 text", frames.Message{Value: "héllo"}, func(t *testing.T, in inbound) {
			if string(in.msg.Payload) != "héllo" || in.msg.PayloadFormat != 1 {
				t.Fatalf("%+v", in.msg)
			}
		}},
		{"amqp-value binary", frames.Message{Value: []byte{0, 1}}, func(t *testing.T, in inbound) {
			if !bytes.Equal(in.msg.Payload, []byte{0, 1}) || in.msg.PayloadFormat != 0 {
				t.Fatalf("%+v", in.msg)
			}
		}},
		{"no body is an empty payload", frames.Message{}, func(t *testing.T, in inbound) {
			if in.msg.Payload == nil || len(in.msg.Payload) != 0 {
				t.Fatalf("%#v", in.msg.Payload)
			}
		}},
		{"header", frames.Message{Header: &frames.MessageHeader{Durable: true, TTL: &ttl}}, func(t *testing.T, in inbound) {
			if in.msg.QoS != 1 || !in.msg.Expiry.Equal(time.Unix(1000, 0).Add(1500*time.Millisecond)) {
				t.Fatalf("qos %d expiry %v", in.msg.QoS, in.msg.Expiry)
			}
		}},
		{"absolute-expiry-time, the earlier wins", frames.Message{Header: &frames.MessageHeader{TTL: &ttl},
			Properties: &frames.MessageProperties{AbsoluteExpiryTime: encoding.Timestamp(1000500)}}, func(t *testing.T, in inbound) {
			if !in.msg.Expiry.Equal(time.UnixMilli(1000500)) {
				t.Fatalf("expiry %v", in.msg.Expiry)
			}
		}},
		{"properties", frames.Message{Properties: &frames.MessageProperties{To: "x/y", ReplyTo: "topic://r/1", ContentType: "text/plain", CorrelationID: []byte("id")}}, func(t *testing.T, in inbound) {
			m := in.msg
			if in.to != "x/y" || m.ResponseTopic != "r/1" || m.ContentType != "text/plain" || string(m.CorrelationData) != "id" {
				t.Fatalf("%+v to=%q", m, in.to)
			}
		}},
		{"string correlation-id", frames.Message{Properties: &frames.MessageProperties{CorrelationID: "abc"}}, func(t *testing.T, in inbound) {
			if string(in.msg.CorrelationData) != "abc" || in.msg.CorrelationKind != core.IDString {
				t.Fatalf("%q %d", in.msg.CorrelationData, in.msg.CorrelationKind)
			}
		}},
		{"uuid correlation-id", frames.Message{Properties: &frames.MessageProperties{CorrelationID: uuid}}, func(t *testing.T, in inbound) {
			if string(in.msg.CorrelationData) != "01020304-0506-0708-090a-0b0c0d0e0f10" || in.msg.CorrelationKind != core.IDUUID {
				t.Fatalf("%q %d", in.msg.CorrelationData, in.msg.CorrelationKind)
			}
		}},
		{"ulong correlation-id", frames.Message{Properties: &frames.MessageProperties{CorrelationID: uint64(258)}}, func(t *testing.T, in inbound) {
			if string(in.msg.CorrelationData) != "258" || in.msg.CorrelationKind != core.IDULong {
				t.Fatalf("%q %d", in.msg.CorrelationData, in.msg.CorrelationKind)
			}
		}},
		{"binary correlation-id", frames.Message{Properties: &frames.MessageProperties{CorrelationID: []byte{0xff}}}, func(t *testing.T, in inbound) {
			if !bytes.Equal(in.msg.CorrelationData, []byte{0xff}) || in.msg.CorrelationKind != core.IDBinary {
				t.Fatalf("%q %d", in.msg.CorrelationData, in.msg.CorrelationKind)
			}
		}},
		{"application-properties", frames.Message{ApplicationProperties: encoding.ApplicationProperties{
			{Key: "s", Value: "v"}, {Key: "i", Value: int32(-3)}, {Key: "u", Value: uint64(7)}, {Key: "b", Value: true},
			{Key: "f", Value: 1.5}, {Key: "bin", Value: []byte{0xff}}, {Key: "n", Value: nil},
			{Key: "ts", Value: encoding.Timestamp(1500)}, {Key: "sym", Value: encoding.Symbol("q")}, {Key: "c", Value: encoding.Char('é')},
		}}, func(t *testing.T, in inbound) {
			var got []string
			for _, p := range in.msg.UserProperties {
				got = append(got, p.Key+"="+p.Value)
			}
			want := "s=v i=-3 u=7 b=true f=1.5 bin=/w== n= ts=1970-01-01T00:00:01.5Z sym=q c=é " +
				`tolsey_amqp_types={"i":"int","u":"ulong","b":"boolean","f":"double","bin":"binary","n":"null","ts":"timestamp","sym":"symbol","c":"char"}`
			if strings.Join(got, " ") != want {
				t.Fatalf("got  %s\nwant %s", strings.Join(got, " "), want)
			}
		}},
		{"x-opt-retain", frames.Message{MessageAnnotations: encoding.Annotations{{Key: encoding.Symbol("x-opt-retain"), Value: true}}}, func(t *testing.T, in inbound) {
			if !in.msg.Retain {
				t.Fatal("not retained")
			}
		}},
		{"x-opt-jms-dest", frames.Message{MessageAnnotations: encoding.Annotations{{Key: encoding.Symbol("x-opt-jms-dest"), Value: int8(0)}}}, func(t *testing.T, in inbound) {
			if in.jmsDest != 0 {
				t.Fatal(in.jmsDest)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in, err := roundTrip(t, &tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if in.jmsDest != -1 && tc.name != "x-opt-jms-dest" {
				t.Fatalf("jmsDest %d", in.jmsDest)
			}
			tc.check(t, in)
		})
	}
}

// decodeOut encodes m the way a delivery is encoded and decodes it.
func decodeOut(t *testing.T, m *core.Message, retained bool, now time.Time) *frames.Message {
	t.Helper()
	var e encoder
	var b buffer.Buffer
	if err := e.encode(&b, m, retained, jmsTopic, jmsTempQueue, deliveryHeader{}, now); err != nil {
		t.Fatal(err)
	}
	var am frames.Message
	if err := am.Decode(b.Written()); err != nil {
		t.Fatal(err)
	}
	return &am
}

func TestEncode(t *testing.T) {
	now := time.Unix(2000, 0)
	m := &core.Message{
		Topic: "a/b", Payload: []byte("hi"), QoS: 1, ContentType: "text/plain; charset=utf-8",
		ResponseTopic: "$tmp/n/1/1", CorrelationData: []byte{9}, Created: now.Add(-time.Second), Expiry: now.Add(10 * time.Second),
		UserProperties: []core.UserProperty{{Key: "k", Value: "1"}, {Key: "k", Value: "2"}, {Key: "z", Value: "3"}},
	}
	am := decodeOut(t, m, true, now)
	if am.Value != "hi" || am.Data != nil {
		t.Fatalf("text body: value %#v data %q", am.Value, am.Data)
	}
	if am.Header == nil || !am.Header.Durable || am.Header.TTL == nil || *am.Header.TTL != 10000 {
		t.Fatalf("header %+v", am.Header)
	}
	p := am.Properties
	if p.To != "a/b" || p.ReplyTo != "$tmp/n/1/1" || p.ContentType != "text/plain; charset=utf-8" ||
		!bytes.Equal(p.CorrelationID.([]byte), []byte{9}) || p.AbsoluteExpiryTime.Time().Unix() != 2010 || p.CreationTime.Time().Unix() != 1999 {
		t.Fatalf("properties %+v", p)
	}
	if len(am.ApplicationProperties) != 2 || am.ApplicationProperties[0].Value != "1" {
		t.Fatalf("application-properties %+v: duplicate keys keep the first", am.ApplicationProperties)
	}
	ann := am.MessageAnnotations
	for k, want := range map[encoding.Symbol]any{"x-opt-jms-dest": int8(1), "x-opt-jms-msg-type": int8(5), "x-opt-jms-reply-to": int8(2), "x-opt-retain": true} {
		if v, _ := ann.Get(k); v != want {
			t.Errorf("%s = %#v, want %#v", k, v, want)
		}
	}

	// Correlation ids go out with the AMQP type they came with.
	for _, tc := range []struct {
		data string
		kind core.IDKind
		want any
	}{
		{"abc", core.IDString, "abc"},
		{"42", core.IDULong, uint64(42)},
		{"01020304-0506-0708-090a-0b0c0d0e0f10", core.IDUUID, encoding.UUID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}},
		{"abc", core.IDBinary, []byte("abc")},
		{"not a number", core.IDULong, []byte("not a number")},
		{"not-a-uuid", core.IDUUID, []byte("not-a-uuid")},
	} {
		am = decodeOut(t, &core.Message{Topic: "x", CorrelationData: []byte(tc.data), CorrelationKind: tc.kind}, false, now)
		if got := am.Properties.CorrelationID; fmt.Sprintf("%T %v", got, got) != fmt.Sprintf("%T %v", tc.want, tc.want) {
			t.Errorf("%q kind %d: %T %v, want %T %v", tc.data, tc.kind, got, got, tc.want, tc.want)
		}
	}

	// Bytes: a data section, a BytesMessage, no header for QoS 0 without expiry.
	am = decodeOut(t, &core.Message{Topic: "x", Payload: []byte{0xff}}, false, now)
	if am.Value != nil || len(am.Data) != 1 || am.Header != nil {
		t.Fatalf("bytes: %+v", am)
	}
	if v, _ := am.MessageAnnotations.Get("x-opt-jms-msg-type"); v != int8(3) {
		t.Fatalf("msg-type %v", v)
	}
	if _, ok := am.MessageAnnotations.Get("x-opt-retain"); ok {
		t.Fatal("live message with x-opt-retain")
	}
	// Text content type but invalid UTF-8 stays bytes.
	am = decodeOut(t, &core.Message{Topic: "x", ContentType: "text/plain", Payload: []byte{0xff}}, false, now)
	if am.Value != nil {
		t.Fatalf("invalid UTF-8 sent as a string")
	}
	// payload-format 1, long text (str32).
	long := strings.Repeat("x", 300)
	am = decodeOut(t, &core.Message{Topic: "x", PayloadFormat: 1, Payload: []byte(long)}, false, now)
	if am.Value != long {
		t.Fatalf("long text: %v", am.Value)
	}
	// An expired-by-now message still gets a ttl of at least 1 ms.
	am = decodeOut(t, &core.Message{Topic: "x", Expiry: now.Add(-time.Second)}, false, now)
	if am.Header == nil || *am.Header.TTL != 1 {
		t.Fatalf("header %+v", am.Header)
	}
	am = decodeOut(t, &core.Message{Topic: "x", Expiry: now.Add(200 * 24 * time.Hour * 365)}, false, now)
	if *am.Header.TTL != math.MaxUint32 {
		t.Fatalf("ttl %d", *am.Header.TTL)
	}
}

func TestIsTextual(t *testing.T) {
	for ct, want := range map[string]bool{
		"text/plain": true, "TEXT/HTML; charset=utf-8": true, "application/json": true, "application/vnd.x+json": true,
		"application/xml": true, "image/svg+xml": true, "application/octet-stream": false, "": false, "image/png": false,
	} {
		if isTextual(ct) != want {
			t.Errorf("%q: %v", ct, !want)
		}
	}
}

func TestResolveAddress(t *testing.T) {
	for _, tc := range []struct {
		addr string
		caps []encoding.Symbol
		name string
		kind nodeKind
	}{
		{"a/b", nil, "a/b", nodeTopic},
		{"topic://a/b", nil, "a/b", nodeTopic},
		{"queue://q", nil, "q", nodeQueue},
		{"q", []encoding.Symbol{"queue"}, "q", nodeQueue},
		{"q", []encoding.Symbol{"topic"}, "q", nodeTopic},
		{"$tmp/x/1/1", []encoding.Symbol{"temporary-queue"}, "$tmp/x/1/1", nodeTopic},
		{"queue://$tmp/x/1/1", nil, "$tmp/x/1/1", nodeTopic},
	} {
		name, kind := resolveAddress(tc.addr, tc.caps)
		if name != tc.name || kind != tc.kind {
			t.Errorf("%s %v: %s %d", tc.addr, tc.caps, name, kind)
		}
	}
	if _, k := resolveTo("q", jmsQueue); k != nodeQueue {
		t.Error("jms queue")
	}
	if _, k := resolveTo("t", jmsTopic); k != nodeTopic {
		t.Error("jms topic")
	}
	if _, k := resolveTo("t", -1); k != nodeTopic {
		t.Error("no annotation")
	}
}

// TestTransferOverhead: a transfer with every field the writer sets fits
// in transferOverhead bytes with its frame header.
func TestTransferOverhead(t *testing.T) {
	id, fmt := uint32(math.MaxUint32), uint32(math.MaxUint32)
	tr := &frames.Transfer{Handle: math.MaxUint32, DeliveryID: &id, DeliveryTag: []byte{1, 2, 3, 4}, MessageFormat: &fmt, Settled: true, More: true}
	var b buffer.Buffer
	if err := frames.AppendFrame(&b, frames.TypeAMQP, math.MaxUint16, tr, nil); err != nil {
		t.Fatal(err)
	}
	if b.Size() > transferOverhead {
		t.Fatalf("transfer frame without payload is %d bytes, over transferOverhead %d", b.Size(), transferOverhead)
	}
}

// TestEncodeAllocs: encoding a delivery reuses the encoder's structs.
func TestEncodeAllocs(t *testing.T) {
	m := &core.Message{Topic: "a/b", Payload: []byte("hello"), QoS: 1, ContentType: "text/plain",
		UserProperties: []core.UserProperty{{Key: "k", Value: "v"}}, Created: time.Now()}
	var e encoder
	var b buffer.Buffer
	now := time.Now()
	e.encode(&b, m, false, jmsTopic, -1, deliveryHeader{}, now)
	allocs := testing.AllocsPerRun(100, func() {
		b.Reset()
		e.encode(&b, m, false, jmsTopic, -1, deliveryHeader{}, now)
	})
	if allocs > 8 {
		t.Fatalf("%v allocations per encode", allocs)
	}
}

// TestQueueReplyTo: a reply-to that names a queue (a JMS temporary queue)
// is the queue's MQTT address as the Response Topic, so that an MQTT
// responder's publish lands in the queue, and its AMQP address again for
// an AMQP receiver.
func TestQueueReplyTo(t *testing.T) {
	in, err := roundTrip(t, &frames.Message{Properties: &frames.MessageProperties{ReplyTo: "queue://$tmpq/n/1/1"}})
	if err != nil {
		t.Fatal(err)
	}
	if in.msg.ResponseTopic != "$queue/$tmpq/n/1/1" {
		t.Fatalf("response topic %q, want the queue's MQTT address", in.msg.ResponseTopic)
	}
	out := decodeOut(t, &core.Message{Topic: "a", Payload: []byte("x"), ResponseTopic: in.msg.ResponseTopic}, false, time.Now())
	if out.Properties.ReplyTo != "queue://$tmpq/n/1/1" {
		t.Fatalf("reply-to %q, want the queue's AMQP address", out.Properties.ReplyTo)
	}
}

// TestJMSQueueReplyTo: Qpid JMS names a JMSReplyTo queue by its bare name
// and says it is a queue with x-opt-jms-reply-to 0 (a temporary queue's
// address carries the queue:// prefix, a topic's kind is 1 or 3). The
// MQTT Response Topic is the queue's MQTT address, so that an MQTT
// responder's publish lands in the queue, not in a topic of that name.
func TestJMSQueueReplyTo(t *testing.T) {
	for _, c := range []struct {
		replyTo string
		kind    any
		want    string
	}{
		{"orders/replies", int8(0), "$queue/orders/replies"},
		{"orders/replies", uint8(0), "$queue/orders/replies"},
		{"queue://orders/replies", int8(0), "$queue/orders/replies"},
		{"queue://$tmpq/n/1/1", int8(2), "$queue/$tmpq/n/1/1"},
		{"orders/replies", int8(1), "orders/replies"},
		{"topic://orders/replies", int8(1), "orders/replies"},
		{"$tmp/n/1/2", int8(3), "$tmp/n/1/2"},
		{"orders/replies", nil, "orders/replies"},
	} {
		am := &frames.Message{Properties: &frames.MessageProperties{ReplyTo: c.replyTo}}
		if c.kind != nil {
			am.MessageAnnotations = encoding.Annotations{{Key: encoding.Symbol("x-opt-jms-reply-to"), Value: c.kind}}
		}
		in, err := roundTrip(t, am)
		if err != nil {
			t.Fatal(err)
		}
		if in.msg.ResponseTopic != c.want {
			t.Errorf("reply-to %q, x-opt-jms-reply-to %v: response topic %q, want %q", c.replyTo, c.kind, in.msg.ResponseTopic, c.want)
		}
	}
}

// TestEncodeNativeAllocs: sending on a message an AMQP client sent into a
// queue (its native encoding, a `to` to fill in, the delivery's header)
// allocates nothing: the encoder keeps the split and the rewrite of the
// properties between messages (frames.HopScratch, frames.BareScratch).
func TestEncodeNativeAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts differ under -race")
	}
	in, err := roundTrip(t, &frames.Message{Header: &frames.MessageHeader{Durable: true},
		Properties: &frames.MessageProperties{MessageID: "id-1"}, Data: [][]byte{[]byte("payload")}})
	if err != nil {
		t.Fatal(err)
	}
	m := in.msg
	if m.Native.Bytes == nil {
		t.Fatal("no native encoding kept: not the path under test")
	}
	m.Topic = queueTopic + "load"
	var e encoder
	var b buffer.Buffer
	now := time.Now()
	h := deliveryHeader{firstAcquirer: true}
	if err := e.encode(&b, m, false, jmsQueue, -1, h, now); err != nil {
		t.Fatal(err)
	}
	var out frames.Message
	if err := out.Decode(b.Written()); err != nil || out.Properties == nil || out.Properties.To != "queue://load" {
		t.Fatalf("encoded %v: %+v", err, out.Properties)
	}
	allocs := testing.AllocsPerRun(100, func() {
		b.Reset()
		e.encode(&b, m, false, jmsQueue, -1, h, now)
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per encode", allocs)
	}
}
