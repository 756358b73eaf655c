package bridge

import (
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tolsey/tolsey/core"
)

var t0 = time.Date(2025, 5, 1, 12, 0, 0, 0, time.UTC)

// headerCases: messages and provenances that must come back as they were.
// Expiries are whole seconds after t0: the header carries seconds.
var headerCases = []struct {
	name string
	m    core.Message
	p    Provenance
}{
	{"nothing", core.Message{}, Provenance{}},
	{"content type", core.Message{ContentType: "application/json; charset=utf-8"}, Provenance{}},
	{"content type with CRLF", core.Message{ContentType: "text/plain\r\nX-Evil: 1"}, Provenance{}},
	{"content type with spaces at the ends", core.Message{ContentType: " text/plain "}, Provenance{}},
	{"content type not ASCII", core.Message{ContentType: "text/plain; name=été"}, Provenance{}},
	{"content type with %", core.Message{ContentType: "a%41b"}, Provenance{}},
	{"correlation data, binary", core.Message{CorrelationData: []byte{0, 1, 0xfe, 0xff, '\r', '\n'}}, Provenance{}},
	{"correlation data, empty", core.Message{CorrelationData: []byte{}}, Provenance{}},
	{"correlation id, string", core.Message{CorrelationData: []byte("req-42"), CorrelationKind: core.IDString}, Provenance{}},
	{"correlation id, ulong", core.Message{CorrelationData: []byte("42"), CorrelationKind: core.IDULong}, Provenance{}},
	{"correlation id, uuid", core.Message{CorrelationData: []byte("0f8fad5b-d9cb-469f-a165-70867728950e"), CorrelationKind: core.IDUUID}, Provenance{}},
	{"response topic", core.Message{ResponseTopic: "replies/client1"}, Provenance{}},
	{"response topic, Sparkplug", core.Message{ResponseTopic: "spBv1.0/g/NCMD/e"}, Provenance{}},
	{"response topic, empty levels", core.Message{ResponseTopic: "/replies//x/"}, Provenance{}},
	{"response topic, no subject", core.Message{ResponseTopic: "replies/a b"}, Provenance{}},
	{"response topic, not ASCII", core.Message{ResponseTopic: "réponses/1"}, Provenance{}},
	{"response topic, a wildcard level for NATS", core.Message{ResponseTopic: "r/*"}, Provenance{}},
	{"user properties: order and duplicates", core.Message{UserProperties: []core.UserProperty{
		{Key: "b", Value: "2"}, {Key: "a", Value: "1"}, {Key: "b", Value: "3"}, {Key: "a", Value: "1"},
	}}, Provenance{}},
	{"user properties: what a header cannot carry", core.Message{UserProperties: []core.UserProperty{
		{Key: "k=v", Value: "x=y=z"},
		{Key: "100%", Value: "%41%"},
		{Key: " lead", Value: "trail "},
		{Key: "", Value: ""},
		{Key: " ", Value: " "},
		{Key: "crlf\r\n", Value: "line1\r\nline2\n"},
		{Key: "tab\t", Value: "\tx\x01\x7f"},
		{Key: "température", Value: "20 °C 🌡"},
		{Key: "Nats-Msg-Id", Value: "not a JetStream id"},
		{Key: "Content-Type", Value: "not the content type"},
	}}, Provenance{}},
	{"payload format", core.Message{PayloadFormat: 1}, Provenance{}},
	{"expiry", core.Message{Expiry: t0.Add(90 * time.Second)}, Provenance{}},
	{"retain", core.Message{Retain: true}, Provenance{}},
	{"QoS 1", core.Message{QoS: 1}, Provenance{}},
	{"QoS 2", core.Message{QoS: 2}, Provenance{}},
	{"origin and path", core.Message{}, Provenance{
		Origin: core.Origin{Protocol: core.ProtocolMQTT, Node: "edge-1", Client: "sensor 7/ü"},
		Path:   []string{"edge-1", "hub:2", " spaced ", "100%"},
	}},
	{"message id", core.Message{QoS: 1}, Provenance{MsgID: MessageID("edge-1", "alarms", 42)}},
	{"everything", core.Message{
		ContentType:     "application/cbor",
		CorrelationData: []byte{1, 2, 3},
		CorrelationKind: core.IDBinary,
		ResponseTopic:   "replies/dev.1",
		UserProperties:  []core.UserProperty{{Key: "unit", Value: "°C"}, {Key: "unit", Value: "K"}},
		PayloadFormat:   1,
		Expiry:          t0.Add(time.Hour),
		Retain:          true,
		QoS:             2,
	}, Provenance{
		Origin: core.Origin{Protocol: core.ProtocolAMQP, Node: "gw-a", Client: "container-1"},
		Path:   []string{"gw-a", "gw-b"},
		MsgID:  "gw-a:r1:7",
	}},
}

