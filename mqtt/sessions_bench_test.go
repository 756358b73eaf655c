package mqtt

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/tolsey/tolsey/core/coretest"
	"github.com/tolsey/tolsey/mqtt/session"
	"github.com/tolsey/tolsey/retain"
	"github.com/tolsey/tolsey/retain/memory"
)

// BenchmarkOfflineSessionQoS1 measures QoS 1 publishes per second to an
// offline persistent subscriber, each acknowledged once stored: with the
// session store (persist=on: the PUBACK waits for the group commit) and
// without (persist=off: the session lives in memory only); and with the
// store, to a topic no stored session subscribes to (unmatched). 4 connections
// publish from 16 goroutines each, so up to 64 PUBLISHes wait at once; a
// commit takes what has queued. It reports msgs/s and, with the store,
// commits per message (each commit is one bbolt transaction: one fsync
// round). Every message stays queued for the subscriber, so b.N is
// bounded by mqtt.maxInflight: run it with -benchtime=20000x.
//
//	go test -run '^$' -bench OfflineSessionQoS1 -benchtime=20000x ./mqtt/
func BenchmarkOfflineSessionQoS1(b *testing.B) {
	for _, c := range []struct {
		name    string
		persist bool
		filter  string // the offline session's subscription
	}{
		{"persist=off", false, "bench/#"},
		{"persist=on", true, "bench/#"},
		// A session is stored but the messages reach none: what deferring
		// every PUBACK while any session is stored costs other traffic.
		{"persist=off,unmatched", false, "other/#"},
		{"persist=on,unmatched", true, "other/#"},
	} {
		b.Run(c.name, func(b *testing.B) {
			if b.N > 60000 {
				b.Skip("b.N over mqtt.maxInflight: use -benchtime=20000x")
			}
			benchOfflineSession(b, c.persist, c.filter)
		})
	}
}

func benchOfflineSession(b *testing.B, persist bool, filter string) {
	var backend session.Backend
	if persist {
		bb, err := session.OpenBolt(b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		backend = bb
	}
	s := startTestServer(b, memory.New(retain.Limits{}), func(o *Options) {
		o.Sessions = backend
		o.MaxInflight = 65535
	})
	expiry := uint32(3600)
	sub := benchClient(b, s.Addr(), &paho.Connect{ClientID: "dev", CleanStart: true, KeepAlive: 30,
		Properties: &paho.ConnectProperties{SessionExpiryInterval: &expiry}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	_, err := sub.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: filter, QoS: 1}}})
	cancel()
	if err != nil {
		b.Fatal(err)
	}
	_ = sub.Disconnect(&paho.Disconnect{})
	coretest.Eventually(b, "dev offline", 20*time.Second, func() bool {
		cl, ok := s.mochi.Clients.Get("dev")
		return ok && cl.Closed()
	})

	const conns, perConn = 4, 16
	var next atomic.Int64
	var wg sync.WaitGroup
	clients := make([]*paho.Client, conns)
	for i := range clients {
		clients[i] = benchClient(b, s.Addr(), &paho.Connect{ClientID: fmt.Sprintf("pub%d", i), CleanStart: true, KeepAlive: 30})
	}
	var before uint64
	if s.sessions != nil {
		before = s.sessions.log.Commits()
	}
	b.ResetTimer()
	start := time.Now()
	for i := range conns * perConn {
		wg.Add(1)
		go func(c *paho.Client) {
			defer wg.Done()
			for next.Add(1) <= int64(b.N) {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				r, err := c.Publish(ctx, &paho.Publish{Topic: "bench/t", QoS: 1, Payload: make([]byte, 64)})
				cancel()
				if err != nil || r.ReasonCode != 0 {
					b.Errorf("publish: %v %v", err, r)
					return
				}
			}
		}(clients[i%conns])
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
	if s.sessions != nil {
		b.ReportMetric(float64(s.sessions.log.Commits()-before)/float64(b.N), "commits/msg")
	}
}

// benchClient connects a paho client with cp, disconnected when b ends.
func benchClient(b testing.TB, addr string, cp *paho.Connect) *paho.Client {
	b.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	c := paho.NewClient(paho.ClientConfig{ClientID: cp.ClientID, Conn: conn})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if ca, err := c.Connect(ctx, cp); err != nil || ca.ReasonCode != 0 {
		b.Fatalf("connect %s: %v %v", cp.ClientID, err, ca)
	}
	b.Cleanup(func() { _ = c.Disconnect(&paho.Disconnect{}) })
	return c
}
