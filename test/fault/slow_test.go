package fault

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"

	"github.com/tolsey/tolsey/test/internal/mqttlean"
)

// slowDrill is drill 5's size: the short run in test/run, the long one with
// -long (docs/reliability.md). A stuck client is found once the gateway's
// socket send buffer is full (Linux grows it up to net.ipv4.tcp_wmem's
// maximum, 4 MiB here: about 2.8 MB of messages) and a write has then waited
// writeTimeout, so each stuck client gets a share of the load (one topic in
// topics) large enough to be found within seconds.
type slowDrill struct {
	stuck, slow          int // MQTT subscribers that never read, that read slowly
	amqpStuck, amqpHeld  int // AMQP receivers that never read the socket, that never settle
	rate0, rate1         int // offered msg/s, QoS 0 and QoS 1
	payload, topics      int // bytes; the load goes round topics d/<j>/q0, d/<j>/q1
	slowTopics           int // topics each slow reader subscribes to
	slowBytesPerSecond   int // how fast a slow reader reads
	window               time.Duration
	writeTimeout         time.Duration
	pending, inflight    int // mqtt.maxPendingWrites, mqtt.maxInflight
	linkBuffer, rcvbuf   int // amqp.linkBuffer; SO_RCVBUF of the stuck clients
	amqpStuckCredit      uint32
	amqpHeldCredit       int32
	disconnectedDeadline time.Duration
}

var (
	slowShort = slowDrill{stuck: 30, slow: 3, amqpStuck: 5, amqpHeld: 5, rate0: 2000, rate1: 200, payload: 4096, topics: 10,
		slowTopics: 4, slowBytesPerSecond: 2 << 20, window: 2 * time.Second, writeTimeout: 3 * time.Second,
		pending: 1024, inflight: 1024, linkBuffer: 1000, rcvbuf: 4096, amqpStuckCredit: 5000, amqpHeldCredit: 100,
		disconnectedDeadline: time.Minute}
	slowLong = slowDrill{stuck: 1000, slow: 10, amqpStuck: 100, amqpHeld: 100, rate0: 20000, rate1: 2000, payload: 2048, topics: 50,
		slowTopics: 10, slowBytesPerSecond: 2 << 20, window: 10 * time.Second, writeTimeout: 10 * time.Second,
		pending: 256, inflight: 1024, linkBuffer: 1000, rcvbuf: 4096, amqpStuckCredit: 5000, amqpHeldCredit: 100,
		disconnectedDeadline: 3 * time.Minute}
)

