package redistest

import (
	"net"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestStartStopRestart(t *testing.T) {
	s := Start(t)
	if err := Ping(s.Addr); err != nil {
		t.Fatal(err)
	}
	s.Stop()
	if err := Ping(s.Addr); err == nil {
		t.Fatal("PING answered after Stop")
	}
	s.Restart()
	if err := Ping(s.Addr); err != nil {
		t.Fatalf("after Restart: %v", err)
	}
}

func TestProxyCut(t *testing.T) {
	s := Start(t)
	p := NewProxy(t, s.Addr)
	if err := Ping(p.Addr); err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p.Cut()
	if err := Ping(p.Addr); err == nil {
		t.Fatal("PING through a cut proxy")
	}
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("connection survived Cut")
	}
	p.Restore()
	if err := Ping(p.Addr); err != nil {
		t.Fatalf("after Restore: %v", err)
	}
}
