package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/tolsey/tolsey/core/coretest"
)

// testCA is a certificate authority made for one test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// serverCert is a certificate for 127.0.0.1 signed by ca.
func (ca *testCA) serverCert(t *testing.T) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func (ca *testCA) file(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(p, ca.pem, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// amqpsBridgeFlag is --bridge.amqp with bridge name to amqps://addr,
// trusting the CA in caFile.
func amqpsBridgeFlag(name, addr, caFile string, rules ...ruleJSON) string {
	b, _ := json.Marshal([]map[string]any{{"name": name, "url": "amqps://" + addr, "sasl": "anonymous",
		"tls": map[string]string{"ca": caFile}, "rules": rules}})
	return "--bridge.amqp=" + string(b)
}

// amqps:// to a remote gateway behind a TLS-terminating proxy (the
// gateway's AMQP listener has no TLS yet) with a certificate from a CA
// made here: with that CA in tls.ca messages flow; with another CA the
// bridge does not connect and says why (unknown authority) in its status
// and log.
func TestBridgeAMQPTLS(t *testing.T) {
	ca := newTestCA(t, "tolsey test CA")
	remote := startGateway(t, "--node.id=R")
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{ca.serverCert(t)}, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatal(err)
	}
	proxy(t, ln, remote.AMQPAddr())
	front := ln.Addr().String()
	rule := ruleJSON{"direction": "out", "local": "up/#", "remote": "uplink", "qos": 1}

	rsub := connect5(t, remote.MQTTAddr(), "rsub")
	rsub.subscribe(t, paho.SubscribeOptions{Topic: "uplink", QoS: 1})
	good := startGateway(t, "--node.id=L", amqpsBridgeFlag("cloud", front, ca.file(t), rule))
	eventually(t, "bridge connected over TLS", func() bool { return bridgeUp(good) })
	pub := connect5(t, good.MQTTAddr(), "pub")
	if r := pub.publish(t, &paho.Publish{Topic: "up/1", QoS: 1, Payload: []byte("over tls")}); r.ReasonCode != 0 {
		t.Fatalf("PUBACK %#x", r.ReasonCode)
	}
	if m := rsub.next(t); string(m.Payload) != "over tls" {
		t.Errorf("remote got %q", m.Payload)
	}

	var log coretest.SyncBuffer
	other := newTestCA(t, "some other CA")
	bad := startGatewayLog(t, &log, "--node.id=B", amqpsBridgeFlag("cloud", front, other.file(t), rule))
	eventually(t, "the TLS failure reported", func() bool { return bad.Bridges()[0].LastError != "" })
	st := bad.Bridges()[0]
	t.Logf("wrong CA: %s", st.LastError)
	line := grepLines(log.String(), "AMQP bridge connect failed")
	if st.Connected || !strings.Contains(st.LastError, "not signed by the CA in tls.ca") ||
		!strings.Contains(line, "bridge=cloud") || !strings.Contains(line, "unknown authority") {
		t.Errorf("with the wrong CA: status %+v, log %q", st, line)
	}
}
