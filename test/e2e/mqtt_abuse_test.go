package e2e

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"
	"github.com/eclipse/paho.golang/paho"
)

// Clients that misbehave, on purpose or by bad luck: each must cost the
// gateway only its own connection, never anyone else's service.

// dialStuck connects an MQTT 5 client with a tiny socket receive buffer,
// subscribes it to filter at QoS 1 with keep alive 0, and returns its
// connection, which the test then never reads: a subscriber that stopped
// reading (a hung device, a full mobile link).
func dialStuck(t *testing.T, addr, id, filter string) net.Conn {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 1024)
		})
		return errors.Join(err, serr)
	}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	w := &wire{t: t, c: c, rd: bufio.NewReader(c)}
	body := append([]byte{0, 4, 'M', 'Q', 'T', 'T', 5, 0x02, 0, 0, 0}, str(id)...) // keep alive 0
	if err := w.send(0x10, body); err != nil {
		t.Fatal(err)
	}
	if typ, b := w.read(); typ != 0x20 || b[1] != 0 {
		t.Fatalf("CONNACK %#x % x", typ, b)
	}
	sub := append([]byte{0, 1, 0}, str(filter)...) // packet id 1, no properties
	if err := w.send(0x82, append(sub, 0x01)); err != nil {
		t.Fatal(err)
	}
	if typ, b := w.read(); typ != 0x90 || b[len(b)-1] != 0x01 {
		t.Fatalf("SUBACK %#x % x", typ, b)
	}
	_ = c.SetReadDeadline(time.Time{})
	return c
}

// counter5 is an MQTT 5 client that counts what it receives by QoS.
type counter5 struct {
	*paho.Client
	qos0, qos1 atomic.Int64
}

func connectCounter(t *testing.T, addr, id string) *counter5 {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c := &counter5{}
	c.Client = paho.NewClient(paho.ClientConfig{ClientID: id, Conn: conn,
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(pr paho.PublishReceived) (bool, error) {
			if pr.Packet.QoS == 0 {
				c.qos0.Add(1)
			} else {
				c.qos1.Add(1)
			}
			return true, nil
		}}})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if ca, err := c.Connect(ctx, &paho.Connect{ClientID: id, CleanStart: true, KeepAlive: 30,
		Properties: &paho.ConnectProperties{ReceiveMaximum: ptr[uint16](65535)}}); err != nil || ca.ReasonCode != 0 {
		t.Fatalf("connect %s: %v %v", id, err, ca)
	}
	t.Cleanup(func() { _ = c.Disconnect(&paho.Disconnect{}) })
	return c
}

// publishMany publishes n messages of size bytes at qos from 4 goroutines
// sharing one client, and returns how many were acknowledged with a
// success code and how long it took.
func publishMany(t *testing.T, c *paho.Client, topic string, qos byte, n, size int) (int64, time.Duration) {
	t.Helper()
	payload := make([]byte, size)
	var acked atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := w; i < n; i += 4 {
				r, err := c.Publish(ctx, &paho.Publish{Topic: topic, QoS: qos, Payload: payload})
				if err != nil {
					t.Logf("publish %d: %v", i, err)
					return // counted as missing
				}
				if qos == 0 || (r != nil && r.ReasonCode < 0x80) {
					acked.Add(1)
				}
			}
		}(w)
	}
	wg.Wait()
	return acked.Load(), time.Since(start)
}