// checkRoundTrip decodes h, received at t0, and compares with what was sent.
func checkRoundTrip(t *testing.T, name string, h nats.Header, m core.Message, p Provenance) {
	t.Helper()
	got := core.Message{Topic: "kept", Payload: []byte("kept")}
	gp, err := DecodeHeaders(h, &got, t0)
	if err != nil {
		t.Errorf("%s: DecodeHeaders(%q): %v", name, h, err)
		return
	}
	want := m
	want.Topic, want.Payload = "kept", []byte("kept")
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s: headers %q\n\tdecode to %+v\n\twant      %+v", name, h, got, want)
	}
	if !reflect.DeepEqual(gp, p) {
		t.Errorf("%s: headers %q\n\tdecode to provenance %+v\n\twant                %+v", name, h, gp, p)
	}
}

func TestHeadersRoundTrip(t *testing.T) {
	for _, c := range headerCases {
		h := EncodeHeaders(&c.m, c.p, t0)
		for k, vs := range h {
			for _, v := range vs {
				if !headerSafe(v) {
					t.Errorf("%s: header %s: %q would not survive nats.go", c.name, k, v)
				}
			}
		}
		checkRoundTrip(t, c.name, h, c.m, c.p)
	}
}

// What a NATS client reads: the headers meant for it are plain.
func TestHeadersForNATSClients(t *testing.T) {
	m := core.Message{
		ContentType:    "application/json",
		ResponseTopic:  "replies/dev.1",
		UserProperties: []core.UserProperty{{Key: "unit", Value: "°C"}},
		Expiry:         t0.Add(1500 * time.Millisecond),
		Retain:         true,
	}
	h := EncodeHeaders(&m, Provenance{MsgID: "id-1", Path: []string{"gw"}}, t0)
	for k, want := range map[string]string{
		HeaderContentType:     "application/json",
		HeaderResponseSubject: "replies.dev//1",
		HeaderUserProperty:    "unit=%C2%B0C",
		HeaderExpiry:          "2", // seconds left, rounded up [MQTT-3.3.2-6]
		HeaderRetain:          "true",
		HeaderMsgID:           "id-1",
		HeaderPath:            "gw",
	} {
		if got := h.Get(k); got != want {
			t.Errorf("header %s = %q, want %q", k, got, want)
		}
	}
	if len(h) != 7 {
		t.Errorf("headers %q: want only those 7", h)
	}
	var got core.Message
	if _, err := DecodeHeaders(h, &got, t0.Add(time.Minute)); err != nil || !got.Expiry.Equal(t0.Add(time.Minute+2*time.Second)) {
		t.Errorf("expiry decoded at t0+1m: %v, %v; want t0+1m2s", got.Expiry, err)
	}
}