// Drill 5 (docs/reliability.md), slow and stuck consumers: under a paced QoS 0 + QoS 1
// load over topics d/<j>/q0 and d/<j>/q1, MQTT subscribers that never read
// (small receive buffers, one topic each), MQTT subscribers that read
// slowly (a share of the topics each), AMQP receivers that grant credit and
// never read their socket, and AMQP receivers that never settle join a fast
// MQTT subscriber of d/#. Promised and asserted: every stuck MQTT and AMQP
// client is disconnected (the write deadline) and counted in
// tolsey_connections_closed_total{reason="write_timeout"}, the slow ones
// and the never-settling ones are not; the fast subscriber gets every
// acknowledged QoS 1 message; the gateway's peak RSS stays below the bound
// its configuration sets (the formula is printed). Reported: the fast
// subscriber's rate with the abusers over its rate before them (the issue
// asks ≥ 0.9; not asserted on a shared box), drops, times.
func TestSlowAndStuckConsumers(t *testing.T) {
	d := slowShort
	if *long {
		d = slowLong
	}
	gw := start(t, "--data.dir="+t.TempDir(), "--amqp.listen=127.0.0.1:0",
		"--mqtt.writeTimeout="+d.writeTimeout.String(), "--amqp.writeTimeout="+d.writeTimeout.String(),
		"--mqtt.maxPendingWrites="+strconv.Itoa(d.pending), "--mqtt.maxInflight="+strconv.Itoa(d.inflight),
		"--amqp.linkBuffer="+strconv.Itoa(d.linkBuffer))
	rss0 := procKB(t, gw.Cmd.Process.Pid, "VmRSS:")

	// The fast subscriber reads everything and records the QoS 1 sequence
	// numbers it got.
	fast := leanDial(t, gw.mqtt, "fast", 0)
	if err := fast.Subscribe(1, 1, nil, "d/#"); err != nil {
		t.Fatal(err)
	}
	var (
		fastN   atomic.Int64
		fastMu  sync.Mutex
		fastQ1  = map[int]bool{}
		fastErr = make(chan error, 1)
	)
	go func() {
		for {
			p, err := fast.ReadPacket()
			if err != nil {
				fastErr <- err
				return
			}
			if p.Type != mqttlean.PUBLISH {
				continue
			}
			fastN.Add(1)
			if p.QoS() == 1 {
				_ = fast.Puback(p.ID)
				if seq, ok := seqOf(p.Payload); ok {
					fastMu.Lock()
					fastQ1[seq] = true
					fastMu.Unlock()
				}
			}
		}
	}()

	// Peak RSS, sampled (VmHWM covers the whole run; this splits it).
	var peak, tcpPeak atomic.Int64 // gateway VmRSS kB; the machine's TCP buffers, pages
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stopSampling:
				return
			case <-tick.C:
				if kb, err := procStatusKB(gw.Cmd.Process.Pid, "VmRSS:"); err == nil && kb > peak.Load() {
					peak.Store(kb)
				}
				if pages := tcpMemPages(); pages > tcpPeak.Load() {
					tcpPeak.Store(pages)
				}
			}
		}
	}()

	load := startSlowLoad(t, gw.mqtt, d)
	// Phase A: the fast subscriber alone, after a second of warm-up.
	time.Sleep(time.Second) // the load is paced: a fixed warm-up, not a wait for a condition
	rateA, sentA := load.measure(&fastN, d.window)
	peakA := peak.Load()

	// Phase B: the abusers join.
	tB := time.Now()
	stuck := make([]*mqttlean.Conn, d.stuck)
	attach := make([]error, d.stuck)
	var attaching sync.WaitGroup
	sem := make(chan struct{}, 32) // in parallel: a thousand one by one under load take minutes
	for j := range stuck {
		attaching.Add(1)
		sem <- struct{}{}
		go func() {
			defer attaching.Done()
			defer func() { <-sem }()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			c, err := mqttlean.Dial(ctx, gw.mqtt, mqttlean.Options{ClientID: fmt.Sprintf("stuck-%d", j), Clean: true, ReadBuffer: d.rcvbuf})
			if err == nil {
				stuck[j] = c
				err = c.Subscribe(1, 1, nil, fmt.Sprintf("d/%d/#", j%d.topics))
			}
			attach[j] = err
		}()
	}
	attaching.Wait()
	for _, c := range stuck {
		if c != nil {
			t.Cleanup(func() { _ = c.Close() })
		}
	}
	if err := errors.Join(attach...); err != nil {
		t.Fatalf("stuck subscribers: %v", err)
	}
	slowGot := make([]atomic.Int64, d.slow)
	slowErr := make([]atomic.Value, d.slow)
	for s := range d.slow {
		c := leanDial(t, gw.mqtt, fmt.Sprintf("slow-%d", s), 0)
		var filters []string
		for i := range d.slowTopics {
			filters = append(filters, fmt.Sprintf("d/%d/#", (s*d.slowTopics+i)%d.topics))
		}
		if err := c.Subscribe(1, 1, nil, filters...); err != nil {
			t.Fatal(err)
		}
		go slowRead(c, d.slowBytesPerSecond, &slowGot[s], &slowErr[s])
	}
	amqpStuck := make([]*freezeConn, d.amqpStuck)
	for k := range amqpStuck {
		amqpStuck[k] = amqpFrozenReceiver(t, gw.amqp, fmt.Sprintf("d/%d/#", k%d.topics), d)
	}
	for k := range d.amqpHeld {
		amqpHeldReceiver(t, gw.amqp, fmt.Sprintf("d/%d/#", d.topics-1-k%d.topics), d.amqpHeldCredit)
	}
	t.Logf("abusers attached in %v", time.Since(tB).Round(time.Millisecond))
	rateB, sentB := load.measure(&fastN, d.window)

	// Every stuck one is disconnected by the write deadline while the load
	// goes on.
	var mqttClosed, amqpClosed float64
	_ = waitFor(d.disconnectedDeadline, func() bool {
		mqttClosed = metricValue(t, gw.admin, "tolsey_connections_closed_total", `protocol="mqtt"`, `reason="write_timeout"`)
		amqpClosed = metricValue(t, gw.admin, "tolsey_connections_closed_total", `protocol="amqp"`, `reason="write_timeout"`)
		return int(mqttClosed) >= d.stuck && int(amqpClosed) >= d.amqpStuck
	})
	allClosed := time.Since(tB)
	sent0, acked1 := load.stop()
	close(stopSampling)
	<-sampled
	hwm := procKB(t, gw.Cmd.Process.Pid, "VmHWM:")

	// The fast subscriber has every acknowledged QoS 1 message.
	if err := waitFor(30*time.Second, func() bool {
		fastMu.Lock()
		defer fastMu.Unlock()
		for _, s := range acked1 {
			if !fastQ1[s] {
				return false
			}
		}
		return true
	}); err != nil {
		fastMu.Lock()
		missing := 0
		for _, s := range acked1 {
			if !fastQ1[s] {
				missing++
			}
		}
		fastMu.Unlock()
		t.Errorf("fast subscriber lacks %d of %d acknowledged QoS 1 messages", missing, len(acked1))
	}
	select {
	case err := <-fastErr:
		t.Errorf("fast subscriber's connection ended: %v", err)
	default:
	}

	// The gateway holds the connections that read (the fast subscriber, the
	// slow readers, the two publishers; the never-settling AMQP receivers)
	// and none of the stuck ones. (A stuck client itself would see its EOF
	// only after reading the megabytes the closed socket still sends.)
	if got, want := metricValue(t, gw.admin, "tolsey_connections", `protocol="mqtt"`), float64(d.slow+3); got != want {
		t.Errorf("open MQTT connections %v, want %v (fast, slow, publishers)", got, want)
	}
	if got, want := metricValue(t, gw.admin, "tolsey_connections", `protocol="amqp"`), float64(d.amqpHeld); got != want {
		t.Errorf("open AMQP connections %v, want %v (the never-settling receivers)", got, want)
	}
	if int(mqttClosed) != d.stuck {
		t.Errorf("mqtt write_timeout closes %v, want %d (the stuck subscribers, not the slow ones)", mqttClosed, d.stuck)
	}
	if int(amqpClosed) != d.amqpStuck {
		t.Errorf("amqp write_timeout closes %v, want %d (the frozen receivers, not the never-settling ones)", amqpClosed, d.amqpStuck)
	}
	slowAlive := 0
	for s := range d.slow {
		if slowErr[s].Load() == nil && slowGot[s].Load() > 0 {
			slowAlive++
		} else {
			t.Errorf("slow reader %d: %d messages, ended: %v", s, slowGot[s].Load(), slowErr[s].Load())
		}
	}

	// The bound: per stuck MQTT connection, its write queue's QoS 0 packets
	// and its session's QoS 1 messages, plus the write buffer; per AMQP
	// receiving link, its buffer; each message once per holder; twice that
	// for the Go heap's growth between collections (GOGC=100).
	msgCost := int64(d.payload + 512) // payload + topic, packet and message structs, map slots (generous)
	bound := 2 * (int64(d.stuck+d.slow)*(int64(d.pending+d.inflight)*msgCost+2048) +
		int64(d.amqpStuck+d.amqpHeld)*(int64(d.linkBuffer)*msgCost+8192))
	mdrop := metricValue(t, gw.admin, "tolsey_mqtt_messages_dropped_total")
	adrop := metricValue(t, gw.admin, "tolsey_messages_dropped_total", `protocol="amqp"`, `reason="slow_consumer"`)
	t.Logf("load offered %d msg/s QoS 0 + %d msg/s QoS 1 of %d B over %d topics: sent QoS 0 %d, QoS 1 acknowledged %d",
		d.rate0, d.rate1, d.payload, d.topics, sent0, len(acked1))
	t.Logf("fast subscriber: %.0f msg/s alone (%.0f sent), %.0f msg/s with the abusers (%.0f sent): ratio %.2f",
		rateA, sentA, rateB, sentB, rateB/rateA)
	t.Logf("stuck: MQTT %d closed by write_timeout (%v), AMQP %d (%v); all within %v of attaching (writeTimeout %v)",
		int(mqttClosed), d.stuck, int(amqpClosed), d.amqpStuck, allClosed.Round(time.Millisecond), d.writeTimeout)
	t.Logf("slow readers alive %d/%d, never-settling AMQP receivers %d; dropped: MQTT queue overflows %v, AMQP slow_consumer %v",
		slowAlive, d.slow, d.amqpHeld, mdrop, adrop)
	t.Logf("gateway RSS: %s at start, peak %s before the abusers, %s with them (VmHWM %s); bound from the config: start + %s "+
		"= 2 × ((stuck+slow) × ((maxPendingWrites %d + maxInflight %d) × (payload + 512 B) + 2 KiB) + AMQP links × (linkBuffer %d × (payload + 512 B) + 8 KiB))",
		kib(rss0), kib(peakA), kib(peak.Load()), kib(hwm), kib(bound>>10), d.pending, d.inflight, d.linkBuffer)
	tcpMem, _ := os.ReadFile("/proc/sys/net/ipv4/tcp_mem")
	t.Logf("the machine's TCP buffers (every process's sockets): peak %d pages of 4 KiB; net.ipv4.tcp_mem (min, pressure, max) %s",
		tcpPeak.Load(), strings.TrimSpace(string(tcpMem)))
	if hwm-rss0 > bound>>10 {
		t.Errorf("peak RSS %s above start %s + bound %s", kib(hwm), kib(rss0), kib(bound>>10))
	}
}

