// Package soak is drill 8 of docs/reliability.md: a mixed load
// held on a running gateway for a long time, while the gateway's RSS,
// goroutines and open file descriptors are sampled, so that a leak shows
// as a slope. The load: MQTT 5 QoS 0 and QoS 1 publishers and subscribers,
// persistent sessions that go offline and come back, retained updates on a
// rolling set of topics, AMQP senders and receivers on a topic and on a
// durable queue, and connection churn (clients that connect, do a little
// and leave). The QoS 1 flows, the retained topics' live subscriber, the
// AMQP topic receiver and the queue consumer are checked: every
// acknowledged message must reach them.
//
// The command test/fault/cmd/soak runs it for an hour at half the measured
// maximum; TestSoakShort in test/fault for seconds.
package soak

import (
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	goamqp "github.com/Azure/go-amqp"
	"github.com/eclipse/paho.golang/paho"
)

// Rates are the offered rates of the flows, messages per second over all
// of a flow's publishers; 0 = as fast as each publisher goes (the probe).
// QoS 0 is not offered on its own: it rides with QoS 1, qos0PerQoS1
// messages per QoS 1 message; it is reported.
type Rates struct {
	QoS0, QoS1, Persistent, Retained, AMQPTopic, AMQPQueue float64
}

// Half is r at half rate.
func (r Rates) Half() Rates {
	return Rates{r.QoS0 / 2, r.QoS1 / 2, r.Persistent / 2, r.Retained / 2, r.AMQPTopic / 2, r.AMQPQueue / 2}
}

// Total is the sum of the flows' rates.
func (r Rates) Total() float64 {
	return r.QoS0 + r.QoS1 + r.Persistent + r.Retained + r.AMQPTopic + r.AMQPQueue
}

func (r Rates) String() string {
	return fmt.Sprintf("%.0f msg/s (QoS 0 %.0f, QoS 1 %.0f, persistent %.0f, retained %.0f, AMQP topic %.0f, AMQP queue %.0f)",
		r.Total(), r.QoS0, r.QoS1, r.Persistent, r.Retained, r.AMQPTopic, r.AMQPQueue)
}

// Config is one soak run against a running gateway.
type Config struct {
	MQTT, AMQP, Admin string // addresses
	PID               int    // the gateway's process, for /proc
	Queue             string // a durable queue the gateway has declared
	Duration          time.Duration
	Sample            time.Duration // between samples (10 s)
	Rates             Rates
	// PersistentCap bounds the persistent flow when Rates.Persistent is 0
	// (the probe): an offline session holds at most mqtt.maxInflight
	// messages (8192) and must not overflow while it is away.
	PersistentCap float64
	Churn         time.Duration // between churn connections
	// Persistent sessions are online this long, then offline Offline.
	Online, Offline time.Duration
	Size            int           // payload bytes
	Drain           time.Duration // how long checked receivers may take to catch up at the end
	CSV             io.Writer     // samples, if set
	Progress        io.Writer     // a line per sample, if set
	Log             func() []string
	Stop            <-chan struct{} // ends the load before Duration (an operator's ^C)
}

// Flow is what one flow did.
type Flow struct {
	Name      string
	Sent, Got int64 // Sent: acknowledged (QoS 0: written); Got: received by its receivers
	Errors    int64
	Lost      int // acknowledged and never received (checked flows)
	LostDesc  string
	Dups      int64
	Receivers int // checked receivers; each gets every message
}

// Rate is the flow's delivered rate over d (per receiver).
func (f Flow) Rate(d time.Duration) float64 {
	return float64(f.Got) / float64(max(f.Receivers, 1)) / d.Seconds()
}

// Result is one run.
type Result struct {
	Elapsed       time.Duration // of load
	Flows         []Flow
	Churned       int64 // churn connections made
	Samples       []Sample
	Before, After Sample // before the load; after it, every client gone and the gateway settled
	Slopes        Slopes
	Errors        int64
	FirstErrors   []string
	Log           LogLines
}