// A NATS client's own headers become user properties, after ours, ordered
// by key; NATS's and unknown Tolsey- headers are left out.
func TestDecodeHeadersForeign(t *testing.T) {
	h := nats.Header{
		"X-Trace":                {"abc", "def"},
		"Content-Type":           {"text/plain"},
		"A-First":                {"1"},
		"Nats-Msg-Id":            {"js-1"},
		"Nats-Expected-Stream":   {"S"},
		"Nmqtt-Pub":              {"1"},
		"Tolsey-From-The-Future": {"?"},
		HeaderUserProperty:       {"ours=1"},
	}
	var m core.Message
	p, err := DecodeHeaders(h, &m, t0)
	if err != nil {
		t.Fatal(err)
	}
	want := []core.UserProperty{{Key: "ours", Value: "1"}, {Key: "A-First", Value: "1"}, {Key: "X-Trace", Value: "abc"}, {Key: "X-Trace", Value: "def"}}
	if !reflect.DeepEqual(m.UserProperties, want) {
		t.Errorf("user properties %+v, want %+v", m.UserProperties, want)
	}
	if m.ContentType != "text/plain" || p.MsgID != "js-1" {
		t.Errorf("content type %q, message id %q", m.ContentType, p.MsgID)
	}
}

func TestDecodeHeadersRefuses(t *testing.T) {
	for _, h := range []nats.Header{
		{HeaderContentTypeEscaped: {"text%2"}},
		{HeaderContentTypeEscaped: {"text%ZZ"}},
		{HeaderContentType: {"text\xff"}},
		{HeaderCorrelationData: {"not base64!"}},
		{HeaderCorrelationData: {"AA=="}, HeaderCorrelationKind: {"guid"}},
		{HeaderResponseSubject: {"a/b"}},
		{HeaderResponseTopic: {"a%00b"}},
		{HeaderUserProperty: {"no-equals"}},
		{HeaderUserProperty: {"k=%FF"}},
		{HeaderPayloadFormat: {"2"}},
		{HeaderExpiry: {"-1"}},
		{HeaderExpiry: {"4294967296"}},
		{HeaderRetain: {"yes"}},
		{HeaderQoS: {"3"}},
		{HeaderOriginNode: {"%"}},
		{HeaderPath: slicesRepeat("gw", MaxHops+1)},
		{"X-Bad": {"\xff"}},
	} {
		m := core.Message{Topic: "t", ContentType: "before", QoS: 1}
		before := m
		if _, err := DecodeHeaders(h, &m, t0); !errors.Is(err, ErrBadHeader) {
			t.Errorf("DecodeHeaders(%q): %v, want ErrBadHeader", h, err)
		}
		if !reflect.DeepEqual(m, before) {
			t.Errorf("DecodeHeaders(%q) changed the message to %+v", h, m)
		}
	}
}

func slicesRepeat(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprint(s, i)
	}
	return out
}

func TestProvenanceLoops(t *testing.T) {
	p := Provenance{Path: []string{"a", "b"}}
	if !p.Loops("a") || !p.Loops("b") || p.Loops("c") {
		t.Errorf("%+v: Loops(a, b, c) = %v %v %v, want true true false", p, p.Loops("a"), p.Loops("b"), p.Loops("c"))
	}
	long := Provenance{Path: slicesRepeat("gw", MaxHops)}
	if !long.Loops("new") {
		t.Errorf("a path of MaxHops gateways does not loop")
	}
}

func TestMessageID(t *testing.T) {
	for _, c := range []struct {
		node, rule string
		seq        uint64
		want       string
	}{
		{"edge-1", "alarms", 42, "edge-1:alarms:42"},
		{"a:b", "r 1", 0, "a%3Ab:r 1:0"},
		{" n", "r ", 18446744073709551615, "%20n:r :18446744073709551615"},
		{"été", "", 1, "%C3%A9t%C3%A9::1"},
	} {
		got := MessageID(c.node, c.rule, c.seq)
		if got != c.want || !headerSafe(got) {
			t.Errorf("MessageID(%q, %q, %d) = %q, want %q (header-safe)", c.node, c.rule, c.seq, got, c.want)
		}
	}
	if MessageID("a:b", "c", 1) == MessageID("a", "b:c", 1) {
		t.Error("node and rule names run into each other")
	}
}

