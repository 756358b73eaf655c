package mqtt

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/tolsey/tolsey/retain"
	"github.com/tolsey/tolsey/retain/memory"
)

// wsDial opens a WebSocket to the front-end, subprotocol "mqtt".
func wsDial(t *testing.T, s *Server) *websocket.Conn {
	t.Helper()
	d := websocket.Dialer{Subprotocols: []string{"mqtt"}, HandshakeTimeout: 5 * time.Second}
	c, _, err := d.Dial("ws://"+s.WSAddr()+"/mqtt", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	return c
}

// wsFrame is one client frame: masked (unless unmasked), FIN as given.
func wsFrame(op byte, fin, unmasked bool, payload []byte) []byte {
	b0 := op
	if fin {
		b0 |= 0x80
	}
	f := []byte{b0}
	mbit := byte(0x80)
	if unmasked {
		mbit = 0
	}
	switch n := len(payload); {
	case n < 126:
		f = append(f, mbit|byte(n))
	case n < 1<<16:
		f = append(f, mbit|126, byte(n>>8), byte(n))
	default:
		f = append(f, mbit|127)
		f = binary.BigEndian.AppendUint64(f, uint64(n))
	}
	if unmasked {
		return append(f, payload...)
	}
	mask := [4]byte{0x12, 0x34, 0x56, 0x78}
	f = append(f, mask[:]...)
	for i, b := range payload {
		f = append(f, b^mask[i&3])
	}
	return f
}

// mqttConnect is an MQTT 5 CONNECT for id, clean start, no keepalive.
func mqttConnect(id string) []byte {
	body := append([]byte{0, 4, 'M', 'Q', 'T', 'T', 5, 0x02, 0, 0, 0, byte(len(id) >> 8), byte(len(id))}, id...)
	return append(binary.AppendUvarint([]byte{0x10}, uint64(len(body))), body...)
}

// mqttPacket reads one MQTT packet from the WebSocket's binary messages.
type wsStream struct {
	c *websocket.Conn
	r io.Reader
}

func (s *wsStream) Read(p []byte) (int, error) {
	for {
		if s.r == nil {
			op, r, err := s.c.NextReader()
			if err != nil {
				return 0, err
			}
			if op != websocket.BinaryMessage {
				return 0, fmt.Errorf("server sent message type %d", op)
			}
			s.r = r
		}
		n, err := s.r.Read(p)
		if err == io.EOF {
			s.r = nil
			if n == 0 {
				continue
			}
			err = nil
		}
		return n, err
	}
}

func readMQTT(t *testing.T, br *bufio.Reader) (byte, []byte) {
	t.Helper()
	h, err := br.ReadByte()
	if err != nil {
		t.Fatal(err)
	}
	n, err := binary.ReadUvarint(br)
	if err != nil {
		t.Fatal(err)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(br, body); err != nil {
		t.Fatal(err)
	}
	return h >> 4, body
}

// TestWebSocketFrames: MQTT packets split across fragmented messages, with
// a ping between the fragments; many packets in one message; a 100 KB
// publish in frames of every length encoding, read back through the
// connection's own subscription.
func TestWebSocketFrames(t *testing.T) {
	s := startTestServer(t, memory.New(retain.Limits{}))
	c := wsDial(t, s)
	pongs := make(chan string, 1)
	c.SetPongHandler(func(data string) error { pongs <- data; return nil })
	raw := c.UnderlyingConn()

	connect := mqttConnect("ws-frames")
	var out []byte
	out = append(out, wsFrame(wsBinary, false, false, connect[:3])...)
	out = append(out, wsFrame(wsPing, true, false, []byte("are you there"))...)
	out = append(out, wsFrame(wsContinuation, false, false, connect[3:7])...)
	out = append(out, wsFrame(wsContinuation, true, false, connect[7:])...)
	// SUBSCRIBE ws/big QoS 0 and a 100 KB PUBLISH to it, in one message
	// split into a 126-length-encoded and a 127-length-encoded frame.
	sub := append([]byte{0x82, 12, 0, 1, 0, 0, 6}, "ws/big"...)
	sub = append(sub, 0)
	payload := bytes.Repeat([]byte("0123456789abcdef"), 100<<10/16)
	pubBody := append([]byte{0, 6}, "ws/big"...)
	pubBody = append(pubBody, 0) // no properties
	pubBody = append(pubBody, payload...)
	pub := append(binary.AppendUvarint([]byte{0x30}, uint64(len(pubBody))), pubBody...)
	msg := append(sub, pub...)
	out = append(out, wsFrame(wsBinary, false, false, msg[:300])...)
	out = append(out, wsFrame(wsContinuation, true, false, msg[300:])...)
	if _, err := raw.Write(out); err != nil {
		t.Fatal(err)
	}

	br := bufio.NewReader(&wsStream{c: c})
	if typ, body := readMQTT(t, br); typ != 2 || body[1] != 0 {
		t.Fatalf("want CONNACK success, got type %d % x", typ, body)
	}
	select {
	case p := <-pongs:
		if p != "are you there" {
			t.Errorf("pong carried %q", p)
		}
	default:
		t.Error("no pong before the CONNACK (the ping came before the CONNECT's last fragment)")
	}
	if typ, _ := readMQTT(t, br); typ != 9 {
		t.Fatalf("want SUBACK, got type %d", typ)
	}
	typ, body := readMQTT(t, br)
	if typ != 3 || !bytes.HasSuffix(body, payload) || len(body) != len(pubBody) {
		t.Fatalf("want the 100 KB PUBLISH back, got type %d, %d bytes", typ, len(body))
	}
}

// TestWebSocketBadFramesCloseTheConnection: each kind of frame a server
// must refuse closes that one connection with the RFC 6455 close code.
func TestWebSocketBadFramesCloseTheConnection(t *testing.T) {
	s := startTestServer(t, memory.New(retain.Limits{}))
	for _, tc := range []struct {
		name  string
		frame []byte
		code  int
	}{
		{"text message", wsFrame(wsText, true, false, mqttConnect("x")), websocket.CloseUnsupportedData},
		{"unmasked frame", wsFrame(wsBinary, true, true, mqttConnect("x")), websocket.CloseProtocolError},
		{"reserved bit", append([]byte{0x80 | 0x40 | wsBinary}, wsFrame(wsBinary, true, false, mqttConnect("x"))[1:]...), websocket.CloseProtocolError},
		{"unknown opcode", wsFrame(0x3, true, false, nil), websocket.CloseProtocolError},
		{"continuation first", wsFrame(wsContinuation, true, false, mqttConnect("x")), websocket.CloseProtocolError},
		{"fragmented ping", wsFrame(wsPing, false, false, nil), websocket.CloseProtocolError},
		{"oversized ping", wsFrame(wsPing, true, false, make([]byte, 126)), websocket.CloseProtocolError},
		{"client close", wsFrame(wsClose, true, false, websocket.FormatCloseMessage(4001, "bye")), 4001},
		{"client close without a code", wsFrame(wsClose, true, false, nil), websocket.CloseNormalClosure},
		{"close with a one-byte body", wsFrame(wsClose, true, false, []byte{3}), websocket.CloseProtocolError},
		{"close with code 1005", wsFrame(wsClose, true, false, []byte{0x03, 0xed}), websocket.CloseProtocolError},
		{"close with code 999", wsFrame(wsClose, true, false, []byte{0x03, 0xe7}), websocket.CloseProtocolError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := wsDial(t, s)
			if _, err := c.UnderlyingConn().Write(tc.frame); err != nil {
				t.Fatal(err)
			}
			_, _, err := c.ReadMessage()
			var ce *websocket.CloseError
			if !errors.As(err, &ce) || ce.Code != tc.code {
				t.Fatalf("want a close frame with code %d, got %v", tc.code, err)
			}
		})
	}
}

// A client that goes away mid-frame ends only its own connection.
func TestWebSocketTruncatedFrame(t *testing.T) {
	s := startTestServer(t, memory.New(retain.Limits{}))
	c := wsDial(t, s)
	frame := wsFrame(wsBinary, true, false, mqttConnect("cut"))
	if _, err := c.UnderlyingConn().Write(frame[:len(frame)-3]); err != nil {
		t.Fatal(err)
	}
	c.UnderlyingConn().(*net.TCPConn).CloseWrite()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, _, err := c.ReadMessage(); !closedByServer(err) {
		t.Fatalf("the connection stayed open after a truncated frame: %v", err)
	}
	// The server still serves others.
	d := wsDial(t, s)
	if err := d.WriteMessage(websocket.BinaryMessage, mqttConnect("after")); err != nil {
		t.Fatal(err)
	}
	if typ, _ := readMQTT(t, bufio.NewReader(&wsStream{c: d})); typ != 2 {
		t.Fatalf("want CONNACK, got type %d", typ)
	}
}

// Shutdown ends connections that never sent CONNECT (mochi knows nothing of
// them, and its Close waited for them for ever), over TCP and WebSocket.
func TestShutdownWithConnectionsThatNeverConnect(t *testing.T) {
	s := startTestServerOnly(t, memory.New(retain.Limits{})) // shut down below
	tc, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	ws := wsDial(t, s)
	connected := wsDial(t, s) // and one that did connect
	if err := connected.WriteMessage(websocket.BinaryMessage, mqttConnect("connected")); err != nil {
		t.Fatal(err)
	}
	if typ, _ := readMQTT(t, bufio.NewReader(&wsStream{c: connected})); typ != 2 {
		t.Fatalf("want CONNACK, got type %d", typ)
	}
	time.Sleep(50 * time.Millisecond) // both silent ones are being served

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v after %v", err, time.Since(start))
	}
	_ = tc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := tc.Read(make([]byte, 1)); !closedByServer(err) {
		t.Errorf("the silent TCP connection is still open: %v", err)
	}
	_ = ws.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, _, err := ws.ReadMessage(); !closedByServer(err) {
		t.Errorf("the silent WebSocket connection is still open: %v", err)
	}
}

