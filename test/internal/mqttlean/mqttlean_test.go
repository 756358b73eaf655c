package mqttlean

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"testing"
	"time"
)

// pair is a connected client Conn and the server's end of its socket,
// read as a Conn too (ReadPacket parses what the client wrote).
func pair(t *testing.T) (*Conn, *Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	acc := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		acc <- c
	}()
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	sc := <-acc
	if sc == nil {
		t.Fatal("accept failed")
	}
	cli := &Conn{nc: nc, r: bufio.NewReader(nc)}
	srv := &Conn{nc: sc, r: bufio.NewReader(sc)}
	t.Cleanup(func() { cli.Close(); srv.Close() })
	return cli, srv
}

// Queued publishes stay in the buffer until Flush, FlushAt bytes, or
// another packet, and go out whole and in order.
func TestQueueFlush(t *testing.T) {
	cli, srv := pair(t)
	if err := cli.Queue(0, "a/b", []byte("one"), 0); err != nil {
		t.Fatal(err)
	}
	if err := cli.Queue(7, "a/c", []byte("two"), 1); err != nil {
		t.Fatal(err)
	}
	_ = srv.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if p, err := srv.ReadPacket(); err == nil {
		t.Fatalf("read %+v before Flush", p)
	}
	if err := cli.Flush(); err != nil {
		t.Fatal(err)
	}
	_ = srv.SetReadDeadline(time.Now().Add(5 * time.Second))
	want := []Packet{
		{Type: PUBLISH, Topic: "a/b", Payload: []byte("one")},
		{Type: PUBLISH, Flags: 2, ID: 7, Topic: "a/c", Payload: []byte("two")},
	}
	for i, w := range want {
		p, err := srv.ReadPacket()
		if err != nil {
			t.Fatalf("packet %d: %v", i, err)
		}
		if p.Type != w.Type || p.Flags != w.Flags || p.ID != w.ID || p.Topic != w.Topic || !bytes.Equal(p.Payload, w.Payload) {
			t.Fatalf("packet %d: %+v, want %+v", i, p, w)
		}
	}

	// Another packet sends what was queued before it, then itself.
	if err := cli.Queue(0, "x", []byte("queued"), 0); err != nil {
		t.Fatal(err)
	}
	if err := cli.Puback(9); err != nil {
		t.Fatal(err)
	}
	if p, err := srv.ReadPacket(); err != nil || p.Type != PUBLISH || p.Topic != "x" {
		t.Fatalf("got %+v, %v; want the queued PUBLISH first", p, err)
	}
	if p, err := srv.ReadPacket(); err != nil || p.Type != PUBACK || p.ID != 9 {
		t.Fatalf("got %+v, %v; want PUBACK 9", p, err)
	}

	// FlushAt bytes go out without Flush (the packet that reaches it
	// included), the rest at Flush; a payload over 127 bytes needs a
	// two-byte remaining length.
	payload := bytes.Repeat([]byte{'p'}, 200)
	written, total := -1, 0
	const n = 200
	for i := 0; i < n; i++ {
		topic := fmt.Sprintf("t/%d", i)
		if err := cli.Queue(0, topic, payload, 0); err != nil {
			t.Fatal(err)
		}
		total += 1 + 2 + 2 + len(topic) + len(payload)
		if written < 0 && total >= FlushAt {
			written = i + 1
		}
	}
	read := func(from, to int) {
		for i := from; i < to; i++ {
			p, err := srv.ReadPacket()
			if err != nil {
				t.Fatalf("packet %d: %v", i, err)
			}
			if p.Topic != fmt.Sprintf("t/%d", i) || !bytes.Equal(p.Payload, payload) {
				t.Fatalf("packet %d: topic %q, %d bytes", i, p.Topic, len(p.Payload))
			}
		}
	}
	read(0, written)
	_ = srv.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if p, err := srv.ReadPacket(); err == nil {
		t.Fatalf("read %q before Flush", p.Topic)
	}
	if err := cli.Flush(); err != nil {
		t.Fatal(err)
	}
	_ = srv.SetReadDeadline(time.Now().Add(5 * time.Second))
	read(written, n)
}
