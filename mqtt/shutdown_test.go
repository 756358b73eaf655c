package mqtt

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/tolsey/tolsey/retain"
	"github.com/tolsey/tolsey/retain/memory"
)

// Shutdown while connections keep arriving: a connection accepted just
// before the listener closed used to be counted in mochi's ClientsWg (Add,
// on its own goroutine) while Server.Close was already waiting on it, a
// data race that -race reports (see connServer.wait). Seen first when
// TestListenerSurvivesEMFILE shut down with its backlog still arriving.
// The race needs the scheduler's help: before the fix, -race caught it in
// about 6 runs of 8 of this test (40 rounds each) on a 2-core box.
func TestShutdownDuringConnectionBurst(t *testing.T) {
	for round := 0; round < 40; round++ {
		s := startTestServerOnly(t, memory.New(retain.Limits{})) // shut down below
		stop := make(chan struct{})
		dialed := make(chan struct{}, 1)
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					c, err := net.DialTimeout("tcp", s.Addr(), time.Second)
					if err != nil {
						return // the listener has closed
					}
					// Closed at once: each connection's client ends soon,
					// so the count mochi waits on keeps passing through 0.
					_ = c.Close()
					select {
					case dialed <- struct{}{}:
					default:
					}
				}
			}()
		}
		<-dialed
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := s.Shutdown(ctx)
		cancel()
		close(stop)
		wg.Wait()
		if err != nil {
			t.Fatalf("round %d: Shutdown: %v", round, err)
		}
	}
}

// Shutdown tells every MQTT 5 client why, DISCONNECT 0x8B, also one that
// keeps sending (here PINGREQs without a pause), over TCP and WebSocket:
// its DISCONNECT could be left behind the PINGRESP being written and the
// connection closed before it went out, or the close with its next
// PINGREQ unread reset the connection and the client's kernel dropped the
// DISCONNECT unread (mochi patch 20, and the listeners closing only what
// mochi does not end).
func TestShutdownDisconnectReachesBusyClients(t *testing.T) {
	for _, transport := range []string{"tcp", "ws"} {
		t.Run(transport, func(t *testing.T) {
			const rounds, clients = 6, 8
			lost := 0
			for round := 0; round < rounds; round++ {
				s := startTestServerOnly(t, memory.New(retain.Limits{})) // shut down below
				got := make(chan error, clients)
				var pingers sync.WaitGroup
				for i := range clients {
					r, ping, closeConn := busyClient(t, s, transport, fmt.Sprintf("busy-%d-%d", round, i))
					pingers.Add(1)
					go func() {
						defer pingers.Done()
						for ping() == nil {
						}
					}()
					go func() {
						got <- readUntilDisconnect(r, 0x8b)
						closeConn() // the end of the stream ends the server's drain, and the pinger
					}()
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				err := s.Shutdown(ctx)
				cancel()
				for range clients {
					if err := <-got; err != nil {
						lost++
						t.Logf("round %d: %v", round, err)
					}
				}
				pingers.Wait()
				if err != nil {
					t.Fatalf("round %d: Shutdown: %v", round, err)
				}
			}
			if lost > 0 {
				t.Fatalf("%d of %d clients did not read the DISCONNECT of the shutdown", lost, rounds*clients)
			}
		})
	}
}

// busyClient connects an MQTT 5 client over transport, "tcp" or "ws", and
// returns what it reads after the CONNACK, a function sending one PINGREQ,
// and one closing it.
func busyClient(t *testing.T, s *Server, transport, id string) (io.Reader, func() error, func()) {
	t.Helper()
	if transport == "tcp" {
		c := rawConnect(t, s.Addr(), id, "")
		// The client reads every PINGRESP its flood drew before the
		// DISCONNECT (megabytes in the socket buffers): 10 s was short of
		// that under -race on a loaded 2-core box once packets were handled
		// on mochi's pooled handlers (patch 24), which keep a busy
		// connection's reads going without a goroutine switch.
		_ = c.SetReadDeadline(time.Now().Add(60 * time.Second))
		ping := func() error { _, err := c.Write([]byte{0xc0, 0}); return err }
		return c, ping, func() { _ = c.Close() }
	}
	c := wsDial(t, s)
	connect := append([]byte{0x10, byte(13 + len(id)), 0, 4, 'M', 'Q', 'T', 'T', 5, 0x02, 0, 0, 0, 0, byte(len(id))}, id...)
	if err := c.WriteMessage(websocket.BinaryMessage, connect); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(&wsStream{c: c})
	if typ, _ := readMQTT(t, br); typ != 2 {
		t.Fatalf("packet type %d, want CONNACK", typ)
	}
	ping := func() error { return c.WriteMessage(websocket.BinaryMessage, []byte{0xc0, 0}) }
	return br, ping, func() { _ = c.Close() }
}

// readUntilDisconnect reads packets from r until a DISCONNECT, and reports
// an error unless it comes and carries reason code want.
func readUntilDisconnect(r io.Reader, want byte) error {
	br := bufio.NewReader(r)
	for {
		h, err := br.ReadByte()
		if err != nil {
			return fmt.Errorf("no DISCONNECT before %w", err)
		}
		n, err := binary.ReadUvarint(br)
		if err != nil {
			return fmt.Errorf("no DISCONNECT before %w", err)
		}
		body := make([]byte, n)
		if _, err := io.ReadFull(br, body); err != nil {
			return fmt.Errorf("no DISCONNECT before %w", err)
		}
		if h>>4 == 14 {
			if len(body) == 0 || body[0] != want {
				return fmt.Errorf("DISCONNECT % x, want reason code %#x", body, want)
			}
			return nil
		}
	}
}
