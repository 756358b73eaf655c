package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/nats-io/nats.go"

	"github.com/tolsey/tolsey/core/auth"
)

// bridge.identity (docs/security.md, "The bridge"): the NATS bridge's rules
// act as the user "bridge" of the users file. An inbound message reaches
// the topic space only where that user may publish, an outbound one leaves
// only from where it may subscribe; the others are dropped and counted. A
// reload that widens the user's rules applies to the next message.
func TestBridgeIdentityACL(t *testing.T) {
	dir := t.TempDir()
	hash, err := auth.HashBcrypt("pw", 4)
	if err != nil {
		t.Fatal(err)
	}
	users := filepath.Join(dir, "users.yaml")
	write := func(extra string) {
		f := fmt.Sprintf(`users:
  - {name: bridge, password: %q}
  - {name: ops, password: %q}
acl:
  - {allow: [publish], topic: "cmd/ok/#", users: [bridge]}
  - {allow: [subscribe], topic: "sensors/ok/#", users: [bridge]}
  - {allow: [publish, subscribe], topic: "#", users: [ops]}
%sdefault: deny
`, hash, hash, extra)
		if err := os.WriteFile(users, []byte(f), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("")
	s := startNATS(t, 0, "")
	g := startBridged(t, s, "gw1", []ruleJSON{
		{"direction": "out", "local": "sensors/#", "remote": "iot.sensors.>", "qos": 0},
		{"direction": "in", "local": "cmd/#", "remote": "site.cmd.>", "qos": 0},
	}, "--auth.file="+users, "--bridge.identity=bridge")

	nc := natsClient(t, s)
	got := make(chan *nats.Msg, 10)
	if _, err := nc.ChanSubscribe("iot.>", got); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	ops := connect5(t, g.MQTTAddr(), "ops-1", func(c *paho.Connect) {
		c.Username, c.UsernameFlag, c.Password, c.PasswordFlag = "ops", true, []byte("pw"), true
	})
	ops.subscribe(t, paho.SubscribeOptions{Topic: "cmd/#", QoS: 1})

	// Outbound: sensors/no/x is not the bridge's to read.
	ops.publish(t, &paho.Publish{Topic: "sensors/no/x", QoS: 1, Payload: []byte("secret")})
	ops.publish(t, &paho.Publish{Topic: "sensors/ok/x", QoS: 1, Payload: []byte("fine")})
	select {
	case m := <-got:
		if m.Subject != "iot.sensors.ok.x" {
			t.Fatalf("NATS got %s %q first, want iot.sensors.ok.x", m.Subject, m.Data)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("nothing reached NATS")
	}
	// Inbound: cmd/no/x is not the bridge's to publish.
	for _, subj := range []string{"site.cmd.no.x", "site.cmd.ok.x"} {
		if err := nc.Publish(subj, []byte(subj)); err != nil {
			t.Fatal(err)
		}
	}
	if m := ops.next(t); m.Topic != "cmd/ok/x" {
		t.Fatalf("MQTT got %s first, want cmd/ok/x (cmd/no/x is denied to the bridge)", m.Topic)
	}
	st := g.Bridges()
	if len(st) != 1 || st[0].Rules[0].Dropped != 1 || st[0].Rules[1].Dropped != 1 {
		t.Fatalf("want one message dropped each way, status %+v", st)
	}

	// A reload that lets the bridge publish on cmd/no/#: the next message passes.
	write("  - {allow: [publish], topic: \"cmd/no/#\", users: [bridge]}\n")
	if err := g.Reload(); err != nil {
		t.Fatal(err)
	}
	if err := nc.Publish("site.cmd.no.y", []byte("now allowed")); err != nil {
		t.Fatal(err)
	}
	if m := ops.next(t); m.Topic != "cmd/no/y" {
		t.Fatalf("after the reload MQTT got %s, want cmd/no/y", m.Topic)
	}
}
