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

func rawConnectDelayedWill(t *testing.T, addr, id string, clean bool) net.Conn {
	return rawConnectDelayedWillQoS(t, addr, id, clean, 0)
}

// rawConnectDelayedWillQoS is rawConnectDelayedWill with the will's QoS.
func rawConnectDelayedWillQoS(t *testing.T, addr, id string, clean bool, qos byte) net.Conn {
	str := func(v string) []byte { return append([]byte{byte(len(v) >> 8), byte(len(v))}, v...) }
	flags := byte(0x04) | qos<<3
	if clean {
		flags |= 0x02
	}
	body := []byte{0, 4, 'M', 'Q', 'T', 'T', 5, flags, 0, 0, 5, 0x11, 0, 0, 0, 60} // session expiry 60
	body = append(body, str(id)...)
	body = append(body, 5, 0x18, 0, 0, 0, 1) // will delay 1 s
	body = append(body, str("will/"+id)...)
	body = append(body, str("dead")...)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c.Write(append(binary.AppendUvarint([]byte{0x10}, uint64(len(body))), body...))
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	ack := make([]byte, 2)
	if _, err := io.ReadFull(c, ack); err != nil || ack[0] != 0x20 {
		t.Fatalf("connack %x %v", ack, err)
	}
	rest := make([]byte, ack[1])
	io.ReadFull(c, rest)
	c.SetReadDeadline(time.Time{})
	return c
}

// TestDelayedWillNotSentWhenSessionTakenOver: A (will delay 1 s) is taken
// over by B (same id, clean start 0), which stays connected: A's will is
// not sent [MQTT-3.1.3-9] (it was, 20 of 20, and it cleared B's will); when
// the B connections end without DISCONNECT, their own wills are.
func TestDelayedWillNotSentWhenSessionTakenOver(t *testing.T) {
	store := memory.New(retain.Limits{})
	s := startTestServer(t, store)
	obs := dialTest(t, s.Addr(), "obs", nil)
	obs.subscribe(t, "will/#")
	// wills counts the wills that arrive before a fence published now.
	wills := func() int {
		s.opts.Router.Publish(context.Background(), &core.Message{Topic: "will/fence", QoS: 1,
			Origin: core.Origin{Protocol: core.ProtocolAMQP}})
		n := 0
		for m := range obs.msgs {
			if m.Topic == "will/fence" {
				return n
			}
			n++
		}
		return n
	}
	const rounds = 20
	var conns []net.Conn
	for i := 0; i < rounds; i++ {
		id := "dw" + string(rune('a'+i))
		a := rawConnectDelayedWill(t, s.Addr(), id, true)
		b := rawConnectDelayedWill(t, s.Addr(), id, false)
		conns = append(conns, a, b)
	}
	time.Sleep(2500 * time.Millisecond) // the delays pass (mochi checks them every second)
	if n := wills(); n != 0 {
		t.Errorf("%d of %d delayed wills published although a new connection took the session over within the delay", n, rounds)
	}
	for i, c := range conns {
		if i%2 == 1 {
			c.Close()
		}
	}
	got := 0
	for deadline := time.Now().Add(10 * time.Second); got < rounds && time.Now().Before(deadline); {
		select {
		case m := <-obs.msgs:
			if m.Topic != "will/fence" {
				got++
			}
		case <-time.After(time.Second):
		}
	}
	if got != rounds {
		t.Errorf("after the %d new connections ended without DISCONNECT: %d wills, want %d", rounds, got, rounds)
	}
}
