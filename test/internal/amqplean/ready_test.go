package amqplean

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"
)

// holder is a TCP proxy in front of a server that forwards everything
// until hold is called; from then on it forwards nothing more either way,
// and reads nothing more from the client (a server that stops answering
// and reading, as a stuck or overloaded one does).
type holder struct {
	addr string
	once sync.Once
	held chan struct{}
}

func holdingProxy(t *testing.T, server string) *holder {
	t.Helper()
	h := &holder{held: make(chan struct{})}
	h.addr = proxy(t, server, func(cc, sc net.Conn) {
		go func() {
			buf := make([]byte, 64<<10)
			for {
				select {
				case <-h.held: // read no more: the client's writes fill the socket's buffers
					return
				default:
				}
				n, err := cc.Read(buf)
				if n > 0 {
					if _, err := sc.Write(buf[:n]); err != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		}()
		go func() {
			buf := make([]byte, 64<<10)
			for {
				n, err := sc.Read(buf)
				select {
				case <-h.held:
					return
				default:
				}
				if n > 0 {
					if _, err := cc.Write(buf[:n]); err != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		}()
	})
	return h
}

func (h *holder) hold() { h.once.Do(func() { close(h.held) }) }

// Ready is bounded by its context: with the server no longer answering,
// the sender's one send in flight is never settled, and Ready returns
// the context's error instead of waiting for ever (queueload stamps a
// message only once Ready returns, and stops when its run's context
// ends); once the connection ends, Ready says why.
func TestReadyEndsWithItsContext(t *testing.T) {
	p := holdingProxy(t, startGateway(t))
	c := dial(t, p.addr, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.AttachSender(ctx, "queue://load", 1); err != nil {
		t.Fatal(err)
	}
	if err := c.Ready(ctx, 1024); err != nil { // credit and window arrived
		t.Fatalf("ready before any send: %v", err)
	}
	p.hold()
	if err := c.Send(body(0, 0, 1024)); err != nil {
		t.Fatal(err)
	}
	short, cancelShort := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancelShort()
	if err := c.Ready(short, 1024); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("ready with a send in flight never settled: %v, want the context's deadline", err)
	}
	if err := c.Err(); err != nil {
		t.Fatalf("the connection ended: %v", err)
	}
	c.Close()
	if err := c.Ready(ctx, 1024); err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("ready on a closed connection: %v, want the connection's end", err)
	}
}

// Close returns when the server reads nothing any more: with a send's
// frames filling the socket's buffers the writer is stuck in a write,
// and Close, which writes the close frame, must not wait behind it for
// ever.
func TestCloseWithAServerThatDoesNotRead(t *testing.T) {
	p := holdingProxy(t, startGateway(t))
	c := dial(t, p.addr, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.AttachSender(ctx, "queue://load", 64); err != nil {
		t.Fatal(err)
	}
	if err := c.Ready(ctx, 1<<20); err != nil {
		t.Fatalf("ready before any send: %v", err)
	}
	p.hold()
	// 64 MiB queued: far more than the sockets on both sides of the
	// proxy buffer.
	msg := make([]byte, 1<<20)
	for range 64 {
		if err := c.Send(msg); err != nil {
			t.Fatal(err)
		}
	}
	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	select {
	case <-closed:
	case <-time.After(time.Minute):
		t.Fatal("Close has not returned after a minute")
	}
}
