package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"
	"github.com/eclipse/paho.golang/paho"
	dto "github.com/prometheus/client_model/go"

	"github.com/tolsey/tolsey/core/coretest"
	"github.com/tolsey/tolsey/core/tlsconf/tlstest"
)

// limits.maxConnections is one total over both protocols: with 2, an MQTT
// and an AMQP connection fill it, and a third client of either protocol is
// refused in its protocol's words; one freed slot admits again.
func TestConnectionLimitSpansProtocols(t *testing.T) {
	g := New(testConfig(t, "--amqp.listen=127.0.0.1:0", "--limits.maxConnections=2", "--mqtt.maxSubscriptions=1"), quiet())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := g.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer g.Stop(ctx)

	m := mqttClient(t, g, "one")
	a, err := goamqp.Dial(ctx, "amqp://"+g.AMQPAddr(), &goamqp.ConnOptions{SASLType: goamqp.SASLTypeAnonymous()})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()

	conn, err := net.Dial("tcp", g.MQTTAddr())
	if err != nil {
		t.Fatal(err)
	}
	c := paho.NewClient(paho.ClientConfig{Conn: conn})
	if ca, err := c.Connect(ctx, &paho.Connect{ClientID: "three", CleanStart: true}); err == nil || ca == nil || ca.ReasonCode != 0x97 {
		t.Fatalf("a third client over MQTT: %v %v, want CONNACK 0x97", ca, err)
	}
	a2, err := goamqp.Dial(ctx, "amqp://"+g.AMQPAddr(), nil)
	if err == nil {
		_, err = a2.NewSession(ctx, nil)
		a2.Close()
	}
	var ce *goamqp.ConnError
	if !errors.As(err, &ce) || ce.RemoteErr == nil || ce.RemoteErr.Condition != goamqp.ErrCondResourceLimitExceeded {
		t.Fatalf("a third client over AMQP: %v, want amqp:resource-limit-exceeded", err)
	}
	for _, p := range []string{"mqtt", "amqp"} {
		var v dto.Metric
		if err := g.metrics.ConnsRefused.WithLabelValues(p, "max_connections").Write(&v); err != nil || v.GetCounter().GetValue() != 1 {
			t.Errorf("tolsey_connections_refused_total{protocol=%s,reason=max_connections} = %v, want 1", p, v.GetCounter().GetValue())
		}
	}

	// mqtt.maxSubscriptions reaches the front-end.
	sa, _ := m.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "a"}, {Topic: "b"}}})
	if sa == nil || len(sa.Reasons) != 2 || sa.Reasons[1] != 0x97 {
		t.Fatalf("two filters with mqtt.maxSubscriptions=1: %+v", sa)
	}

	a.Close()
	coretest.Eventually(t, "the AMQP connection's slot to be freed", 10*time.Second, func() bool { return g.admission.Open() == 1 })
	mqttClient(t, g, "again")
}

func TestConfigLimits(t *testing.T) {
	c := DefaultConfig()
	if c.Limits != (LimitsConfig{SendBuffer: 256 << 10}) || c.MQTT.MaxSubscriptions != 10000 {
		t.Fatalf("defaults: %+v, mqtt.maxSubscriptions %d", c.Limits, c.MQTT.MaxSubscriptions)
	}
	c, err := LoadConfig([]string{"--limits.connectRate=0.5", "--limits.connectBurst=3", "--limits.maxConnections=100",
		"--limits.maxConnectionsPerAddress=10"}, nil, nil)
	if err != nil || c.Limits != (LimitsConfig{MaxConnections: 100, MaxPerAddress: 10, ConnectRate: 0.5, ConnectBurst: 3, SendBuffer: 256 << 10}) {
		t.Fatalf("%v %+v", err, c)
	}
	for _, tc := range []struct {
		args []string
		key  string
	}{
		{[]string{"--limits.maxConnections=-1"}, "limits.maxConnections"},
		{[]string{"--limits.maxConnections=lots"}, "limits.maxConnections"},
		{[]string{"--limits.maxConnectionsPerAddress=1.5"}, "limits.maxConnectionsPerAddress"},
		{[]string{"--limits.connectRate=-2"}, "limits.connectRate"},
		{[]string{"--limits.connectRate=fast"}, "limits.connectRate"},
		{[]string{"--limits.connectRate=NaN"}, "limits.connectRate"},
		{[]string{"--limits.connectBurst=5"}, "limits.connectBurst"}, // without a rate
		{[]string{"--mqtt.maxSubscriptions=-1"}, "mqtt.maxSubscriptions"},
	} {
		wantConfigError(t, tc.args, nil, tc.key, "")
	}
}

// The TLS listeners count in the same total, and a refusal reaches the
// client through TLS: MQTT TLS CONNACK 0x97, AMQPS close
// amqp:resource-limit-exceeded.
func TestConnectionLimitCountsTLS(t *testing.T) {
	f := newTLSFixture(t)
	g := New(testConfig(t, append(f.args("none"), "--limits.maxConnections=2")...), quiet())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := g.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer g.Stop(ctx)
	cfg := tlstest.ClientConfig(f.ca, nil)
	if _, _, err := mqttTLS(t, g.MQTTTLSAddr(), "tls-one", cfg); err != nil {
		t.Fatal(err)
	}
	a, err := goamqp.Dial(ctx, "amqps://"+g.AMQPTLSAddr(), &goamqp.ConnOptions{TLSConfig: cfg, SASLType: goamqp.SASLTypeAnonymous()})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()

	conn, err := tls.Dial("tcp", g.MQTTTLSAddr(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := paho.NewClient(paho.ClientConfig{Conn: conn})
	if ca, err := c.Connect(ctx, &paho.Connect{ClientID: "tls-three", CleanStart: true}); err == nil || ca == nil || ca.ReasonCode != 0x97 {
		t.Fatalf("a third client over MQTT TLS: %v %v, want CONNACK 0x97", ca, err)
	}
	a2, err := goamqp.Dial(ctx, "amqps://"+g.AMQPTLSAddr(), &goamqp.ConnOptions{TLSConfig: cfg})
	if err == nil {
		_, err = a2.NewSession(ctx, nil)
		a2.Close()
	}
	var ce *goamqp.ConnError
	if !errors.As(err, &ce) || ce.RemoteErr == nil || ce.RemoteErr.Condition != goamqp.ErrCondResourceLimitExceeded {
		t.Fatalf("a third client over AMQPS: %v, want amqp:resource-limit-exceeded", err)
	}
}
