package mqtt

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/tolsey/tolsey/retain"
	"github.com/tolsey/tolsey/retain/memory"
)

// FuzzListener (drill 9) drives a live front-end's MQTT listener over a real
// socket with mutated real traffic: each input is what one client sends on
// a connection of its own, after which it closes its side. Seeds are whole
// sessions encoded by mochi's own codec, MQTT 3.1.1 and 5: CONNECT with a
// will, user name and password and every property, SUBSCRIBE with every
// option (no local, retain as published, retain handling, subscription
// identifier, shared and $queue filters), PUBLISH with every property at
// each QoS, and the acknowledgements, PINGREQ, UNSUBSCRIBE, AUTH and
// DISCONNECT. After each input:
//
//   - the process is alive (a panic on any of the server's goroutines
//     ends the fuzzing run with it);
//   - the fuzzed connection ends once the client has closed its side, and
//     what the server wrote on it is a sequence of whole MQTT packets, the
//     CONNACK first if any, nothing after a DISCONNECT [MQTT-3.14.4-1], and
//     a DISCONNECT from the server carries an error reason code (a
//     malformed packet: 0x81, a protocol error: 0x82);
//   - another client, connected once for the whole run, still gets its own
//     messages back: the gateway serves everyone else.
//
// Short run: test/fuzz-short. Long run: docs/reliability.md, drill 9.
func FuzzListener(f *testing.F) {
	for _, seed := range listenerSeeds() {
		f.Add(seed)
	}
	s := startTestServer(f, memory.New(retain.Limits{}))
	ctl, err := newControlClient(s.Addr())
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { ctl.conn.Close() })
	f.Fuzz(func(t *testing.T, data []byte) {
		out, err := exchange(s.Addr(), data)
		if err != nil {
			t.Fatalf("fuzzed connection: %v", err)
		}
		if err := checkServerStream(out); err != nil {
			t.Fatalf("what the server wrote (% x): %v", out, err)
		}
		if err := ctl.roundTrip(); err != nil {
			t.Fatalf("the control client, after the fuzzed connection: %v", err)
		}
	})
}

// exchange sends data on a connection of its own, closes its side and
// returns what the server wrote until it closed the connection.
func exchange(addr string, data []byte) ([]byte, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(15 * time.Second))
	wrote := make(chan error, 1)
	go func() {
		_, err := c.Write(data)
		if cerr := c.(*net.TCPConn).CloseWrite(); err == nil {
			err = cerr
		}
		wrote <- err
	}()
	var out bytes.Buffer
	_, err = io.Copy(&out, c)
	<-wrote // a write refused by a closed connection is no failure
	if errors.Is(err, net.ErrClosed) || isReset(err) {
		err = nil // the server closed with input unread: a reset is allowed
	}
	if err != nil {
		return out.Bytes(), fmt.Errorf("the server did not end the connection after the client's end: %w", err)
	}
	return out.Bytes(), nil
}

func isReset(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "read" && !op.Timeout()
}

// checkServerStream checks what a server wrote on one connection: whole
// packets of server-to-client types, CONNACK first, nothing after a
// DISCONNECT, whose reason code (MQTT 5) is an error.
func checkServerStream(b []byte) error {
	r := bytes.NewReader(b)
	for i := 0; r.Len() > 0; i++ {
		h, _ := r.ReadByte()
		n, err := binary.ReadUvarint(r)
		if err != nil || n > uint64(r.Len()) {
			return fmt.Errorf("packet %d: cut short or bad length (%d, %v)", i, n, err)
		}
		body := make([]byte, n)
		_, _ = io.ReadFull(r, body)
		switch typ := h >> 4; {
		case typ == packets.Connack:
			if i != 0 {
				return fmt.Errorf("CONNACK as packet %d", i)
			}
		case i == 0:
			return fmt.Errorf("%s before the CONNACK", packets.PacketNames[typ])
		case typ == packets.Disconnect:
			if r.Len() > 0 {
				return fmt.Errorf("%d bytes after the DISCONNECT", r.Len())
			}
			if len(body) > 0 && body[0] < 0x80 {
				return fmt.Errorf("DISCONNECT with reason code %#x, not an error", body[0])
			}
		case typ == packets.Connect || typ == packets.Subscribe || typ == packets.Unsubscribe || typ == packets.Pingreq:
			return fmt.Errorf("%s from the server", packets.PacketNames[typ])
		}
	}
	return nil
}

// controlClient is an MQTT 5 client subscribed to a topic of its own (a
// random id and topic: fuzzed inputs cannot take its session or publish
// there by chance), which publishes to it and reads the message back.
type controlClient struct {
	conn  net.Conn
	r     *bufio.Reader
	topic string
	seq   int
}