// Every header goes through a real NATS server, written and read by
// nats.go, and comes back as it was: what proves the escaping (nats.go
// trims values and turns CR and LF into spaces).
func TestHeadersThroughNATS(t *testing.T) {
	s, _ := startNATS(t)
	nc := natsConn(t, s)
	sub, err := nc.SubscribeSync("hdr.>")
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range headerCases {
		msg := &nats.Msg{Subject: fmt.Sprintf("hdr.%d", i), Header: EncodeHeaders(&c.m, c.p, t0)}
		if err := nc.PublishMsg(msg); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		got, err := sub.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		checkRoundTrip(t, c.name, got.Header, c.m, c.p)
	}
	// Without the escaping, this is what a value would become.
	raw := &nats.Msg{Subject: "hdr.raw", Header: nats.Header{"X": {" a\r\nb "}}}
	if err := nc.PublishMsg(raw); err != nil {
		t.Fatal(err)
	}
	if got, err := sub.NextMsg(10 * time.Second); err != nil || got.Header.Get("X") != "a  b" {
		t.Fatalf("nats.go sent %q as %q (%v): the test's premise changed", " a\r\nb ", got.Header.Get("X"), err)
	}
}

// Why EncodeHeaders never sets "Nmqtt-Pub": NATS's MQTT support takes a
// core NATS message that carries it at QoS ≥ 1 for one that reaches QoS 1
// subscribers through JetStream, which a core publish never does: its QoS 1
// MQTT subscriber misses it, while the same message without the header
// arrives. If this fails, NATS changed: look at headers.go again.
func TestNmqttPubHidesFromQoS1(t *testing.T) {
	s, url := startNATS(t)
	nc := natsConn(t, s)
	c, got := mqttConn(t, url, "qos1")
	if tok := c.Subscribe("q/#", 1, nil); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe: %v", tok.Error())
	}
	marked := &nats.Msg{Subject: "q.marked", Data: []byte("marked"), Header: nats.Header{"Nmqtt-Pub": {"1"}}}
	if err := nc.PublishMsg(marked); err != nil {
		t.Fatal(err)
	}
	if err := nc.Publish("q.plain", []byte("plain")); err != nil {
		t.Fatal(err)
	}
	// Both go the same way from one connection to one subscription: the
	// marked one would come first.
	select {
	case m := <-got:
		if m.payload != "plain" {
			t.Fatalf("the QoS 1 subscriber got %q first: NATS delivers Nmqtt-Pub messages now", m.payload)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the QoS 1 subscriber got nothing")
	}
}

// Header values pass nats.go unchanged, and come back as they were, for
// any user property.
func FuzzHeadersRoundTrip(f *testing.F) {
	f.Add("k", "v", "text/plain", "r/1")
	f.Add(" =%", "% \r\n", " x\x00", "a b")
	f.Add("é", "🌡", "é", "/")
	f.Fuzz(func(t *testing.T, key, value, ct, rt string) {
		m := core.Message{
			ContentType:    ct,
			ResponseTopic:  rt,
			UserProperties: []core.UserProperty{{Key: key, Value: value}},
		}
		p := Provenance{Origin: core.Origin{Client: key}, Path: []string{value}}
		h := EncodeHeaders(&m, p, t0)
		for k, vs := range h {
			for _, v := range vs {
				if !headerSafe(v) {
					t.Fatalf("header %s: %q would not survive nats.go", k, v)
				}
			}
		}
		valid := true
		for _, s := range []string{key, value, ct, rt} {
			valid = valid && mqttString(s) == nil
		}
		var got core.Message
		gp, err := DecodeHeaders(h, &got, t0)
		if !valid {
			return // no MQTT message holds such strings
		}
		if err != nil {
			t.Fatalf("DecodeHeaders(%q): %v", h, err)
		}
		if !reflect.DeepEqual(got, m) || !reflect.DeepEqual(gp, p) {
			t.Fatalf("headers %q decode to %+v, %+v; want %+v, %+v", h, got, gp, m, p)
		}
	})
}

