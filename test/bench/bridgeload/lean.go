package main

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/tolsey/tolsey/test/internal/mqttlean"
)

// The lean MQTT clients (-client lean, the default): MQTT 3.1.1 over one
// connection each, no goroutine but the reader, so that the MQTT side of a
// flow costs this program about what a nats.go client costs it, and the
// gateway, not the load program, is what the ratio to bare nats.go
// measures. Publishers pipeline as nats.go does: publishes are appended to
// a write buffer that goes out when it holds 32 KiB (nats.go's default
// buffer) or when the publisher has nothing more to send right now (the
// end of its share, a pause of -rate, a full QoS 1 window), not one write
// per message. paho (-client paho) writes each publish on its own and
// runs several goroutines per connection.

// leanSubs connects S lean subscribers, subscriber j to prefix/+/s{j}, each
// read by a goroutine of its own until the phase closes the connection.
func leanSubs(ctx context.Context, e env, prefix string, qos byte, cs *closers) ([]*sink, error) {
	var sinks []*sink
	for j := 0; j < e.c.subs; j++ {
		c, err := mqttlean.Dial(ctx, e.gwAddr, mqttlean.Options{ClientID: fmt.Sprintf("%s-sub%d", e.tag, j), Clean: true, BufSize: 32 << 10})
		if err != nil {
			return nil, err
		}
		s := &sink{}
		if err := c.Subscribe(1, qos, nil, fmt.Sprintf("%s/+/s%d", prefix, j)); err != nil {
			c.Close()
			return nil, err
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			for {
				p, err := c.ReadPacket()
				if err != nil {
					return
				}
				if p.Type != mqttlean.PUBLISH {
					continue
				}
				s.record(p.Payload)
				if p.QoS() > 0 {
					if c.Puback(p.ID) != nil {
						return
					}
				}
			}
		}()
		cs.add(func() {
			_ = c.Disconnect()
			<-done
		})
		sinks = append(sinks, s)
	}
	return sinks, nil
}

// leanPubs connects P lean publishers; publisher i sends n messages
// round-robin on prefix/p{i}/s{j}. QoS 0: queued, written 32 KiB at a time
// and at the end (or before a -rate pause). QoS 1: up to window
// publishes awaiting their PUBACK, each window's worth queued and written
// together; a reader goroutine takes the PUBACKs and frees their packet
// ids. start returns when every publish is written (QoS 0) or
// acknowledged (QoS 1).
func leanPubs(ctx context.Context, e env, prefix string, n int, qos byte, a *acks, cs *closers) (func(context.Context, time.Time) error, error) {
	var conns []*mqttlean.Conn
	for i := 0; i < e.c.pubs; i++ {
		c, err := mqttlean.Dial(ctx, e.gwAddr, mqttlean.Options{ClientID: fmt.Sprintf("%s-pub%d", e.tag, i), Clean: true, BufSize: 4 << 10})
		if err != nil {
			return nil, err
		}
		cs.add(func() { _ = c.Disconnect() })
		conns = append(conns, c)
	}
	return func(ctx context.Context, t0 time.Time) error {
		return each(conns, func(i int, c *mqttlean.Conn) error {
			topics := make([]string, e.c.subs)
			for j := range topics {
				topics[j] = fmt.Sprintf("%s/p%d/s%d", prefix, i, j)
			}
			if qos == 0 {
				for k := 0; k < n; k++ {
					if e.c.rate > 0 && k%16 == 0 && k > 0 {
						if err := c.Flush(); err != nil {
							return err
						}
						pace(e.c.rate, k, t0)
					}
					if err := c.Queue(0, topics[k%len(topics)], payload(e.c.size), 0); err != nil {
						return err
					}
				}
				return c.Flush()
			}
			return leanQoS1(ctx, e, c, topics, n, qos, a)
		})
	}, nil
}

// leanQoS1 sends n publishes at qos (1) on c with at most -window awaiting
// their PUBACK, and returns when all are acknowledged.
func leanQoS1(ctx context.Context, e env, c *mqttlean.Conn, topics []string, n int, qos byte, a *acks) error {
	window := min(e.c.window, n, 65535)
	free := make(chan uint16, window) // packet ids not in flight
	for id := 1; id <= window; id++ {
		free <- uint16(id)
	}
	sent := make([]atomic.Int64, window+1) // by packet id: UnixNano the sender wrote it
	readErr := make(chan error, 1)
	go func() {
		for acked := 0; acked < n; {
			p, err := c.ReadPacket()
			if err != nil {
				readErr <- err
				return
			}
			if p.Type != mqttlean.PUBACK || p.ID == 0 || int(p.ID) > window {
				continue
			}
			if len(p.Codes) > 0 && p.Codes[0] >= 0x80 {
				readErr <- fmt.Errorf("PUBACK reason %#x", p.Codes[0])
				return
			}
			a.add(time.Duration(time.Now().UnixNano() - sent[p.ID].Load()))
			acked++
			free <- p.ID
		}
		readErr <- nil
	}()
	for k := 0; k < n; k++ {
		var id uint16
		select {
		case id = <-free:
		default:
			// The window is full: what is queued goes out, then wait.
			if err := c.Flush(); err != nil {
				return err
			}
			select {
			case id = <-free:
			case err := <-readErr:
				return errors.Join(errors.New("connection lost with publishes in flight"), err)
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		sent[id].Store(time.Now().UnixNano())
		if err := c.Queue(id, topics[k%len(topics)], payload(e.c.size), qos); err != nil {
			return err
		}
	}
	if err := c.Flush(); err != nil {
		return err
	}
	select {
	case err := <-readErr:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}
