package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	pahov3 "github.com/eclipse/paho.mqtt.golang"

	"github.com/tolsey/tolsey/gateway"
)

func TestQuotaExceededStillDeliversLive(t *testing.T) {
	g := startGateway(t, "--retain.maxMessages=1", "--retain.maxPayload=8")
	sub := connect5(t, g.MQTTAddr(), "sub")
	sub.subscribe(t, paho.SubscribeOptions{Topic: "q/#", QoS: 1})
	pub := connect5(t, g.MQTTAddr(), "pub")
	if r := pub.publish(t, &paho.Publish{Topic: "q/1", QoS: 1, Retain: true, Payload: []byte("a")}); r.ReasonCode != 0 {
		t.Fatalf("first retained: PUBACK %#x, want 0", r.ReasonCode)
	}
	if r := pub.publish(t, &paho.Publish{Topic: "q/2", QoS: 1, Retain: true, Payload: []byte("b")}); r.ReasonCode != 0x97 {
		t.Fatalf("retained over maxMessages: PUBACK %#x, want 0x97", r.ReasonCode)
	}
	if r := pub.publish(t, &paho.Publish{Topic: "q/1", QoS: 1, Retain: true, Payload: []byte("too long!")}); r.ReasonCode != 0x97 {
		t.Fatalf("retained over maxPayload: PUBACK %#x, want 0x97", r.ReasonCode)
	}
	if r := pub.publish(t, &paho.Publish{Topic: "q/1", QoS: 1, Retain: true, Payload: []byte("c")}); r.ReasonCode != 0 {
		t.Fatalf("replacing the held topic at the limit: PUBACK %#x, want 0", r.ReasonCode)
	}
	var got []string
	for range 4 {
		got = append(got, string(sub.next(t).Payload))
	}
	if strings.Join(got, ",") != "a,b,too long!,c" {
		t.Fatalf("live deliveries %v; every publish must be delivered live even when not retained", got)
	}
	m, err := g.Store().Get(t.Context(), "q/1")
	if err != nil || m == nil || string(m.Payload) != "c" {
		t.Fatalf("stored q/1 = %v, %v", m, err)
	}
	if m, _ := g.Store().Get(t.Context(), "q/2"); m != nil {
		t.Fatalf("q/2 stored despite quota")
	}
	_, body := httpDo(t, "GET", "http://"+g.AdminAddr()+"/metrics")
	if !strings.Contains(body, `tolsey_retained_refused_total{reason="quota"} 2`) {
		t.Fatalf("metrics do not count the 2 refusals:\n%s", grep(body, "refused"))
	}
}

func TestMQTT311RetainAndWebSocket(t *testing.T) {
	g := startGateway(t)
	for _, url := range []string{"tcp://" + g.MQTTAddr(), "ws://" + g.MQTTWSAddr() + "/mqtt"} {
		t.Run(strings.SplitN(url, ":", 2)[0], func(t *testing.T) {
			topic := "v3/" + strings.SplitN(url, ":", 2)[0]
			live := make(chan pahov3.Message, 10)
			c1 := connect3(t, url, "v3sub-"+topic)
			if tok := c1.Subscribe(topic, 1, func(_ pahov3.Client, m pahov3.Message) { live <- m }); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
				t.Fatalf("subscribe: %v", tok.Error())
			}
			c2 := connect3(t, url, "v3pub-"+topic)
			if tok := c2.Publish(topic, 1, true, "hello"); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
				t.Fatalf("publish: %v", tok.Error())
			}
			m := recv3(t, live)
			if m.Retained() || string(m.Payload()) != "hello" {
				t.Fatalf("existing 3.1.1 subscriber: retained=%v payload=%q", m.Retained(), m.Payload())
			}
			late := make(chan pahov3.Message, 10)
			c3 := connect3(t, url, "v3late-"+topic)
			if tok := c3.Subscribe(topic, 1, func(_ pahov3.Client, m pahov3.Message) { late <- m }); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
				t.Fatalf("subscribe: %v", tok.Error())
			}
			if m := recv3(t, late); !m.Retained() || string(m.Payload()) != "hello" {
				t.Fatalf("late 3.1.1 subscriber: retained=%v payload=%q", m.Retained(), m.Payload())
			}
		})
	}
}

func connect3(t *testing.T, url, id string) pahov3.Client {
	t.Helper()
	o := pahov3.NewClientOptions().AddBroker(url).SetClientID(id).SetProtocolVersion(4).SetAutoReconnect(false)
	c := pahov3.NewClient(o)
	if tok := c.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("connect %s: %v", url, tok.Error())
	}
	t.Cleanup(func() { c.Disconnect(100) })
	return c
}

