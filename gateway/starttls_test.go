package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"

	"github.com/tolsey/tolsey/core/tlsconf/tlstest"
)

// amqp.tls.cert and amqp.tls.key without amqp.tls.listen serve the TLS
// upgrade on amqp.listen (AMQP 1.0 §5.2.1): the TLS header comes back, the
// handshake shows the configured certificate, and AMQP runs inside it.
// A cert without its key stops the start naming amqp.tls.key.
func TestAMQPTLSUpgrade(t *testing.T) {
	f := newTLSFixture(t)
	_, err := LoadConfig([]string{"--data.dir=" + t.TempDir(), "--amqp.listen=127.0.0.1:0", "--amqp.tls.cert=" + f.files.Cert}, nil, io.Discard)
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Key != "amqp.tls.key" {
		t.Errorf("amqp.tls.cert without its key: %v, want a ConfigError on amqp.tls.key", err)
	}

	g := startGateway(t, "--amqp.listen=127.0.0.1:0", "--amqp.tls.cert="+f.files.Cert, "--amqp.tls.key="+f.files.Key)
	nc, err := net.Dial("tcp", g.AMQPAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	header := "AMQP\x02\x01\x00\x00"
	if _, err := io.WriteString(nc, header); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 8)
	if _, err := io.ReadFull(nc, got); err != nil || string(got) != header {
		t.Fatalf("answer to the TLS header: %q %v", got, err)
	}
	tc := tls.Client(nc, tlstest.ClientConfig(f.ca, nil))
	if err := tc.Handshake(); err != nil {
		t.Fatalf("TLS handshake on amqp.listen: %v", err)
	}
	_ = nc.SetDeadline(time.Time{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := goamqp.NewConn(ctx, tc, &goamqp.ConnOptions{SASLType: goamqp.SASLTypeAnonymous()})
	if err != nil {
		t.Fatalf("AMQP after the upgrade: %v", err)
	}
	defer c.Close()
	s, err := c.NewSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	r, err := s.NewReceiver(ctx, "up/gw", nil)
	if err != nil {
		t.Fatal(err)
	}
	snd, err := s.NewSender(ctx, "up/gw", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := snd.Send(ctx, &goamqp.Message{Data: [][]byte{[]byte("upgraded")}}, nil); err != nil {
		t.Fatal(err)
	}
	m, err := r.Receive(ctx, nil)
	if err != nil || string(m.GetData()) != "upgraded" {
		t.Fatalf("received %v %v", m, err)
	}
}