// slowLoad is the drill's publishers: one QoS 0 and one QoS 1 connection,
// paced per millisecond; payloads carry "q<qos>:<seq>:".
type slowLoad struct {
	stopc  chan struct{}
	pacers sync.WaitGroup
	window chan int // QoS 1 sequence numbers sent, not yet acknowledged
	sent0  atomic.Int64
	sent1  atomic.Int64
	mu     sync.Mutex
	acked1 []int
}

func startSlowLoad(t *testing.T, addr string, d slowDrill) *slowLoad {
	l := &slowLoad{stopc: make(chan struct{}), window: make(chan int, 100)}
	pub0 := leanDial(t, addr, "load-q0", 0)
	pub1 := leanDial(t, addr, "load-q1", 0)
	pad := strings.Repeat("x", d.payload)
	msg := func(q, seq int) []byte {
		b := fmt.Appendf(nil, "q%d:%d:", q, seq)
		return append(b, pad[:max(d.payload-len(b), 0)]...)
	}
	// QoS 1: up to 100 unacknowledged; id = seq mod 65535 + 1. The reader
	// ends with the connection, at the test's end.
	window := l.window
	go func() {
		for {
			p, err := pub1.ReadPacket()
			if err != nil {
				return
			}
			if p.Type == mqttlean.PUBACK {
				seq := <-window
				l.mu.Lock()
				l.acked1 = append(l.acked1, seq)
				l.mu.Unlock()
			}
		}
	}()
	l.pacers.Add(2)
	pace := func(rate int, send func(seq int) error) {
		defer l.pacers.Done()
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		t0, seq := time.Now(), 0
		for {
			select {
			case <-l.stopc:
				return
			case <-tick.C:
			}
			due := int(time.Since(t0).Seconds() * float64(rate))
			// More than 100 ms behind (this box cannot keep the pace): the
			// missed slots are not sent in a burst; the sent rate reports it.
			seq = max(seq, due-rate/10)
			for ; seq < due; seq++ {
				if err := send(seq); err != nil {
					return
				}
			}
		}
	}
	go pace(d.rate0, func(seq int) error {
		l.sent0.Add(1)
		return pub0.Publish(0, fmt.Sprintf("d/%d/q0", seq%d.topics), msg(0, seq), 0)
	})
	go pace(d.rate1, func(seq int) error {
		select {
		case window <- seq:
		case <-l.stopc:
			return errors.New("stopped")
		}
		l.sent1.Add(1)
		return pub1.Publish(uint16(seq%65535+1), fmt.Sprintf("d/%d/q1", seq%d.topics), msg(1, seq), 1)
	})
	return l
}

