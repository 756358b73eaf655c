package e2e

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/tolsey/tolsey/core/coretest"
	"github.com/tolsey/tolsey/gateway"
)

// startGateway runs an in-process gateway on free ports with cfg changes
// applied; it stops when the test ends.
func startGateway(t testing.TB, set ...string) *gateway.Gateway {
	t.Helper()
	return startGatewayLog(t, os.Stderr, set...)
}

// startGatewayLog is startGateway with the gateway's log written to w.
func startGatewayLog(t testing.TB, w io.Writer, set ...string) *gateway.Gateway {
	t.Helper()
	args := []string{"--mqtt.listen=127.0.0.1:0", "--mqtt.ws.listen=127.0.0.1:0", "--admin.listen=127.0.0.1:0",
		"--amqp.listen=127.0.0.1:0", "--retain.backend=memory", "--data.dir=" + t.TempDir(), "--node.id=" + t.Name()}
	args = append(args, set...)
	cfg, err := gateway.LoadConfig(args, nil, io.Discard)
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	lvl := slog.LevelWarn
	if os.Getenv("TOLSEY_TEST_DEBUG") != "" {
		lvl = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: lvl}))
	g := gateway.New(cfg, log)
	if err := g.Start(context.Background()); err != nil {
		t.Fatalf("start gateway: %v", err)
	}
	t.Cleanup(func() { stopGateway(t, g) })
	return g
}

func stopGateway(t testing.TB, g *gateway.Gateway) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := g.Stop(ctx); err != nil {
		t.Errorf("stop gateway: %v", err)
	}
}

// client5 is an MQTT 5 client (paho.golang) that collects what it receives.
type client5 struct {
	*paho.Client
	msgs chan *paho.Publish
}

func connect5(t *testing.T, addr, id string, mods ...func(*paho.Connect)) *client5 {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	c := &client5{msgs: make(chan *paho.Publish, 1000)}
	c.Client = paho.NewClient(paho.ClientConfig{
		ClientID: id,
		Conn:     conn,
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(pr paho.PublishReceived) (bool, error) {
			c.msgs <- pr.Packet
			return true, nil
		}},
	})
	cp := &paho.Connect{ClientID: id, CleanStart: true, KeepAlive: 30}
	for _, m := range mods {
		m(cp)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ca, err := c.Connect(ctx, cp)
	if err != nil {
		t.Fatalf("connect %s: %v", id, err)
	}
	if ca.ReasonCode != 0 {
		t.Fatalf("connect %s: reason %#x", id, ca.ReasonCode)
	}
	t.Cleanup(func() { _ = c.Disconnect(&paho.Disconnect{}) })
	return c
}

func (c *client5) subscribe(t *testing.T, opts ...paho.SubscribeOptions) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	sa, err := c.Subscribe(ctx, &paho.Subscribe{Subscriptions: opts})
	if err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	for i, r := range sa.Reasons {
		if r >= 0x80 {
			t.Fatalf("subscribe %q refused: %#x", opts[i].Topic, r)
		}
	}
}

func (c *client5) publish(t *testing.T, p *paho.Publish) *paho.PublishResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := c.Publish(ctx, p)
	if err != nil && r == nil {
		t.Fatalf("publish %s: %v", p.Topic, err)
	}
	return r
}

// next waits for the next message.
func (c *client5) next(t *testing.T) *paho.Publish {
	t.Helper()
	select {
	case m := <-c.msgs:
		return m
	case <-time.After(10 * time.Second):
		t.Fatalf("no message within 10s")
		return nil
	}
}

// until collects messages until one arrives on marker (a topic the test
// publishes last, without retain, as a fence): what came before it is
// everything the gateway sent, so "nothing else arrived" can be asserted
// without sleeping.
func (c *client5) until(t *testing.T, marker string) []*paho.Publish {
	t.Helper()
	var got []*paho.Publish
	for {
		m := c.next(t)
		if m.Topic == marker {
			return got
		}
		got = append(got, m)
	}
}

// retainedOnly drops live (RETAIN=0) copies: mochi fans a QoS 1 publish out
// after its PUBACK, so a subscriber that subscribes right after a publish
// returned may still get that publish live, besides the stored copy.
func retainedOnly(ms []*paho.Publish) []*paho.Publish {
	var out []*paho.Publish
	for _, m := range ms {
		if m.Retain {
			out = append(out, m)
		}
	}
	return out
}

// eventually polls cond until it holds or 15 s pass.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	coretest.Eventually(t, what, 15*time.Second, cond)
}

func httpDo(t *testing.T, method, url string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func topics(ms []*paho.Publish) string {
	var s []string
	for _, m := range ms {
		s = append(s, fmt.Sprintf("%s=%s(r%v)", m.Topic, m.Payload, m.Retain))
	}
	return strings.Join(s, ",")
}
