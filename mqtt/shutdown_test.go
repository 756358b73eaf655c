package mqtt

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/tolsey/tolsey/retain"
	"github.com/tolsey/tolsey/retain/memory"
)

// Shutdown while connections keep arriving: a connection accepted just
// before the listener closed used to be counted in mochi's ClientsWg (Add,
// on its own goroutine) while Server.Close was already waiting on it, a
// data race that -race reports (see connServer.wait). Seen first when
// TestListenerSurvivesEMFILE shut down with its backlog still arriving.
// The race needs the scheduler's help: before the fix, -race caught it in
// about 6 runs of 8 of this test (40 rounds each) on a 2-core box.
func TestShutdownDuringConnectionBurst(t *testing.T) {
	for round := 0; round < 40; round++ {
		s := startTestServerOnly(t, memory.New(retain.Limits{})) // shut down below
		stop := make(chan struct{})
		dialed := make(chan struct{}, 1)
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					c, err := net.DialTimeout("tcp", s.Addr(), time.Second)
					if err != nil {
						return // the listener has closed
					}
					// Closed at once: each connection's client ends soon,
					// so the count mochi waits on keeps passing through 0.
					_ = c.Close()
					select {
					case dialed <- struct{}{}:
					default:
					}
				}
			}()
		}
		<-dialed
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := s.Shutdown(ctx)
		cancel()
		close(stop)
		wg.Wait()
		if err != nil {
			t.Fatalf("round %d: Shutdown: %v", round, err)
		}
	}
}
