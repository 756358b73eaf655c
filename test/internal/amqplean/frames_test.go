package amqplean

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

	goamqp "github.com/Azure/go-amqp"

	"github.com/tolsey/tolsey/core/coretest"
)

// counter is a TCP proxy in front of a server that counts the AMQP
// frames its clients send, by performative, with their bytes.
type counter struct {
	addr   string
	mu     sync.Mutex
	frames map[byte]int
	bytes  map[byte]int
	// gaps are the transfers whose delivery-id was not the one after the
	// connection's previous delivery-id (a session numbers its deliveries
	// one by one, §2.6.12, whatever number of frames each takes).
	gaps []string
}

func countFrames(t *testing.T, server string) *counter {
	t.Helper()
	p := &counter{frames: map[byte]int{}, bytes: map[byte]int{}}
	p.addr = proxy(t, server, func(cc, sc net.Conn) {
		go func() { _, _ = io.Copy(cc, sc); cc.Close() }()
		go func() { p.count(bufio.NewReader(cc), sc); sc.Close() }()
	})
	return p
}

// proxy listens on a free port of 127.0.0.1 and returns its address; for
// each client it accepts it dials server and calls pipe with both
// connections, which starts the goroutines that forward between them.
// Every connection and the listener are closed when the test ends.
func proxy(t *testing.T, server string, pipe func(client, server net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	go func() {
		for {
			cc, err := ln.Accept()
			if err != nil {
				return
			}
			sc, err := net.Dial("tcp", server)
			if err != nil {
				cc.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, cc, sc)
			mu.Unlock()
			pipe(cc, sc)
		}
	}()
	return ln.Addr().String()
}

// count forwards what a client writes, counting the frames of type 0
// (AMQP) by descriptor; protocol headers and SASL frames pass uncounted.
func (p *counter) count(r *bufio.Reader, w io.Writer) {
	var prev uint32
	seen := false
	for {
		h := make([]byte, 8)
		if _, err := io.ReadFull(r, h); err != nil {
			return
		}
		if string(h[:4]) == "AMQP" {
			if _, err := w.Write(h); err != nil {
				return
			}
			continue
		}
		size := binary.BigEndian.Uint32(h)
		f := make([]byte, size)
		copy(f, h)
		if _, err := io.ReadFull(r, f[8:]); err != nil {
			return
		}
		if body := f[int(h[4])*4:]; h[5] == 0 && len(body) >= 3 {
			p.mu.Lock()
			p.frames[body[2]]++
			p.bytes[body[2]] += int(size)
			p.mu.Unlock()
			if body[2] == descTransfer {
				if desc, f, _, err := performative(body); err == nil && desc == descTransfer {
					_, _, _ = f.next() // handle
					if code, v, err := f.next(); err == nil {
						if id, ok := uintOf(code, v); ok {
							if seen && id != prev+1 {
								p.mu.Lock()
								p.gaps = append(p.gaps, fmt.Sprintf("delivery-id %d after %d", id, prev))
								p.mu.Unlock()
							}
							prev, seen = id, true
						}
					}
				}
			}
		}
		if _, err := w.Write(f); err != nil {
			return
		}
	}
}

func (p *counter) get(desc byte) (int, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.frames[desc], p.bytes[desc]
}

func (p *counter) reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	clear(p.frames)
	clear(p.bytes)
	p.gaps = nil
}

// The lean client puts the same protocol work on the server as the go-amqp
// clients queueload used: for the same load (one sender, 64 in flight,
// 1 KiB durable messages; one receiver with credit 256 topped up by 128
// per 128 accepted, as queueload's), the same frames of each kind, and
// the same bytes of transfer and disposition, reach the gateway. (The
// flows' bytes differ by a few: the counts in them depend on how many
// transfers had arrived when the credit was topped up, and a count under
// 256 takes 2 bytes, one over it 5.)
func TestSameFramesAsGoAMQP(t *testing.T) {
	sameFrames(t, startGateway(t), "queue://frames", Options{}, 3000, 1024)
}

// Messages of three frames and more (200 KiB; the gateway's max-frame-size
// is 64 KiB) as go-amqp sends them: the same frames and bytes, a
// delivery-id on the first frame of each, numbered one per message, and
// the continuation frames carrying no delivery-id, tag or format.
func TestSameMultiFrameTransfersAsGoAMQP(t *testing.T) {
	sameFrames(t, startGateway(t), "queue://bigframes", Options{}, 12, 200<<10)
}

