package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tolsey/tolsey/core/coretest"
	"github.com/tolsey/tolsey/test/internal/gwproc"
)

// The gateway as a child process (test/internal/gwproc), for what an
// in-process gateway cannot show: kill -9.

// buildGatewayBinary compiles ./cmd/gateway into a temp dir.
func buildGatewayBinary(t *testing.T) string {
	t.Helper()
	return gwproc.Build(t, "../..") // the module root, from test/e2e
}

// gwProc is one run of the gateway binary, its addresses under the names
// these tests use.
type gwProc struct {
	*gwproc.Proc
	mqtt, admin, amqp string
}

// runGatewayProc starts bin with args (and the memory retained store
// unless args say otherwise) on free ports and waits until it is ready.
func runGatewayProc(t *testing.T, bin string, args ...string) *gwProc {
	t.Helper()
	p := gwproc.Start(t, bin, append([]string{"--retain.backend=memory"}, args...)...)
	return &gwProc{Proc: p, mqtt: p.MQTT, admin: p.Admin, amqp: p.AMQP}
}

// bufferedOf reads rule 0's buffered message count from GET /api/v1/bridges;
// -1 when it cannot be read.
func (p *gwProc) bufferedOf() int64 {
	resp, err := httpGet("http://" + p.admin + "/api/v1/bridges")
	if err != nil {
		return -1
	}
	var st []struct {
		Rules []struct {
			Buffer *struct {
				Messages int64 `json:"messages"`
			} `json:"buffer"`
		} `json:"rules"`
	}
	if json.Unmarshal(resp, &st) != nil || len(st) != 1 || len(st[0].Rules) == 0 || st[0].Rules[0].Buffer == nil {
		return -1
	}
	return st[0].Rules[0].Buffer.Messages
}

// killPublisher is one MQTT 5 publisher of the kill -9 test: it publishes
// its sequence numbers 0..n-1 at QoS 1, one at a time, and records which
// got a PUBACK (reason 0). When its connection is lost (the gateway was
// killed), it waits for the next gateway and sends the unacknowledged one
// again, as an application whose publish failed does.
type killPublisher struct {
	id       int
	acked    []bool
	resent   []int // sequence numbers sent again after a lost connection
	lastDone int   // sequence numbers below it got a PUBACK
}

// gwAddr hands the publishers the current gateway's MQTT address.
type gwAddr struct {
	mu      sync.Mutex
	addr    string
	changed chan struct{} // closed when addr changes
}

func (a *gwAddr) get() (string, <-chan struct{}) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.addr, a.changed
}

func (a *gwAddr) set(addr string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.addr = addr
	close(a.changed)
	a.changed = make(chan struct{})
}

func (kp *killPublisher) run(ctx context.Context, addrs *gwAddr, n int, totalAcked *atomic.Int64) error {
	kp.acked = make([]bool, n)
	var c *paho.Client
	var changed <-chan struct{}
	defer func() {
		if c != nil {
			_ = c.Disconnect(&paho.Disconnect{})
		}
	}()
	seq := 0
	failedAt := -1
	for seq < n {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if c == nil {
			var addr string
			addr, changed = addrs.get()
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				// Killed and not back yet: wait for the next one.
				select {
				case <-changed:
				case <-ctx.Done():
				}
				continue
			}
			id := fmt.Sprintf("killpub%d", kp.id)
			c = paho.NewClient(paho.ClientConfig{ClientID: id, Conn: conn})
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			ca, err := c.Connect(cctx, &paho.Connect{ClientID: id, CleanStart: true, KeepAlive: 30})
			cancel()
			if err != nil || ca.ReasonCode != 0 {
				_ = c.Disconnect(&paho.Disconnect{})
				c = nil
				select {
				case <-changed:
				case <-ctx.Done():
				}
				continue
			}
		}
		if failedAt == seq {
			kp.resent = append(kp.resent, seq)
		}
		pctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		r, err := c.Publish(pctx, &paho.Publish{Topic: fmt.Sprintf("alarms/p%d", kp.id), QoS: 1,
			Payload: []byte(fmt.Sprintf("%d:%d", kp.id, seq))})
		cancel()
		if err == nil && r != nil && r.ReasonCode == 0 {
			kp.acked[seq] = true
			totalAcked.Add(1)
			seq++
			kp.lastDone = seq
			continue
		}
		if r != nil && r.ReasonCode != 0 {
			return fmt.Errorf("publisher %d seq %d: PUBACK reason %#x", kp.id, seq, r.ReasonCode)
		}
		// The connection is gone (the gateway was killed): wait for the
		// next gateway, then send this one again.
		failedAt = seq
		_ = c.Disconnect(&paho.Disconnect{})
		c = nil
		select {
		case <-changed:
		case <-ctx.Done():
		}
	}
	return nil
}

