// Package console tests the web console (gateway/console) in a real
// browser: Debian's headless chromium driven by playwright-core
// (console.mjs), against an in-process gateway with real clients.
//
// test/run installs both (apt-get install chromium; npm ci here). Run it
// alone with
//
//	go test -count=1 ./test/console
//
// and with TOLSEY_CONSOLE_README=1 it also writes docs/console.png, the
// README's screenshot of the overview under traffic.
package console

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"
	"github.com/eclipse/paho.golang/paho"
	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"

	"github.com/tolsey/tolsey/core"
	"github.com/tolsey/tolsey/core/coretest"
	"github.com/tolsey/tolsey/gateway"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// chromium is the browser the script drives: $CHROMIUM, or Debian's.
func chromium(t *testing.T) string {
	t.Helper()
	for _, p := range []string{os.Getenv("CHROMIUM"), "/usr/bin/chromium", "/usr/bin/chromium-browser"} {
		if p == "" {
			continue
		}
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	t.Fatal("no chromium: install Debian's (apt-get install chromium; test/run does) or set CHROMIUM")
	return ""
}

// TestConsoleInBrowser opens every page of the console against a gateway
// with real traffic and checks what they show and do (console.mjs says
// each step); what the browser did to the clients is checked here: the
// disconnected client got DISCONNECT 0x98, the subscriber got the form's
// message, the retained messages deleted in the browser are gone.
func TestConsoleInBrowser(t *testing.T) {
	browser := chromium(t)
	if _, err := os.Stat("node_modules/playwright-core"); err != nil {
		t.Fatal("no playwright-core: run (cd test/console && npm ci); test/run does")
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Fatal("no node: install nodejs (test/run needs it for the JavaScript clients too)")
	}

	raw := make([]byte, 24)
	_, _ = rand.Read(raw)
	token := hex.EncodeToString(raw)
	sum := sha256.Sum256([]byte(token))
	// A NATS bridge carrying the sensors out, for the bridges page.
	ns := startNATS(t)
	bridged := make(chan *nats.Msg, 1000)
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := nc.ChanSubscribe("iot.sensors.>", bridged); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	g := startGateway(t, "--admin.tokens=sha256:"+hex.EncodeToString(sum[:]),
		`--queues.declare=[{"name":"orders","subscriptions":["orders/#"]}]`,
		"--bridge.nats.url="+ns.ClientURL(), "--bridge.nats.name=console-edge",
		`--bridge.nats.rules=[{"direction":"out","local":"sensors/#","remote":"iot.sensors.>"}]`)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// The client the browser finds and disconnects.
	disc := make(chan byte, 1)
	dev := connect(t, g, "console-dev", func(d *paho.Disconnect) { disc <- d.ReasonCode }, nil)
	subscribe(t, dev, "devices/console-dev/cmd/#")
	// The subscriber of the publish form's message.
	got := make(chan *paho.Publish, 100)
	listener := connect(t, g, "console-listener", nil, got)
	subscribe(t, listener, "console/#")
	// A dashboard of the sensors, for the overview's messages out.
	subscribe(t, connect(t, g, "dashboard", nil, nil), "sensors/#")
	// A session kept for a client that went away, holding one message.
	expiry := uint32(3600)
	sleeper := connect(t, g, "console-sleeper", nil, nil, &paho.ConnectProperties{SessionExpiryInterval: &expiry})
	subscribe(t, sleeper, "alerts/#")
	_ = sleeper.Disconnect(&paho.Disconnect{})
	<-sleeper.Done()
	// Retained messages, JSON and binary; three in the queue.
	feed := connect(t, g, "sensor-feed", nil, nil)
	publish(t, feed, &paho.Publish{Topic: "alerts/fire", QoS: 1, Payload: []byte("drill")})
	publish(t, feed, &paho.Publish{Topic: "sensors/room1/temp", Retain: true, QoS: 1, Payload: []byte(`{"celsius":21.5}`),
		Properties: &paho.PublishProperties{ContentType: "application/json"}})
	publish(t, feed, &paho.Publish{Topic: "sensors/room1/raw", Retain: true, QoS: 1, Payload: []byte{0, 1, 2, 0xfe, 0xff}})
	publish(t, feed, &paho.Publish{Topic: "site/config", Retain: true, QoS: 1, Payload: []byte("mode=normal")})
	for range 3 {
		publish(t, feed, &paho.Publish{Topic: "orders/new", QoS: 1, Payload: []byte(`{"order":1}`)})
	}
	// An AMQP application, so that the overview has both protocols.
	ac, err := goamqp.Dial(ctx, "amqp://"+g.AMQPAddr(), &goamqp.ConnOptions{ContainerID: "console-amqp-app", SASLType: goamqp.SASLTypeAnonymous()})
	if err != nil {
		t.Fatal(err)
	}
	defer ac.Close()
	as, err := ac.NewSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := as.NewReceiver(ctx, "console/amqp/#", &goamqp.ReceiverOptions{Name: "console-link", Credit: 10}); err != nil {
		t.Fatal(err)
	}

	// Steady traffic while the browser looks, for the rates and charts.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			p := &paho.Publish{Topic: "sensors/room" + string(rune('2'+i%3)) + "/temp", Payload: []byte(`{"celsius":20}`)}
			if _, err := feed.Publish(ctx, p); err != nil {
				return
			}
		}
	}()
	defer func() { close(stop); wg.Wait() }()

	shots := os.Getenv("TOLSEY_CONSOLE_SHOTS")
	if shots == "" {
		shots = t.TempDir()
		// A failure's screenshots (failure.png among them) outlive the
		// test's temporary directory; the log says where.
		t.Cleanup(func() {
			if !t.Failed() {
				return
			}
			if keep, err := os.MkdirTemp("", "tolsey-console-"); err == nil && os.CopyFS(keep, os.DirFS(shots)) == nil {
				t.Logf("screenshots kept in %s", keep)
			}
		})
	}
	env := append(os.Environ(), "CONSOLE_URL=http://"+g.AdminAddr()+"/", "CONSOLE_TOKEN="+token,
		"CHROMIUM="+browser, "CONSOLE_SHOTS="+shots)
	if os.Getenv("TOLSEY_CONSOLE_README") != "" {
		abs, _ := filepath.Abs("../../docs/console.png")
		env = append(env, "CONSOLE_README_SHOT="+abs)
	}
	cmd := exec.CommandContext(ctx, "node", "console.mjs")
	cmd.Env = env
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	t.Logf("console.mjs:\n%s", out.String())
	if err != nil {
		t.Fatalf("the browser script failed: %v", err)
	}

	select {
	case rc := <-disc:
		if rc != 0x98 {
			t.Errorf("console-dev was disconnected with %#x, want 0x98 (administrative action)", rc)
		}
	default:
		t.Error("console-dev got no DISCONNECT from the console's Disconnect")
	}
	deadline := time.After(10 * time.Second)
	for found := false; !found; {
		select {
		case p := <-got:
			found = p.Topic == "console/greeting" && string(p.Payload) == "hello from the browser"
		case <-deadline:
			t.Fatal("the subscriber of console/# did not get the publish form's message")
		}
	}
	var left []string
	if err := g.Store().Match(ctx, "sensors/#", func(m *core.Message) bool {
		left = append(left, m.Topic)
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Errorf("retained messages the console deleted are still there: %v", left)
	}
	req, _ := http.NewRequest("GET", "http://"+g.AdminAddr()+"/api/v1/sessions", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || strings.Contains(string(body), "console-sleeper") {
		t.Errorf("the session deleted in the browser: %d %s", resp.StatusCode, body)
	}
	q, ok := g.Queues().Queue("orders")
	if !ok {
		t.Fatal("queue orders is gone")
	}
	coretest.Eventually(t, "orders purged", 5*time.Second, func() bool { return q.Info().Messages == 0 })
	if len(bridged) == 0 {
		t.Error("the NATS subscriber of iot.sensors.> got nothing through the bridge the browser showed")
	}
	if _, ok := g.Queues().Queue("browser-q"); ok {
		t.Error("queue browser-q, created and deleted in the browser, is still there")
	}
}

// startNATS runs an in-process NATS server on a free loopback port until
// the test ends.
func startNATS(t *testing.T) *natsserver.Server {
	t.Helper()
	s, err := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatalf("nats server: %v", err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server not ready")
	}
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	return s
}

func startGateway(t *testing.T, set ...string) *gateway.Gateway {
	t.Helper()
	args := append([]string{"--mqtt.listen=127.0.0.1:0", "--mqtt.ws.listen=", "--admin.listen=127.0.0.1:0",
		"--amqp.listen=127.0.0.1:0", "--retain.backend=embedded", "--data.dir=" + t.TempDir(), "--node.id=edge-1"}, set...)
	cfg, err := gateway.LoadConfig(args, nil, io.Discard)
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	g := gateway.New(cfg, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err := g.Start(context.Background()); err != nil {
		t.Fatalf("start gateway: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := g.Stop(ctx); err != nil {
			t.Errorf("stop gateway: %v", err)
		}
	})
	return g
}

// connect is a paho MQTT 5 client; onDisc hears a server's DISCONNECT,
// msgs gets what it receives.
func connect(t *testing.T, g *gateway.Gateway, id string, onDisc func(*paho.Disconnect), msgs chan *paho.Publish, props ...*paho.ConnectProperties) *paho.Client {
	t.Helper()
	conn, err := net.Dial("tcp", g.MQTTAddr())
	if err != nil {
		t.Fatal(err)
	}
	cfg := paho.ClientConfig{ClientID: id, Conn: conn, OnServerDisconnect: onDisc}
	if msgs != nil {
		cfg.OnPublishReceived = []func(paho.PublishReceived) (bool, error){func(pr paho.PublishReceived) (bool, error) {
			msgs <- pr.Packet
			return true, nil
		}}
	}
	c := paho.NewClient(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cp := &paho.Connect{ClientID: id, CleanStart: true, KeepAlive: 30}
	if len(props) > 0 {
		cp.Properties = props[0]
	}
	if ca, err := c.Connect(ctx, cp); err != nil || ca.ReasonCode != 0 {
		t.Fatalf("connect %s: %v %+v", id, err, ca)
	}
	t.Cleanup(func() { _ = c.Disconnect(&paho.Disconnect{}); <-c.Done() })
	return c
}

func subscribe(t *testing.T, c *paho.Client, filter string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: filter, QoS: 1}}}); err != nil {
		t.Fatal(err)
	}
}

func publish(t *testing.T, c *paho.Client, p *paho.Publish) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.Publish(ctx, p); err != nil {
		t.Fatalf("publish %s: %v", p.Topic, err)
	}
}
