package amqp

import (
	"reflect"
	"testing"
	"time"

	"github.com/tolsey/tolsey/amqp/internal/buffer"
	"github.com/tolsey/tolsey/amqp/internal/encoding"
	"github.com/tolsey/tolsey/amqp/internal/frames"
	"github.com/tolsey/tolsey/core"
)

// TestHeadersRendered: subject, a priority other than the default and
// creation-time become the header user properties, after the
// application properties; the default priority is not said.
func TestHeadersRendered(t *testing.T) {
	prio, dflt := uint8(9), uint8(defaultPriority)
	for _, tc := range []struct {
		name string
		am   *frames.Message
		want []core.UserProperty
	}{
		{"all", &frames.Message{Header: &frames.MessageHeader{Priority: &prio}, Value: "x",
			ApplicationProperties: encoding.ApplicationProperties{{Key: "k", Value: "v"}},
			Properties:            &frames.MessageProperties{Subject: "t1", CreationTime: 1500}},
			[]core.UserProperty{{Key: "k", Value: "v"}, {Key: propSubject, Value: "t1"},
				{Key: propCreationTime, Value: "1970-01-01T00:00:01.5Z"}, {Key: propPriority, Value: "9"}}},
		{"default priority", &frames.Message{Header: &frames.MessageHeader{Priority: &dflt}, Value: "x",
			Properties: &frames.MessageProperties{Subject: "t2"}},
			[]core.UserProperty{{Key: propSubject, Value: "t2"}}},
		{"none", &frames.Message{Value: "x"}, nil},
	} {
		in, err := roundTrip(t, tc.am)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(in.msg.UserProperties, tc.want) {
			t.Errorf("%s: user properties %v, want %v", tc.name, in.msg.UserProperties, tc.want)
		}
	}
}

// TestHeadersRestored: an MQTT message's header user properties become
// the AMQP fields (creation time as RFC 3339 or epoch milliseconds); one
// whose value does not parse stays an application property.
func TestHeadersRestored(t *testing.T) {
	for _, tc := range []struct {
		name     string
		props    []core.UserProperty
		subject  string
		priority *uint8
		created  encoding.Timestamp
		app      encoding.ApplicationProperties
	}{
		{"rfc3339", []core.UserProperty{{Key: propSubject, Value: "s"}, {Key: propPriority, Value: "0"},
			{Key: propCreationTime, Value: "1970-01-01T00:00:01.5Z"}}, "s", ptr8(0), 1500, nil},
		{"millis", []core.UserProperty{{Key: propCreationTime, Value: "1700000000123"}, {Key: "k", Value: "v"}},
			"", nil, 1700000000123, encoding.ApplicationProperties{{Key: "k", Value: "v"}}},
		{"bad values stay", []core.UserProperty{{Key: propPriority, Value: "high"}, {Key: propCreationTime, Value: "yesterday"}},
			"", nil, 2000_000, encoding.ApplicationProperties{{Key: propPriority, Value: "high"}, {Key: propCreationTime, Value: "yesterday"}}},
	} {
		m := &core.Message{Topic: "t", Payload: []byte("x"), Created: time.UnixMilli(2000_000), UserProperties: tc.props}
		var enc encoder
		var b buffer.Buffer
		if err := enc.encode(&b, m, false, -1, -1, deliveryHeader{}, time.Now()); err != nil {
			t.Fatal(err)
		}
		var got frames.Message
		if err := got.Decode(b.Written()); err != nil {
			t.Fatal(err)
		}
		var prio *uint8
		if got.Header != nil {
			prio = got.Header.Priority
		}
		if got.Properties.Subject != tc.subject || !reflect.DeepEqual(prio, tc.priority) || got.Properties.CreationTime != tc.created {
			t.Errorf("%s: subject %q priority %v creation-time %d, want %q %v %d", tc.name,
				got.Properties.Subject, prio, got.Properties.CreationTime, tc.subject, tc.priority, tc.created)
		}
		if !reflect.DeepEqual(got.ApplicationProperties, tc.app) {
			t.Errorf("%s: application properties %v, want %v", tc.name, got.ApplicationProperties, tc.app)
		}
	}
}

// TestEncodeHeadersAllocs: restoring the header properties costs no
// allocation beyond a plain encode's.
func TestEncodeHeadersAllocs(t *testing.T) {
	plain := &core.Message{Topic: "a/b", Payload: []byte("hello"), QoS: 1,
		UserProperties: []core.UserProperty{{Key: "k", Value: "v"}}, Created: time.Now()}
	withHeaders := &core.Message{Topic: "a/b", Payload: []byte("hello"), QoS: 1,
		UserProperties: []core.UserProperty{{Key: "k", Value: "v"}, {Key: propSubject, Value: "s"}, {Key: propPriority, Value: "7"},
			{Key: propCreationTime, Value: "2024-05-01T12:00:00.5Z"}}, Created: time.Now()}
	var e encoder
	var b buffer.Buffer
	now := time.Now()
	allocs := func(m *core.Message) float64 {
		e.encode(&b, m, false, jmsTopic, -1, deliveryHeader{}, now)
		return testing.AllocsPerRun(100, func() {
			b.Reset()
			e.encode(&b, m, false, jmsTopic, -1, deliveryHeader{}, now)
		})
	}
	if p, h := allocs(plain), allocs(withHeaders); h > p {
		t.Fatalf("%v allocations per encode with the header properties, %v without", h, p)
	}
}

func ptr8(v uint8) *uint8 { return &v }