// measure returns the rate at which got grows over window, and the rate
// at which the load was sent meanwhile (below the offered rate when this
// box cannot keep the pace).
func (l *slowLoad) measure(got *atomic.Int64, window time.Duration) (gotRate, sentRate float64) {
	g0, s0 := got.Load(), l.sent0.Load()+l.sent1.Load()
	time.Sleep(window) // the load is paced: a measuring window, not a wait for a condition
	return float64(got.Load()-g0) / window.Seconds(), float64(l.sent0.Load()+l.sent1.Load()-s0) / window.Seconds()
}

// stop ends the load, waits for the outstanding PUBACKs, and returns the
// QoS 0 count sent and the QoS 1 sequence numbers acknowledged.
func (l *slowLoad) stop() (int64, []int) {
	close(l.stopc)
	l.pacers.Wait()
	_ = waitFor(10*time.Second, func() bool { return len(l.window) == 0 })
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sent0.Load(), append([]int(nil), l.acked1...)
}

func seqOf(payload []byte) (int, bool) {
	_, rest, ok := strings.Cut(string(payload[:min(len(payload), 32)]), ":")
	if !ok {
		return 0, false
	}
	s, _, _ := strings.Cut(rest, ":")
	n, err := strconv.Atoi(s)
	return n, err == nil
}

