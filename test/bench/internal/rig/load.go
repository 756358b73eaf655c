package rig

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/eclipse/paho.golang/paho"
)

// Load is one MQTT load shape: Pubs publishers, Subs subscribers. Publisher
// i publishes N messages round-robin on load/p{i}/s{j}; subscriber j
// subscribes load/+/s{j}, so every subscriber hears every publisher on a
// topic set of its own and each message is delivered once. Payloads carry
// the send time, so end-to-end latency is measured on the one machine's
// clock.
type Load struct {
	Pubs, Subs, N, Size int
	Rate                int           // per publisher, msgs/s; 0 = as fast as possible
	Idle                time.Duration // the phase ends when subscribers get nothing for this long (QoS 0 losses)
}

// Dial opens one client of a load phase (Connect, or ConnectWith for TLS
// and credentials).
type Dial func(ctx context.Context, id string, onMsg func(*paho.Publish)) (*paho.Client, error)

// LoadResult is one phase.
type LoadResult struct {
	Sent, Got int
	Elapsed   time.Duration
	P50, P99  time.Duration
	SrvCPU    time.Duration // server process CPU during the phase
	CliCPU    time.Duration // this program's CPU during the phase
}

// CPUPerMsg is server CPU per delivered message.
func (r LoadResult) CPUPerMsg() time.Duration { return r.SrvCPU / time.Duration(max(r.Got, 1)) }

// Rate is delivered messages per second.
func (r LoadResult) Rate() float64 { return float64(r.Got) / r.Elapsed.Seconds() }

// MeanLoad averages phases (the rate is the mean of the rates).
func MeanLoad(rs []LoadResult) LoadResult {
	var m LoadResult
	var rate float64
	for _, r := range rs {
		m.Sent += r.Sent
		m.Got += r.Got
		m.P50 += r.P50
		m.P99 += r.P99
		m.SrvCPU += r.SrvCPU
		m.CliCPU += r.CliCPU
		rate += r.Rate()
	}
	n := len(rs)
	m.Sent, m.Got, m.P50, m.P99 = m.Sent/n, m.Got/n, m.P50/time.Duration(n), m.P99/time.Duration(n)
	m.SrvCPU, m.CliCPU = m.SrvCPU/time.Duration(n), m.CliCPU/time.Duration(n)
	rate /= float64(n)
	// Express the mean rate through Elapsed so Rate() returns it.
	m.Elapsed = time.Duration(float64(m.Got) / rate * float64(time.Second))
	return m
}

// loadSubscriber collects what one subscriber receives.
type loadSubscriber struct {
	got  atomic.Int64
	last atomic.Int64 // UnixNano of the latest receipt
	mu   sync.Mutex
	lat  []time.Duration
}

func (s *loadSubscriber) onMsg(p *paho.Publish) {
	now := time.Now().UnixNano()
	if len(p.Payload) >= 8 {
		sent := int64(binary.BigEndian.Uint64(p.Payload))
		s.mu.Lock()
		s.lat = append(s.lat, time.Duration(now-sent))
		s.mu.Unlock()
	}
	s.last.Store(now)
	s.got.Add(1)
}

// RunLoad runs one load phase against server at QoS q with fresh clients
// from dial, named after tag; server's CPU is read around the phase.
func RunLoad(server *Child, dial Dial, l Load, q byte, tag string) (LoadResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	l.Size = max(l.Size, 8)
	var clients []*paho.Client
	defer func() {
		for _, cl := range clients {
			_ = cl.Disconnect(&paho.Disconnect{})
		}
	}()
	subs := make([]*loadSubscriber, l.Subs)
	for j := range subs {
		s := &loadSubscriber{lat: make([]time.Duration, 0, l.N*l.Pubs/l.Subs+16)}
		cl, err := dial(ctx, fmt.Sprintf("%s-q%d-sub%d", tag, q, j), s.onMsg)
		if err != nil {
			return LoadResult{}, err
		}
		clients = append(clients, cl)
		if err := Subscribe(ctx, cl, fmt.Sprintf("load/+/s%d", j), q); err != nil {
			return LoadResult{}, err
		}
		subs[j] = s
	}
	pubs := make([]*paho.Client, l.Pubs)
	for i := range pubs {
		cl, err := dial(ctx, fmt.Sprintf("%s-q%d-pub%d", tag, q, i), nil)
		if err != nil {
			return LoadResult{}, err
		}
		clients = append(clients, cl)
		pubs[i] = cl
	}
	topics := make([][]string, l.Pubs)
	for i := range topics {
		for j := 0; j < l.Subs; j++ {
			topics[i] = append(topics[i], fmt.Sprintf("load/p%d/s%d", i, j))
		}
	}

	srv0, err := server.CPU()
	if err != nil {
		return LoadResult{}, err
	}
	cli0 := SelfCPU()
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, l.Pubs)
	for i, cl := range pubs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- publishLoad(ctx, cl, topics[i], l, q, start)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return LoadResult{}, err
		}
	}
	want := int64(l.N * l.Pubs)
	total := func() (n int64) {
		for _, s := range subs {
			n += s.got.Load()
		}
		return n
	}
	_ = WaitDelivered(total, want, l.Idle, nil)
	srv1, err := server.CPU()
	if err != nil {
		return LoadResult{}, err
	}
	cli1 := SelfCPU()
	var last int64
	var lat []time.Duration
	for _, s := range subs {
		last = max(last, s.last.Load())
		s.mu.Lock()
		lat = append(lat, s.lat...)
		s.mu.Unlock()
	}
	res := LoadResult{Sent: int(want), Got: int(total()), SrvCPU: srv1 - srv0, CliCPU: cli1 - cli0}
	if res.Got == 0 {
		return res, fmt.Errorf("no message delivered")
	}
	res.Elapsed = time.Unix(0, last).Sub(start)
	lat = Sorted(lat)
	res.P50, res.P99 = Percentile(lat, 50), Percentile(lat, 99)
	return res, nil
}