// Delivered is the delivered rate of each flow: the probe's measure.
func (r *Result) Delivered() Rates {
	d := r.Elapsed
	f := func(name string) float64 {
		for _, x := range r.Flows {
			if x.Name == name {
				return x.Rate(d)
			}
		}
		return 0
	}
	return Rates{f("qos0"), f("qos1"), f("persistent"), f("retained"), f("amqp-topic"), f("amqp-queue")}
}

// Lost is the sum of the checked flows' lost messages.
func (r *Result) Lost() int {
	n := 0
	for _, f := range r.Flows {
		n += f.Lost
	}
	return n
}

// flow is a flow while it runs.
type flow struct {
	name      string
	sent, got atomic.Int64
	errs      atomic.Int64
	check     []*tracked // checked receivers (nil: counted only)
	pubs      int
}

// run is one soak in progress.
type run struct {
	cfg   Config
	start time.Time
	flows []*flow

	errs     atomic.Int64
	churned  atomic.Int64
	errMu    sync.Mutex
	firstErr []string
}

// fail counts an error of f; the first few are kept for the report.
func (r *run) fail(ctx context.Context, f *flow, err error) {
	if ctx.Err() != nil {
		return // the load is stopping: cut calls are not the gateway's errors
	}
	f.errs.Add(1)
	r.errs.Add(1)
	r.errMu.Lock()
	if len(r.firstErr) < 20 {
		r.firstErr = append(r.firstErr, fmt.Sprintf("%v %s: %v", time.Since(r.start).Round(time.Second), f.name, err))
	}
	r.errMu.Unlock()
}

func (r *run) newFlow(name string, pubs int, checkers int) *flow {
	f := &flow{name: name, pubs: pubs}
	for i := range checkers {
		t := newTracked(pubs)
		if i > 0 {
			t.acked = f.check[0].acked // one publisher side, several receivers
		}
		f.check = append(f.check, t)
	}
	r.flows = append(r.flows, f)
	return f
}

// pace waits until message n of a publisher at rate (per second) is due;
// false when ctx ends first.
func pace(ctx context.Context, start time.Time, n int, rate float64) bool {
	if rate > 0 {
		due := start.Add(time.Duration(float64(n) / rate * float64(time.Second)))
		if d := time.Until(due); d > 0 && !sleep(ctx, d) {
			return false
		}
	}
	return ctx.Err() == nil
}

// sleep is a cancellable pause.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Run drives the load for cfg.Duration, sampling as it goes, then stops
// it, lets the checked receivers catch up, closes every client and
// measures the gateway once more after it settled.
func Run(cfg Config) (*Result, error) {
	if cfg.Sample <= 0 {
		cfg.Sample = 10 * time.Second
	}
	if cfg.Size <= 0 {
		cfg.Size = 64
	}
	if cfg.Churn <= 0 {
		cfg.Churn = 250 * time.Millisecond
	}
	if cfg.Online <= 0 {
		cfg.Online, cfg.Offline = 20*time.Second, 5*time.Second
	}
	if cfg.Drain <= 0 {
		cfg.Drain = time.Minute
	}
	if cfg.PersistentCap <= 0 {
		cfg.PersistentCap = 200
	}
	res := &Result{}
	var err error
	if res.Before, err = look(cfg.PID, cfg.Admin); err != nil {
		return nil, err
	}
	r := &run{cfg: cfg}
	setup, cancelSetup := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancelSetup()
	l, err := r.receivers(setup)
	if err != nil {
		l.close()
		return nil, err
	}

	load, stop := context.WithCancel(context.Background())
	r.start = time.Now()
	var wg sync.WaitGroup
	r.publishers(load, &wg, l)

	if cfg.CSV != nil {
		fmt.Fprintln(cfg.CSV, "seconds,rss_bytes,goroutines,fds,sent,got,errors,churned")
	}
	tick := time.NewTicker(cfg.Sample)
	end := time.NewTimer(cfg.Duration)
	for running := true; running; {
		select {
		case <-tick.C:
			s, err := r.sample()
			if err != nil {
				stop()
				wg.Wait()
				l.close()
				return nil, fmt.Errorf("sample: %w", err)
			}
			res.Samples = append(res.Samples, s)
			if cfg.CSV != nil {
				fmt.Fprintf(cfg.CSV, "%.0f,%d,%d,%d,%d,%d,%d,%d\n", s.At.Seconds(), s.RSS, s.Goroutines, s.FDs, s.Sent, s.Got, s.Errors, s.Churned)
			}
			if cfg.Progress != nil {
				fmt.Fprintf(cfg.Progress, "%6.0fs RSS %s goroutines %d fds %d sent %d got %d errors %d churned %d\n",
					s.At.Seconds(), MiB(float64(s.RSS)), s.Goroutines, s.FDs, s.Sent, s.Got, s.Errors, s.Churned)
			}
		case <-end.C:
			running = false
		case <-cfg.Stop:
			running = false
		}
	}
	tick.Stop()
	stop()
	wg.Wait()
	res.Elapsed = time.Since(r.start)

	l.drain(r, cfg.Drain)
	l.close()
	res.After = r.settle(res.Before)

	for _, f := range r.flows {
		x := Flow{Name: f.name, Sent: f.sent.Load(), Got: f.got.Load(), Errors: f.errs.Load(), Receivers: len(f.check)}
		var desc []string
		for i, t := range f.check {
			n, d := t.lost()
			x.Lost += n
			x.Dups += t.dups.Load()
			if n > 0 {
				desc = append(desc, fmt.Sprintf("receiver %d: %s", i, d))
			}
		}
		x.LostDesc = fmt.Sprint(desc)
		res.Flows = append(res.Flows, x)
	}
	res.Churned = r.churned.Load()
	res.Slopes = fit(res.Samples)
	res.Errors = r.errs.Load()
	r.errMu.Lock()
	res.FirstErrors = r.firstErr
	r.errMu.Unlock()
	if cfg.Log != nil {
		res.Log = CountLog(cfg.Log())
	}
	return res, nil
}