// slowRead reads at about bytesPerSecond on average (not per message: on a
// loaded box a sleep lasts longer than asked), acknowledging QoS 1 messages.
func slowRead(c *mqttlean.Conn, bytesPerSecond int, got *atomic.Int64, ended *atomic.Value) {
	t0, read := time.Now(), 0
	for {
		p, err := c.ReadPacket()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				ended.Store(err)
			}
			return
		}
		if p.Type == mqttlean.PUBLISH {
			got.Add(1)
			if p.QoS() == 1 {
				_ = c.Puback(p.ID)
			}
			read += len(p.Payload) + len(p.Topic)
			time.Sleep(time.Until(t0.Add(time.Duration(float64(read) / float64(bytesPerSecond) * float64(time.Second))))) // the slowness itself
		}
	}
}

// leanDial connects an MQTT 3.1.1 client (clean session) with SO_RCVBUF
// rcvbuf (0: the default), closed at the test's end.
func leanDial(t *testing.T, addr, id string, rcvbuf int) *mqttlean.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := mqttlean.Dial(ctx, addr, mqttlean.Options{ClientID: id, Clean: true, ReadBuffer: rcvbuf})
	if err != nil {
		t.Fatalf("connect %s: %v", id, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// freezeConn is a real socket whose reader stops on freeze: go-amqp then
// has granted credit but never reads what the gateway sends.
type freezeConn struct {
	net.Conn
	frozen, closed chan struct{}
	once           sync.Once
}

func (c *freezeConn) Read(p []byte) (int, error) {
	select {
	case <-c.frozen:
		<-c.closed
		return 0, net.ErrClosed
	default:
		return c.Conn.Read(p)
	}
}

func (c *freezeConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

// amqpFrozenReceiver attaches a go-amqp receiver of source with a lot of
// credit over a socket with a small receive buffer, then stops reading.
func amqpFrozenReceiver(t *testing.T, addr, source string, d slowDrill) *freezeConn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	nc, err := mqttlean.Dialer(nil, d.rcvbuf).DialContext(ctx, "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	fc := &freezeConn{Conn: nc, frozen: make(chan struct{}), closed: make(chan struct{})}
	conn, err := goamqp.NewConn(ctx, fc, &goamqp.ConnOptions{SASLType: goamqp.SASLTypeAnonymous()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = fc.Close()
		_ = conn.Close()
	})
	sess, err := conn.NewSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sess.NewReceiver(ctx, source, &goamqp.ReceiverOptions{Credit: int32(d.amqpStuckCredit)}); err != nil {
		t.Fatal(err)
	}
	close(fc.frozen)
	return fc
}

// amqpHeldReceiver attaches a go-amqp receiver of source with credit that
// never takes nor settles a message: the gateway's link buffer holds the
// rest.
func amqpHeldReceiver(t *testing.T, addr, source string, credit int32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, sess := amqpSession(ctx, t, addr)
	if _, err := sess.NewReceiver(ctx, source, &goamqp.ReceiverOptions{Credit: credit}); err != nil {
		t.Fatal(err)
	}
}

// waitFor polls cond every 50 ms until it holds or limit passes.
func waitFor(limit time.Duration, cond func() bool) error {
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %v", limit)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}

// procStatusKB reads a "kB" field of /proc/pid/status.
func procStatusKB(pid int, field string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field); ok {
			return strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}

func procKB(t *testing.T, pid int, field string) int64 {
	t.Helper()
	kb, err := procStatusKB(pid, field)
	if err != nil {
		t.Fatal(err)
	}
	return kb
}

func kib(kb int64) string { return fmt.Sprintf("%.1f MiB", float64(kb)/1024) }

// metricValue is the sum of the gateway's /metrics samples of name whose
// labels include every one of labels (`key="value"`).
func metricValue(t *testing.T, admin, name string, labels ...string) float64 {
	t.Helper()
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
next:
	for _, line := range strings.Split(string(b), "\n") {
		series, val, ok := strings.Cut(line, " ")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		n, lab, _ := strings.Cut(series, "{")
		if n != name {
			continue
		}
		for _, l := range labels {
			if !strings.Contains(lab, l) {
				continue next
			}
		}
		if v, err := strconv.ParseFloat(val, 64); err == nil {
			sum += v
		}
	}
	return sum
}

// tcpMemPages is the memory of every TCP socket on the machine, in pages
// (/proc/net/sockstat, "TCP: ... mem N"); 0 when unreadable.
func tcpMemPages() int64 {
	b, err := os.ReadFile("/proc/net/sockstat")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "TCP:"); ok {
			if _, v, ok := strings.Cut(rest, " mem "); ok {
				n, _ := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
				return n
			}
		}
	}
	return 0
}
