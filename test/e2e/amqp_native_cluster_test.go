package e2e

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"
)

// nativeMessage has every section a receiver can compare: a typed body
// the neutral fields cannot hold (so the gateway keeps the message's own
// encoding, docs/architecture.md decision 8), every header and properties
// field, annotations, typed application properties and a footer. No
// symbols: go-amqp reads them back as strings (the Proton and rhea checks,
// test/e2e/amqp/typed_matrix.py, compare every type).
func nativeMessage() *goamqp.Message {
	created := time.UnixMilli(1714564800500).UTC()
	// A future absolute-expiry-time: a message past it is expired and
	// may be dropped on the way (part 3 §3.2.4).
	expires := time.Now().Add(time.Hour).Truncate(time.Millisecond).UTC()
	return &goamqp.Message{
		Header: &goamqp.MessageHeader{Durable: true, Priority: 7, TTL: time.Hour, FirstAcquirer: true},
		Annotations: goamqp.Annotations{
			"x-custom": int64(5), "x-opt-jms-msg-type": int8(2),
		},
		Properties: &goamqp.MessageProperties{
			MessageID: goamqp.UUID{0x0f, 0x8f, 0xad, 0x5b, 0xd9, 0xcb, 0x46, 0x9f, 0xa1, 0x65, 0x70, 0x86, 0x77, 0x28, 0x95, 0x0e},
			UserID:    []byte("anonymous"), Subject: ptr("order.created"), CorrelationID: uint64(42),
			ContentType: ptr("application/x-map"), ContentEncoding: ptr("gzip"),
			AbsoluteExpiryTime: ptr(expires), CreationTime: ptr(created),
			GroupID: ptr("g"), GroupSequence: ptr(uint32(9)), ReplyToGroupID: ptr("rg"),
		},
		ApplicationProperties: map[string]any{
			"i": int32(7), "l": int64(1 << 40), "b": true, "f": float32(0.5), "d": 2.25, "s": "str",
			"u8": uint8(200), "ts": created,
		},
		Value:  map[any]any{"k": int16(3), "s": []any{int32(1), "two", nil, true}, int64(7): 1.5},
		Footer: goamqp.Annotations{"x-digest": []byte{1, 2, 3}},
	}
}

// nativeDiff names the sections of got that differ from sent, as the
// gateway promises them (docs/mapping.md, "AMQP → AMQP"): everything but
// the header's ttl (the time left) and the annotation x-opt-jms-dest the
// gateway sets.
func nativeDiff(sent, got *goamqp.Message) []string {
	var diff []string
	if got.Header == nil || got.Header.Durable != sent.Header.Durable || got.Header.Priority != sent.Header.Priority ||
		got.Header.TTL <= 0 || got.Header.TTL > sent.Header.TTL {
		diff = append(diff, "header")
	}
	ann := goamqp.Annotations{}
	for k, v := range got.Annotations {
		if k != "x-opt-jms-dest" {
			ann[k] = v
		}
	}
	if !reflect.DeepEqual(ann, sent.Annotations) {
		diff = append(diff, "message-annotations")
	}
	gp, sp := *got.Properties, *sent.Properties
	gp.To = nil // the receiver's address, set by the gateway
	if gp.AbsoluteExpiryTime != nil && gp.CreationTime != nil {
		a, c := gp.AbsoluteExpiryTime.UTC(), gp.CreationTime.UTC()
		gp.AbsoluteExpiryTime, gp.CreationTime = &a, &c
	}
	if !reflect.DeepEqual(gp, sp) {
		diff = append(diff, "properties")
	}
	gap := map[string]any{}
	for k, v := range got.ApplicationProperties {
		if ts, ok := v.(time.Time); ok {
			v = ts.UTC()
		}
		gap[k] = v
	}
	if !reflect.DeepEqual(gap, sent.ApplicationProperties) {
		diff = append(diff, "application-properties")
	}
	if !reflect.DeepEqual(got.Value, sent.Value) {
		diff = append(diff, "body")
	}
	if !reflect.DeepEqual(got.Footer, sent.Footer) {
		diff = append(diff, "footer")
	}
	return diff
}

// An AMQP message sent on one gateway of a cluster reaches an AMQP
// receiver on another gateway as it reaches one on its own gateway:
// unchanged, every section (docs/mapping.md, "AMQP → AMQP";
// docs/cluster.md).
func TestClusterNativeAMQPMessageUnchanged(t *testing.T) {
	_, gs := cluster3(t)
	a, b := gs[0], gs[1]
	sa, sb := amqpSession(t, a), amqpSession(t, b)
	ra := amqpReceiver(t, sa, "topic://native/x")
	rb := amqpReceiver(t, sb, "topic://native/x")

	// B's interest reaches A through NATS: ping until a message crosses.
	eventually(t, "a message sent on a to reach b", func() bool {
		amqpSend(t, sa, "topic://native/x", &goamqp.Message{Value: "ping"})
		amqpNext(t, ra)
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		m, err := rb.Receive(ctx, nil)
		if errors.Is(err, context.DeadlineExceeded) {
			return false
		}
		if err != nil {
			t.Fatalf("receive on b: %v", err)
		}
		_ = rb.AcceptMessage(context.Background(), m)
		return true
	})
	// Drain the pings that were on their way.
	amqpSend(t, sa, "topic://native/x", &goamqp.Message{Value: "fence"})
	for amqpBody(amqpNext(t, rb)) != "fence" {
	}
	for amqpBody(amqpNext(t, ra)) != "fence" {
	}

	sent := nativeMessage()
	amqpSend(t, sa, "topic://native/x", sent)
	ma := amqpNext(t, ra)
	if d := nativeDiff(sent, ma); len(d) > 0 {
		t.Errorf("receiver on the sender's gateway: %v differ: %#v %#v", d, ma.ApplicationProperties, ma.Value)
	}
	got := amqpNext(t, rb)
	if d := nativeDiff(sent, got); len(d) > 0 {
		t.Errorf("receiver on another gateway: %v differ; got header %+v properties %+v annotations %v application-properties %v body %#v footer %v",
			d, got.Header, got.Properties, got.Annotations, got.ApplicationProperties, got.Value, got.Footer)
	}
}
