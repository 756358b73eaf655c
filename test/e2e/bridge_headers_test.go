package e2e

import (
	"bytes"
	"slices"
	"testing"

	"github.com/eclipse/paho.golang/paho"
)

// Every MQTT 5 property the bridge carries survives gateway → NATS →
// gateway: content type, correlation data, response topic (mapped as a
// topic both ways), user properties in order with duplicates, payload
// format, message expiry, and the retain flag (the second gateway stores
// the message as retained, and a late subscriber gets it with RETAIN=1).
// Two gateways, because one gateway never takes back what it sent out
// (loop prevention).
func TestBridgeNATSEveryHeaderEndToEnd(t *testing.T) {
	s := startNATS(t, 0, "")
	g1 := startBridged(t, s, "gw1", []ruleJSON{
		{"direction": "out", "local": "hdr/#", "remote": "site.hdr.>", "qos": 0},
	})
	g2 := startBridged(t, s, "gw2", []ruleJSON{
		{"direction": "in", "local": "from1/#", "remote": "site.hdr.>", "qos": 1},
	})
	live := connect5(t, g2.MQTTAddr(), "live")
	live.subscribe(t, paho.SubscribeOptions{Topic: "from1/#", QoS: 1})

	format := byte(1)
	expiry := uint32(3600)
	users := paho.UserProperties{{Key: "unit", Value: "C"}, {Key: "k", Value: "1"}, {Key: "k", Value: "2"}, {Key: "é", Value: "ü"}}
	pub := connect5(t, g1.MQTTAddr(), "pub")
	pub.publish(t, &paho.Publish{Topic: "hdr/room.1/temp", QoS: 1, Retain: true, Payload: []byte("21.5"), Properties: &paho.PublishProperties{
		ContentType:     "text/plain; charset=utf-8",
		CorrelationData: []byte{0, 1, 2, 0xff},
		ResponseTopic:   "replies/room.1/x",
		PayloadFormat:   &format,
		MessageExpiry:   &expiry,
		User:            users,
	}})

	check := func(who string, m *paho.Publish, retain bool) {
		t.Helper()
		if m.Topic != "from1/room.1/temp" || string(m.Payload) != "21.5" || m.Retain != retain {
			t.Fatalf("%s: topic %q payload %q retain %v", who, m.Topic, m.Payload, m.Retain)
		}
		p := m.Properties
		if p == nil {
			t.Fatalf("%s: no properties", who)
		}
		if p.ContentType != "text/plain; charset=utf-8" || !bytes.Equal(p.CorrelationData, []byte{0, 1, 2, 0xff}) ||
			p.ResponseTopic != "replies/room.1/x" {
			t.Errorf("%s: content type %q correlation %x response topic %q", who, p.ContentType, p.CorrelationData, p.ResponseTopic)
		}
		if p.PayloadFormat == nil || *p.PayloadFormat != 1 {
			t.Errorf("%s: payload format %v", who, p.PayloadFormat)
		}
		if p.MessageExpiry == nil || *p.MessageExpiry == 0 || *p.MessageExpiry > expiry {
			t.Errorf("%s: message expiry %v, want 1..%d", who, p.MessageExpiry, expiry)
		}
		if !slices.Equal(p.User, users) {
			t.Errorf("%s: user properties %v, want %v", who, p.User, users)
		}
	}
	// A live delivery never carries the retain flag (docs/architecture.md, decision 1).
	check("live subscriber", live.next(t), false)
	late := connect5(t, g2.MQTTAddr(), "late")
	late.subscribe(t, paho.SubscribeOptions{Topic: "from1/#", QoS: 1})
	check("late subscriber", late.next(t), true)
}
