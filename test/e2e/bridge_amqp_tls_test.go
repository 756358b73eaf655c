package e2e

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/eclipse/paho.golang/paho"

	"github.com/tolsey/tolsey/core/coretest"
	"github.com/tolsey/tolsey/core/tlsconf/tlstest"
)

// amqpsBridgeFlag is --bridge.amqp with bridge name to amqps://addr,
// trusting the CA in caFile.
func amqpsBridgeFlag(name, addr, caFile string, rules ...ruleJSON) string {
	b, _ := json.Marshal([]map[string]any{{"name": name, "url": "amqps://" + addr, "sasl": "anonymous",
		"tls": map[string]string{"ca": caFile}, "rules": rules}})
	return "--bridge.amqp=" + string(b)
}

// amqps:// to a remote gateway's own TLS listener (amqp.tls.*) with a
// certificate from a CA made here: with that CA in tls.ca messages flow;
// with another CA the bridge does not connect and says why (unknown
// authority) in its status and log.
func TestBridgeAMQPTLS(t *testing.T) {
	ca := tlstest.NewCA(t, "tolsey test CA")
	files := tlstest.Write(t, t.TempDir(), ca.Server(t), ca)
	remote := startGateway(t, "--node.id=R", "--amqp.tls.listen=127.0.0.1:0",
		"--amqp.tls.cert="+files.Cert, "--amqp.tls.key="+files.Key)
	front := remote.AMQPTLSAddr()
	rule := ruleJSON{"direction": "out", "local": "up/#", "remote": "uplink", "qos": 1}

	rsub := connect5(t, remote.MQTTAddr(), "rsub")
	rsub.subscribe(t, paho.SubscribeOptions{Topic: "uplink", QoS: 1})
	good := startGateway(t, "--node.id=L", amqpsBridgeFlag("cloud", front, files.CA, rule))
	eventually(t, "bridge connected over TLS", func() bool { return bridgeUp(good) })
	pub := connect5(t, good.MQTTAddr(), "pub")
	if r := pub.publish(t, &paho.Publish{Topic: "up/1", QoS: 1, Payload: []byte("over tls")}); r.ReasonCode != 0 {
		t.Fatalf("PUBACK %#x", r.ReasonCode)
	}
	if m := rsub.next(t); string(m.Payload) != "over tls" {
		t.Errorf("remote got %q", m.Payload)
	}

	var log coretest.SyncBuffer
	other := tlstest.NewCA(t, "some other CA")
	otherFiles := tlstest.Write(t, t.TempDir(), other.Server(t), other)
	bad := startGatewayLog(t, &log, "--node.id=B", amqpsBridgeFlag("cloud", front, otherFiles.CA, rule))
	eventually(t, "the TLS failure reported", func() bool { return bad.Bridges()[0].LastError != "" })
	st := bad.Bridges()[0]
	t.Logf("wrong CA: %s", st.LastError)
	line := grepLines(log.String(), "AMQP bridge connect failed")
	if st.Connected || !strings.Contains(st.LastError, "not signed by the CA in tls.ca") ||
		!strings.Contains(line, "bridge=cloud") || !strings.Contains(line, "unknown authority") {
		t.Errorf("with the wrong CA: status %+v, log %q", st, line)
	}
}
