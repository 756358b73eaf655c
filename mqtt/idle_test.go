package mqtt

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/tolsey/tolsey/retain"
	"github.com/tolsey/tolsey/retain/memory"
)

// TestIdleConnectionStackBudget holds the goroutine stack an idle MQTT
// connection, over TCP and over WebSocket, costs to 4 KiB, right after its
// last packet and after collections: one goroutine (mochi's reader; the writer runs
// only while packets are queued, third_party/mochi-mqtt) whose stack never
// grows, because packets are handled on mochi's pooled handler goroutines
// (patch 24) and every frame on it while it waits is small (serveConn,
// drainConn.Read, wsConn.Read, and mochi's attachClient and Client.Read,
// patched). A frame that grows past that
// budget shows up here as 8 KiB per connection. Each connection first
// subscribes, publishes a QoS 1 message to itself and receives it, so both
// the reader and the writer paths have run. Budgets are checked without
// -race (test/run runs them in the allocation-budget step).
func TestIdleConnectionStackBudget(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector enlarges frames; test/run checks this budget without -race")
	}
	s := startTestServer(t, memory.New(retain.Limits{}))
	base := runtime.NumGoroutine()
	t.Run("tcp", func(t *testing.T) {
		idleStackBudget(t, base, func(t *testing.T) net.Conn {
			c, err := net.Dial("tcp", s.Addr())
			if err != nil {
				t.Fatal(err)
			}
			return c
		})
	})
	t.Run("websocket", func(t *testing.T) {
		idleStackBudget(t, base, func(t *testing.T) net.Conn {
			c := wsDial(t, s)
			_ = c.SetReadDeadline(time.Time{})
			return &wsClientConn{Conn: c.UnderlyingConn(), wsStream: wsStream{c: c}}
		})
	})
}

func idleStackBudget(t *testing.T, base int, dial func(*testing.T) net.Conn) {
	const n = 200
	// The previous subtest's connections end after it does: start from the
	// server's own goroutines only, or their stacks would count as freed.
	for deadline := time.Now().Add(5 * time.Second); runtime.NumGoroutine() > base+1 && time.Now().Before(deadline); { // +1: this subtest's goroutine
		time.Sleep(10 * time.Millisecond)
	}
	before := settledStacks()
	// No collection until the connections are idle: what they cost right
	// after their last packet, before any GC has shrunk a stack.
	gcPercent := debug.SetGCPercent(-1)
	defer debug.SetGCPercent(gcPercent)
	goroutines := runtime.NumGoroutine()
	for i := 0; i < n; i++ {
		c := dial(t)
		t.Cleanup(func() { c.Close() })
		if err := exerciseConn(c, fmt.Sprintf("idle-%s-%d", t.Name(), i)); err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
	}
	// mochi counts a client connected, and its writer goroutine ends, just
	// after the last write; give them a moment.
	// Besides, mochi's handler pool keeps up to 16 × GOMAXPROCS goroutines
	// waiting for packets to handle (patch 24), whatever the connections.
	pool := 16 * runtime.GOMAXPROCS(0)
	for deadline := time.Now().Add(5 * time.Second); runtime.NumGoroutine() > goroutines+n+pool && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if g := runtime.NumGoroutine() - goroutines; g > n+pool {
		t.Errorf("%d idle connections run %d goroutines, want at most one each and %d pooled handlers", n, g, pool)
	}
	right := stacksInUse()
	debug.SetGCPercent(gcPercent)
	after := settledStacks()
	rightPer := float64(right-before) / n
	per := float64(after-before) / n
	t.Logf("goroutine stacks: %.0f B per idle connection right after its last packet, %.0f B after collections (%d connections)", rightPer, per, n)
	if rightPer > 6<<10 { // a stack grown by handling a packet is 16 KiB
		t.Errorf("goroutine stacks cost %.0f B per idle connection right after its last packet, budget 6 KiB: a packet was handled on the connection's own goroutine (mochi patch 24) or its waiting frames grew", rightPer)
	}
	if per > 4096+512 {
		t.Errorf("goroutine stacks cost %.0f B per idle connection, budget 4 KiB: a frame on the idle reader's stack grew (see serveConn, wsConn.Read)", per)
	}
}

// wsClientConn is the client's side of a WebSocket as a byte stream: each
// Write is one binary message.
type wsClientConn struct {
	net.Conn
	wsStream
}

func (c *wsClientConn) Read(p []byte) (int, error) { return c.wsStream.Read(p) }

func (c *wsClientConn) Write(p []byte) (int, error) {
	if err := c.c.WriteMessage(websocket.BinaryMessage, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (c *wsClientConn) SetDeadline(t time.Time) error {
	_ = c.c.SetReadDeadline(t)
	return c.c.SetWriteDeadline(t)
}

func (c *wsClientConn) Close() error { return c.c.Close() }

// settledStacks runs enough collections for every idle stack to have
// shrunk as far as it can (each one halves a stack at most once) and
// returns the bytes of goroutine stacks in use.
func settledStacks() uint64 {
	for i := 0; i < 5; i++ {
		runtime.GC()
	}
	return stacksInUse()
}

// stacksInUse is the bytes of goroutine stacks in use, as they are.
func stacksInUse() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/stacks:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// exerciseConn connects as an MQTT 5 client id, subscribes to its own topic
// at QoS 1, publishes one QoS 1 message to it and acknowledges its delivery.
func exerciseConn(c net.Conn, id string) error {
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	defer c.SetDeadline(time.Time{})
	str := func(v string) []byte { return append([]byte{byte(len(v) >> 8), byte(len(v))}, v...) }
	connect := append([]byte{0, 4, 'M', 'Q', 'T', 'T', 5, 0x02, 0, 0, 0}, str(id)...)
	sub := append(append([]byte{0, 1, 0}, str(id)...), 1)
	pub := append(append(str(id), 0, 2, 0), "idle"...)
	var out []byte
	out = append(append(out, 0x10, byte(len(connect))), connect...)
	out = append(append(out, 0x82, byte(len(sub))), sub...)
	out = append(append(out, 0x32, byte(len(pub))), pub...)
	if _, err := c.Write(out); err != nil {
		return err
	}
	br := bufio.NewReader(c)
	seen := map[byte]bool{}
	for !seen[2] || !seen[9] || !seen[4] || !seen[3] { // CONNACK, SUBACK, PUBACK, PUBLISH
		h, err := br.ReadByte()
		if err != nil {
			return err
		}
		size, err := binary.ReadUvarint(br) // MQTT's variable byte integer is a uvarint
		if err != nil {
			return err
		}
		body := make([]byte, size)
		if _, err := io.ReadFull(br, body); err != nil {
			return err
		}
		seen[h>>4] = true
		if h>>4 == 3 {
			id := body[2+int(body[0])<<8+int(body[1]):][:2]
			if _, err := c.Write([]byte{0x40, 2, id[0], id[1]}); err != nil {
				return err
			}
		}
	}
	return nil
}