// TestStuckSubscriberDoesNotSlowOthers: a QoS 1 subscriber on "#" that
// never reads its socket (keep alive 0, so keep alive never ends it) must
// not hold up anyone else. Before the fix, mochi held the stuck client's
// lock across its blocked socket write, and every publisher routing a QoS 1
// message to it waited on that lock (NextPacketID): the publisher got one
// PUBACK and then nothing for as long as the stuck connection lived, the
// other subscriber got no QoS 1 message, and AMQP senders got no
// dispositions. The write timeout is set long here, so that the stuck
// client is still connected throughout: the others are unaffected because
// nothing waits for it, not because it was cut off.
func TestStuckSubscriberDoesNotSlowOthers(t *testing.T) {
	g := startGateway(t, "--mqtt.writeTimeout=10m")
	normal := connectCounter(t, g.MQTTAddr(), "normal")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := normal.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "#", QoS: 1}}}); err != nil {
		t.Fatal(err)
	}
	pub := connectCounter(t, g.MQTTAddr(), "publisher")

	// First with a second subscriber that reads: the figure to compare with.
	healthy := connectCounter(t, g.MQTTAddr(), "healthy")
	if _, err := healthy.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "#", QoS: 1}}}); err != nil {
		t.Fatal(err)
	}
	const n1 = 2000
	base, baseTook := publishMany(t, pub.Client, "warmup/a", 1, n1, 1024)
	if base != n1 {
		t.Fatalf("baseline: %d of %d acknowledged", base, n1)
	}
	eventually(t, "baseline delivered", func() bool { return normal.qos1.Load() == n1 && healthy.qos1.Load() == n1 })
	_ = healthy.Disconnect(&paho.Disconnect{})

	stuck := dialStuck(t, g.MQTTAddr(), "stuck", "#")
	// QoS 0 until the stuck client's socket and write queue are full.
	const n0 = 20000
	if got, _ := publishMany(t, pub.Client, "fill/a", 0, n0, 1024); got != n0 {
		t.Fatalf("QoS 0: %d of %d sent", got, n0)
	}
	// The normal subscriber may itself lose QoS 0 copies to an unpaced
	// flood (its write queue is bounded too, and MQTT allows it), so the
	// QoS 0 phase asserts nothing: it is there to fill the stuck client.

	acked, took := publishMany(t, pub.Client, "sensors/a", 1, n1, 1024)
	if acked != n1 {
		t.Fatalf("with a stuck subscriber the publisher got %d of %d PUBACKs", acked, n1)
	}
	eventually(t, "QoS 1 delivered to the normal subscriber", func() bool { return normal.qos1.Load() == 2*n1 })
	t.Logf("QoS 0: the normal subscriber got %d of %d", normal.qos0.Load(), n0)
	t.Logf("QoS 1, %d x 1 KiB to 2 subscribers: %.0f msg/s when both read, %.0f msg/s when one is stuck (%.2fx)",
		n1, n1/baseTook.Seconds(), n1/took.Seconds(), baseTook.Seconds()/took.Seconds())

	// An AMQP publisher to a topic the stuck client matches, and one to a
	// topic of its own: both get their dispositions.
	s := amqpSession(t, g)
	for _, topic := range []string{"sensors/b", "other/c"} {
		for i := 0; i < 10; i++ {
			amqpSend(t, s, topic, goamqp.NewMessage([]byte("x")))
		}
	}
	// A new client can still connect and subscribe.
	late := connect5(t, g.MQTTAddr(), "late")
	late.subscribe(t, paho.SubscribeOptions{Topic: "late/#", QoS: 1})

	// The stuck client was not disconnected: its queues held its copies.
	_, metrics := httpDo(t, "GET", "http://"+g.AdminAddr()+"/metrics")
	if l := grep(metrics, `tolsey_connections{protocol="mqtt"}`); !strings.HasSuffix(l, " 4") {
		t.Fatalf("want 4 MQTT connections (normal, publisher, stuck, late), metrics: %q", l)
	}
	_ = stuck
}

// TestStuckSubscriberDisconnectedAfterWriteTimeout: past mqtt.writeTimeout,
// a subscriber that does not read is disconnected and counted.
func TestStuckSubscriberDisconnectedAfterWriteTimeout(t *testing.T) {
	g := startGateway(t, "--mqtt.writeTimeout=500ms")
	pub := connectCounter(t, g.MQTTAddr(), "publisher")
	stuck := dialStuck(t, g.MQTTAddr(), "stuck", "#")
	payload := make([]byte, 1024)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	metric := `tolsey_connections_closed_total{protocol="mqtt",reason="write_timeout"}`
	// Publish until the gateway gives up on the stuck client.
	for i := 0; ; i++ {
		if _, err := pub.Publish(ctx, &paho.Publish{Topic: "sensors/a", QoS: 1, Payload: payload}); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
		if i%500 == 0 {
			_, m := httpDo(t, "GET", "http://"+g.AdminAddr()+"/metrics")
			if strings.HasSuffix(grep(m, metric), " 1") {
				break
			}
		}
	}
	// Its socket ends: what was sent before the cut, then end of stream.
	_ = stuck.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.Copy(io.Discard, stuck); err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("stuck client's connection did not end: %v", err)
	}
	_, m := httpDo(t, "GET", "http://"+g.AdminAddr()+"/metrics")
	if l := grep(m, `tolsey_connections{protocol="mqtt"}`); !strings.HasSuffix(l, " 1") {
		t.Fatalf("want only the publisher connected: %q", l)
	}
}

