package bridge

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/tolsey/tolsey/bridge/cluster"
	"github.com/tolsey/tolsey/core"
	"github.com/tolsey/tolsey/core/coretest"
)

// TestStopBehindStuckConnectionWithCluster is TestStopBehindStuckConnection
// with a cluster on the bridge's connection, as the gateway runs them: the
// cluster's second connection (shared subscriptions, made from a copy of
// the bridge connection's options) went through the bridge's dialer, which
// kept the last connection it dialed, so the stop's deadline cut that one
// (already closed: the cluster stops first) and not the bridge's, and Stop
// waited out nats.go's one-minute write timeout.
func TestStopBehindStuckConnectionWithCluster(t *testing.T) {
	s, _ := startNATS(t)
	p := startProxy(t, s.Addr().String())
	router := core.NewRouter(core.RouterOptions{Node: "n1"})
	b := startBridgeOpts(t, NATSOptions{URLs: []string{"nats://" + p.addr()}, Rules: []Rule{stallRule}, Router: router,
		QueueLen: 4, WriterStall: 10 * time.Millisecond})
	t.Cleanup(p.close)
	coretest.Eventually(t, "the bridge connected", 10*time.Second, func() bool { return b.Down() == nil })

	c, err := cluster.New(cluster.Options{Conn: b.Conn(), Router: router, Node: "n1", Prefix: "gw",
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The gateway stops the cluster before the bridge.
	if err := c.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}

	p.pause()
	payload := make([]byte, 64<<10)
	coretest.Eventually(t, "messages dropped behind the stuck writer", 60*time.Second, func() bool {
		router.Publish(context.Background(), &core.Message{Topic: "st/stuck", Payload: payload})
		return b.rules[0].dropped.Load() > 0
	})

	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	stopped := make(chan error, 1)
	go func() { stopped <- b.Stop(ctx) }()
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatalf("Stop: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Stop behind a stuck NATS connection, with a cluster on it, did not return within 30 s of a 500 ms context")
	}
}