// The headline store-and-forward test. The gateway binary runs
// with an outbound JetStream rule while NATS is down; 4 MQTT 5 publishers
// send 2,500 QoS 1 messages each (10,000), every one carrying its publisher
// and sequence number. After 5,000 PUBACKs, while they are publishing, the
// gateway is killed with SIGKILL and started again on the same data.dir;
// the publishers reconnect and go on (sending again the one whose PUBACK
// they did not get). Then NATS starts, on the same port with the same
// JetStream store: every message that got a PUBACK is in the stream, in
// order per publisher; duplicates are counted (JetStream's de-duplication
// of the bridge's own resends leaves only the publishers' resends).
func TestBridgeKill9StoreAndForward(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the gateway and publishes 10,000 messages")
	}
	bin := buildGatewayBinary(t)
	natsDir := t.TempDir()
	s := startNATS(t, 0, natsDir)
	port := natsPort(s)
	nc := natsClient(t, s)
	createStream(t, jsClient(t, nc), "ALARMS", "site1.alarms.>")
	nc.Close()
	s.Shutdown()
	s.WaitForShutdown()

	args := []string{"--data.dir=" + t.TempDir(), "--node.id=edge",
		fmt.Sprintf("--bridge.nats.url=nats://127.0.0.1:%d", port),
		rulesFlag(ruleJSON{"direction": "out", "local": "alarms/#", "remote": "site1.alarms.>", "qos": 1, "jetstream": true})}
	const pubs, per = 4, 2500
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	kps, gw2, atKill := killDrill(ctx, t, bin, args, pubs, per)

	s2 := startNATS(t, port, natsDir)
	nc2 := natsClient(t, s2)
	stream, err := jsClient(t, nc2).Stream(ctx, "ALARMS")
	if err != nil {
		t.Fatal(err)
	}
	coretest.Eventually(t, "buffer drained into JetStream", 2*time.Minute, func() bool { return gw2.bufferedOf() == 0 })
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}

	// Read the stream in order.
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	dc := newDrillCount(pubs)
	for i := uint64(0); i < info.State.Msgs; i++ {
		m, err := cons.Next(jetstream.FetchMaxWait(10 * time.Second))
		if err != nil {
			t.Fatalf("stream message %d of %d: %v", i, info.State.Msgs, err)
		}
		p, seq, ok := parsePubSeq(string(m.Data()))
		if !ok || p >= pubs || m.Subject() != fmt.Sprintf("site1.alarms.p%d", p) {
			t.Fatalf("stream message %d: %s %q", i, m.Subject(), m.Data())
		}
		dc.add(t, p, seq)
	}
	// The bridge's own resends carry the same Nats-Msg-Id and JetStream
	// drops them; only a publisher's own resend of a message whose PUBACK
	// the kill swallowed can be stored twice (at least once).
	dc.check(t, kps, atKill, "the stream")
}

// killDrill is the publishing half of a kill -9 drill: the gateway binary
// bin runs with args; pubs MQTT 5 publishers send per QoS 1 messages each;
// after half of them got a PUBACK the gateway is killed with SIGKILL and
// started again with the same args, and the publishers go on. It returns
// once every message got its PUBACK, with the publishers, the running
// gateway and the PUBACK count at the kill, having checked that the
// restarted gateway's buffer holds at least what was acknowledged since.
func killDrill(ctx context.Context, t *testing.T, bin string, args []string, pubs, per int) ([]*killPublisher, *gwProc, int64) {
	t.Helper()
	kps, gw2, atKill := publishAcrossKill(ctx, t, bin, args, runGatewayProc(t, bin, args...), pubs, per)
	if n := gw2.bufferedOf(); n < int64(pubs*per)-atKill {
		t.Fatalf("the restarted gateway's buffer holds %d, want at least the %d acknowledged since the kill", n, int64(pubs*per)-atKill)
	}
	return kps, gw2, atKill
}

