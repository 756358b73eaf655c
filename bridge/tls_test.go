package bridge

import (
	"context"
	"crypto/tls"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/tolsey/tolsey/core"
	"github.com/tolsey/tolsey/core/coretest"
	"github.com/tolsey/tolsey/core/tlsconf/tlstest"
)

// The bridge dials NATS's sockets itself (abortDialer) and nats.go puts
// TLS on them: a bridge to a NATS that requires TLS and a client
// certificate connects, sends, and does again over a new TLS session
// after its connection was cut (a reconnect through the same dialer).
func TestNATSOverTLSReconnects(t *testing.T) {
	ca := tlstest.NewCA(t, "nats-ca")
	srv := ca.Server(t)
	files := tlstest.Write(t, t.TempDir(), ca.Client(t, "bridge"), ca)
	s, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{srv.TLS}, ClientCAs: ca.Pool(),
			ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12},
		TLSVerify: true, TLSTimeout: 5,
	})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	nc, err := nats.Connect("tls://"+s.Addr().String(), nats.RootCAs(files.CA), nats.ClientCert(files.Cert, files.Key))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	got := countOn(t, nc, "st.>")

	p := startProxy(t, s.Addr().String())
	t.Cleanup(p.close)
	router := core.NewRouter(core.RouterOptions{Node: "n1"})
	b := startBridgeOpts(t, NATSOptions{URLs: []string{"tls://" + p.addr()}, Rules: []Rule{stallRule}, Router: router,
		TLSCA: files.CA, TLSCert: files.Cert, TLSKey: files.Key})
	coretest.Eventually(t, "the bridge connected over TLS", 10*time.Second, func() bool { return b.Down() == nil })
	if st, err := b.Conn().TLSConnectionState(); err != nil || !st.HandshakeComplete {
		t.Fatalf("bridge connection: TLS state %v, %v", st.HandshakeComplete, err)
	}
	pub := func() { router.Publish(context.Background(), &core.Message{Topic: "st/tls", Payload: []byte("x")}) }
	pub()
	coretest.Eventually(t, "the first message at the NATS subscriber", 10*time.Second, func() bool { return got.Load() >= 1 })

	// Cut every connection through the proxy: the bridge reconnects, over
	// TLS again.
	before := b.Conn().Stats().Reconnects
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
	p.mu.Unlock()
	coretest.Eventually(t, "the bridge reconnected", 20*time.Second, func() bool {
		return b.Conn().Stats().Reconnects > before && b.Down() == nil
	})
	if st, err := b.Conn().TLSConnectionState(); err != nil || !st.HandshakeComplete {
		t.Fatalf("bridge connection after the reconnect: TLS state %v, %v", st.HandshakeComplete, err)
	}
	coretest.Eventually(t, "a message after the reconnect at the NATS subscriber", 20*time.Second, func() bool {
		pub()
		return got.Load() >= 2
	})
}
