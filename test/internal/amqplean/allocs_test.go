package amqplean

import (
	"bufio"
	"context"
	"sync"
	"testing"
)

// loop reads the same bytes over and over: a peer that sends one frame
// for ever.
type loop struct {
	b   []byte
	off int
}

func (l *loop) Read(p []byte) (int, error) {
	n := copy(p, l.b[l.off:])
	l.off = (l.off + n) % len(l.b)
	return n, nil
}

// A message costs no allocation once the buffers have grown: Ready (when
// it need not wait; a wait registers its context once, not per message)
// and Send, which encodes into the write buffer, and the reader, which
// decodes a transfer in its frame buffer and hands it to the handler,
// whose Accept and IssueCredit encode into the write buffer too. (Not under -race, whose
// instrumentation allocates.)
func TestNoAllocationPerMessage(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	c := &Conn{peerMax: maxFrame, inFlight: 1 << 30, credit: 1 << 30, remoteIncomingWindow: 1 << 30,
		wake: make(chan struct{}, 1), frame: make([]byte, 0, maxFrame)}
	c.cond = sync.NewCond(&c.mu)
	body := make([]byte, 1024)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if n := testing.AllocsPerRun(1000, func() {
		if err := c.Ready(ctx, len(body)); err != nil {
			t.Fatal(err)
		}
		if err := c.Send(body); err != nil {
			t.Fatal(err)
		}
		c.wb = c.wb[:0]
	}); n != 0 {
		t.Errorf("Send: %v allocations per message", n)
	}

	// What a sender sends is what a receiver reads: one transfer frame.
	frame := c.appendTransfer(nil, body)
	c.role = true
	c.r = bufio.NewReaderSize(&loop{b: frame}, maxFrame)
	got := 0
	c.onMsg = func(d *Delivery) {
		if len(d.Data) == len(body) && d.Durable {
			got++
		}
		c.Accept(d.ID)
		if got%128 == 0 {
			c.IssueCredit(128)
		}
	}
	if n := testing.AllocsPerRun(1000, func() {
		desc, f, err := c.readFrame()
		if err == nil {
			err = c.handle(desc, f)
		}
		if err != nil {
			t.Fatal(err)
		}
		c.wb = c.wb[:0]
	}); n != 0 {
		t.Errorf("receiving: %v allocations per message", n)
	}
	if got != 1001 {
		t.Errorf("the handler saw %d intact messages of 1001", got)
	}
}
