package mqtt

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/tolsey/tolsey/core"
	"github.com/tolsey/tolsey/retain"
	"github.com/tolsey/tolsey/retain/memory"
)

// TestRoutedFanOutEncodingsPerSubscriber: messages from another
// front-end, injected with their payload shared by the subscribers'
// copies (mochi patch 45) and fanned out with QoS 0 encodings shared by
// the clients that need the same bytes (patch 27, written from the queued
// packet: patch 47), reach subscribers that each need other bytes with
// theirs: MQTT 3.1.1 beside MQTT 5, a subscription identifier, a topic
// alias, Retain As Published, QoS 1 (a packet id), the message expiry
// interval left. Every payload arrives as published, and the published
// messages' payloads are unchanged after their delivery.
func TestRoutedFanOutEncodingsPerSubscriber(t *testing.T) {
	s := startTestServer(t, memory.New(retain.Limits{}))
	r := s.opts.Router

	connect := func(id string, version byte, props packets.Properties) *rawClient {
		c := dialRawConn(t, s.Addr(), version)
		c.write(t, packets.Packet{
			FixedHeader: packets.FixedHeader{Type: packets.Connect},
			Connect:     packets.ConnectParams{ProtocolName: []byte("MQTT"), Clean: true, Keepalive: 30, ClientIdentifier: id},
			Properties:  props,
		})
		if pk := c.read(t); pk.FixedHeader.Type != packets.Connack || pk.ReasonCode != 0 {
			t.Fatalf("%s: want a successful CONNACK, got %s %#x", id, packets.PacketNames[pk.FixedHeader.Type], pk.ReasonCode)
		}
		return c
	}
	subscribe := func(c *rawClient, sub packets.Subscription, props packets.Properties) {
		c.write(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1}, PacketID: 1,
			Filters: packets.Subscriptions{sub}, Properties: props})
		if pk := c.read(t); pk.FixedHeader.Type != packets.Suback || len(pk.ReasonCodes) != 1 || pk.ReasonCodes[0] >= 0x80 {
			t.Fatalf("want a granted SUBACK, got %s %v", packets.PacketNames[pk.FixedHeader.Type], pk.ReasonCodes)
		}
	}

	type subscriber struct {
		name    string
		c       *rawClient
		v5      bool
		qos     byte
		sid     int  // subscription identifier expected (0: none)
		rap     bool // Retain As Published
		aliases bool // resolves topic aliases
	}
	f := packets.Subscription{Filter: "enc/#"}
	v311 := connect("v311", 4, packets.Properties{})
	subscribe(v311, f, packets.Properties{})
	plain := connect("plain", 5, packets.Properties{})
	subscribe(plain, f, packets.Properties{})
	plain2 := connect("plain2", 5, packets.Properties{}) // shares plain's encoding
	subscribe(plain2, f, packets.Properties{})
	sid := connect("sid", 5, packets.Properties{})
	subscribe(sid, f, packets.Properties{SubscriptionIdentifier: []int{7}})
	alias := connect("alias", 5, packets.Properties{TopicAliasMaximum: 2})
	subscribe(alias, f, packets.Properties{})
	rap := connect("rap", 5, packets.Properties{})
	subscribe(rap, packets.Subscription{Filter: "enc/#", RetainAsPublished: true}, packets.Properties{})
	q1 := connect("q1", 5, packets.Properties{})
	subscribe(q1, packets.Subscription{Filter: "enc/#", Qos: 1}, packets.Properties{})
	subs := []subscriber{
		{name: "v311", c: v311},
		{name: "plain", c: plain, v5: true},
		{name: "plain2", c: plain2, v5: true},
		{name: "sid", c: sid, v5: true, sid: 7},
		{name: "alias", c: alias, v5: true, aliases: true},
		{name: "rap", c: rap, v5: true, rap: true},
		{name: "q1", c: q1, v5: true, qos: 1},
	}

	// Published from a goroutine while the subscribers read, so that
	// copies of different messages are queued and written at once.
	const n = 200
	msgs := make([]*core.Message, n)
	want := make([]string, n)
	for i := range msgs {
		want[i] = fmt.Sprintf("payload %d of the routed stream", i)
		m := &core.Message{Topic: fmt.Sprintf("enc/%d", i%3), Payload: []byte(want[i]), QoS: 1,
			Origin: core.Origin{Protocol: core.ProtocolAMQP}}
		if i%5 == 0 {
			m.Expiry = time.Now().Add(time.Hour)
		}
		if i%7 == 0 {
			m.Retain = true
		}
		msgs[i] = m
	}
	go func() {
		for _, m := range msgs {
			r.Publish(context.Background(), m)
		}
	}()

	var wg sync.WaitGroup
	errs := make(chan error, len(subs))
	for _, sb := range subs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			aliases := map[uint16]string{}
			for i := range n {
				pk, err := sb.c.next()
				if err != nil {
					errs <- fmt.Errorf("%s: message %d: %w", sb.name, i, err)
					return
				}
				if err := checkRouted(pk, msgs[i], want[i], sb.v5, sb.qos, sb.sid, sb.rap, sb.aliases, aliases); err != nil {
					errs <- fmt.Errorf("%s: message %d: %w", sb.name, i, err)
					return
				}
				if pk.FixedHeader.Qos > 0 {
					ack := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Puback}, PacketID: pk.PacketID}
					b, err := encodePacket(sb.c.version, ack)
					if err == nil {
						_, err = sb.c.conn.Write(b)
					}
					if err != nil {
						errs <- fmt.Errorf("%s: PUBACK: %w", sb.name, err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for i, m := range msgs {
		if string(m.Payload) != want[i] {
			t.Errorf("published message %d's payload changed to %q", i, m.Payload)
		}
	}
}

// checkRouted reports how pk, as a subscriber read it, is not m as that
// subscriber should get it.
func checkRouted(pk packets.Packet, m *core.Message, payload string, v5 bool, qos byte, sid int, rap, resolve bool, aliases map[uint16]string) error {
	if pk.FixedHeader.Type != packets.Publish {
		return fmt.Errorf("got %s, want a PUBLISH", packets.PacketNames[pk.FixedHeader.Type])
	}
	topic := pk.TopicName
	if a := pk.Properties.TopicAlias; pk.Properties.TopicAliasFlag || a > 0 {
		if !resolve {
			return fmt.Errorf("a topic alias %d to a client that allows none", a)
		}
		if topic != "" {
			aliases[a] = topic
		} else {
			topic = aliases[a]
		}
	}
	if topic != m.Topic || string(pk.Payload) != payload {
		return fmt.Errorf("got %q %q, want %q %q", topic, pk.Payload, m.Topic, payload)
	}
	if pk.FixedHeader.Qos != qos || (qos > 0) != (pk.PacketID != 0) {
		return fmt.Errorf("QoS %d packet id %d, want QoS %d", pk.FixedHeader.Qos, pk.PacketID, qos)
	}
	if wantRetain := rap && m.Retain; pk.FixedHeader.Retain != wantRetain {
		return fmt.Errorf("RETAIN %v, want %v", pk.FixedHeader.Retain, wantRetain)
	}
	ids := pk.Properties.SubscriptionIdentifier
	if (sid == 0) != (len(ids) == 0) || (sid != 0 && (len(ids) != 1 || ids[0] != sid)) {
		return fmt.Errorf("subscription identifiers %v, want %d", ids, sid)
	}
	e := pk.Properties.MessageExpiryInterval
	switch {
	case !v5 || m.Expiry.IsZero():
		if e != 0 {
			return fmt.Errorf("message expiry interval %d, want none", e)
		}
	case e == 0 || e > 3600:
		return fmt.Errorf("message expiry interval %d, want what is left of an hour", e)
	}
	return nil
}
