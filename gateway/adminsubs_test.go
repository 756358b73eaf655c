package gateway

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"
	"github.com/eclipse/paho.golang/paho"

	"github.com/tolsey/tolsey/core/coretest"
)

// TestAdminConnectionCountersAndSubscriptions: each connection counts the
// messages and bytes it sent and received; GET of one lists an MQTT
// connection's subscriptions and an AMQP connection's links with their
// credit; GET /api/v1/subscriptions lists both protocols' subscriptions
// (a shared MQTT one with its group, an AMQP receiving link by its source
// address) and narrows them by filter, client and protocol.
func TestAdminConnectionCountersAndSubscriptions(t *testing.T) {
	g := startGateway(t, "--data.dir="+t.TempDir(), "--amqp.listen=127.0.0.1:0")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	got := make(chan string, 16)
	mc, as := bothClients(ctx, t, g, paho.ClientConfig{OnPublishReceived: []func(paho.PublishReceived) (bool, error){
		func(p paho.PublishReceived) (bool, error) { got <- p.Packet.Topic; return true, nil },
	}}, "dev-1", "jms-app", "a/#", "$share/g/b/+")
	recv, err := as.NewReceiver(ctx, "a/#", &goamqp.ReceiverOptions{Credit: 50})
	if err != nil {
		t.Fatal(err)
	}
	snd, err := as.NewSender(ctx, "a/z", nil)
	if err != nil {
		t.Fatal(err)
	}

	for i := range 3 {
		if _, err := mc.Publish(ctx, &paho.Publish{Topic: fmt.Sprintf("a/%d", i), QoS: 1, Payload: []byte("hello")}); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		if err := snd.Send(ctx, goamqp.NewMessage([]byte("from amqp")), nil); err != nil {
			t.Fatal(err)
		}
	}
	for range 5 {
		select {
		case <-got:
		case <-ctx.Done():
			t.Fatal("the MQTT subscriber did not get its 5 messages")
		}
		if _, err := recv.Receive(ctx, nil); err != nil {
			t.Fatal(err)
		}
	}

	// The counters are added after the writes: poll until they show.
	var m, a connJSON
	coretest.Eventually(t, "the counters of both connections", 10*time.Second, func() bool {
		list := decode[[]connJSON](t, mustCall(t, g, "GET", "/api/v1/connections", http.StatusOK))
		if len(list) != 2 {
			t.Fatalf("connections: %+v", list)
		}
		a, m = list[0], list[1]
		return m.MessagesIn == 3 && m.MessagesOut == 5 && a.MessagesIn == 2 && a.MessagesOut == 5
	})
	if m.ConnectedSince == nil || time.Since(*m.ConnectedSince) > time.Minute {
		t.Errorf("MQTT connectedSince %v", m.ConnectedSince)
	}
	// At least the topic and payload of each message, besides the
	// CONNECT, SUBSCRIBE and acknowledgements.
	if m.BytesIn < 3*8 || m.BytesOut < 5*8 || a.BytesIn < 2*9 || a.BytesOut < 5*5 { // topic and payload of each
		t.Errorf("bytes: MQTT in %d out %d, AMQP in %d out %d", m.BytesIn, m.BytesOut, a.BytesIn, a.BytesOut)
	}
	if a.Links == nil || *a.Links != 2 {
		t.Errorf("AMQP links: %v", a.Links)
	}

	one := decode[connJSON](t, mustCall(t, g, "GET", "/api/v1/connections/mqtt:dev-1", http.StatusOK))
	if len(one.SubscriptionList) != 2 || one.SubscriptionList[0].Filter != "b/+" || one.SubscriptionList[0].ShareGroup != "g" ||
		one.SubscriptionList[1].Filter != "a/#" || one.SubscriptionList[1].QoS != 1 {
		t.Errorf("GET of the MQTT connection: subscriptions %+v", one.SubscriptionList)
	}
	two := decode[connJSON](t, mustCall(t, g, "GET", "/api/v1/connections/"+a.ID, http.StatusOK))
	if len(two.LinkList) != 2 {
		t.Fatalf("GET of the AMQP connection: links %+v", two.LinkList)
	}
	// Sorted by role: the client's receiver first.
	r, s := two.LinkList[0], two.LinkList[1]
	if r.Role != "receiver" || r.Address != "a/#" || r.Credit != 45 || s.Role != "sender" || s.Address != "a/z" || s.Credit == 0 {
		t.Errorf("GET of the AMQP connection: links %+v", two.LinkList)
	}

	subs := decode[[]subJSON](t, mustCall(t, g, "GET", "/api/v1/subscriptions", http.StatusOK))
	var ids []string
	for _, s := range subs {
		ids = append(ids, s.ID)
	}
	want := []string{a.ID + " a/# " + r.Name, "mqtt:dev-1 $share/g/b/+", "mqtt:dev-1 a/#"}
	if strings.Join(ids, "|") != strings.Join(want, "|") {
		t.Fatalf("subscriptions %q, want %q", ids, want)
	}
	if subs[0].Protocol != "amqp" || subs[0].ClientID != "jms-app" || subs[0].Connection != a.ID || subs[1].ShareGroup != "g" || subs[1].Filter != "b/+" {
		t.Errorf("subscriptions: %+v", subs)
	}
	for q, want := range map[string]int{"filter=a/%23": 2, "filter=b/%2B": 1, "filter=x": 0, "protocol=amqp": 1, "protocol=mqtt": 2,
		"clientId=dev": 2, "clientId=jms": 1, "limit=1": 1, "after=" + url.QueryEscape(want[1]): 1} {
		if got := decode[[]subJSON](t, mustCall(t, g, "GET", "/api/v1/subscriptions?"+q, http.StatusOK)); len(got) != want {
			t.Errorf("?%s: %d subscriptions, want %d", q, len(got), want)
		}
	}
	mustCall(t, g, "GET", "/api/v1/subscriptions?protocol=stomp", http.StatusBadRequest)
}