// TestTakeoverKeepsNewSession: a clean-session client that disconnects
// and connects again at once with the same id keeps what the new session
// subscribes to. mochi cleaned the old connection up by client id, so when
// the new connection had already registered, the old one's cleanup
// removed the new session (from the client list or the subscription
// index) and the new session's messages went nowhere: 1-2 rounds in 30
// lost all 3 messages, 2 in 4 with 1,000 filters per session. A clean
// DISCONNECT never publishes the will, however quick the reconnect.
func TestTakeoverKeepsNewSession(t *testing.T) {
	g := startGateway(t)
	watcher := connect5(t, g.MQTTAddr(), "watcher")
	watcher.subscribe(t, paho.SubscribeOptions{Topic: "will/#", QoS: 0})

	const workers, rounds, filters = 4, 40, 100
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			id := fmt.Sprintf("takeover-%d", w)
			for r := 0; r < rounds; r++ {
				if err := takeoverRound(g.MQTTAddr(), id, filters, r); err != nil {
					errs <- fmt.Errorf("%s round %d: %w", id, r, err)
					return
				}
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// A fence: everything the watcher was sent before it has arrived.
	pub := connect5(t, g.MQTTAddr(), "fence")
	pub.publish(t, &paho.Publish{Topic: "will/fence", QoS: 1})
	if wills := watcher.until(t, "will/fence"); len(wills) > 0 {
		t.Fatalf("%d wills published after clean DISCONNECTs: %s", len(wills), topics(wills))
	}
}

// takeoverRound: connect (MQTT 3.1.1, clean session, with a will),
// subscribe, DISCONNECT; connect again at once, subscribe, publish 3
// messages to itself at QoS 1 and receive them all.
func takeoverRound(addr, id string, filters, round int) error {
	first, err := dial311(addr, id)
	if err != nil {
		return err
	}
	if err := first.subscribe(filters, id); err != nil {
		return err
	}
	_ = first.send(0xe0, nil) // DISCONNECT
	first.c.Close()

	second, err := dial311(addr, id)
	if err != nil {
		return err
	}
	defer second.c.Close()
	if err := second.subscribe(filters, id); err != nil {
		return err
	}
	for i := 0; i < 3; i++ {
		topic := fmt.Sprintf("self/%s/%d", id, filters-1)
		body := append(str(topic), 0, byte(i+1))
		body = append(body, strconv.Itoa(round*10+i)...)
		if err := second.send(0x32, body); err != nil {
			return err
		}
	}
	got, acks := 0, 0
	for got < 3 || acks < 3 {
		typ, b, err := second.readPacket()
		if err != nil {
			return fmt.Errorf("after %d messages and %d PUBACKs: %w", got, acks, err)
		}
		switch typ & 0xf0 {
		case 0x40:
			acks++
		case 0x30:
			got++
			if typ&0x06 != 0 { // QoS 1: acknowledge
				n := binary.BigEndian.Uint16(b)
				if err := second.send(0x40, b[2+n:4+n]); err != nil {
					return err
				}
			}
		}
	}
	_ = second.send(0xe0, nil)
	return nil
}

// conn311 is a raw MQTT 3.1.1 connection for the takeover test, which runs
// on several goroutines (wire reports through t).
type conn311 struct {
	c  net.Conn
	rd *reader
}

func dial311(addr, id string) (*conn311, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	m := &conn311{c: c, rd: newReader(c)}
	// CONNECT 3.1.1, clean session, will flag (QoS 0), keep alive 30.
	body := append([]byte{0, 4, 'M', 'Q', 'T', 'T', 4, 0x02 | 0x04, 0, 30}, str(id)...)
	body = append(append(body, str("will/"+id)...), str("gone")...)
	if err := m.send(0x10, body); err != nil {
		return nil, err
	}
	typ, b, err := m.readPacket()
	if err != nil || typ != 0x20 || b[1] != 0 {
		c.Close()
		return nil, fmt.Errorf("CONNACK %#x % x: %v", typ, b, err)
	}
	return m, nil
}

// subscribe subscribes to n filters self/<id>/0 ... self/<id>/n-1 at QoS 1.
func (m *conn311) subscribe(n int, id string) error {
	body := []byte{0, 7}
	for i := 0; i < n; i++ {
		body = append(append(body, str(fmt.Sprintf("self/%s/%d", id, i))...), 1)
	}
	if err := m.send(0x82, body); err != nil {
		return err
	}
	typ, b, err := m.readPacket()
	if err != nil || typ != 0x90 || len(b) != 2+n || b[2] != 0x01 {
		return fmt.Errorf("SUBACK %#x % x: %v", typ, b, err)
	}
	return nil
}

func (m *conn311) send(header byte, body []byte) error {
	pk := binary.AppendUvarint([]byte{header}, uint64(len(body)))
	_, err := m.c.Write(append(pk, body...))
	return err
}

func (m *conn311) readPacket() (byte, []byte, error) { return m.rd.packet() }

// reader reads MQTT packets off a connection.
type reader struct{ r io.Reader }

func newReader(c net.Conn) *reader { return &reader{r: c} }

func (r *reader) ReadByte() (byte, error) {
	var b [1]byte
	_, err := io.ReadFull(r.r, b[:])
	return b[0], err
}

func (r *reader) Read(p []byte) (int, error) { return r.r.Read(p) }

func (r *reader) packet() (byte, []byte, error) {
	h, err := r.ReadByte()
	if err != nil {
		return 0, nil, err
	}
	n, err := binary.ReadUvarint(r)
	if err != nil {
		return 0, nil, err
	}
	b := make([]byte, n)
	_, err = io.ReadFull(r.r, b)
	return h, b, err
}

// TestPacketSizeLimits: the default maximum packet size (1 MiB) is
// announced in the CONNACK, and a larger PUBLISH ends the connection with
// DISCONNECT 0x95; without a limit, a header that declares 256 MiB and is
// followed by nothing reserves no more than what arrives (mochi made the
// whole buffer from the header: 8 such connections took the heap to 2 GiB).
func TestPacketSizeLimits(t *testing.T) {
	t.Run("default", func(t *testing.T) {
		g := startGateway(t)
		c, err := net.Dial("tcp", g.MQTTAddr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		w := &wire{t: t, c: c, rd: bufio.NewReader(c)}
		if err := w.send(0x10, append([]byte{0, 4, 'M', 'Q', 'T', 'T', 5, 0x02, 0, 30, 0}, str("big")...)); err != nil {
			t.Fatal(err)
		}
		typ, b := w.read()
		if typ != 0x20 || b[1] != 0 {
			t.Fatalf("CONNACK %#x % x", typ, b)
		}
		if mps, ok := connackProp(b, 0x27); !ok || mps != 1<<20 {
			t.Fatalf("CONNACK Maximum Packet Size = %d (present %v), want %d; properties % x", mps, ok, 1<<20, b)
		}
		// A PUBLISH one byte over the limit, whole packet counted.
		topic := "big/a"
		over := 1<<20 + 1 - (1 + 3) - (2 + len(topic) + 1) // fixed header 1+3 bytes, topic, property length
		if err := w.send(0x30, publishBody(topic, 0, nil, make([]byte, over))[2:]); err != nil {
			// publishBody adds a packet id; QoS 0 has none
			t.Fatal(err)
		}
		typ, b = w.read()
		if typ != 0xe0 || len(b) < 1 || b[0] != 0x95 {
			t.Fatalf("want DISCONNECT 0x95, got %#x % x", typ, b)
		}
	})
	t.Run("protocol limit", func(t *testing.T) {
		g := startGateway(t, "--mqtt.maxPacketSize=0")
		const conns = 4
		before := heapInUse()
		for i := 0; i < conns; i++ {
			w := dialWire(t, g.MQTTAddr(), "hog-"+strconv.Itoa(i))
			// PUBLISH, remaining length 268,435,455, then silence.
			if _, err := w.c.Write([]byte{0x30, 0xff, 0xff, 0xff, 0x7f, 0, 1, 'a'}); err != nil {
				t.Fatal(err)
			}
		}
		// A normal client is still served. Whatever the readers of the
		// silent ones reserve, they reserve as soon as they read the
		// header: watch the heap for a while.
		connect5(t, g.MQTTAddr(), "normal").publish(t, &paho.Publish{Topic: "x", QoS: 1})
		var grew int64
		for end := time.Now().Add(time.Second); time.Now().Before(end); {
			grew = max(grew, heapInUse()-before)
			if grew > 16<<20 {
				t.Fatalf("heap grew by %d MiB for %d headers alone", grew>>20, conns)
			}
		}
		t.Logf("heap grew by at most %d KiB for %d connections announcing 256 MiB packets", grew>>10, conns)
	})
	t.Run("largest unauthenticated connection", func(t *testing.T) {
		// A CONNECT of the largest size allowed (1 MiB by default), all
		// but its last byte sent: what one connection that has not
		// authenticated can make the gateway hold.
		g := startGateway(t)
		before := heapInUse()
		c, err := net.Dial("tcp", g.MQTTAddr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		n := 1<<20 - 1 - 3 // the whole packet is 1 MiB: 1 + 3 length bytes + body
		if _, err := c.Write(append(binary.AppendUvarint([]byte{0x10}, uint64(n)), make([]byte, n-1)...)); err != nil {
			t.Fatal(err)
		}
		var grew int64
		for end := time.Now().Add(time.Second); time.Now().Before(end); {
			grew = max(grew, heapInUse()-before)
		}
		t.Logf("one connection holding a 1 MiB CONNECT but its last byte: heap grew by at most %d KiB", grew>>10)
		if grew > 4<<20 {
			t.Fatalf("heap grew by %d KiB", grew>>10)
		}
	})
	t.Run("trickling CONNECT", func(t *testing.T) {
		g := startGateway(t, "--mqtt.connectTimeout=1s")
		c, err := net.Dial("tcp", g.MQTTAddr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		body := append([]byte{0, 4, 'M', 'Q', 'T', 'T', 5, 0x02, 0, 30, 0}, str("slow")...)
		pk := append(binary.AppendUvarint([]byte{0x10}, uint64(len(body))), body...)
		// One byte every 100 ms: the whole CONNECT would take 2 s.
		start := time.Now()
		for _, b := range pk[:len(pk)-1] {
			if _, err := c.Write([]byte{b}); err != nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		n, err := c.Read(make([]byte, 16))
		if err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("connection still open after %v (read %d bytes, %v)", time.Since(start), n, err)
		}
	})
}

// connackProp returns the uint32 property id of a CONNACK body.
func connackProp(b []byte, id byte) (uint32, bool) {
	n, k := binary.Uvarint(b[2:])
	props := b[2+k : 2+k+int(n)]
	for len(props) > 0 {
		switch p := props[0]; p {
		case 0x27, 0x11: // four-byte integers
			if p == id {
				return binary.BigEndian.Uint32(props[1:5]), true
			}
			props = props[5:]
		case 0x21, 0x22, 0x13: // two-byte integers
			props = props[3:]
		case 0x24, 0x25, 0x28, 0x29, 0x2a: // bytes
			props = props[2:]
		case 0x12, 0x1a, 0x1c, 0x1f: // strings
			props = props[3+int(binary.BigEndian.Uint16(props[1:3])):]
		case 0x26: // user property
			l := int(binary.BigEndian.Uint16(props[1:3]))
			props = props[3+l:]
			props = props[2+int(binary.BigEndian.Uint16(props[0:2])):]
		default:
			return 0, false
		}
	}
	return 0, false
}

func heapInUse() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapInuse)
}

// A stuck subscriber's QoS 1 copies wait in its session, bounded by
// mqtt.maxInflight; beyond it they are dropped and counted
// (tolsey_mqtt_inflight_dropped_total), and the publisher is acknowledged
// throughout (docs/mqtt-frontend.md, "Slow and stuck subscribers";
// TestStuckSubscriberDoesNotSlowOthers shows the other subscribers unharmed).
func TestStuckSubscriberSessionBoundedAndCounted(t *testing.T) {
	const limit = 100
	g := startGateway(t, "--mqtt.writeTimeout=10m", fmt.Sprintf("--mqtt.maxInflight=%d", limit))
	pub := connectCounter(t, g.MQTTAddr(), "publisher")
	stuck := dialStuck(t, g.MQTTAddr(), "stuck", "#")

	const n = 3000
	if acked, _ := publishMany(t, pub.Client, "sensors/a", 1, n, 1024); acked != n {
		t.Fatalf("with a stuck subscriber the publisher got %d of %d PUBACKs", acked, n)
	}
	// The stuck client never acknowledges: limit copies are held in its
	// session (some of them in its socket), every other one is dropped and
	// counted. Nothing else subscribes, so every drop is the stuck one's.
	var dropped float64
	eventually(t, "the stuck subscriber's overflow counted", func() bool {
		_, metrics := httpDo(t, "GET", "http://"+g.AdminAddr()+"/metrics")
		l := grep(metrics, "tolsey_mqtt_inflight_dropped_total ")
		f := strings.Fields(l)
		if len(f) != 2 {
			t.Fatalf("metric tolsey_mqtt_inflight_dropped_total: %q", l)
		}
		v, err := strconv.ParseFloat(f[1], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", l, err)
		}
		dropped = v
		return dropped >= n-limit
	})
	if dropped != n-limit {
		t.Fatalf("dropped %v of the stuck subscriber's %d copies; want %d (it holds %d)", dropped, n, n-limit, limit)
	}
	t.Logf("stuck subscriber: %v of %d copies dropped and counted, %d held in its session (mqtt.maxInflight)", dropped, n, limit)
	_ = stuck
}
