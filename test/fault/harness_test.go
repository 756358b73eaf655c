// Package fault holds the drills of docs/reliability.md: the
// gateway binary runs as a child process on free ports, with real clients
// and a real redis-server, and each drill breaks something under load
// (Redis away, SIGTERM, a full disk), prints its figures with t.Logf and
// asserts the promises. The short versions run in `go test ./...`; -long
// runs the long ones (`go test -v ./test/fault -args -long`).
package fault

import (
	"context"
	"flag"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"
	"github.com/eclipse/paho.golang/paho"
	"go.uber.org/goleak"

	"github.com/tolsey/tolsey/test/internal/gwproc"
)

var long = flag.Bool("long", false, "run the long versions of the drills (docs/reliability.md)")

// bin is the gateway binary every drill runs, built once by the first
// start into binDir, which TestMain removes.
var (
	binDir  string
	binOnce sync.Once
	binErr  error
)

func TestMain(m *testing.M) {
	var err error
	if binDir, err = os.MkdirTemp("", "fault-gateway"); err != nil {
		panic(err)
	}
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		_ = os.RemoveAll(binDir)
		os.Exit(code)
	}))
}

// proc is one run of the gateway binary (test/internal/gwproc).
type proc struct {
	*gwproc.Proc
	mqtt, admin, amqp string
}

// start runs the gateway with args on free ports (AMQP off unless args
// turn it on) and waits until it is ready.
func start(t *testing.T, args ...string) *proc {
	t.Helper()
	p := gwproc.Start(t, gatewayBin(t), args...)
	return &proc{Proc: p, mqtt: p.MQTT, admin: p.Admin, amqp: p.AMQP}
}

// gatewayBin builds the gateway binary once for the package and returns
// its path.
func gatewayBin(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(binDir, "gateway")
	binOnce.Do(func() { binErr = gwproc.BuildInto("../..", bin) }) // the module root, from test/fault
	if binErr != nil {
		t.Fatal(binErr)
	}
	return bin
}

// readyz is the status of GET /readyz, or 0 when it cannot be asked.
func (p *proc) readyz() int {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + p.admin + "/readyz")
	if err != nil {
		return 0
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode
}

// client is an MQTT 5 client (paho) over a real socket.
type client struct {
	*paho.Client
	msgs chan *paho.Publish
	gone chan *paho.Disconnect // the server's DISCONNECT, if it sent one
}

func dial5(t *testing.T, addr, id string, clean bool, buf int) *client {
	t.Helper()
	msgs := make(chan *paho.Publish, buf)
	c := dialWith(t, addr, id, clean, func(p *paho.Publish) { msgs <- p })
	c.msgs = msgs
	return c
}

// dialWith is dial5 for a client that hands every PUBLISH to got (paho
// acknowledges it once got returns) instead of a channel: a drill's
// subscriber that counts more messages than a buffer should hold.
func dialWith(t *testing.T, addr, id string, clean bool, got func(*paho.Publish)) *client {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	c := &client{gone: make(chan *paho.Disconnect, 1)}
	c.Client = paho.NewClient(paho.ClientConfig{
		ClientID: id,
		Conn:     conn,
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(pr paho.PublishReceived) (bool, error) {
			got(pr.Packet)
			return true, nil
		}},
		OnServerDisconnect: func(d *paho.Disconnect) {
			select {
			case c.gone <- d:
			default:
			}
		},
		OnClientError: func(error) {},
	})
	cp := &paho.Connect{ClientID: id, CleanStart: clean, KeepAlive: 30}
	if !clean {
		exp := uint32(3600)
		cp.Properties = &paho.ConnectProperties{SessionExpiryInterval: &exp}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ca, err := c.Connect(ctx, cp)
	if err != nil {
		t.Fatalf("connect %s: %v", id, err)
	}
	if ca.ReasonCode != 0 {
		t.Fatalf("connect %s: reason %#x", id, ca.ReasonCode)
	}
	t.Cleanup(func() {
		_ = c.Disconnect(&paho.Disconnect{})
		<-c.Done()
	})
	return c
}

