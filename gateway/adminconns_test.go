package gateway

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"
	"github.com/eclipse/paho.golang/paho"
)

// TestAdminConnections: GET /api/v1/connections lists an MQTT 5 client
// (version, user, subscriptions, keep alive) and an AMQP connection
// (container id); the filters and paging narrow it; GET of one shows an
// MQTT connection's filters; DELETE ends the MQTT one with DISCONNECT
// 0x98 (its session kept) and the AMQP one with amqp:connection:forced.
func TestAdminConnections(t *testing.T) {
	g := startGateway(t, "--data.dir="+t.TempDir(), "--amqp.listen=127.0.0.1:0")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	conn, err := net.Dial("tcp", g.MQTTAddr())
	if err != nil {
		t.Fatal(err)
	}
	disc := make(chan byte, 1)
	mc := paho.NewClient(paho.ClientConfig{Conn: conn, OnServerDisconnect: func(d *paho.Disconnect) { disc <- d.ReasonCode }})
	expiry := uint32(3600)
	if ca, err := mc.Connect(ctx, &paho.Connect{ClientID: "dev-1", CleanStart: true, KeepAlive: 30,
		Username: "alice", UsernameFlag: true, Properties: &paho.ConnectProperties{SessionExpiryInterval: &expiry}}); err != nil || ca.ReasonCode != 0 {
		t.Fatalf("connect: %v %+v", err, ca)
	}
	if _, err := mc.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "a/#", QoS: 1}, {Topic: "b/+", QoS: 0}}}); err != nil {
		t.Fatal(err)
	}
	ac, err := goamqp.Dial(ctx, "amqp://"+g.AMQPAddr(), &goamqp.ConnOptions{ContainerID: "jms-app", SASLType: goamqp.SASLTypeAnonymous()})
	if err != nil {
		t.Fatal(err)
	}
	defer ac.Close()
	as, err := ac.NewSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}

	list := decode[[]connJSON](t, mustCall(t, g, "GET", "/api/v1/connections", http.StatusOK))
	if len(list) != 2 || list[0].Protocol != "amqp" || list[1].ID != "mqtt:dev-1" {
		t.Fatalf("connections: %+v", list)
	}
	a, m := list[0], list[1]
	if a.ClientID != "jms-app" || a.Version != "1.0" || a.ConnectedSince == nil || !strings.HasPrefix(a.ID, "amqp:") {
		t.Errorf("the AMQP connection: %+v", a)
	}
	if m.Version != "5" || m.User != "alice" || *m.Subscriptions != 2 || *m.KeepAlive != 30 || m.Remote == "" {
		t.Errorf("the MQTT connection: %+v", m)
	}
	for q, want := range map[string]int{"protocol=mqtt": 1, "protocol=amqp": 1, "clientId=dev": 1, "clientId=x": 0,
		"user=alice": 1, "address=127.0.0.1": 2, "address=10.": 0, "limit=1": 1, "after=" + a.ID: 1} {
		if got := decode[[]connJSON](t, mustCall(t, g, "GET", "/api/v1/connections?"+q, http.StatusOK)); len(got) != want {
			t.Errorf("?%s: %d connections, want %d", q, len(got), want)
		}
	}
	mustCall(t, g, "GET", "/api/v1/connections?protocol=stomp", http.StatusBadRequest)
	one := decode[connJSON](t, mustCall(t, g, "GET", "/api/v1/connections/mqtt:dev-1", http.StatusOK))
	if strings.Join(one.Filters, ",") != "a/#,b/+" {
		t.Errorf("GET of one: filters %v", one.Filters)
	}
	mustCall(t, g, "GET", "/api/v1/connections/mqtt:nobody", http.StatusNotFound)

	mustCall(t, g, "DELETE", "/api/v1/connections/mqtt:dev-1", http.StatusNoContent)
	select {
	case rc := <-disc:
		if rc != 0x98 {
			t.Errorf("DISCONNECT %#x, want 0x98 (administrative action)", rc)
		}
	case <-ctx.Done():
		t.Fatal("no DISCONNECT")
	}
	if body := mustCall(t, g, "GET", "/api/v1/sessions", http.StatusOK); !strings.Contains(body, `"dev-1"`) {
		t.Errorf("the session went with the connection: %s", body)
	}
	mustCall(t, g, "DELETE", "/api/v1/connections/"+a.ID, http.StatusNoContent)
	_, err = as.NewReceiver(ctx, "x/y", nil)
	var ce *goamqp.ConnError
	if !errors.As(err, &ce) || ce.RemoteErr == nil || ce.RemoteErr.Condition != goamqp.ErrCondConnectionForced {
		t.Errorf("after DELETE the AMQP client saw %v, want amqp:connection:forced", err)
	}
	mustCall(t, g, "DELETE", "/api/v1/connections/"+a.ID, http.StatusNotFound)
	mustCall(t, g, "DELETE", "/api/v1/connections/amqp:x", http.StatusNotFound)
}
