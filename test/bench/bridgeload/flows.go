package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tolsey/tolsey/test/bench/internal/rig"
)

// sink collects what one subscriber (or consumer) receives.
type sink struct {
	got  atomic.Int64
	last atomic.Int64 // UnixNano of the latest receipt
	mu   sync.Mutex
	lat  []time.Duration
}

func (s *sink) record(payload []byte) {
	now := time.Now().UnixNano()
	if len(payload) >= 8 {
		sent := int64(binary.BigEndian.Uint64(payload))
		s.mu.Lock()
		s.lat = append(s.lat, time.Duration(now-sent))
		s.mu.Unlock()
	}
	s.last.Store(now)
	s.got.Add(1)
}

// acks collects publish → acknowledgement times (PUBACK, JetStream PubAck).
type acks struct {
	mu  sync.Mutex
	lat []time.Duration
}

func (a *acks) add(d time.Duration) {
	a.mu.Lock()
	a.lat = append(a.lat, d)
	a.mu.Unlock()
}

func payload(size int) []byte {
	p := make([]byte, size)
	binary.BigEndian.PutUint64(p, uint64(time.Now().UnixNano()))
	return p
}

// env is what a flow runs against.
type env struct {
	c       *config
	gwAddr  string // gateway MQTT
	natsURL string
	tag     string // unique per phase: client ids, message ids
}

// closers closes what a phase opened, in reverse order.
type closers []func()

func (cs *closers) add(f func()) { *cs = append(*cs, f) }
func (cs closers) close() {
	for i := len(cs) - 1; i >= 0; i-- {
		cs[i]()
	}
}

// load is one flow's phase, set up and ready to go: start runs the
// publishers until each has sent its share; sinks fill meanwhile.
type load struct {
	sinks []*sink
	acks  *acks
	want  int
	start func(ctx context.Context, t0 time.Time) error
	// stored, for JetStream phases, is how many messages the stream
	// gained (the sinks see them through an ordered consumer).
	stored func() (int, error)
}

// natsSubs subscribes S nats.go connections, subscriber j to
// prefix.*.s{j}.
func natsSubs(e env, prefix string, cs *closers) ([]*sink, error) {
	var sinks []*sink
	for j := 0; j < e.c.subs; j++ {
		nc, err := nats.Connect(e.natsURL, nats.Name(fmt.Sprintf("%s-sub%d", e.tag, j)))
		if err != nil {
			return nil, err
		}
		cs.add(nc.Close)
		s := &sink{}
		if _, err := nc.Subscribe(fmt.Sprintf("%s.*.s%d", prefix, j), func(m *nats.Msg) { s.record(m.Data) }); err != nil {
			return nil, err
		}
		if err := nc.Flush(); err != nil {
			return nil, err
		}
		sinks = append(sinks, s)
	}
	return sinks, nil
}

// mqttSubs connects S MQTT subscribers (-client), subscriber j to
// prefix/+/s{j}.
func mqttSubs(ctx context.Context, e env, prefix string, qos byte, cs *closers) ([]*sink, error) {
	if e.c.client == "lean" {
		return leanSubs(ctx, e, prefix, qos, cs)
	}
	var sinks []*sink
	for j := 0; j < e.c.subs; j++ {
		s := &sink{}
		cl, err := rig.Connect(ctx, e.gwAddr, fmt.Sprintf("%s-sub%d", e.tag, j), func(p *paho.Publish) { s.record(p.Payload) })
		if err != nil {
			return nil, err
		}
		cs.add(func() { _ = cl.Disconnect(&paho.Disconnect{}) })
		if err := rig.Subscribe(ctx, cl, fmt.Sprintf("%s/+/s%d", prefix, j), qos); err != nil {
			return nil, err
		}
		sinks = append(sinks, s)
	}
	return sinks, nil
}

// pace sleeps until message k of a publisher paced at rate/s is due.
func pace(rate, k int, t0 time.Time) {
	if rate > 0 && k%16 == 0 {
		if d := time.Until(t0.Add(time.Duration(k) * time.Second / time.Duration(rate))); d > 0 {
			time.Sleep(d)
		}
	}
}

// natsPubs connects P nats.go publishers; publisher i sends n core NATS
// messages round-robin on prefix.p{i}.s{j}.
func natsPubs(e env, prefix string, n int, cs *closers) (func(context.Context, time.Time) error, error) {
	var conns []*nats.Conn
	for i := 0; i < e.c.pubs; i++ {
		nc, err := nats.Connect(e.natsURL, nats.Name(fmt.Sprintf("%s-pub%d", e.tag, i)))
		if err != nil {
			return nil, err
		}
		cs.add(nc.Close)
		conns = append(conns, nc)
	}
	return func(ctx context.Context, t0 time.Time) error {
		return each(conns, func(i int, nc *nats.Conn) error {
			subjects := make([]string, e.c.subs)
			for j := range subjects {
				subjects[j] = fmt.Sprintf("%s.p%d.s%d", prefix, i, j)
			}
			for k := 0; k < n; k++ {
				pace(e.c.rate, k, t0)
				if err := nc.Publish(subjects[k%len(subjects)], payload(e.c.size)); err != nil {
					return err
				}
			}
			return nc.FlushWithContext(ctx)
		})
	}, nil
}

