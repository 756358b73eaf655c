package mqtt

import (
	"runtime"
	"sync"
)

// gateway patch 24: packets are handled on pooled goroutines, so that a
// connection's own goroutine only waits.
//
// Handling a packet takes ~12 KiB of frames (mochi passes its 800-byte
// Packet by value down the publish path), which grows the goroutine's stack
// to 16 KiB; the runtime halves a stack only at a garbage collection, once
// per collection, so a connection that has just gone idle held 16 KiB for
// two collections (up to four minutes on an idle server, where the runtime
// forces one every two). Now the connection's goroutine waits for the first
// byte of a packet (Client.Read) and hands the reading and handling of
// everything that has arrived (Client.readBurst) to a handler goroutine
// from the server's pool, waiting for it to finish: packets are handled in
// order, one connection's at a time, as before. The connection's stack
// never grows past its starting size; the grown stacks belong to the
// handlers, as many as run at once, not to the connections.
//
// A pooled handler costs two goroutine switches per burst of packets; a
// goroutine started per burst would cost its stack's growth each time
// (measured several µs, the switches well under one).

// handler is one pooled goroutine. Its fields are set by the connection
// goroutine that took it from the pool before it sends on start, and read
// back after done: the channels order the two goroutines' accesses.
type handler struct {
	start chan struct{} // closed: exit
	done  chan struct{} // one token per burst handled

	cl   *Client
	fn   ReadFn
	once func() error // instead of cl.readBurst(fn): the CONNECT (attachClient)
	err  error
}

// handlerPool keeps up to maxIdle handlers waiting for work; more run while
// more connections are busy at once, and exit when they are done.
type handlerPool struct {
	mu      sync.Mutex
	idle    []*handler
	maxIdle int
	closed  bool
}

func newHandlerPool() *handlerPool {
	return &handlerPool{maxIdle: 16 * runtime.GOMAXPROCS(0)}
}

// run reads and handles cl's packets on a handler until nothing more has
// arrived, and returns what readBurst returned. A nil pool (a client made
// without a server) handles them on the caller's goroutine.
func (p *handlerPool) run(cl *Client, fn ReadFn) error {
	if p == nil {
		return cl.readBurst(fn)
	}
	h := p.get()
	h.cl, h.fn = cl, fn
	return p.wait(h)
}

// runOnce runs f on a handler, as run runs a burst.
func (p *handlerPool) runOnce(f func() error) error {
	if p == nil {
		return f()
	}
	h := p.get()
	h.once = f
	return p.wait(h)
}

// wait starts h on the work set in it, waits for it and puts it back.
func (p *handlerPool) wait(h *handler) error {
	h.start <- struct{}{}
	<-h.done
	err := h.err
	h.cl, h.fn, h.once, h.err = nil, nil, nil, nil
	p.put(h)
	return err
}

func (p *handlerPool) get() *handler {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		h := p.idle[n-1]
		p.idle[n-1] = nil
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		return h
	}
	p.mu.Unlock()
	h := &handler{start: make(chan struct{}), done: make(chan struct{}, 1)}
	go h.loop()
	return h
}

// put keeps h for the next burst, or ends it when enough wait already or
// the server has closed.
func (p *handlerPool) put(h *handler) {
	p.mu.Lock()
	if !p.closed && len(p.idle) < p.maxIdle {
		p.idle = append(p.idle, h)
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	close(h.start)
}

// close ends the waiting handlers; those still running end when their
// burst is done.
func (p *handlerPool) close() {
	p.mu.Lock()
	p.closed = true
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	for _, h := range idle {
		close(h.start)
	}
}

func (h *handler) loop() {
	for range h.start {
		if h.once != nil {
			h.err = h.once()
		} else {
			h.err = h.cl.readBurst(h.fn)
		}
		h.done <- struct{}{}
	}
}