func newControlClient(addr string) (*controlClient, error) {
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	id := "fuzz-control-" + hex.EncodeToString(rnd[:])
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	cc := &controlClient{conn: c, r: bufio.NewReader(c), topic: id + "/t"}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	defer c.SetDeadline(time.Time{})
	connect := encode(5, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect},
		Connect: packets.ConnectParams{ProtocolName: []byte("MQTT"), Clean: true, ClientIdentifier: id}})
	sub := encode(5, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1}, PacketID: 1,
		Filters: packets.Subscriptions{{Filter: cc.topic}}})
	if _, err := c.Write(append(connect, sub...)); err != nil {
		return nil, err
	}
	for _, want := range []byte{packets.Connack, packets.Suback} {
		h, _, err := cc.next()
		if err != nil {
			return nil, err
		}
		if h>>4 != want {
			return nil, fmt.Errorf("control client: got %s, want %s", packets.PacketNames[h>>4], packets.PacketNames[want])
		}
	}
	return cc, nil
}

func (cc *controlClient) next() (byte, []byte, error) {
	h, err := cc.r.ReadByte()
	if err != nil {
		return 0, nil, err
	}
	n, err := binary.ReadUvarint(cc.r)
	if err != nil {
		return 0, nil, err
	}
	body := make([]byte, n)
	_, err = io.ReadFull(cc.r, body)
	return h, body, err
}

// roundTrip publishes the next sequence number to the control topic at QoS
// 0 and waits for it to come back.
func (cc *controlClient) roundTrip() error {
	cc.seq++
	payload := fmt.Sprintf("ctl-%d", cc.seq)
	_ = cc.conn.SetDeadline(time.Now().Add(10 * time.Second))
	defer cc.conn.SetDeadline(time.Time{})
	if _, err := cc.conn.Write(encode(5, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish},
		TopicName: cc.topic, Payload: []byte(payload)})); err != nil {
		return err
	}
	for {
		h, body, err := cc.next()
		if err != nil {
			return err
		}
		if h>>4 == packets.Publish && bytes.HasSuffix(body, []byte(payload)) {
			return nil
		}
	}
}

// encode is encodePacket for seeds: one the codec cannot write is a bug in
// the seed.
func encode(v byte, pk packets.Packet) []byte {
	b, err := encodePacket(v, pk)
	if err != nil {
		panic(err)
	}
	return b
}

// encodePacket is mochi's encoding of a client's packet pk for protocol
// version v.
func encodePacket(v byte, pk packets.Packet) ([]byte, error) {
	pk.ProtocolVersion = v
	var buf bytes.Buffer
	var err error
	switch pk.FixedHeader.Type {
	case packets.Connect:
		err = pk.ConnectEncode(&buf)
	case packets.Publish:
		err = pk.PublishEncode(&buf)
	case packets.Puback:
		err = pk.PubackEncode(&buf)
	case packets.Pubrec:
		err = pk.PubrecEncode(&buf)
	case packets.Pubrel:
		pk.FixedHeader.Qos = 1 // [MQTT-3.6.1-1]
		err = pk.PubrelEncode(&buf)
	case packets.Pubcomp:
		err = pk.PubcompEncode(&buf)
	case packets.Subscribe:
		err = pk.SubscribeEncode(&buf)
	case packets.Unsubscribe:
		err = pk.UnsubscribeEncode(&buf)
	case packets.Pingreq:
		err = pk.PingreqEncode(&buf)
	case packets.Disconnect:
		err = pk.DisconnectEncode(&buf)
	case packets.Auth:
		err = pk.AuthEncode(&buf)
	default:
		err = fmt.Errorf("no encoder for a client's %s", packets.PacketNames[pk.FixedHeader.Type])
	}
	return buf.Bytes(), err
}

