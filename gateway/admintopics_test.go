package gateway

import (
	"context"
	"net/http"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"
	"github.com/eclipse/paho.golang/paho"
)

// TestAdminTopics: GET /api/v1/topics counts each message once, whichever
// way it came: MQTT-only (mochi fans it out, the router never sees it),
// MQTT with an AMQP subscriber (through the router), AMQP, the admin API;
// it says which topic has a retained message, and narrows by filter.
func TestAdminTopics(t *testing.T) {
	g := startGateway(t, "--data.dir="+t.TempDir(), "--amqp.listen=127.0.0.1:0")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	mc, as := bothClients(ctx, t, g, paho.ClientConfig{}, "pub", "")
	recv, err := as.NewReceiver(ctx, "t/5", &goamqp.ReceiverOptions{Credit: 10})
	if err != nil {
		t.Fatal(err)
	}
	snd, err := as.NewSender(ctx, "t/3", nil)
	if err != nil {
		t.Fatal(err)
	}

	pub := func(topic string, retain bool) {
		t.Helper()
		if _, err := mc.Publish(ctx, &paho.Publish{Topic: topic, QoS: 1, Retain: retain, Payload: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		pub("t/1", false) // nobody else wants it: mochi's alone
	}
	pub("t/2", true)
	pub("t/5", false) // the AMQP receiver wants it: through the router
	pub("t/5", false)
	for range 2 {
		if err := snd.Send(ctx, goamqp.NewMessage([]byte("y")), nil); err != nil {
			t.Fatal(err)
		}
	}
	if code, body := call(t, g, "POST", "/api/v1/publish", `{"topic":"t/4","payload":"z"}`); code != http.StatusOK {
		t.Fatalf("admin publish: %d %s", code, body)
	}
	pub("other", false)
	for range 2 {
		if _, err := recv.Receive(ctx, nil); err != nil {
			t.Fatal(err)
		}
	}

	got := decode[[]topicJSON](t, mustCall(t, g, "GET", "/api/v1/topics?filter=t/%23", http.StatusOK))
	want := map[string]uint64{"t/1": 3, "t/2": 1, "t/3": 2, "t/4": 1, "t/5": 2}
	if len(got) != len(want) {
		t.Fatalf("topics: %+v", got)
	}
	for _, tj := range got {
		if tj.Messages != want[tj.Topic] || tj.ID != tj.Topic || tj.LastSeen.IsZero() || time.Since(tj.LastSeen) > time.Minute {
			t.Errorf("%s: %+v, want %d messages", tj.Topic, tj, want[tj.Topic])
		}
		if tj.Retained == nil || *tj.Retained != (tj.Topic == "t/2") {
			t.Errorf("%s: retained %v", tj.Topic, tj.Retained)
		}
	}
	if all := decode[[]topicJSON](t, mustCall(t, g, "GET", "/api/v1/topics", http.StatusOK)); len(all) != 6 {
		t.Errorf("every topic: %+v", all)
	}
	if page := decode[[]topicJSON](t, mustCall(t, g, "GET", "/api/v1/topics?after=t/2&limit=2", http.StatusOK)); len(page) != 2 || page[0].Topic != "t/3" {
		t.Errorf("a page: %+v", page)
	}
	mustCall(t, g, "GET", "/api/v1/topics?filter=a/%23/b", http.StatusBadRequest)
}
