package mqtt

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"

	"github.com/tolsey/tolsey/core"
	"github.com/tolsey/tolsey/retain"
	"github.com/tolsey/tolsey/retain/memory"
)

func rawConnect(t *testing.T, addr, id string, willTopic string) net.Conn {
	t.Helper()
	str := func(v string) []byte { return append([]byte{byte(len(v) >> 8), byte(len(v))}, v...) }
	flags := byte(0x02)
	if willTopic != "" {
		flags |= 0x04
	}
	body := []byte{0, 4, 'M', 'Q', 'T', 'T', 5, flags, 0, 0, 0}
	body = append(body, str(id)...)
	if willTopic != "" {
		body = append(body, 0) // will props
		body = append(body, str(willTopic)...)
		body = append(body, str("dead")...)
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	pk := binary.AppendUvarint([]byte{0x10}, uint64(len(body)))
	if _, err := c.Write(append(pk, body...)); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	ack := make([]byte, 2)
	if _, err := io.ReadFull(c, ack); err != nil || ack[0] != 0x20 {
		t.Fatalf("connack %x %v", ack, err)
	}
	rest := make([]byte, ack[1])
	io.ReadFull(c, rest)
	_ = c.SetReadDeadline(time.Time{})
	return c
}

func rawSubscribe(t *testing.T, c net.Conn, filter string, qos byte) {
	str := func(v string) []byte { return append([]byte{byte(len(v) >> 8), byte(len(v))}, v...) }
	body := []byte{0, 1, 0}
	body = append(body, str(filter)...)
	body = append(body, qos)
	pk := binary.AppendUvarint([]byte{0x82}, uint64(len(body)))
	if _, err := c.Write(append(pk, body...)); err != nil {
		t.Fatal(err)
	}
}

// TestCleanDisconnectUnderFloodFiresNoWill: a subscriber under a flood
// sends DISCONNECT 0x00 and closes. A write to it then fails; that must not
// close the socket before its reader took the DISCONNECT (44 wills in 200
// rounds did, when a failed write stopped the client at once).
func TestCleanDisconnectUnderFloodFiresNoWill(t *testing.T) {
	for _, linger0 := range []bool{false, true} {
		store := memory.New(retain.Limits{})
		s := startTestServer(t, store)
		obs := dialTest(t, s.Addr(), "obs", nil)
		obs.subscribe(t, "will/#")
		stop := floodRouter(s, "flood/x", 512)
		const rounds = 100
		for i := 0; i < rounds; i++ {
			c := rawConnect(t, s.Addr(), "sub", "will/sub")
			rawSubscribe(t, c, "flood/#", 0)
			time.Sleep(2 * time.Millisecond)
			if _, err := c.Write([]byte{0xe0, 0x00}); err != nil {
				t.Fatal(err)
			}
			if linger0 {
				_ = c.(*net.TCPConn).SetLinger(0)
			}
			_ = c.Close()
			waitUntil(t, "sub gone", func() bool { _, ok := s.mochi.Clients.Get("sub"); return !ok })
		}
		stop()
		// A fence: the wills were published before each client left.
		s.opts.Router.Publish(context.Background(), &core.Message{Topic: "will/fence", QoS: 1,
			Origin: core.Origin{Protocol: core.ProtocolAMQP}})
		wills := 0
		for m := range obs.msgs {
			if m.Topic == "will/fence" {
				break
			}
			wills++
		}
		if wills > 0 {
			t.Errorf("linger0=%v: %d wills published after %d clean DISCONNECTs", linger0, wills, rounds)
		}
	}
}

// floodRouter publishes payloads of size bytes to topic through s's router,
// as another front-end would, as fast as it can until the returned stop is
// called; stop returns once the publisher has.
func floodRouter(s *Server, topic string, size int) (stop func()) {
	done := make(chan struct{})
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		payload := make([]byte, size)
		for {
			select {
			case <-done:
				return
			default:
			}
			s.opts.Router.Publish(context.Background(), &core.Message{Topic: topic, Payload: payload,
				Origin: core.Origin{Protocol: core.ProtocolAMQP}})
		}
	}()
	return func() { close(done); <-ended }
}