// publishAcrossKill runs pubs MQTT 5 publishers of per QoS 1 messages each
// against gw (the gateway binary bin run with args); after half of them
// got a PUBACK gw is killed with SIGKILL and started again with the same
// args, and the publishers go on. It returns once every message got its
// PUBACK, with the publishers, the running gateway and the PUBACK count at
// the kill.
func publishAcrossKill(ctx context.Context, t *testing.T, bin string, args []string, gw *gwProc, pubs, per int) ([]*killPublisher, *gwProc, int64) {
	t.Helper()
	addrs := &gwAddr{addr: gw.mqtt, changed: make(chan struct{})}
	var total atomic.Int64
	kps := make([]*killPublisher, pubs)
	errs := make(chan error, pubs)
	for i := range kps {
		kps[i] = &killPublisher{id: i}
		go func(kp *killPublisher) { errs <- kp.run(ctx, addrs, per, &total) }(kps[i])
	}
	coretest.Eventually(t, fmt.Sprintf("%d PUBACKs", pubs*per/2), 3*time.Minute, func() bool { return total.Load() >= int64(pubs*per/2) })
	gw.Kill()
	atKill := total.Load()
	gw2 := runGatewayProc(t, bin, args...)
	addrs.set(gw2.mqtt)
	for range kps {
		if err := <-errs; err != nil {
			t.Fatalf("%v\n--- gateway log:\n%s", err, gw2.Output())
		}
	}
	if got := total.Load(); got != int64(pubs*per) {
		t.Fatalf("%d PUBACKs, want %d", got, pubs*per)
	}
	return kps, gw2, atKill
}

// drillCount judges what a kill -9 drill's remote received, in the order
// it received it: copies per publisher and sequence number, duplicates,
// first copies out of order.
type drillCount struct {
	seen             []map[int]int
	last             []int
	got              int
	dups, outOfOrder int
}

func newDrillCount(pubs int) *drillCount {
	d := &drillCount{seen: make([]map[int]int, pubs), last: make([]int, pubs)}
	for i := range d.seen {
		d.seen[i], d.last[i] = map[int]int{}, -1
	}
	return d
}

func (d *drillCount) add(t *testing.T, p, seq int) {
	d.got++
	d.seen[p][seq]++
	if d.seen[p][seq] > 1 {
		d.dups++
		return // order is judged on first copies
	}
	if seq <= d.last[p] {
		d.outOfOrder++
		if d.outOfOrder <= 5 {
			t.Errorf("publisher %d: %d after %d", p, seq, d.last[p])
		}
	}
	d.last[p] = seq
}

// check fails the test when a PUBACKed message is missing, came out of
// order, or came twice other than because its publisher sent it again;
// it logs the figures.
func (d *drillCount) check(t *testing.T, kps []*killPublisher, atKill int64, where string) {
	t.Helper()
	missing, resentDups := 0, 0
	for p, kp := range kps {
		for seq, ok := range kp.acked {
			if ok && d.seen[p][seq] == 0 {
				missing++
				if missing <= 5 {
					t.Errorf("publisher %d seq %d got a PUBACK and is not in %s", p, seq, where)
				}
			}
		}
		for _, seq := range kp.resent {
			resentDups += max(d.seen[p][seq]-1, 0)
		}
	}
	t.Logf("kill -9 after %d PUBACKs; %s got %d messages; %d duplicates (%d of them messages their publisher sent again after the kill); missing %d; out of order %d; resent %v",
		atKill, where, d.got, d.dups, resentDups, missing, d.outOfOrder, resentOf(kps))
	if missing > 0 || d.outOfOrder > 0 {
		t.Fatalf("missing %d acknowledged messages, %d out of order", missing, d.outOfOrder)
	}
	if d.dups != resentDups {
		t.Errorf("%d duplicates the publishers did not cause", d.dups-resentDups)
	}
}

func parsePubSeq(s string) (p, seq int, ok bool) {
	a, b, found := strings.Cut(s, ":")
	if !found {
		return 0, 0, false
	}
	p, err1 := strconv.Atoi(a)
	seq, err2 := strconv.Atoi(b)
	return p, seq, err1 == nil && err2 == nil
}

// resentOf lists publisher:sequence of what was sent again, the first 20
// and a count of the rest.
func resentOf(kps []*killPublisher) string {
	var s []string
	n := 0
	for _, kp := range kps {
		for _, seq := range kp.resent {
			if n++; n <= 20 {
				s = append(s, fmt.Sprintf("%d:%d", kp.id, seq))
			}
		}
	}
	if n > 20 {
		s = append(s, fmt.Sprintf("… %d in all", n))
	}
	return strings.Join(s, ",")
}

// httpGet is a GET that returns an error instead of failing the test, for
// polling a process that may not be there.
func httpGet(url string) ([]byte, error) {
	cl := &httpClient
	resp, err := cl.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return nil, errors.New(resp.Status)
	}
	return io.ReadAll(resp.Body)
}

// httpClient polls without keep-alive connections, which would outlive the
// test (goleak) and the killed gateway.
var httpClient = http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
