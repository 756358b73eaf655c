package mqtt

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
)

// wsConn presents a WebSocket as the byte stream mochi reads MQTT from: an
// MQTT packet may span WebSocket messages and one message may hold several
// packets [MQTT-6.0.0-2]. gorilla/websocket does the handshake, every write
// and the close; wsConn reads the client's frames itself (RFC 6455 §5),
// because gorilla's reader keeps ~2.5 KiB of frames and a buffer of its own
// under every connection waiting for its next frame, which held an idle
// WebSocket connection's stack at 8 KiB. A connection waiting here has the
// same frames on its stack as a TCP one (serveConn) and holds a 16-byte
// buffer; while bytes keep arriving it reads 4 KiB a system call through a
// pooled buffer, as drainConn does.
type wsConn struct {
	net.Conn // the hijacked connection: reads and deadlines
	c        *websocket.Conn
	wm       sync.Mutex // one message written at a time
	// writeBy is the write deadline set (unix nanoseconds, 0: none).
	// gorilla's own is the writer's alone (it is not safe beside a write),
	// and mochi also sets one from the goroutine stopping the client while
	// another writes (patch 20): Write hands this one to gorilla.
	writeBy atomic.Int64

	// control writes a control frame (pong, close): c.WriteControl, or a
	// test's recorder.
	control func(messageType int, data []byte) error

	// Input, used by the one reading goroutine only.
	ahead     readAhead
	small     [16]byte // what a waiting connection reads into
	in        []byte   // unread input: of small or of ahead's buffer
	remaining uint64   // payload bytes left in the current data frame
	mask      [4]byte
	maskAt    int  // position in mask of the next payload byte
	fragments bool // a binary message continues in the next data frame
	ctl       [125]byte
}

func newWSConn(c *websocket.Conn) *wsConn {
	ws := &wsConn{Conn: c.UnderlyingConn(), c: c}
	ws.control = func(messageType int, data []byte) error {
		return c.WriteControl(messageType, data, time.Now().Add(time.Second))
	}
	ws.ahead.init(ws.Conn)
	return ws
}

// Read returns payload bytes of the client's binary messages. While the
// client is quiet it waits here, in a read into ws.small, with nothing but
// this frame above the socket read; its frame is on every idle WebSocket
// connection's stack, so it takes no defer and calls no helper on that path.
func (ws *wsConn) Read(p []byte) (int, error) {
	for ws.remaining == 0 {
		if len(ws.in) == 0 {
			var err error
			if ws.in, err = ws.ahead.fill(); err != nil {
				return 0, err
			}
			if len(ws.in) == 0 {
				n, err := ws.Conn.Read(ws.small[:])
				if n == 0 {
					if err == nil {
						err = io.ErrNoProgress
					}
					return 0, err
				}
				ws.in = ws.small[:n]
			}
		}
		if err := ws.frame(); err != nil {
			return 0, err
		}
	}
	n := len(p)
	if uint64(n) > ws.remaining {
		n = int(ws.remaining)
	}
	var err error
	if len(ws.in) == 0 && n < readAheadSize { // a big read goes straight into p
		if ws.in, err = ws.ahead.fill(); err != nil {
			return 0, err
		}
	}
	if len(ws.in) > 0 {
		n = copy(p[:n], ws.in)
		ws.in = ws.in[n:]
	} else if n, err = ws.Conn.Read(p[:n]); n == 0 {
		return 0, err
	}
	for i := range p[:n] {
		p[i] ^= ws.mask[(ws.maskAt+i)&3]
	}
	ws.maskAt = (ws.maskAt + n) & 3
	ws.remaining -= uint64(n)
	return n, nil
}

// InputReady is drainConn.InputReady for a WebSocket: input (frame headers
// included) read and not yet returned, or found by a read that does not
// wait. Called by the reading goroutine of the moment: mochi's handler,
// between packets (mochi patch 24).
func (ws *wsConn) InputReady() bool {
	if len(ws.in) == 0 {
		var err error
		if ws.in, err = ws.ahead.fill(); err != nil {
			return true
		}
	}
	return len(ws.in) > 0
}

// WebSocket opcodes (RFC 6455 §5.2).
const (
	wsContinuation = 0x0
	wsText         = 0x1
	wsBinary       = 0x2
	wsClose        = 0x8
	wsPing         = 0x9
	wsPong         = 0xa
)

var errWSClosed = fmt.Errorf("websocket: closed by the client: %w", io.EOF)