func (r *run) sample() (Sample, error) {
	s, err := look(r.cfg.PID, r.cfg.Admin)
	if err != nil {
		return s, err
	}
	s.At = time.Since(r.start)
	for _, f := range r.flows {
		s.Sent += f.sent.Load()
		s.Got += f.got.Load()
	}
	s.Errors = r.errs.Load()
	s.Churned = r.churned.Load()
	return s, nil
}

// settle waits (up to a minute) for the gateway to let go of what the
// load's clients held: goroutines and fds back within a small margin of
// before, then returns what it sees.
func (r *run) settle(before Sample) Sample {
	deadline := time.Now().Add(time.Minute)
	for {
		s, err := look(r.cfg.PID, r.cfg.Admin)
		if err == nil {
			s.At = time.Since(r.start)
			if s.Goroutines <= before.Goroutines+5 && s.FDs <= before.FDs+2 || time.Now().After(deadline) {
				return s
			}
		} else if time.Now().After(deadline) {
			return s
		}
		time.Sleep(500 * time.Millisecond) // a poll of another process
	}
}

// closer is something a run closes at its end.
type closer func()

// live holds the receivers and what must be closed.
type live struct {
	mu      sync.Mutex
	closers []closer
	// The persistent subscribers, reconnected by drain.
	persist []*persistent
}

func (l *live) add(c closer) {
	l.mu.Lock()
	l.closers = append(l.closers, c)
	l.mu.Unlock()
}

func (l *live) close() {
	l.mu.Lock()
	cs := l.closers
	l.closers = nil
	l.mu.Unlock()
	for i := len(cs) - 1; i >= 0; i-- {
		cs[i]()
	}
}

// drain waits until every checked receiver has what was acknowledged, or
// until limit; persistent subscribers come back online for it.
func (l *live) drain(r *run, limit time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	for _, p := range l.persist {
		p.online(ctx, r)
	}
	for ctx.Err() == nil {
		lost := 0
		for _, f := range r.flows {
			for _, t := range f.check {
				n, _ := t.lost()
				lost += n
			}
		}
		if lost == 0 {
			return
		}
		sleep(ctx, 200*time.Millisecond)
	}
}

