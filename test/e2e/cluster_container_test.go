package e2e

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"
	"github.com/eclipse/paho.golang/paho"
)

// rawAMQP is an AMQP connection written by hand (go-amqp cannot send
// desired capabilities): SASL ANONYMOUS, then an open.
type rawAMQP struct {
	t  *testing.T
	nc net.Conn
}

// frame writes one frame of type typ on channel 0 with body.
func (c *rawAMQP) frame(typ byte, body []byte) {
	c.t.Helper()
	b := binary.BigEndian.AppendUint32(nil, uint32(8+len(body)))
	b = append(b, 2, typ, 0, 0)
	if _, err := c.nc.Write(append(b, body...)); err != nil {
		c.t.Fatal(err)
	}
}

// next reads the next frame's body, skipping empty ones (heartbeats).
func (c *rawAMQP) next() []byte {
	c.t.Helper()
	for {
		_ = c.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		var h [8]byte
		if _, err := io.ReadFull(c.nc, h[:]); err != nil {
			c.t.Fatalf("read frame: %v", err)
		}
		b := make([]byte, binary.BigEndian.Uint32(h[:4])-8)
		if _, err := io.ReadFull(c.nc, b); err != nil {
			c.t.Fatalf("read frame: %v", err)
		}
		if len(b) > 0 {
			return b
		}
	}
}

func (c *rawAMQP) header(h string) {
	c.t.Helper()
	if _, err := c.nc.Write([]byte(h)); err != nil {
		c.t.Fatal(err)
	}
	got := make([]byte, 8)
	_ = c.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(c.nc, got); err != nil || string(got) != h {
		c.t.Fatalf("protocol header %q: %v", got, err)
	}
}

// amqpStr8 and amqpSym8 encode a short string and symbol (AMQP 1.0 §1.6).
func amqpStr8(s string) []byte { return append([]byte{0xa1, byte(len(s))}, s...) }
func amqpSym8(s string) []byte { return append([]byte{0xa3, byte(len(s))}, s...) }

// described returns the described list code(fields...) (list8).
func described(code byte, fields ...[]byte) []byte {
	items := bytes.Join(fields, nil)
	return append([]byte{0x00, 0x53, code, 0xc0, byte(1 + len(items)), byte(len(fields))}, items...)
}

// soleOpenAMQP connects to addr and opens a connection of container
// asking for it alone (desired capability sole-connection-for-container,
// as Qpid JMS does). It returns the server's open and, when that says
// amqp:connection-establishment-failed, the close that follows.
func soleOpenAMQP(t *testing.T, addr, container string) (c *rawAMQP, open, closed []byte) {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	c = &rawAMQP{t: t, nc: nc}
	c.header("AMQP\x03\x01\x00\x00")
	c.next()                                           // sasl-mechanisms
	c.frame(1, described(0x41, amqpSym8("ANONYMOUS"))) // sasl-init
	c.next()                                           // sasl-outcome
	c.header("AMQP\x00\x01\x00\x00")
	null := []byte{0x40}
	c.frame(0, described(0x10, amqpStr8(container), null, null, null, null, null, null, null,
		amqpSym8("sole-connection-for-container")))
	open = c.next()
	if bytes.Contains(open, []byte("amqp:connection-establishment-failed")) {
		closed = c.next()
	}
	return c, open, closed
}

// A container id asked for alone (Qpid JMS's ClientID) is unique across
// the gateways of a cluster: open on a, a second connection of it on b is
// refused as ActiveMQ Artemis refuses it (an open saying
// amqp:connection-establishment-failed, then a close amqp:invalid-field
// naming container-id: Qpid JMS's InvalidClientIDException), while a
// connection that does not ask (go-amqp) is let in as before; once the
// connection on a ends, the id opens on b. Before, every connection was
// accepted (the cluster claimed MQTT client ids only).
func TestClusterAMQPSoleContainer(t *testing.T) {
	_, gs := cluster3(t)
	first, open, _ := soleOpenAMQP(t, gs[0].AMQPAddr(), "jms-client-1")
	if bytes.Contains(open, []byte("amqp:connection-establishment-failed")) {
		t.Fatal("the first connection of jms-client-1 was refused")
	}
	_, _, closed := soleOpenAMQP(t, gs[1].AMQPAddr(), "jms-client-1")
	if !bytes.Contains(closed, []byte("amqp:invalid-field")) || !bytes.Contains(closed, []byte("container-id")) {
		t.Fatalf("the second connection of jms-client-1, on b: close %q, want amqp:invalid-field naming container-id", closed)
	}

	// Not asking for it: let in, as Artemis does, and served.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := goamqp.Dial(ctx, "amqp://"+gs[2].AMQPAddr(), &goamqp.ConnOptions{
		SASLType: goamqp.SASLTypeAnonymous(), ContainerID: "jms-client-1"})
	if err != nil {
		t.Fatalf("open without sole-connection-for-container: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	s, err := conn.NewSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := collectAMQP(t, amqpReceiver(t, s, "topic://ct/x"))
	pub := connect5(t, gs[0].MQTTAddr(), "ctpub")
	eventually(t, "the connection that did not ask to receive", func() bool {
		pub.publish(t, &paho.Publish{Topic: "ct/x", QoS: 1, Payload: []byte("x")})
		return got.count("x") > 0
	})

	first.nc.Close()
	conn.Close()
	eventually(t, "jms-client-1 to open on b once a's connection ended", func() bool {
		_, open, _ := soleOpenAMQP(t, gs[1].AMQPAddr(), "jms-client-1")
		return !bytes.Contains(open, []byte("amqp:connection-establishment-failed"))
	})
}

// One container id asked for alone on two gateways at the same instant:
// exactly one connection is refused (the later stamp; equal stamps, by
// node id), as MQTT's claims decide between two CONNECTs.
func TestClusterAMQPSoleContainerRace(t *testing.T) {
	_, gs := cluster3(t)
	for i := range 10 {
		id := fmt.Sprint("race-", i)
		refused := make(chan bool, 2)
		for _, g := range gs[:2] {
			go func() {
				_, open, _ := soleOpenAMQP(t, g.AMQPAddr(), id)
				refused <- bytes.Contains(open, []byte("amqp:connection-establishment-failed"))
			}()
		}
		n := 0
		for range 2 {
			select {
			case r := <-refused:
				n += btoi(r)
			case <-time.After(30 * time.Second): // an open that failed (its goroutine ended the test)
				t.Fatalf("%s: an open did not complete", id)
			}
		}
		if n != 1 {
			t.Fatalf("%s opened on a and b at once: %d refused, want 1", id, n)
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
