package mqtt

import (
	"bufio"
	"encoding/binary"
	"io"
	"testing"
	"time"

	"github.com/tolsey/tolsey/retain"
	"github.com/tolsey/tolsey/retain/memory"
)

// TestTakeoverTellsOldConnection: the old connection of a session taken
// over gets DISCONNECT 0x8E [MQTT-3.1.4-3] (it was half-closed before the
// DISCONNECT was written, and lost it in up to 6 of 50). Under a flood the
// packet can be cut off by the old client's own end of stream, so that case
// is only logged.
func TestTakeoverTellsOldConnection(t *testing.T) {
	for _, flood := range []bool{false, true} {
		store := memory.New(retain.Limits{})
		s := startTestServer(t, store)
		stop := func() {}
		if flood {
			stop = floodRouter(s, "flood/x", 300)
		}
		const rounds = 50
		got := 0
		for i := 0; i < rounds; i++ {
			old := rawConnect(t, s.Addr(), "busy", "")
			rawSubscribe(t, old, "flood/#", 0)
			time.Sleep(5 * time.Millisecond)
			done := make(chan bool)
			go func() {
				br := bufio.NewReader(old)
				last := byte(0)
				code := byte(0)
				for {
					h, err := br.ReadByte()
					if err != nil {
						break
					}
					n, err := binary.ReadUvarint(br)
					if err != nil {
						break
					}
					b := make([]byte, n)
					if _, err := io.ReadFull(br, b); err != nil {
						break
					}
					last = h
					if h == 0xe0 && n > 0 {
						code = b[0]
					}
				}
				done <- last == 0xe0 && code == 0x8e
			}()
			nw := rawConnect(t, s.Addr(), "busy", "")
			select {
			case ok := <-done:
				if ok {
					got++
				}
			case <-time.After(5 * time.Second):
				t.Fatal("old connection not closed")
			}
			nw.Close()
			old.Close()
		}
		stop()
		waitUntil(t, "busy gone", func() bool { _, ok := s.mochi.Clients.Get("busy"); return !ok })
		if subs := s.mochi.Topics.Subscribers("flood/x"); len(subs.Subscriptions) > 0 {
			t.Errorf("stale subscriptions for flood/x after every client left: %v", subs.Subscriptions)
		}
		t.Logf("flood=%v: old connection got DISCONNECT 0x8E in %d of %d takeovers", flood, got, rounds)
		if !flood && got != rounds {
			t.Errorf("an idle old connection got DISCONNECT 0x8E in %d of %d takeovers", got, rounds)
		}
	}
}
