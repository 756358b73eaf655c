package mqtt

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/tolsey/tolsey/core"
	"github.com/tolsey/tolsey/retain"
	"github.com/tolsey/tolsey/retain/memory"
)

// TestSlowSteadyReaderGetsLargeMessage: the write timeout bounds a stall,
// not a whole packet: a subscriber that reads steadily (64 KiB every
// 40 ms at most, a 16 KiB socket buffer: about 5 s for the message) gets
// a 4 MiB message with a write timeout of 3 s (the whole write used to
// have to fit in it, and the client was cut off). The timeout leaves room
// for a loaded machine's scheduling stalls; 1 s failed now and then.
func TestSlowSteadyReaderGetsLargeMessage(t *testing.T) {
	store := memory.New(retain.Limits{})
	s := startTestServer(t, store, func(o *Options) { o.WriteTimeout = 3 * time.Second })
	c := rawConnect(t, s.Addr(), "slow", "")
	c.(*net.TCPConn).SetReadBuffer(16 << 10)
	rawSubscribe(t, c, "big", 0)
	time.Sleep(100 * time.Millisecond)
	s.opts.Router.Publish(context.Background(), &core.Message{Topic: "big", Payload: make([]byte, 4<<20),
		Origin: core.Origin{Protocol: core.ProtocolAMQP}})
	total := 0
	buf := make([]byte, 64<<10)
	start := time.Now()
	var err error
	for total < 4<<20 {
		var n int
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, err = c.Read(buf)
		total += n
		if err != nil {
			break
		}
		time.Sleep(40 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("client reading steadily was disconnected after %v, having read %d of 4 MiB: %v", time.Since(start).Round(time.Millisecond), total, err)
	} else {
		t.Logf("read %d bytes in %v", total, time.Since(start))
	}
}