func (c *client) subscribe(t *testing.T, filter string, qos byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sa, err := c.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: filter, QoS: qos}}})
	if err != nil {
		t.Fatalf("subscribe %s: %v", filter, err)
	}
	if sa.Reasons[0] >= 0x80 {
		t.Fatalf("subscribe %s refused: %#x", filter, sa.Reasons[0])
	}
}

// pub publishes at QoS 1 and returns the PUBACK's reason code, or an error
// when no PUBACK came.
func (c *client) pub(topic string, payload []byte, retain bool) (byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := c.Publish(ctx, &paho.Publish{Topic: topic, QoS: 1, Retain: retain, Payload: payload})
	if r != nil {
		return r.ReasonCode, nil
	}
	return 0, err
}

// retainedOf subscribes a fresh client to topic and returns the payload of
// the retained copy it gets, or "" when none arrives before a fence.
func retainedOf(t *testing.T, addr, topic string) string {
	t.Helper()
	c := dial5(t, addr, "probe-"+strings.ReplaceAll(topic, "/", "-"), true, 100)
	c.subscribe(t, topic, 1)
	c.subscribe(t, "fence/"+topic, 1)
	if code, err := c.pub("fence/"+topic, []byte("f"), false); err != nil || code != 0 {
		t.Fatalf("fence publish: %#x %v", code, err)
	}
	got := ""
	for {
		select {
		case m := <-c.msgs:
			if m.Topic == "fence/"+topic {
				return got
			}
			if m.Retain {
				got = string(m.Payload)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no fence within 10s on %s", topic)
		}
	}
}

// drainQueue reads the durable queue through MQTT ($queue/<name>) until a
// fence published on fenceTopic (a topic the queue subscribes to, so the
// fence is queued last) comes out; it returns how often each payload came.
func drainQueue(t *testing.T, addr, name, fenceTopic string) map[string]int {
	t.Helper()
	drain := dial5(t, addr, "drain-"+name, true, 1<<18)
	drain.subscribe(t, "$queue/"+name, 1)
	fence := dial5(t, addr, "fence-"+name, true, 1)
	if c, err := fence.pub(fenceTopic, []byte("fence"), false); err != nil || c != 0 {
		t.Fatalf("fence: %#x %v", c, err)
	}
	got := map[string]int{}
	for {
		select {
		case m := <-drain.msgs:
			if string(m.Payload) == "fence" {
				return got
			}
			got[string(m.Payload)]++
		case <-time.After(30 * time.Second):
			t.Fatalf("no fence from queue %s within 30s; %d drained", name, len(got))
		}
	}
}

// amqpSession opens an AMQP connection (SASL ANONYMOUS), closed at the
// test's end, and a session on it.
func amqpSession(ctx context.Context, t *testing.T, addr string) (*goamqp.Conn, *goamqp.Session) {
	t.Helper()
	conn, err := goamqp.Dial(ctx, "amqp://"+addr, &goamqp.ConnOptions{SASLType: goamqp.SASLTypeAnonymous()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	sess, err := conn.NewSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	return conn, sess
}

// amqpLink is an AMQP sender (go-amqp) over its own connection.
type amqpLink struct{ snd *goamqp.Sender }

func amqpSender(t *testing.T, addr, target string) *amqpLink {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, sess := amqpSession(ctx, t, addr)
	snd, err := sess.NewSender(ctx, target, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &amqpLink{snd}
}

// retained sends body unsettled with x-opt-retain = true and returns the
// outcome.
func (l *amqpLink) retained(t *testing.T, body string) goamqp.DeliveryState {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m := goamqp.NewMessage([]byte(body))
	m.Annotations = goamqp.Annotations{"x-opt-retain": true}
	r, err := l.snd.SendWithReceipt(ctx, m, nil)
	if err != nil {
		t.Fatalf("AMQP send: %v", err)
	}
	st, err := r.Wait(ctx)
	if err != nil {
		t.Fatalf("AMQP outcome: %v", err)
	}
	return st
}

func isAccepted(st goamqp.DeliveryState) bool {
	_, ok := st.(*goamqp.StateAccepted)
	return ok
}

func isRejected(st goamqp.DeliveryState, cond goamqp.ErrCond) bool {
	r, ok := st.(*goamqp.StateRejected)
	return ok && r.Error != nil && r.Error.Condition == cond
}
