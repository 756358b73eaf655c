package e2e

import (
	"strings"
	"testing"

	"github.com/eclipse/paho.golang/paho"

	"github.com/tolsey/tolsey/core/coretest"
)

// A remote that requires SASL PLAIN, and a bridge with the wrong password:
// one clear log line names the bridge and the reason, the bridge retries
// with backoff, /api/v1/bridges and /readyz say it is down and why, QoS 1
// messages wait in the buffer. A restart with the right password on the
// same data.dir delivers them.
func TestBridgeAMQPWrongCredentials(t *testing.T) {
	remote := startGateway(t, "--node.id=R", "--amqp.users=gw:right", "--amqp.allowAnonymous=false")
	rsub := connect5(t, remote.MQTTAddr(), "rsub")
	rsub.subscribe(t, paho.SubscribeOptions{Topic: "uplink", QoS: 1})
	bridge := func(password string) string {
		return amqpBridgesFlag(map[string]any{"name": "cloud", "addr": remote.AMQPAddr(), "user": "gw", "password": password,
			"rules": []ruleJSON{{"direction": "out", "local": "up/#", "remote": "uplink", "qos": 1}}})
	}
	dataDir := t.TempDir()
	var log coretest.SyncBuffer
	local := startGatewayLog(t, &log, "--node.id=L", "--data.dir="+dataDir, bridge("wrong"))
	eventually(t, "the refusal logged", func() bool { return strings.Contains(log.String(), "AMQP bridge connect failed") })
	st := local.Bridges()[0]
	t.Logf("status: state %s, lastError %q", st.State, st.LastError)
	line := grepLines(log.String(), "AMQP bridge connect failed")
	if !strings.Contains(line, "bridge=cloud") || !strings.Contains(line, "authentication failed") {
		t.Errorf("log line %q: want the bridge's name and the SASL refusal", line)
	}
	if st.Connected || !strings.Contains(st.LastError, "authentication failed") {
		t.Errorf("/api/v1/bridges: %+v", st)
	}
	code, body := httpDo(t, "GET", "http://"+local.AdminAddr()+"/readyz")
	if code != 200 || !strings.Contains(body, "bridge amqp cloud down") || !strings.Contains(body, "authentication failed") {
		t.Errorf("/readyz %d %q", code, body)
	}
	pub := connect5(t, local.MQTTAddr(), "pub")
	if r := pub.publish(t, &paho.Publish{Topic: "up/1", QoS: 1, Payload: []byte("waited")}); r.ReasonCode != 0 {
		t.Fatalf("PUBACK %#x", r.ReasonCode)
	}
	stopGateway(t, local)
	if n := strings.Count(log.String(), "AMQP bridge connect failed"); n != 1 {
		t.Errorf("the same refusal logged %d times at WARN, want once (repeats at DEBUG)", n)
	}

	fixed := startGateway(t, "--node.id=L", "--data.dir="+dataDir, bridge("right"))
	eventually(t, "bridge connected with the right password", func() bool { return bridgeUp(fixed) })
	if m := rsub.next(t); string(m.Payload) != "waited" {
		t.Errorf("remote got %q", m.Payload)
	}
}