// mqttPubs connects P MQTT publishers (-client); publisher i sends n
// messages round-robin on prefix/p{i}/s{j}. paho: QoS 0 publishes are
// written as fast as paho can; QoS 1 ones by window goroutines per
// publisher, each waiting for its PUBACK, so at most window are
// unacknowledged per connection. lean: see leanPubs.
func mqttPubs(ctx context.Context, e env, prefix string, n int, qos byte, a *acks, cs *closers) (func(context.Context, time.Time) error, error) {
	if e.c.client == "lean" {
		return leanPubs(ctx, e, prefix, n, qos, a, cs)
	}
	var conns []*paho.Client
	for i := 0; i < e.c.pubs; i++ {
		cl, err := rig.Connect(ctx, e.gwAddr, fmt.Sprintf("%s-pub%d", e.tag, i), nil)
		if err != nil {
			return nil, err
		}
		cs.add(func() { _ = cl.Disconnect(&paho.Disconnect{}) })
		conns = append(conns, cl)
	}
	return func(ctx context.Context, t0 time.Time) error {
		return each(conns, func(i int, cl *paho.Client) error {
			topics := make([]string, e.c.subs)
			for j := range topics {
				topics[j] = fmt.Sprintf("%s/p%d/s%d", prefix, i, j)
			}
			if qos == 0 {
				opts := paho.PublishOptions{Method: paho.PublishMethod_AsyncSend}
				for k := 0; k < n; k++ {
					pace(e.c.rate, k, t0)
					p := &paho.Publish{Topic: topics[k%len(topics)], Payload: payload(e.c.size)}
					if _, err := cl.PublishWithOptions(ctx, p, opts); err != nil {
						return err
					}
				}
				return nil
			}
			var next atomic.Int64
			workers := make([]int, min(e.c.window, n))
			return each(workers, func(int, int) error {
				for {
					k := int(next.Add(1) - 1)
					if k >= n {
						return nil
					}
					sent := time.Now()
					p := &paho.Publish{Topic: topics[k%len(topics)], QoS: qos, Payload: payload(e.c.size)}
					res, err := cl.Publish(ctx, p)
					if err != nil {
						return err
					}
					if res.ReasonCode >= 0x80 {
						return fmt.Errorf("PUBACK reason %#x", res.ReasonCode)
					}
					a.add(time.Since(sent))
				}
			})
		})
	}, nil
}

// jsPubs connects P nats.go JetStream publishers; publisher i sends n
// async publishes on prefix.p{i}.s{j} with at most window awaiting their
// PubAck, each with a Nats-Msg-Id as the bridge sends (so the server
// de-duplicates both alike).
func jsPubs(e env, prefix string, n int, a *acks, cs *closers) (func(context.Context, time.Time) error, error) {
	var jss []jetstream.JetStream
	for i := 0; i < e.c.pubs; i++ {
		nc, err := nats.Connect(e.natsURL, nats.Name(fmt.Sprintf("%s-pub%d", e.tag, i)))
		if err != nil {
			return nil, err
		}
		cs.add(nc.Close)
		js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(e.c.window+1))
		if err != nil {
			return nil, err
		}
		jss = append(jss, js)
	}
	return func(ctx context.Context, t0 time.Time) error {
		return each(jss, func(i int, js jetstream.JetStream) error {
			type inflight struct {
				f    jetstream.PubAckFuture
				sent time.Time
			}
			// Acks come in order: one goroutine waits for them in
			// order and frees a window slot for each.
			window := make(chan inflight, max(e.c.window-1, 0))
			ackErr := make(chan error, 1)
			go func() {
				var first error
				for p := range window {
					select {
					case <-p.f.Ok():
						a.add(time.Since(p.sent))
					case err := <-p.f.Err():
						if first == nil {
							first = err
						}
					}
				}
				ackErr <- first
			}()
			var err error
			for k := 0; k < n && err == nil; k++ {
				sent := time.Now()
				m := &nats.Msg{Subject: fmt.Sprintf("%s.p%d.s%d", prefix, i, k%e.c.subs), Data: payload(e.c.size)}
				var f jetstream.PubAckFuture
				f, err = js.PublishMsgAsync(m, jetstream.WithMsgID(fmt.Sprintf("%s:%d:%d", e.tag, i, k)))
				if err == nil {
					window <- inflight{f, sent}
				}
			}
			close(window)
			return errors.Join(err, <-ackErr)
		})
	}, nil
}

// orderedSink consumes stream from its next message on through an ordered
// consumer: a message is delivered once it is stored.
func orderedSink(ctx context.Context, e env, stream string, cs *closers) (*sink, func() (int, error), error) {
	nc, err := nats.Connect(e.natsURL, nats.Name(e.tag+"-consumer"))
	if err != nil {
		return nil, nil, err
	}
	cs.add(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, nil, err
	}
	before, err := streamMsgs(ctx, js, stream)
	if err != nil {
		return nil, nil, err
	}
	cons, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverNewPolicy})
	if err != nil {
		return nil, nil, err
	}
	s := &sink{}
	cc, err := cons.Consume(func(m jetstream.Msg) { s.record(m.Data()) })
	if err != nil {
		return nil, nil, err
	}
	cs.add(cc.Stop)
	stored := func() (int, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		n, err := streamMsgs(ctx, js, stream)
		return int(n - before), err
	}
	return s, stored, nil
}

// each runs f for every item on a goroutine of its own and joins their errors.
func each[T any](items []T, f func(int, T) error) error {
	errs := make([]error, len(items))
	var wg sync.WaitGroup
	for i, it := range items {
		wg.Go(func() { errs[i] = f(i, it) })
	}
	wg.Wait()
	return errors.Join(errs...)
}