// sameFrames runs the load of TestSameFramesAsGoAMQP with each client
// against the server at addr: the lean client on queue target+"1", then
// go-amqp on target+"2" (a queue of its own: a server may still count the
// lean receiver, closed, among the first queue's consumers for a while,
// and hand it a share of go-amqp's messages).
func sameFrames(t *testing.T, addr, target string, o Options, n, size int) {
	p := countFrames(t, addr)
	type tally struct {
		transfers, tBytes, dispositions, dBytes, flows, fBytes int
		gaps                                                   []string
	}
	measure := func(run func()) tally {
		p.reset()
		run()
		coretest.Eventually(t, "every disposition through the proxy", 10*time.Second, func() bool {
			d, _ := p.get(descDisposition)
			return d >= n
		})
		var x tally
		x.transfers, x.tBytes = p.get(descTransfer)
		x.dispositions, x.dBytes = p.get(descDisposition)
		x.flows, x.fBytes = p.get(descFlow)
		p.mu.Lock()
		x.gaps = p.gaps
		p.mu.Unlock()
		return x
	}

	lean := measure(func() {
		col := receive(t, p.addr, target+"1", o, size)
		if err := send(t, p.addr, target+"1", o, 0, n, size, 64); err != nil {
			t.Fatalf("lean sender: %v", err)
		}
		col.wait(n)
		coretest.Eventually(t, "every disposition through the proxy", 10*time.Second, func() bool {
			d, _ := p.get(descDisposition)
			return d >= n
		})
		col.c.Close() // or it would take a share of go-amqp's messages
	})
	goamqpRun := measure(func() { goamqpLoad(t, p.addr, target+"2", o, n, size) })
	t.Logf("lean:    %+v", lean)
	t.Logf("go-amqp: %+v", goamqpRun)
	// The receiver's flows: the credit at attach, one per 128 accepted,
	// and go-amqp's session flow every 2,500 transfers received.
	// Each message in frames of the server's max-frame-size less go-amqp's
	// 66 bytes for the frame header and the performative.
	msgFrames := 1
	if size > 1024 {
		msgFrames = goamqpRun.transfers / n
	}
	want := tally{transfers: n * msgFrames, dispositions: n, flows: 1 + n/128 + n/2500}
	for _, x := range []struct {
		name string
		got  tally
	}{{"lean", lean}, {"go-amqp", goamqpRun}} {
		if x.got.transfers != want.transfers || x.got.dispositions != want.dispositions || x.got.flows != want.flows {
			t.Errorf("%s: %d transfers, %d dispositions, %d flows; want %d, %d, %d", x.name,
				x.got.transfers, x.got.dispositions, x.got.flows, want.transfers, want.dispositions, want.flows)
		}
		if len(x.got.gaps) > 0 {
			t.Errorf("%s: deliveries not numbered one by one: %v", x.name, x.got.gaps[:min(len(x.got.gaps), 5)])
		}
	}
	if size > 1024 && msgFrames < 3 {
		t.Errorf("go-amqp sent %d transfers for %d messages of %d bytes: want 3 frames or more each", goamqpRun.transfers, n, size)
	}
	if lean.tBytes != goamqpRun.tBytes || lean.dBytes != goamqpRun.dBytes {
		t.Errorf("bytes of transfers %d (lean) and %d (go-amqp), of dispositions %d and %d", lean.tBytes, goamqpRun.tBytes, lean.dBytes, goamqpRun.dBytes)
	}
}

// goamqpLoad is queueload's go-amqp path (before -client lean), one
// sender and one receiver.
func goamqpLoad(t *testing.T, addr, target string, o Options, n, size int) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dial := func() *goamqp.Session {
		sasl := goamqp.SASLTypeAnonymous()
		if o.SASL == "PLAIN" {
			sasl = goamqp.SASLTypePlain(o.User, o.Password)
		}
		c, err := goamqp.Dial(ctx, "amqp://"+addr, &goamqp.ConnOptions{SASLType: sasl})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		s, err := c.NewSession(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	rcv, err := dial().NewReceiver(ctx, target, &goamqp.ReceiverOptions{Credit: -1})
	if err != nil {
		t.Fatal(err)
	}
	if err := rcv.IssueCredit(256); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		accepted := 0
		for i := range n {
			m, err := rcv.Receive(ctx, nil)
			if err != nil {
				got <- fmt.Errorf("after %d of %d messages: %w", i, n, err)
				return
			}
			if len(m.GetData()) != size {
				got <- fmt.Errorf("message %d: %d bytes", i, len(m.GetData()))
				return
			}
			if err := rcv.AcceptMessage(ctx, m); err != nil {
				got <- err
				return
			}
			if accepted++; accepted == 128 {
				accepted = 0
				if err := rcv.IssueCredit(128); err != nil {
					got <- err
					return
				}
			}
		}
		got <- nil
	}()
	snd, err := dial().NewSender(ctx, target, nil)
	if err != nil {
		t.Fatal(err)
	}
	var inflight []goamqp.SendReceipt
	wait := func() {
		st, err := inflight[0].Wait(ctx)
		inflight = inflight[1:]
		if _, ok := st.(*goamqp.StateAccepted); err != nil || !ok {
			t.Fatalf("outcome %v %v", st, err)
		}
	}
	for seq := range n {
		if len(inflight) == 64 {
			wait()
		}
		m := goamqp.NewMessage(body(0, seq, size))
		m.Header = &goamqp.MessageHeader{Durable: true}
		r, err := snd.SendWithReceipt(ctx, m, nil)
		if err != nil {
			t.Fatal(err)
		}
		inflight = append(inflight, r)
	}
	for len(inflight) > 0 {
		wait()
	}
	if err := <-got; err != nil {
		t.Fatalf("go-amqp receiver: %v", err)
	}
}