// listenerSeeds are whole client sessions, MQTT 3.1.1 and 5.
func listenerSeeds() [][]byte {
	user := []packets.UserProperty{{Key: "k", Val: "v"}, {Key: "k", Val: "w"}}
	connect := func(v byte, id string, clean bool, props packets.Properties) packets.Packet {
		return packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect}, Properties: props,
			Connect: packets.ConnectParams{ProtocolName: []byte("MQTT"), Clean: clean, Keepalive: 30,
				ClientIdentifier: id, UsernameFlag: true, Username: []byte("user"), PasswordFlag: true, Password: []byte("pass"),
				WillFlag: true, WillQos: 1, WillRetain: true, WillTopic: "fuzz/will/" + id, WillPayload: []byte("gone"),
				WillProperties: packets.Properties{WillDelayInterval: 1, PayloadFormat: 1, PayloadFormatFlag: true,
					MessageExpiryInterval: 60, ContentType: "text/plain", ResponseTopic: "fuzz/reply",
					CorrelationData: []byte("corr"), User: user}}}
	}
	connProps := packets.Properties{SessionExpiryInterval: 60, SessionExpiryIntervalFlag: true, ReceiveMaximum: 10,
		MaximumPacketSize: 1 << 16, TopicAliasMaximum: 4, RequestResponseInfo: 1, RequestProblemInfo: 1,
		RequestProblemInfoFlag: true, User: user}
	subscribe := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1}, PacketID: 1,
		Properties: packets.Properties{SubscriptionIdentifier: []int{7}, User: user},
		Filters: packets.Subscriptions{
			{Filter: "fuzz/a/#", Qos: 2, NoLocal: true, RetainAsPublished: true, RetainHandling: 1},
			{Filter: "fuzz/+/b", Qos: 1, RetainHandling: 2},
			{Filter: "$share/g/fuzz/s", Qos: 1},
			{Filter: "$queue/fuzzq", Qos: 1},
			{Filter: "fuzz/r", Qos: 0, RetainAsPublished: true},
		}}
	publish := func(qos byte, id uint16, retain bool) packets.Packet {
		return packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: qos, Retain: retain}, PacketID: id,
			TopicName: "fuzz/a/x", Payload: []byte("hello"),
			Properties: packets.Properties{PayloadFormat: 1, PayloadFormatFlag: true, MessageExpiryInterval: 30,
				TopicAlias: 1, TopicAliasFlag: true, ResponseTopic: "fuzz/reply", CorrelationData: []byte("c"),
				ContentType: "application/json", User: user}}
	}
	ack := func(typ byte, id uint16, code byte) packets.Packet {
		return packets.Packet{FixedHeader: packets.FixedHeader{Type: typ},
			PacketID: id, ReasonCode: code, Properties: packets.Properties{ReasonString: "why", User: user}}
	}
	session := func(v byte, id string, clean bool, props packets.Properties) []byte {
		pkts := []packets.Packet{
			connect(v, id, clean, props),
			subscribe,
			publish(0, 0, false),
			publish(1, 2, true),
			publish(2, 3, false),
			ack(packets.Pubrel, 3, 0),
			ack(packets.Puback, 1, 0),
			ack(packets.Pubrec, 2, 0),
			ack(packets.Pubcomp, 2, 0),
			{FixedHeader: packets.FixedHeader{Type: packets.Pingreq}},
			{FixedHeader: packets.FixedHeader{Type: packets.Unsubscribe, Qos: 1}, PacketID: 4,
				Filters: packets.Subscriptions{{Filter: "fuzz/a/#"}, {Filter: "$share/g/fuzz/s"}}},
			{FixedHeader: packets.FixedHeader{Type: packets.Disconnect}, ReasonCode: 0x04,
				Properties: packets.Properties{SessionExpiryInterval: 0, SessionExpiryIntervalFlag: true, ReasonString: "bye"}},
		}
		var b []byte
		for _, pk := range pkts {
			if v < 5 {
				pk.Properties = packets.Properties{}
				pk.Filters = append(packets.Subscriptions(nil), pk.Filters...)
				for i := range pk.Filters {
					pk.Filters[i].NoLocal, pk.Filters[i].RetainAsPublished, pk.Filters[i].RetainHandling = false, false, 0
				}
				pk.ReasonCode = 0
				pk.Connect.WillProperties = packets.Properties{}
			}
			b = append(b, encode(v, pk)...)
		}
		return b
	}
	seeds := [][]byte{
		session(5, "fuzz-v5", true, connProps),
		session(5, "fuzz-v5-persistent", false, connProps),
		session(4, "fuzz-v311", true, packets.Properties{}),
		session(4, "fuzz-v311-persistent", false, packets.Properties{}),
	}
	// MQTT 5 enhanced authentication, which the gateway does not offer.
	seeds = append(seeds, append(encode(5, connect(5, "fuzz-auth", true, packets.Properties{AuthenticationMethod: "SCRAM-SHA-1",
		AuthenticationData: []byte("x")})), encode(5, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Auth},
		ReasonCode: 0x19, Properties: packets.Properties{AuthenticationMethod: "SCRAM-SHA-1", AuthenticationData: []byte("y")}})...))
	// A client may not send a subscription identifier on PUBLISH; a topic
	// alias alone (no topic name) after the alias was set.
	pub := publish(1, 9, false)
	pub.Properties.SubscriptionIdentifier = []int{3}
	alias := publish(0, 0, false)
	alias.TopicName = ""
	seeds = append(seeds, append(append(encode(5, connect(5, "fuzz-props", true, connProps)), encode(5, pub)...), encode(5, alias)...))
	// Malformed: a bad remaining length, a truncated CONNECT, reserved
	// flags set on SUBSCRIBE, a second CONNECT.
	seeds = append(seeds,
		[]byte{0x10, 0xff, 0xff, 0xff, 0xff, 0x7f},
		encode(5, connect(5, "fuzz-cut", true, connProps))[:20],
		append(encode(5, connect(5, "fuzz-flags", true, packets.Properties{})), 0x80, 0x06, 0x00, 0x01, 0x00, 0x01, 'a', 0x00),
		append(encode(5, connect(5, "fuzz-twice", true, packets.Properties{})), encode(5, connect(5, "fuzz-twice", true, packets.Properties{}))...),
	)
	return seeds
}
