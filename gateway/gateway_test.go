package gateway

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func testConfig(t *testing.T, args ...string) *Config {
	t.Helper()
	base := []string{"--mqtt.listen=127.0.0.1:0", "--mqtt.ws.listen=127.0.0.1:0", "--admin.listen=127.0.0.1:0",
		"--amqp.listen=", "--retain.backend=embedded", "--data.dir=" + t.TempDir()}
	c, err := LoadConfig(append(base, args...), nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// mqttClient connects a paho MQTT 5 client to g.
func mqttClient(t *testing.T, g *Gateway, id string) *paho.Client {
	t.Helper()
	return mqttConnect(t, g, &paho.Connect{ClientID: id, CleanStart: true})
}

// mqttConnect connects a paho MQTT 5 client to g with cp.
func mqttConnect(t *testing.T, g *Gateway, cp *paho.Connect) *paho.Client {
	t.Helper()
	conn, err := net.Dial("tcp", g.MQTTAddr())
	if err != nil {
		t.Fatal(err)
	}
	c := paho.NewClient(paho.ClientConfig{Conn: conn})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.Connect(ctx, cp); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Disconnect(&paho.Disconnect{}); <-c.Done() })
	return c
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// Start, serve a client, stop: every goroutine is gone afterwards (goleak
// in TestMain) and Stop is idempotent.
func TestLifecycle(t *testing.T) {
	g := New(testConfig(t), quiet())
	if err := g.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := g.Ready(); err != nil {
		t.Fatalf("not ready after Start: %v", err)
	}
	c := mqttClient(t, g, "life")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.Publish(ctx, &paho.Publish{Topic: "life/state", QoS: 1, Retain: true, Payload: []byte("up")}); err != nil {
		t.Fatal(err)
	}
	// Stop with the client still connected: the gateway disconnects it.
	if err := g.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := g.Stop(ctx); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if g.Ready() == nil {
		t.Fatal("ready after Stop")
	}
}

// When a part fails to start, the parts already started are stopped and
// the error names what failed.
func TestStartFailureStopsStartedParts(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	g := New(testConfig(t, "--mqtt.listen="+busy.Addr().String()), quiet())
	err = g.Start(context.Background())
	if err == nil || !strings.Contains(err.Error(), "mqtt.listen") {
		t.Fatalf("Start with a busy MQTT port: %v", err)
	}
	// The admin API had started; it must be closed again.
	if a := g.AdminAddr(); a != "" {
		if c, err := net.DialTimeout("tcp", a, time.Second); err == nil {
			c.Close()
			t.Fatalf("admin API still listening on %s after a failed start", a)
		}
	}
}

func TestBadRedisURLIsAConfigError(t *testing.T) {
	g := New(testConfig(t, "--retain.backend=redis", "--retain.redis.url=http://nope"), quiet())
	err := g.Start(context.Background())
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Key != "retain.redis.url" {
		t.Fatalf("got %v, want a ConfigError naming retain.redis.url", err)
	}
}

// The topic limits reach the front-ends through the router: a publish over
// --mqtt.maxTopicLevels is refused with PUBACK 0x90.
func TestTopicLimitsReachTheFrontEnds(t *testing.T) {
	g := New(testConfig(t, "--mqtt.maxTopicLevels=3"), quiet())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := g.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer g.Stop(ctx)
	c := mqttClient(t, g, "limits")
	if pr, err := c.Publish(ctx, &paho.Publish{Topic: "a/b/c", QoS: 1, Payload: []byte("x")}); err != nil || pr.ReasonCode >= 0x80 {
		t.Fatalf("3 levels: %+v %v", pr, err)
	}
	if pr, _ := c.Publish(ctx, &paho.Publish{Topic: "a/b/c/d", QoS: 1, Payload: []byte("x")}); pr == nil || pr.ReasonCode != 0x90 {
		t.Fatalf("4 levels: %+v, want PUBACK 0x90", pr)
	}
}
