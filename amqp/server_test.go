package amqp

import (
	"testing"

	goamqp "github.com/Azure/go-amqp"
)

func TestTopicSendReceive(t *testing.T) {
	e := startServer(t)
	s := e.session(t)
	r := newReceiver(t, s, "sensors/+/temp", nil)
	snd := newSender(t, s, "sensors/room1/temp", nil)
	send(t, snd, goamqp.NewMessage([]byte("21.5")))
	m := receive(t, r)
	if body(m) != "21.5" {
		t.Fatalf("body %q", body(m))
	}
	if m.Properties == nil || m.Properties.To == nil || *m.Properties.To != "sensors/room1/temp" {
		t.Fatalf("to = %+v", m.Properties)
	}
	if _, ok := m.Annotations["x-opt-retain"]; ok {
		t.Fatal("live message carries x-opt-retain")
	}
}