// WaitDelivered returns once total reaches want or has not moved for idle
// (QoS 0 drops), or with check's error when check (if set) fails. A
// benchmark's client, not production code: polling the counters is the
// simplest way to notice both "all in" and "nothing moves any more".
func WaitDelivered(total func() int64, want int64, idle time.Duration, check func() error) error {
	prev, lastMove := total(), time.Now()
	for {
		n := total()
		if n >= want {
			return nil
		}
		if n != prev {
			prev, lastMove = n, time.Now()
		} else if time.Since(lastMove) > idle {
			return nil
		}
		if check != nil {
			if err := check(); err != nil {
				return err
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// publishLoad sends l.N messages round-robin over topics. QoS 1/2 publishes
// are pipelined: paho's session keeps at most the server's Receive Maximum
// in flight and blocks the next one until an ack frees a slot.
func publishLoad(ctx context.Context, cl *paho.Client, topics []string, l Load, q byte, start time.Time) error {
	opts := paho.PublishOptions{Method: paho.PublishMethod_AsyncSend}
	for k := 0; k < l.N; k++ {
		if l.Rate > 0 && k%16 == 0 {
			due := start.Add(time.Duration(k) * time.Second / time.Duration(l.Rate))
			if d := time.Until(due); d > 0 {
				time.Sleep(d)
			}
		}
		payload := make([]byte, l.Size) // paho keeps QoS 1/2 packets in its session
		binary.BigEndian.PutUint64(payload, uint64(time.Now().UnixNano()))
		p := &paho.Publish{Topic: topics[k%len(topics)], QoS: q, Payload: payload}
		if _, err := cl.PublishWithOptions(ctx, p, opts); err != nil {
			return fmt.Errorf("publish: %w", err)
		}
	}
	return nil
}

// SelfCPU is this process's user+system CPU time.
func SelfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Flags registers the load's flags on the default flag set (-pubs, -subs,
// -n, -size, -rate, -idle) with l's values as defaults, and -qos, whose
// value QoS parses after flag.Parse.
func (l *Load) Flags(qosDefault string) *string {
	flag.IntVar(&l.Pubs, "pubs", l.Pubs, "publishers")
	flag.IntVar(&l.Subs, "subs", l.Subs, "subscribers (each on its own topic set)")
	flag.IntVar(&l.N, "n", l.N, "messages per publisher per phase")
	flag.IntVar(&l.Size, "size", max(l.Size, 8), "payload bytes (at least 8: the send time)")
	flag.IntVar(&l.Rate, "rate", l.Rate, "messages/s per publisher; 0 = as fast as possible")
	flag.DurationVar(&l.Idle, "idle", l.Idle, "a phase ends when subscribers get nothing for this long (QoS 0 losses)")
	return flag.String("qos", qosDefault, "QoS levels, comma-separated")
}

// QoS parses a comma-separated list of QoS levels ("0,1").
func QoS(s string) ([]byte, error) {
	var out []byte
	for _, q := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(q))
		if err != nil || v < 0 || v > 2 {
			return nil, fmt.Errorf("bad QoS list %q", s)
		}
		out = append(out, byte(v))
	}
	return out, nil
}
