package soak

import (
	"context"
	"fmt"
	"sync"
	"time"

	goamqp "github.com/Azure/go-amqp"
	"github.com/eclipse/paho.golang/paho"
)

// A message a publisher sends: its topic, QoS, whether it is retained,
// its body, whether it is checked (its acknowledgement recorded, as
// sequence n of the publisher) and the flow it counts in (nil: the
// publisher's).
type message struct {
	topic   string
	qos     byte
	retain  bool
	body    []byte
	checked bool
	f       *flow
}

// publishers starts every publisher, the persistent subscribers' cycles
// and the churn; they stop when ctx ends, wg says when they have.
func (r *run) publishers(ctx context.Context, wg *sync.WaitGroup, l *live) {
	rates := r.cfg.Rates
	persist := rates.Persistent
	if persist == 0 {
		persist = r.cfg.PersistentCap
	}
	size := r.cfg.Size
	byName := map[string]*flow{}
	for _, f := range r.flows {
		byName[f.name] = f
	}
	// Each step of a QoS 1 publisher sends one QoS 1 message and, on the
	// same connection, qos0PerQoS1 QoS 0 ones: the mix keeps its shape at
	// any rate, and the probe's QoS 0 messages cannot starve the rest
	// (unpaced, a QoS 0 publisher goes as fast as its socket).
	for i := range 2 {
		r.goMQTT(ctx, wg, byName["qos1"], i, rates.QoS1/2, func(n int) []message {
			ms := []message{{topic: fmt.Sprintf("s/q1/%d", i), qos: 1, body: payload(i, n, size), checked: true}}
			for range qos0PerQoS1 {
				ms = append(ms, message{topic: fmt.Sprintf("s/q0/%d", i), body: payload(i, n, size), f: byName["qos0"]})
			}
			return ms
		})
	}
	for i := range 2 {
		r.goMQTT(ctx, wg, byName["persistent"], i, persist/2, func(n int) []message {
			return []message{{topic: fmt.Sprintf("s/p/%d/%d", i, n%4), qos: 1, body: payload(i, n, size), checked: true}}
		})
		// A rolling set of 256 retained topics (128 each); every 64th
		// update clears one.
		r.goMQTT(ctx, wg, byName["retained"], i, rates.Retained/2, func(n int) []message {
			m := message{topic: fmt.Sprintf("r/%d", (n%128)*2+i), qos: 1, retain: true}
			if n%64 != 63 {
				m.body, m.checked = payload(i, n, size), true
			}
			return []message{m}
		})
		r.goAMQP(ctx, wg, byName["amqp-topic"], i, "s/a/x", rates.AMQPTopic/2, false)
		r.goAMQP(ctx, wg, byName["amqp-queue"], i, "queue://"+r.cfg.Queue, rates.AMQPQueue/2, true)
	}

	for i, p := range l.persist {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.cycle(ctx, r, time.Duration(i)*r.cfg.Online/2)
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		r.churn(ctx)
	}()
}

// qos0PerQoS1 is how many QoS 0 messages come with each QoS 1 one.
const qos0PerQoS1 = 2

// goMQTT runs publisher idx of f: step n of gen at rate steps per second
// (0: as fast as it goes), reconnecting after an error that closed its
// client.
func (r *run) goMQTT(ctx context.Context, wg *sync.WaitGroup, f *flow, idx int, rate float64, gen func(int) []message) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		id := fmt.Sprintf("soak-%s-pub-%d", f.name, idx)
		var c *paho.Client
		defer func() {
			if c != nil {
				closeMQTT(c)
			}
		}()
		start := time.Now()
		for n := 0; pace(ctx, start, n, rate); n++ {
			if c == nil {
				var err error
				if c, err = dialMQTT(ctx, r.cfg.MQTT, id, mqttOpts{clean: true}); err != nil {
					r.fail(ctx, f, err)
					sleep(ctx, time.Second)
					continue
				}
			}
		step:
			for _, m := range gen(n) {
				mf := m.f
				if mf == nil {
					mf = f
				}
				if err := publish(ctx, c, m.topic, m.qos, m.retain, m.body); err != nil {
					r.fail(ctx, mf, err)
					select {
					case <-c.Done():
						c = nil // reconnect
						break step
					default:
					}
					continue
				}
				mf.sent.Add(1)
				if m.checked {
					mf.check[0].acked[idx].add(n) // the receivers share the acked sets
				}
			}
		}
	}()
}

// goAMQP runs f's AMQP sender idx to addr: unsettled sends, one at a time,
// each outcome awaited, at rate (0: as fast as it goes).
func (r *run) goAMQP(ctx context.Context, wg *sync.WaitGroup, f *flow, idx int, addr string, rate float64, durable bool) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		var conn *goamqp.Conn
		var snd *goamqp.Sender
		defer func() {
			if conn != nil {
				conn.Close()
			}
		}()
		start := time.Now()
		for n := 0; pace(ctx, start, n, rate); n++ {
			if conn == nil {
				var sess *goamqp.Session
				var err error
				if conn, sess, err = dialAMQP(ctx, r.cfg.AMQP); err == nil {
					if snd, err = sess.NewSender(ctx, addr, nil); err != nil {
						conn.Close()
						conn = nil
					}
				}
				if err != nil {
					r.fail(ctx, f, err)
					sleep(ctx, time.Second)
					continue
				}
			}
			if err := sendAMQP(ctx, snd, payload(idx, n, r.cfg.Size), durable); err != nil {
				r.fail(ctx, f, err)
				conn.Close()
				conn = nil
				continue
			}
			f.sent.Add(1)
			f.check[0].acked[idx].add(n)
		}
	}()
}

// churn connects a short-lived client every cfg.Churn, MQTT and AMQP in
// turn: the MQTT one subscribes to the retained topics (and gets them),
// publishes one QoS 1 message and disconnects; the AMQP one sends one
// message and closes.
func (r *run) churn(ctx context.Context) {
	f := &flow{name: "churn"} // errors only
	tick := time.NewTicker(r.cfg.Churn)
	defer tick.Stop()
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		var err error
		if n%2 == 0 {
			err = r.churnMQTT(ctx, n)
		} else {
			err = r.churnAMQP(ctx)
		}
		if err != nil {
			r.fail(ctx, f, err)
			continue
		}
		r.churned.Add(1)
	}
}

func (r *run) churnMQTT(ctx context.Context, n int) error {
	c, err := dialMQTT(ctx, r.cfg.MQTT, fmt.Sprintf("soak-churn-%d", n), mqttOpts{clean: true, onMsg: func(*paho.Publish) {}})
	if err != nil {
		return err
	}
	defer closeMQTT(c)
	if err := subscribe(ctx, c, "r/+", 1); err != nil {
		return err
	}
	return publish(ctx, c, "s/c/m", 1, false, []byte("churn"))
}

func (r *run) churnAMQP(ctx context.Context) error {
	conn, sess, err := dialAMQP(ctx, r.cfg.AMQP)
	if err != nil {
		return err
	}
	defer conn.Close()
	snd, err := sess.NewSender(ctx, "s/c/a", nil)
	if err != nil {
		return err
	}
	return sendAMQP(ctx, snd, []byte("churn"), false)
}