// go test -run '^$' -bench Headers -benchmem ./bridge/
func BenchmarkEncodeHeaders(b *testing.B) {
	m, p := headerCases[len(headerCases)-1].m, headerCases[len(headerCases)-1].p
	b.ReportAllocs()
	for b.Loop() {
		EncodeHeaders(&m, p, t0)
	}
}

func BenchmarkDecodeHeaders(b *testing.B) {
	m, p := headerCases[len(headerCases)-1].m, headerCases[len(headerCases)-1].p
	h := EncodeHeaders(&m, p, t0)
	b.ReportAllocs()
	for b.Loop() {
		var got core.Message
		if _, err := DecodeHeaders(h, &got, t0); err != nil {
			b.Fatal(err)
		}
	}
}

// A device's QoS 0 reading, as it usually leaves: no properties, its
// origin and a one-gateway path.
func BenchmarkEncodeHeadersTypical(b *testing.B) {
	m := core.Message{Topic: "sensors/room1/temp", Payload: []byte("21.5")}
	p := Provenance{Origin: core.Origin{Protocol: core.ProtocolMQTT, Node: "edge-1", Client: "sensor-7"}, Path: []string{"edge-1"}}
	b.ReportAllocs()
	for b.Loop() {
		EncodeHeaders(&m, p, t0)
	}
}

func BenchmarkDecodeHeadersTypical(b *testing.B) {
	m := core.Message{Topic: "sensors/room1/temp", Payload: []byte("21.5")}
	p := Provenance{Origin: core.Origin{Protocol: core.ProtocolMQTT, Node: "edge-1", Client: "sensor-7"}, Path: []string{"edge-1"}}
	h := EncodeHeaders(&m, p, t0)
	b.ReportAllocs()
	for b.Loop() {
		var got core.Message
		if _, err := DecodeHeaders(h, &got, t0); err != nil {
			b.Fatal(err)
		}
	}
}

// TestHeaderCache: the writer's cached headers are EncodeHeaders' path and
// QoS alone for every plain message, whatever its origin, and a message
// with any other property is not served from the cache.
func TestHeaderCache(t *testing.T) {
	var c headerCache
	path := []string{"n1"}
	for range 2 { // the second round is served from the cache
		for _, m := range []core.Message{
			{Topic: "a", QoS: 0, Origin: core.Origin{Protocol: core.ProtocolMQTT, Node: "n1", Client: "c1"}},
			{Topic: "b", QoS: 1, Origin: core.Origin{Protocol: core.ProtocolMQTT, Node: "n1", Client: "c1"}},
			{Topic: "a", QoS: 0, Origin: core.Origin{Protocol: core.ProtocolAMQP, Node: "n1", Client: "c 2"}},
		} {
			want := EncodeHeaders(&m, Provenance{Path: path}, t0)
			if got := c.get(&m, path); !reflect.DeepEqual(got, want) {
				t.Fatalf("%+v: cached %v, want %v", m, got, want)
			}
		}
	}
	if c.byQoS[0] == nil || c.byQoS[1] == nil || c.byQoS[2] != nil {
		t.Fatalf("cached by QoS: %v", c.byQoS)
	}
	o := core.Origin{Protocol: core.ProtocolMQTT, Node: "n1", Client: "c1"}
	for _, m := range []core.Message{
		{Retain: true, Origin: o}, {ContentType: "text/plain", Origin: o}, {CorrelationData: []byte{}, Origin: o},
		{ResponseTopic: "r", Origin: o}, {UserProperties: []core.UserProperty{{Key: "k"}}, Origin: o},
		{PayloadFormat: 1, Origin: o}, {Expiry: t0.Add(time.Minute), Origin: o},
	} {
		if h := c.get(&m, path); h != nil {
			t.Fatalf("%+v served from the cache: %v", m, h)
		}
	}
}
