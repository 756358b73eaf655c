package gateway

import (
	"bufio"
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
)

// The queue engine, queues.autoCreate and queues.v311Full reach the MQTT
// front-end: a SUBSCRIBE to $queue/<unknown> creates the queue, and an
// MQTT 3.1.1 publish a full queue refuses is acknowledged under
// v311Full: drop (the default closes the connection).
func TestMQTTQueuesWired(t *testing.T) {
	g := startGateway(t, "--queues.autoCreate=true", "--queues.v311Full=drop")
	c := mqttClient(t, g, "consumer")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	sa, err := c.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "$queue/auto", QoS: 1}}})
	if err != nil || len(sa.Reasons) != 1 || sa.Reasons[0] != 1 {
		t.Fatalf("SUBSCRIBE $queue/auto with queues.autoCreate: %v %v", sa, err)
	}
	if _, ok := g.queues.Load().Queue("auto"); !ok {
		t.Fatal("queue auto not created")
	}

	if code, body := call(t, g, "PUT", "/api/v1/queues/tiny", `{"maxMessages": 1}`); code != 201 {
		t.Fatalf("PUT tiny: %d %s", code, body)
	}
	conn, err := net.Dial("tcp", g.MQTTAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(conn)
	// MQTT 3.1.1 CONNECT, clean session, keep alive 30 s, client id "p3".
	write(t, conn, []byte{0x10, 14, 0, 4, 'M', 'Q', 'T', 'T', 4, 0x02, 0, 30, 0, 2, 'p', '3'})
	expect(t, r, []byte{0x20, 2, 0, 0}, "CONNACK")
	topic := "$queue/tiny"
	for id := byte(1); id <= 2; id++ { // the second is over maxMessages
		pk := []byte{0x32, byte(2 + len(topic) + 2 + 1), 0, byte(len(topic))}
		pk = append(append(pk, topic...), 0, id, 'm')
		write(t, conn, pk)
		expect(t, r, []byte{0x40, 2, 0, id}, "PUBACK")
	}
	q, _ := g.queues.Load().Queue("tiny")
	if in := q.Info(); in.Messages != 1 || in.Counters.Refused != 1 {
		t.Fatalf("want 1 message stored and 1 refused, got %+v", in)
	}
}

func write(t *testing.T, c net.Conn, b []byte) {
	t.Helper()
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
}

func expect(t *testing.T, r io.Reader, want []byte, what string) {
	t.Helper()
	got := make([]byte, len(want))
	if _, err := io.ReadFull(r, got); err != nil || string(got) != string(want) {
		t.Fatalf("want %s % x, got % x, %v", what, want, got, err)
	}
}
