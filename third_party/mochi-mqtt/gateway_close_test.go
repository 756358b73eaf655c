package mqtt

// Tests of gateway patch 20: a DISCONNECT the server sends reaches a
// client that reads it (see PATCHES.md).

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
)

// Over real TCP, each round a client connects, sends PINGREQs without a
// pause (so the server's reader writes PINGRESPs, holding the write lock,
// and unread bytes wait in the server's socket) and reads; meanwhile the
// server ends it with DisconnectClientNoWait and 0x8B. The client must read
// the DISCONNECT before the connection ends. Before the patch it was lost
// either way: left pending behind the PINGRESP's writer and then written
// into a socket Stop had already closed, or discarded by the client's
// kernel on the reset a close with unread bytes sends.
func TestServerDisconnectReachesReadingClient(t *testing.T) {
	s := newServer()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns sync.WaitGroup
	defer conns.Wait()
	defer ln.Close()
	conns.Add(1)
	go func() {
		defer conns.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() {
				defer conns.Done()
				_ = s.EstablishConnection("tcp", c)
			}()
		}
	}()

	const rounds = 200
	lost := 0
	for i := 0; i < rounds; i++ {
		if err := disconnectRound(s, ln.Addr().String(), fmt.Sprintf("c%d", i)); err != nil {
			lost++
			t.Logf("round %d: %v", i, err)
		}
	}
	if lost > 0 {
		t.Fatalf("%d of %d clients did not read the server's DISCONNECT", lost, rounds)
	}
}

// disconnectRound is one round of TestServerDisconnectReachesReadingClient.
func disconnectRound(s *Server, addr, id string) error {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	connect := append([]byte{0x10, byte(13 + len(id)), 0, 4, 'M', 'Q', 'T', 'T', 5, 0x02, 0, 30, 0, 0, byte(len(id))}, id...)
	if _, err := c.Write(connect); err != nil {
		return err
	}
	r := bufio.NewReader(c)
	if typ, _, err := readRawPacket(r); err != nil || typ != packets.Connack {
		return fmt.Errorf("CONNACK: type %d, %v", typ, err)
	}
	cl, ok := s.Clients.Get(id)
	if !ok {
		return errors.New("client not registered after its CONNACK")
	}

	pinging := make(chan struct{})
	go func() {
		defer close(pinging)
		for {
			if _, err := c.Write([]byte{packets.Pingreq << 4, 0}); err != nil {
				return
			}
		}
	}()
	defer func() { <-pinging }()
	defer c.Close() // ends the pinger, before it is waited for

	disconnected := false
	for {
		typ, body, err := readRawPacket(r)
		if err != nil {
			return fmt.Errorf("no DISCONNECT before %w", err)
		}
		switch typ {
		case packets.Pingresp:
			if !disconnected { // the server's reader is busy: end it now
				disconnected = true
				_ = s.DisconnectClientNoWait(cl, packets.ErrServerShuttingDown)
			}
		case packets.Disconnect:
			if len(body) == 0 || body[0] != packets.ErrServerShuttingDown.Code {
				return fmt.Errorf("DISCONNECT % x, want reason code %#x", body, packets.ErrServerShuttingDown.Code)
			}
			return nil
		default:
			return fmt.Errorf("unexpected packet type %d", typ)
		}
	}
}

// readRawPacket reads one MQTT packet: its type and what follows its
// fixed header.
func readRawPacket(r *bufio.Reader) (byte, []byte, error) {
	b, err := r.ReadByte()
	if err != nil {
		return 0, nil, err
	}
	n, shift := 0, 0
	for {
		d, err := r.ReadByte()
		if err != nil {
			return 0, nil, err
		}
		n |= int(d&0x7f) << shift
		if d&0x80 == 0 {
			break
		}
		if shift += 7; shift > 21 {
			return 0, nil, errors.New("malformed remaining length")
		}
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return 0, nil, err
	}
	return b >> 4, body, nil
}

// A client that stopped reading holds nothing: a write to it is blocked
// (1 MiB, the socket buffers small) under a write timeout of a minute when
// DisconnectClientNoWait leaves the DISCONNECT pending behind it. Stop's
// deadline ends that write, and the connection's goroutine ends, long
// before the write timeout would have.
func TestServerDisconnectFreesStalledWriter(t *testing.T) {
	s := newServer()
	s.Options.WriteTimeout = time.Minute
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		_ = c.(*net.TCPConn).SetWriteBuffer(4096)
		_ = s.EstablishConnection("tcp", c)
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.(*net.TCPConn).SetReadBuffer(4096)
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte{0x10, 15, 0, 4, 'M', 'Q', 'T', 'T', 5, 0x02, 0, 30, 0, 0, 2, 's', 't'}); err != nil {
		t.Fatal(err)
	}
	if typ, _, err := readRawPacket(bufio.NewReader(c)); err != nil || typ != packets.Connack {
		t.Fatalf("CONNACK: type %d, %v", typ, err)
	}
	cl, ok := s.Clients.Get("st")
	if !ok {
		t.Fatal("client not registered after its CONNACK")
	}

	wrote := make(chan error, 1)
	go func() {
		wrote <- cl.WritePacket(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish},
			TopicName: "t", Payload: make([]byte, 1<<20)})
	}()
	for deadline := time.Now().Add(10 * time.Second); cl.Net.wmu.TryLock(); {
		cl.Net.wmu.Unlock() // the writer has not started yet
		if time.Now().After(deadline) {
			t.Fatal("the write never started")
		}
		time.Sleep(time.Millisecond)
	}
	_ = s.DisconnectClientNoWait(cl, packets.ErrServerShuttingDown) // left pending: the writer holds wmu
	select {
	case err := <-wrote:
		if err == nil {
			t.Fatal("a 1 MiB write to a client that reads nothing succeeded")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the blocked write outlived Stop by 10 s (write timeout: 1 min)")
	}
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the connection's goroutine outlived Stop by 10 s")
	}
}