// closedByServer reports whether err is the end of a connection the server
// closed, not a read that timed out on one still open.
func closedByServer(err error) bool {
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

// FuzzWSFrames: whatever a client sends, the frame reader returns payload
// bytes or an error, never more payload than it was sent, and never
// (0, nil).
func FuzzWSFrames(f *testing.F) {
	f.Add(wsFrame(wsBinary, true, false, mqttConnect("x")))
	f.Add(append(wsFrame(wsBinary, false, false, []byte{1, 2}), append(wsFrame(wsPing, true, false, []byte("p")),
		wsFrame(wsContinuation, true, false, []byte{3})...)...))
	f.Add(wsFrame(wsClose, true, false, websocket.FormatCloseMessage(1000, "")))
	f.Add(wsFrame(wsBinary, true, false, make([]byte, 70000)))
	f.Add(wsFrame(wsText, true, true, []byte("x")))
	f.Fuzz(func(t *testing.T, in []byte) {
		srv, cli := net.Pipe()
		defer srv.Close()
		ws := &wsConn{Conn: srv, control: func(int, []byte) error { return nil }}
		go func() {
			_, _ = cli.Write(in)
			cli.Close()
		}()
		buf := make([]byte, 100)
		total := 0
		for {
			n, err := ws.Read(buf)
			total += n
			if err != nil {
				break
			}
			if n == 0 {
				t.Fatal("Read returned 0 bytes and no error")
			}
		}
		if total > len(in) {
			t.Fatalf("%d payload bytes from %d bytes of input", total, len(in))
		}
	})
}
