package main

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// client is the load's own MQTT client: raw packets over one TCP
// connection, written through a 64 KiB buffer and read through another.
// Why not paho: the four servers must see the same client, NATS speaks only
// MQTT 3.1.1 (paho.golang only 5), and on two shared cores a client that
// costs more than the server measures itself. It knows what the load needs
// and nothing more: CONNECT (clean session, no keep alive), one SUBSCRIBE,
// PUBLISH at QoS 0 and 1 without properties, PUBACK, DISCONNECT.
type client struct {
	conn  net.Conn
	r     *bufio.Reader
	w     *bufio.Writer // owned by whoever writes: the publisher's goroutine, or a subscriber's reader
	proto byte          // 4 = MQTT 3.1.1, 5 = MQTT 5
}

func dialClient(addr, id string, proto byte) (*client, error) {
	conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return nil, err
	}
	c := &client{conn: conn, r: bufio.NewReaderSize(conn, 64<<10), w: bufio.NewWriterSize(conn, 64<<10), proto: proto}
	var vh []byte
	vh = appendString(vh, "MQTT")
	vh = append(vh, proto, 0x02, 0, 0) // clean session, keep alive 0
	if proto == 5 {
		// Receive Maximum 65535 (0x21), as paho announces: the server's
		// own window is what is measured.
		vh = append(vh, 3, 0x21, 0xff, 0xff)
	}
	vh = appendString(vh, id)
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	defer func() { _ = conn.SetDeadline(time.Time{}) }()
	if err := c.writePacket(0x10, vh); err != nil {
		conn.Close()
		return nil, err
	}
	typ, body, err := c.readPacket()
	if err != nil || typ>>4 != 2 || len(body) < 2 || body[1] != 0 {
		conn.Close()
		if err == nil {
			err = fmt.Errorf("CONNACK refused: % x", body)
		}
		return nil, fmt.Errorf("connect %s: %w", id, err)
	}
	return c, nil
}

// subscribe sends one SUBSCRIBE and waits for its SUBACK.
func (c *client) subscribe(filter string, qos byte) error {
	b := []byte{0, 1}
	if c.proto == 5 {
		b = append(b, 0)
	}
	b = appendString(b, filter)
	b = append(b, qos)
	_ = c.conn.SetDeadline(time.Now().Add(10 * time.Second))
	defer func() { _ = c.conn.SetDeadline(time.Time{}) }()
	if err := c.writePacket(0x82, b); err != nil {
		return err
	}
	typ, body, err := c.readPacket()
	if err != nil {
		return err
	}
	if typ>>4 != 9 || len(body) < 3 || body[len(body)-1] >= 0x80 {
		return fmt.Errorf("subscribe %s refused: % x", filter, body)
	}
	return nil
}

// publish buffers one PUBLISH (id is ignored at QoS 0).
func (c *client) publish(topic string, qos byte, id uint16, payload []byte) error {
	n := 2 + len(topic) + len(payload)
	if qos > 0 {
		n += 2
	}
	if c.proto == 5 {
		n++
	}
	c.w.WriteByte(0x30 | qos<<1)
	writeVarint(c.w, n)
	c.w.WriteByte(byte(len(topic) >> 8))
	c.w.WriteByte(byte(len(topic)))
	c.w.WriteString(topic)
	if qos > 0 {
		c.w.WriteByte(byte(id >> 8))
		c.w.WriteByte(byte(id))
	}
	if c.proto == 5 {
		c.w.WriteByte(0)
	}
	_, err := c.w.Write(payload)
	return err
}

// puback buffers a PUBACK (MQTT 5: remaining length 2 means success).
func (c *client) puback(id uint16) {
	c.w.Write([]byte{0x40, 2, byte(id >> 8), byte(id)})
}

func (c *client) writePacket(typ byte, body []byte) error {
	c.w.WriteByte(typ)
	writeVarint(c.w, len(body))
	c.w.Write(body)
	return c.w.Flush()
}

// close sends DISCONNECT and closes the connection.
func (c *client) close() {
	_ = c.conn.SetWriteDeadline(time.Now().Add(2 * time.Second))
	_ = c.writePacket(0xe0, nil)
	c.conn.Close()
}

