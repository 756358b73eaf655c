package bridge

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tolsey/tolsey/core"
)

// TestPlainMessageHeaders: a plain message (no property) reaches NATS with
// its path alone, what loop prevention needs; a message with a property
// carries its origin too. Seen by a nats.go subscriber on a real server.
func TestPlainMessageHeaders(t *testing.T) {
	s, _ := startNATS(t)
	router := core.NewRouter(core.RouterOptions{Node: "n1"})
	startBridge(t, router, s.ClientURL(), BufferOptions{}, Rule{Direction: Out, Local: "p/#", Remote: "p.>"})
	nc := natsConn(t, s)
	got := make(chan *nats.Msg, 4)
	if _, err := nc.ChanSubscribe("p.>", got); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	origin := core.Origin{Protocol: core.ProtocolMQTT, Node: "n1", Client: "c1"}
	for _, c := range []struct {
		m    core.Message
		want nats.Header
	}{
		{core.Message{Topic: "p/plain", Payload: []byte("1"), Origin: origin},
			nats.Header{HeaderPath: {"n1"}}},
		{core.Message{Topic: "p/typed", Payload: []byte("2"), ContentType: "text/plain", Origin: origin},
			nats.Header{HeaderContentType: {"text/plain"}, HeaderOriginProtocol: {"mqtt"}, HeaderOriginNode: {"n1"},
				HeaderOriginClient: {"c1"}, HeaderPath: {"n1"}}},
	} {
		router.Publish(context.Background(), &c.m)
		select {
		case msg := <-got:
			if msg.Subject != "p."+c.m.Topic[2:] || !reflect.DeepEqual(msg.Header, c.want) {
				t.Errorf("%s: got %s %v, want headers %v", c.m.Topic, msg.Subject, msg.Header, c.want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: nothing arrived", c.m.Topic)
		}
	}
}