// bothClients connects an MQTT 5 client of cfg (its Conn dialled here) as
// id, subscribed to filters (the first at QoS 1), and opens an AMQP
// session as containerID (amqpSession); both close when the test ends.
func bothClients(ctx context.Context, t *testing.T, g *Gateway, cfg paho.ClientConfig, id, containerID string, filters ...string) (*paho.Client, *goamqp.Session) {
	t.Helper()
	conn, err := net.Dial("tcp", g.MQTTAddr())
	if err != nil {
		t.Fatal(err)
	}
	cfg.Conn = conn
	mc := paho.NewClient(cfg)
	if ca, err := mc.Connect(ctx, &paho.Connect{ClientID: id, CleanStart: true, KeepAlive: 30}); err != nil || ca.ReasonCode != 0 {
		t.Fatalf("connect: %v %+v", err, ca)
	}
	t.Cleanup(func() { _ = mc.Disconnect(&paho.Disconnect{}) })
	if len(filters) > 0 {
		var subs []paho.SubscribeOptions
		for i, f := range filters {
			qos := byte(0)
			if i == 0 {
				qos = 1
			}
			subs = append(subs, paho.SubscribeOptions{Topic: f, QoS: qos})
		}
		if _, err := mc.Subscribe(ctx, &paho.Subscribe{Subscriptions: subs}); err != nil {
			t.Fatal(err)
		}
	}
	_, as := amqpSession(t, g, containerID)
	return mc, as
}

// TestAdminSubscriptionsDurableAndShared: a JMS durable subscription's
// link is listed as durable, a shared one with its name as share group.
func TestAdminSubscriptionsDurableAndShared(t *testing.T) {
	g := startGateway(t, "--data.dir="+t.TempDir(), "--amqp.listen=127.0.0.1:0")
	c, _ := durableReceiver(t, g, "jms-1", "sub1", "orders/#")
	defer c.Close()
	_, s := amqpSession(t, g, "jms-2")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := s.NewReceiver(ctx, "prices/#", &goamqp.ReceiverOptions{Name: "shared1",
		SourceCapabilities: []string{"shared"}}); err != nil {
		t.Fatal(err)
	}

	// A link is listed once its attach has been handled, which may be
	// just after its answer reached the client.
	var subs []subJSON
	coretest.Eventually(t, "both links listed", 10*time.Second, func() bool {
		subs = decode[[]subJSON](t, mustCall(t, g, "GET", "/api/v1/subscriptions?protocol=amqp", http.StatusOK))
		return len(subs) >= 2
	})
	if len(subs) != 2 {
		t.Fatalf("subscriptions: %+v", subs)
	}
	d, sh := subs[0], subs[1]
	if d.Filter != "orders/#" || !d.Durable || d.Link != "sub1" || d.ClientID != "jms-1" || d.QoS != 1 {
		t.Errorf("the durable subscription: %+v", d)
	}
	if sh.Filter != "prices/#" || sh.Durable || sh.ShareGroup == "" || sh.ClientID != "jms-2" {
		t.Errorf("the shared subscription: %+v", sh)
	}
	one := decode[connJSON](t, mustCall(t, g, "GET", "/api/v1/connections/"+d.Connection, http.StatusOK))
	if len(one.LinkList) != 1 || !one.LinkList[0].Durable || one.LinkList[0].Subscription == "" {
		t.Errorf("the durable subscriber's links: %+v", one.LinkList)
	}
}

// TestAdminSubscriptionIDsUnambiguous: a client id and a filter may hold
// spaces; client "a b" on "c" and client "a" on "b c" were both listed as
// "mqtt:a b c", and paging by id (?after=) skipped one of them.
func TestAdminSubscriptionIDsUnambiguous(t *testing.T) {
	g := startGateway(t, "--data.dir="+t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for id, filter := range map[string]string{"a b": "c", "a": "b c"} {
		conn, err := net.Dial("tcp", g.MQTTAddr())
		if err != nil {
			t.Fatal(err)
		}
		mc := paho.NewClient(paho.ClientConfig{Conn: conn})
		if ca, err := mc.Connect(ctx, &paho.Connect{ClientID: id, CleanStart: true, KeepAlive: 30}); err != nil || ca.ReasonCode != 0 {
			t.Fatalf("connect %q: %v %+v", id, err, ca)
		}
		t.Cleanup(func() { _ = mc.Disconnect(&paho.Disconnect{}) })
		if _, err := mc.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: filter}}}); err != nil {
			t.Fatal(err)
		}
	}
	subs := decode[[]subJSON](t, mustCall(t, g, "GET", "/api/v1/subscriptions", http.StatusOK))
	if len(subs) != 2 || subs[0].ID == subs[1].ID {
		t.Fatalf("subscriptions %+v: want two distinct ids", subs)
	}
	next := decode[[]subJSON](t, mustCall(t, g, "GET", "/api/v1/subscriptions?limit=1&after="+url.QueryEscape(subs[0].ID), http.StatusOK))
	if len(next) != 1 || next[0].ID != subs[1].ID {
		t.Fatalf("the page after %q: %+v, want %q", subs[0].ID, next, subs[1].ID)
	}
}