// readPacket reads one packet; body is valid until the next read.
func (c *client) readPacket() (byte, []byte, error) {
	typ, err := c.r.ReadByte()
	if err != nil {
		return 0, nil, err
	}
	n, err := readVarint(c.r)
	if err != nil {
		return 0, nil, err
	}
	if n <= c.r.Size() {
		body, err := c.r.Peek(n)
		if err != nil {
			return 0, nil, err
		}
		_, _ = c.r.Discard(n)
		return typ, body, nil
	}
	body := make([]byte, n)
	_, err = io.ReadFull(c.r, body)
	return typ, body, err
}

func appendString(b []byte, s string) []byte {
	return append(binary.BigEndian.AppendUint16(b, uint16(len(s))), s...)
}

func writeVarint(w *bufio.Writer, n int) {
	for {
		b := byte(n & 0x7f)
		n >>= 7
		if n > 0 {
			b |= 0x80
		}
		w.WriteByte(b)
		if n == 0 {
			return
		}
	}
}

func readVarint(r *bufio.Reader) (int, error) {
	n, shift := 0, 0
	for i := 0; i < 4; i++ {
		b, err := r.ReadByte()
		if err != nil {
			return 0, err
		}
		n |= int(b&0x7f) << shift
		if b&0x80 == 0 {
			return n, nil
		}
		shift += 7
	}
	return 0, errors.New("malformed remaining length")
}

// subscriber counts what one subscription receives and answers QoS 1
// PUBLISHes, on one goroutine: PUBACKs are buffered and flushed whenever
// nothing more has been read yet.
type subscriber struct {
	c    *client
	got  atomic.Int64
	last atomic.Int64 // UnixNano of the latest receipt
	mu   sync.Mutex
	lat  []time.Duration
	done chan error
}

func (s *subscriber) run() {
	var err error
	defer func() { s.done <- err }()
	for {
		if s.c.r.Buffered() == 0 && s.c.w.Buffered() > 0 {
			if err = s.c.w.Flush(); err != nil {
				return
			}
		}
		var typ byte
		var body []byte
		if typ, body, err = s.c.readPacket(); err != nil {
			return
		}
		if typ>>4 != 3 {
			continue
		}
		now := time.Now().UnixNano()
		qos := typ >> 1 & 3
		if len(body) < 2 {
			err = errors.New("short PUBLISH")
			return
		}
		off := 2 + int(binary.BigEndian.Uint16(body))
		var id uint16
		if qos > 0 && off+2 <= len(body) {
			id = binary.BigEndian.Uint16(body[off:])
			off += 2
		}
		if s.c.proto == 5 && off < len(body) {
			pl, k := binary.Uvarint(body[off:]) // properties length (same 7-bit encoding)
			off += k + int(pl)
		}
		if off+8 <= len(body) {
			sent := int64(binary.BigEndian.Uint64(body[off:]))
			s.mu.Lock()
			s.lat = append(s.lat, time.Duration(now-sent))
			s.mu.Unlock()
		}
		if qos > 0 {
			s.c.puback(id)
		}
		s.last.Store(now)
		s.got.Add(1)
	}
}

// publisher sends n messages round-robin over topics; at QoS 1 at most
// window are unacknowledged (its reader takes the PUBACKs).
type publisher struct {
	c      *client
	topics []string
	slots  chan struct{} // QoS 1: one per PUBLISH in flight
	done   chan error    // the PUBACK reader's end
}

func (p *publisher) readAcks() {
	var err error
	defer func() { p.done <- err }()
	for {
		var typ byte
		if typ, _, err = p.c.readPacket(); err != nil {
			return
		}
		if typ>>4 == 4 {
			<-p.slots
		}
	}
}

// send publishes l's messages; with a rate it flushes each one (latency is
// measured, nothing must wait in the buffer), else when the buffer fills
// or the window does.
func (p *publisher) send(n, size, rate int, qos byte, start time.Time) error {
	payload := make([]byte, size)
	for k := 0; k < n; k++ {
		if rate > 0 && k%16 == 0 {
			due := start.Add(time.Duration(k) * time.Second / time.Duration(rate))
			if d := time.Until(due); d > 0 {
				time.Sleep(d)
			}
		}
		if qos > 0 {
			select {
			case p.slots <- struct{}{}:
			default:
				if err := p.c.w.Flush(); err != nil {
					return err
				}
				p.slots <- struct{}{}
			}
		}
		binary.BigEndian.PutUint64(payload, uint64(time.Now().UnixNano()))
		if err := p.c.publish(p.topics[k%len(p.topics)], qos, uint16(k%65535+1), payload); err != nil {
			return err
		}
		if rate > 0 {
			if err := p.c.w.Flush(); err != nil {
				return err
			}
		}
	}
	return p.c.w.Flush()
}
