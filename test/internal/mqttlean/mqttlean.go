// Package mqttlean is a minimal MQTT 3.1.1 client over a plain net.Conn for
// the drills that need thousands of clients (test/bench/storm) or clients
// that misbehave on purpose (a subscriber that never reads, with a small
// receive buffer: test/fault). paho costs several goroutines, channels and
// buffers per client; this costs one connection, a 512-byte read buffer and
// whatever goroutine the caller reads from. It speaks only what those
// drills use: CONNECT/CONNACK, SUBSCRIBE/SUBACK, PUBLISH (QoS 0, 1),
// PUBACK, DISCONNECT. Tests and bench programs only.
//
// A load program that measures the server against a nats.go client
// (test/bench/bridgeload) pipelines its publishes as nats.go does: Queue
// appends a PUBLISH to the connection's write buffer, which goes out in
// one write when it holds FlushAt bytes or the caller calls Flush (when it
// has nothing more to send right now), not one write per message.
package mqttlean

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"time"
)

// Packet types (MQTT 3.1.1 §2.2.1).
const (
	CONNECT    = 1
	CONNACK    = 2
	PUBLISH    = 3
	PUBACK     = 4
	SUBSCRIBE  = 8
	SUBACK     = 9
	PINGRESP   = 13
	DISCONNECT = 14
)

// Options of one connection.
type Options struct {
	ClientID  string
	Clean     bool   // clean session (false: a persistent session, §3.1.2.4)
	KeepAlive uint16 // seconds; 0 disables
	// LocalAddr is the source address (nil: any). Spreading clients over
	// 127.0.0.x gives each address its own ephemeral port range.
	LocalAddr net.Addr
	// ReadBuffer sets SO_RCVBUF before the connect, so the window the
	// server sees is small from the first byte (0: the system's default).
	ReadBuffer int
	// BufSize is the size of the read buffer ReadPacket reads through
	// (0: 512 bytes, for thousands of mostly idle clients; a busy
	// subscriber wants tens of KiB, as nats.go's 32 KiB).
	BufSize int
}

// FlushAt is how many bytes of queued publishes make Queue write them out:
// nats.go's default write buffer (32 KiB).
const FlushAt = 32 << 10

// Conn is one MQTT connection. Writes may come from any goroutine; reads
// (ReadPacket) from one goroutine at a time.
type Conn struct {
	SessionPresent bool // from the CONNACK

	nc  net.Conn
	r   *bufio.Reader
	wmu sync.Mutex
	wb  []byte // guarded by wmu: packets queued and not yet written
}

// Packet is what ReadPacket returns; which fields are set depends on Type.
type Packet struct {
	Type    byte
	Flags   byte // the fixed header's low nibble (PUBLISH: DUP, QoS, RETAIN)
	ID      uint16
	Topic   string
	Payload []byte
	Codes   []byte // SUBACK return codes; CONNACK: session present, return code
}

// QoS of a PUBLISH.
func (p *Packet) QoS() byte { return p.Flags >> 1 & 3 }

// Dup is a PUBLISH's DUP flag.
func (p *Packet) Dup() bool { return p.Flags&8 != 0 }

// Dial connects, sends CONNECT and waits for a successful CONNACK, all
// bounded by ctx.
func Dial(ctx context.Context, addr string, o Options) (*Conn, error) {
	d := Dialer(o.LocalAddr, o.ReadBuffer)
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	c := &Conn{nc: nc, r: bufio.NewReaderSize(nc, max(o.BufSize, 512))}
	if dl, ok := ctx.Deadline(); ok {
		_ = nc.SetDeadline(dl)
	}
	// Variable header: protocol name, level 4, flags, keep alive (§3.1.2).
	flags := byte(0)
	if o.Clean {
		flags |= 2
	}
	body := []byte{0, 4, 'M', 'Q', 'T', 'T', 4, flags, byte(o.KeepAlive >> 8), byte(o.KeepAlive)}
	body = appendString(body, o.ClientID)
	if err := c.write(CONNECT<<4, body); err != nil {
		nc.Close()
		return nil, err
	}
	p, err := c.ReadPacket()
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("CONNACK: %w", err)
	}
	if p.Type != CONNACK || len(p.Codes) != 2 {
		nc.Close()
		return nil, fmt.Errorf("want CONNACK, got packet type %d", p.Type)
	}
	if p.Codes[1] != 0 {
		nc.Close()
		return nil, fmt.Errorf("CONNACK return code %d", p.Codes[1])
	}
	c.SessionPresent = p.Codes[0]&1 == 1
	_ = nc.SetDeadline(time.Time{})
	return c, nil
}

// Dialer dials from local (nil: any) with SO_RCVBUF set to rcvbuf before
// the connect (0: the system's default), for any protocol: a client that
// stops reading then stalls its server's writes after a few KiB.
func Dialer(local net.Addr, rcvbuf int) *net.Dialer {
	d := &net.Dialer{LocalAddr: local}
	if rcvbuf > 0 {
		d.Control = func(_, _ string, rc syscall.RawConn) error {
			var serr error
			err := rc.Control(func(fd uintptr) {
				serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, rcvbuf)
			})
			return errors.Join(err, serr)
		}
	}
	return d
}