func recv3(t *testing.T, ch chan pahov3.Message) pahov3.Message {
	t.Helper()
	select {
	case m := <-ch:
		return m
	case <-time.After(10 * time.Second):
		t.Fatal("no message within 10s")
		return nil
	}
}

func TestAdminAPI(t *testing.T) {
	g := startGateway(t)
	base := "http://" + g.AdminAddr()
	if code, body := httpDo(t, "GET", base+"/healthz"); code != 200 {
		t.Fatalf("/healthz %d %s", code, body)
	}
	if code, body := httpDo(t, "GET", base+"/readyz"); code != 200 {
		t.Fatalf("/readyz %d %s", code, body)
	}
	pub := connect5(t, g.MQTTAddr(), "pub")
	for i := range 5 {
		pub.publish(t, &paho.Publish{Topic: fmt.Sprintf("site/%d/temp", i), QoS: 1, Retain: true, Payload: []byte{byte('0' + i)}})
	}
	pub.publish(t, &paho.Publish{Topic: "site/bin", QoS: 1, Retain: true, Payload: []byte{0xff, 0x00}})
	code, body := httpDo(t, "GET", base+"/api/v1/retained?filter="+urlq("site/+/temp"))
	var list []map[string]any
	if code != 200 || json.Unmarshal([]byte(body), &list) != nil || len(list) != 5 {
		t.Fatalf("GET retained: %d %s", code, body)
	}
	code, body = httpDo(t, "GET", base+"/api/v1/retained?filter=site/bin")
	if code != 200 || !strings.Contains(body, `"payloadBase64":"/wA="`) {
		t.Fatalf("binary payload: %d %s", code, body)
	}
	if code, body := httpDo(t, "GET", base+"/api/v1/retained?filter="+urlq("a/#/b")); code != 400 {
		t.Fatalf("bad filter: %d %s", code, body)
	}
	if code, body := httpDo(t, "DELETE", base+"/api/v1/retained"); code != 400 {
		t.Fatalf("missing filter: %d %s", code, body)
	}
	code, body = httpDo(t, "DELETE", base+"/api/v1/retained?filter="+urlq("site/+/temp"))
	if code != 200 || strings.TrimSpace(body) != `{"deleted":5}` {
		t.Fatalf("DELETE wildcard: %d %s", code, body)
	}
	code, body = httpDo(t, "DELETE", base+"/api/v1/retained?filter=site/bin")
	if code != 200 || strings.TrimSpace(body) != `{"deleted":1}` {
		t.Fatalf("DELETE exact: %d %s", code, body)
	}
	if n := g.Store().Stats().Count; n != 0 {
		t.Fatalf("store holds %d after deleting all", n)
	}
	_, body = httpDo(t, "GET", base+"/metrics")
	for _, want := range []string{"tolsey_messages_in_total{protocol=\"mqtt\"} 6", "tolsey_retained_messages 0", "tolsey_connections{protocol=\"mqtt\"} 1"} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q:\n%s", want, grep(body, "gateway_"))
		}
	}
}

func urlq(s string) string {
	return strings.NewReplacer("#", "%23", "+", "%2B", "$", "%24").Replace(s)
}

func grep(body, sub string) string {
	var out []string
	for _, l := range strings.Split(body, "\n") {
		if strings.Contains(l, sub) && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func TestEmbeddedSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	start := func() *gateway.Gateway {
		cfg, err := gateway.LoadConfig([]string{"--mqtt.listen=127.0.0.1:0", "--admin.listen=", "--amqp.listen=",
			"--retain.backend=embedded", "--data.dir=" + dir}, nil, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		g := gateway.New(cfg, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
		if err := g.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		return g
	}
	g := start()
	pub := connect5(t, g.MQTTAddr(), "pub")
	pub.publish(t, &paho.Publish{Topic: "keep/me", QoS: 1, Retain: true, Payload: []byte("durable"),
		Properties: &paho.PublishProperties{ContentType: "text/plain", User: paho.UserProperties{{Key: "unit", Value: "C"}}}})
	_ = pub.Disconnect(&paho.Disconnect{})
	stopGateway(t, g)

	g = start()
	t.Cleanup(func() { stopGateway(t, g) })
	late := connect5(t, g.MQTTAddr(), "late")
	late.subscribe(t, paho.SubscribeOptions{Topic: "keep/#", QoS: 1})
	m := late.next(t)
	if !m.Retain || string(m.Payload) != "durable" || m.Properties.ContentType != "text/plain" || m.Properties.User.Get("unit") != "C" {
		t.Fatalf("after restart: retain=%v payload=%q props=%+v", m.Retain, m.Payload, m.Properties)
	}
}
