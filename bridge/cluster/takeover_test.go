package cluster

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"

	"github.com/tolsey/tolsey/core"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func runNATS(t *testing.T) *natsserver.Server {
	t.Helper()
	s, err := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return s
}

func natsConn(t *testing.T, s *natsserver.Server) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(s.ClientURL(), nats.NoEcho())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func startCluster(t *testing.T, nc *nats.Conn, node string) *Cluster {
	t.Helper()
	return startWith(t, Options{Conn: nc, Router: core.NewRouter(core.RouterOptions{Node: node}), Node: node,
		TakeoverTimeout: 10 * time.Second})
}

// startWith starts a cluster member with opts, stopped when the test ends.
func startWith(t *testing.T, opts Options) *Cluster {
	t.Helper()
	c, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Stop(ctx)
	})
	return c
}

// slowHolder lets go of a client only when released, as a gateway whose
// session store commit takes a while does.
type slowHolder struct {
	release  chan struct{}
	released atomic.Bool
}

func (h *slowHolder) TakenOver(_ string, _ int64, _ string, done func(bool)) {
	go func() {
		<-h.release
		h.released.Store(true)
		done(true)
	}()
}

// TestClaimWaitsForTheHolderNotForAnyAnswer: a claim waits for the
// gateways it lists, not for as many answers. Another process answering
// at once (a gateway starting up answers claims before its first
// heartbeat lists it) ended the wait before the gateway holding the
// session had let go of it, so the claimer read the session too early.
func TestClaimWaitsForTheHolderNotForAnyAnswer(t *testing.T) {
	s := runNATS(t)
	a := startCluster(t, natsConn(t, s), "a")
	b := startCluster(t, natsConn(t, s), "b")
	holder := &slowHolder{release: make(chan struct{})}
	a.SetClients(holder)
	deadline := time.Now().Add(10 * time.Second)
	for !b.peerNodes()["a"] {
		if time.Now().After(deadline) {
			t.Fatal("b never heard of a")
		}
		time.Sleep(10 * time.Millisecond)
	}
	ghost := natsConn(t, s)
	answered := make(chan struct{}, 16)
	if _, err := ghost.Subscribe("gw.takeover", func(m *nats.Msg) {
		_ = m.Respond([]byte("starting"))
		answered <- struct{}{}
	}); err != nil {
		t.Fatal(err)
	}
	if err := ghost.Flush(); err != nil {
		t.Fatal(err)
	}

	claimed := make(chan bool, 1)
	go func() {
		b.Claim("dev", time.Now().UnixNano())
		claimed <- holder.released.Load()
	}()
	<-answered
	select {
	case <-claimed:
		t.Fatal("the claim ended on another process's answer, before the gateway holding the session let go")
	case <-time.After(500 * time.Millisecond): // still waiting, as it must
	}
	close(holder.release)
	if !<-claimed {
		t.Fatal("the claim ended before the holder let go")
	}
}