// receivers connects the subscribers and consumers of every flow.
func (r *run) receivers(ctx context.Context) (*live, error) {
	l := &live{}
	q0 := r.newFlow("qos0", 2, 0)
	q1 := r.newFlow("qos1", 2, 1)
	ps := r.newFlow("persistent", 2, 2)
	ret := r.newFlow("retained", 2, 1)
	at := r.newFlow("amqp-topic", 2, 1)
	aq := r.newFlow("amqp-queue", 2, 1)

	sub := func(id, filter string, qos byte, f *flow, t *tracked) error {
		c, err := dialMQTT(ctx, r.cfg.MQTT, id, mqttOpts{clean: true, onMsg: func(p *paho.Publish) {
			f.got.Add(1)
			if t != nil {
				t.receive(p.Payload)
			}
		}})
		if err != nil {
			return err
		}
		l.add(func() { closeMQTT(c) })
		return subscribe(ctx, c, filter, qos)
	}
	if err := sub("soak-q0-sub", "s/q0/#", 0, q0, nil); err != nil {
		return l, err
	}
	if err := sub("soak-q1-sub", "s/q1/#", 1, q1, q1.check[0]); err != nil {
		return l, err
	}
	if err := sub("soak-ret-sub", "r/#", 1, ret, ret.check[0]); err != nil {
		return l, err
	}
	for i, t := range ps.check {
		p := &persistent{id: fmt.Sprintf("soak-psub-%d", i), f: ps, t: t}
		if err := p.connect(ctx, r, true); err != nil {
			return l, err
		}
		l.persist = append(l.persist, p)
		l.add(p.close)
	}

	recv := func(addr string, f *flow, t *tracked) error {
		conn, sess, err := dialAMQP(ctx, r.cfg.AMQP)
		if err != nil {
			return err
		}
		rcv, err := sess.NewReceiver(ctx, addr, &goamqp.ReceiverOptions{Credit: 200})
		if err != nil {
			conn.Close()
			return fmt.Errorf("receiver %s: %w", addr, err)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			for {
				m, err := rcv.Receive(context.Background(), nil)
				if err != nil {
					return
				}
				f.got.Add(1)
				t.receive(m.GetData())
				if err := rcv.AcceptMessage(context.Background(), m); err != nil {
					return
				}
			}
		}()
		l.add(func() {
			conn.Close()
			<-done
		})
		return nil
	}
	if err := recv("s/a/#", at, at.check[0]); err != nil {
		return l, err
	}
	if err := recv("queue://"+r.cfg.Queue, aq, aq.check[0]); err != nil {
		return l, err
	}
	return l, nil
}

// persistent is a subscriber with a persistent session (expiry 1 h) to
// s/p/#, which goes offline and comes back while the load runs.
type persistent struct {
	id string
	f  *flow
	t  *tracked

	mu sync.Mutex
	c  *paho.Client // nil while offline
}

func (p *persistent) connect(ctx context.Context, r *run, first bool) error {
	c, err := dialMQTT(ctx, r.cfg.MQTT, p.id, mqttOpts{clean: false, onMsg: func(m *paho.Publish) {
		p.f.got.Add(1)
		p.t.receive(m.Payload)
	}})
	if err != nil {
		return err
	}
	if first {
		if err := subscribe(ctx, c, "s/p/#", 1); err != nil {
			closeMQTT(c)
			return err
		}
	}
	p.mu.Lock()
	p.c = c
	p.mu.Unlock()
	return nil
}

func (p *persistent) close() {
	p.mu.Lock()
	c := p.c
	p.c = nil
	p.mu.Unlock()
	if c != nil {
		closeMQTT(c)
	}
}

// online reconnects p if it is offline.
func (p *persistent) online(ctx context.Context, r *run) {
	p.mu.Lock()
	on := p.c != nil
	p.mu.Unlock()
	if !on {
		if err := p.connect(ctx, r, false); err != nil {
			r.fail(context.Background(), p.f, err)
		}
	}
}

// cycle takes p offline and online until ctx ends (it is left as it is).
func (p *persistent) cycle(ctx context.Context, r *run, skew time.Duration) {
	if !sleep(ctx, r.cfg.Online+skew) {
		return
	}
	for {
		p.close()
		if !sleep(ctx, r.cfg.Offline) {
			return
		}
		p.online(ctx, r)
		if !sleep(ctx, r.cfg.Online) {
			return
		}
	}
}