// Subscribe sends SUBSCRIBE for filters at qos with packet id id and reads
// until its SUBACK; a PUBLISH read meanwhile goes to other (nil: dropped).
func (c *Conn) Subscribe(id uint16, qos byte, other func(*Packet), filters ...string) error {
	body := []byte{byte(id >> 8), byte(id)}
	for _, f := range filters {
		body = append(appendString(body, f), qos)
	}
	if err := c.write(SUBSCRIBE<<4|2, body); err != nil {
		return err
	}
	for {
		p, err := c.ReadPacket()
		if err != nil {
			return fmt.Errorf("SUBACK: %w", err)
		}
		if p.Type != SUBACK || p.ID != id {
			if other != nil {
				other(p)
			}
			continue
		}
		for i, code := range p.Codes {
			if code >= 0x80 {
				return fmt.Errorf("subscribe %s refused: %#x", filters[i], code)
			}
		}
		return nil
	}
}

// Publish sends a PUBLISH (id is ignored at QoS 0). It does not wait for
// the PUBACK: the caller's reader sees it.
func (c *Conn) Publish(id uint16, topic string, payload []byte, qos byte) error {
	body := appendString(nil, topic)
	if qos > 0 {
		body = append(body, byte(id>>8), byte(id))
	}
	return c.write(PUBLISH<<4|qos<<1, append(body, payload...))
}

// Queue appends a PUBLISH to the write buffer (id is ignored at QoS 0);
// the buffer is written when it holds FlushAt bytes, by Flush, or before
// any other packet. A buffered publish the caller never flushes is never
// sent.
func (c *Conn) Queue(id uint16, topic string, payload []byte, qos byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	n := 2 + len(topic) + len(payload)
	if qos > 0 {
		n += 2
	}
	c.wb = append(c.wb, PUBLISH<<4|qos<<1)
	c.wb = binary.AppendUvarint(c.wb, uint64(n))
	c.wb = appendString(c.wb, topic)
	if qos > 0 {
		c.wb = append(c.wb, byte(id>>8), byte(id))
	}
	c.wb = append(c.wb, payload...)
	if len(c.wb) < FlushAt {
		return nil
	}
	return c.flushLocked()
}

// Flush writes what Queue buffered.
func (c *Conn) Flush() error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.flushLocked()
}

func (c *Conn) flushLocked() error {
	if len(c.wb) == 0 {
		return nil
	}
	_, err := c.nc.Write(c.wb)
	c.wb = c.wb[:0]
	return err
}

// Puback acknowledges a QoS 1 PUBLISH.
func (c *Conn) Puback(id uint16) error { return c.write(PUBACK<<4, []byte{byte(id >> 8), byte(id)}) }

// Disconnect sends DISCONNECT and closes the connection.
func (c *Conn) Disconnect() error {
	err := c.write(DISCONNECT<<4, nil)
	return errors.Join(err, c.nc.Close())
}

// Close closes the connection without DISCONNECT.
func (c *Conn) Close() error { return c.nc.Close() }

// SetReadDeadline bounds the next reads.
func (c *Conn) SetReadDeadline(t time.Time) error { return c.nc.SetReadDeadline(t) }

// ReadPacket reads one packet.
func (c *Conn) ReadPacket() (*Packet, error) {
	h, err := c.r.ReadByte()
	if err != nil {
		return nil, err
	}
	n, err := binary.ReadUvarint(c.r) // MQTT's Remaining Length is a base-128 varint (§2.2.3)
	if err != nil {
		return nil, err
	}
	if n > 1<<28 {
		return nil, fmt.Errorf("remaining length %d", n)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(c.r, b); err != nil {
		return nil, err
	}
	p := &Packet{Type: h >> 4, Flags: h & 15}
	switch p.Type {
	case CONNACK:
		p.Codes = b
	case PUBLISH:
		if len(b) < 2 {
			return nil, errors.New("short PUBLISH")
		}
		tl := int(binary.BigEndian.Uint16(b))
		if len(b) < 2+tl {
			return nil, errors.New("short PUBLISH topic")
		}
		p.Topic, b = string(b[2:2+tl]), b[2+tl:]
		if p.QoS() > 0 {
			if len(b) < 2 {
				return nil, errors.New("short PUBLISH id")
			}
			p.ID, b = binary.BigEndian.Uint16(b), b[2:]
		}
		p.Payload = b
	case PUBACK, SUBACK:
		if len(b) < 2 {
			return nil, fmt.Errorf("short packet type %d", p.Type)
		}
		p.ID, p.Codes = binary.BigEndian.Uint16(b), b[2:]
	}
	return p, nil
}

func (c *Conn) write(h byte, body []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.wb = append(c.wb, h) // after what Queue buffered, if anything
	c.wb = binary.AppendUvarint(c.wb, uint64(len(body)))
	c.wb = append(c.wb, body...)
	return c.flushLocked()
}

func appendString(b []byte, s string) []byte {
	return append(binary.BigEndian.AppendUint16(b, uint16(len(s))), s...)
}
