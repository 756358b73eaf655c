package amqp

import (
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// FuzzConn feeds arbitrary bytes to a live server after a valid protocol
// header: whatever arrives, the connection ends (or idles out) and the
// server keeps serving. Seeded with what real clients sent (the captures).
func FuzzConn(f *testing.F) {
	for _, name := range []string{"proton-topic-send-receive.c2s.bin", "rhea-topic-send-receive.c2s.bin",
		"proton-dynamic-reply.c2s.bin", "go-amqp-settled-and-unsettled.c2s.bin"} {
		if b, err := os.ReadFile(filepath.Join("internal", "frames", "testdata", name)); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte("AMQP\x00\x01\x00\x00\x00\x00\x00\x0c\x02\x00\x00\x00\x00S\x10E"))
	// The TLS upgrade [5.2.1]: a header then a broken ClientHello, a TLS
	// header twice, and a TLS header alone.
	f.Add([]byte("AMQP\x02\x01\x00\x00\x16\x03\x01\x00\x05hello"))
	f.Add([]byte("AMQP\x02\x01\x00\x00AMQP\x02\x01\x00\x00"))
	f.Add([]byte("AMQP\x02\x01\x00\x00"))
	_, tlsCfg := upgradeTLS(f)
	e := startServer(f, func(o *Options) {
		o.IdleTimeout = 200 * time.Millisecond
		o.MaxFrameSize = 1 << 20
		o.TLS = tlsCfg // the plain port offers the TLS upgrade
	})
	f.Fuzz(func(t *testing.T, data []byte) {
		nc, err := net.Dial("tcp", e.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		nc.SetDeadline(time.Now().Add(10 * time.Second))
		go func() {
			nc.Write(data)
			nc.(*net.TCPConn).CloseWrite()
		}()
		if _, err := io.Copy(io.Discard, nc); err != nil {
			t.Fatalf("server did not end the connection: %v", err)
		}
	})
}
