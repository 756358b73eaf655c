package mqtt

import (
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/tolsey/tolsey/core/accept"
)

// TestDrainCountedBeforeListenerWait: a connection closed by its writer
// (a deferred ack's goroutine) while the listener shuts down counted its
// drain in the listener's WaitGroup (Add from 0) unordered with the
// listener's Wait: a data race under -race (CI, TestSessionSurvivesRestart)
// and a Wait that could miss the drain. The count now happens under the
// lock the listener's closeAll takes before it waits.
func TestDrainCountedBeforeListenerWait(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &tcpListener{}
	l.id, l.ln, l.log = "drain-test", accept.New(raw, "drain-test", slog.Default()), slog.Default()
	l.closeClients = func(string) map[net.Conn]bool { return nil }

	client, err := net.Dial("tcp", raw.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	sc, err := raw.Accept()
	if err != nil {
		t.Fatal(err)
	}
	dc := newDrainConn(sc.(*net.TCPConn), l)

	closed := make(chan struct{})
	go func() { // the writer's close, on a goroutine of its own
		_ = dc.Close()
		close(closed)
	}()
	// No synchronisation with that goroutine on purpose: a sleep orders
	// the two in time but not for the race detector, as in the CI run.
	time.Sleep(20 * time.Millisecond)
	go func() { // the client goes: the drain ends
		time.Sleep(50 * time.Millisecond)
		_ = client.Close()
	}()
	l.Close(nil)
	<-closed
}