// frame reads one frame header and handles control frames; after a data
// frame ws.remaining holds its payload length.
func (ws *wsConn) frame() error {
	var h [2]byte
	if err := ws.readFull(h[:]); err != nil {
		return err
	}
	fin, op := h[0]&0x80 != 0, h[0]&0x0f
	if h[0]&0x70 != 0 {
		return ws.fail(websocket.CloseProtocolError, "reserved bits set (no extension was negotiated)")
	}
	if h[1]&0x80 == 0 {
		return ws.fail(websocket.CloseProtocolError, "unmasked client frame") // RFC 6455 §5.1
	}
	size := uint64(h[1] & 0x7f)
	switch size {
	case 126:
		var b [2]byte
		if err := ws.readFull(b[:]); err != nil {
			return err
		}
		size = uint64(binary.BigEndian.Uint16(b[:]))
	case 127:
		var b [8]byte
		if err := ws.readFull(b[:]); err != nil {
			return err
		}
		if size = binary.BigEndian.Uint64(b[:]); size>>63 != 0 {
			return ws.fail(websocket.CloseProtocolError, "payload length with its top bit set")
		}
	}
	if err := ws.readFull(ws.mask[:]); err != nil {
		return err
	}
	ws.maskAt = 0
	switch op {
	case wsBinary, wsContinuation:
		if (op == wsContinuation) != ws.fragments {
			return ws.fail(websocket.CloseProtocolError, "data frame out of sequence")
		}
		ws.fragments = !fin
		ws.remaining = size
		return nil
	case wsText:
		// [MQTT-6.0.0-1]: MQTT travels in binary messages only.
		return ws.fail(websocket.CloseUnsupportedData, "MQTT needs binary messages")
	case wsClose, wsPing, wsPong:
		if !fin || size > uint64(len(ws.ctl)) {
			return ws.fail(websocket.CloseProtocolError, "fragmented or oversized control frame")
		}
		data := ws.ctl[:size]
		if err := ws.readFull(data); err != nil {
			return err
		}
		for i := range data {
			data[i] ^= ws.mask[i&3]
		}
		switch op {
		case wsPing:
			// A pong that cannot be written now (the socket is backed up
			// behind a long write) is skipped, not fatal: the client asked
			// a question, and data is still flowing (gorilla's own ping
			// handler does the same).
			_ = ws.control(websocket.PongMessage, data)
			return nil
		case wsClose:
			// Echo the client's code (RFC 6455 §5.5.1); a one-byte body or
			// a code no endpoint may send is a protocol error (§7.4).
			code := websocket.CloseNormalClosure
			switch {
			case len(data) == 1:
				return ws.fail(websocket.CloseProtocolError, "close frame with a one-byte body")
			case len(data) >= 2:
				if code = int(binary.BigEndian.Uint16(data)); !validCloseCode(code) {
					return ws.fail(websocket.CloseProtocolError, fmt.Sprintf("close code %d", code))
				}
			}
			_ = ws.control(websocket.CloseMessage, websocket.FormatCloseMessage(code, ""))
			return errWSClosed
		}
		return nil // a pong
	default:
		return ws.fail(websocket.CloseProtocolError, fmt.Sprintf("unknown opcode %#x", op))
	}
}

// validCloseCode reports whether a close frame may carry code (RFC 6455
// §7.4.1, §7.4.2: 1004, 1005, 1006 and 1015 are reserved or never sent).
func validCloseCode(code int) bool {
	return (code >= 1000 && code <= 1003) || (code >= 1007 && code <= 1014) || (code >= 3000 && code <= 4999)
}

// fail closes the WebSocket with code and returns the error mochi ends the
// connection with.
func (ws *wsConn) fail(code int, reason string) error {
	_ = ws.control(websocket.CloseMessage, websocket.FormatCloseMessage(code, reason))
	return errors.New("websocket: " + reason)
}

// readFull fills b from the buffered input, reading more as needed.
func (ws *wsConn) readFull(b []byte) error {
	for len(b) > 0 {
		if len(ws.in) == 0 {
			var err error
			if ws.in, err = ws.ahead.fill(); err != nil {
				return err
			}
			if len(ws.in) == 0 {
				n, err := ws.Conn.Read(ws.small[:])
				if n == 0 {
					if err == nil {
						err = io.ErrNoProgress
					}
					return err
				}
				ws.in = ws.small[:n]
			}
		}
		n := copy(b, ws.in)
		ws.in = ws.in[n:]
		b = b[n:]
	}
	return nil
}

func (ws *wsConn) Write(p []byte) (int, error) {
	ws.wm.Lock()
	defer ws.wm.Unlock()
	var by time.Time
	if n := ws.writeBy.Load(); n != 0 {
		by = time.Unix(0, n)
	}
	_ = ws.c.SetWriteDeadline(by)
	if err := ws.c.WriteMessage(websocket.BinaryMessage, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (ws *wsConn) Close() error { return ws.c.Close() }

// SetWriteDeadline bounds gorilla's writes: gorilla sets its own deadline
// on the socket before each frame it writes, so one set on the socket
// alone would be replaced by none (mochi's write timeout); Write gives
// gorilla this one. It is set on the socket too, so that a write blocked
// now ends at t. Safe beside a write, as net.Conn's is.
func (ws *wsConn) SetWriteDeadline(t time.Time) error {
	var n int64
	if !t.IsZero() {
		n = t.UnixNano()
	}
	ws.writeBy.Store(n)
	return ws.Conn.SetWriteDeadline(t)
}

func (ws *wsConn) SetDeadline(t time.Time) error {
	_ = ws.SetWriteDeadline(t)
	return ws.Conn.SetReadDeadline(t)
}

// CloseRead stops reading from the client, keeping what has arrived (a
// TCP half-close): mochi's takeover reads a session's old connection to
// its end for a DISCONNECT the client may have sent before reconnecting.
func (ws *wsConn) CloseRead() error {
	if hc, ok := ws.Conn.(interface{ CloseRead() error }); ok {
		return hc.CloseRead()
	}
	return errors.ErrUnsupported
}
