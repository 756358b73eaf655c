package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"sync/atomic"
	"time"

	"github.com/tolsey/tolsey/gateway"
	"github.com/tolsey/tolsey/test/internal/mqttlean"
)

// runStuck is -mode stuck: a QoS 1 publisher's throughput with a
// subscriber that never reads present, against without one. One gateway
// in this process (no users file; mqtt.writeTimeout as -write-timeout,
// 10 minutes by default, so that the stuck subscriber stays connected
// throughout: what is measured is that nothing waits for it, not that it
// was cut off). A normal subscriber on bench/# reads and acknowledges
// everything. Each round publishes n QoS 1 messages of size bytes, at most
// window unacknowledged, once without and once with a stuck subscriber
// (MQTT 3.1.1, clean session, keep alive 0, SO_RCVBUF 1 KiB, subscribed
// to bench/# at QoS 1, then never read; a new one each round), the order
// alternating between rounds. A phase ends when the publisher has every
// PUBACK and the normal subscriber every message.
func runStuck(n, size, window, rounds int, writeTimeout time.Duration) {
	dir, err := os.MkdirTemp("", "abuse-stuck-")
	if err != nil {
		fail(err)
	}
	defer os.RemoveAll(dir)
	args := []string{"--mqtt.listen=127.0.0.1:0", "--admin.listen=127.0.0.1:0", "--amqp.listen=",
		"--retain.backend=memory", "--data.dir=" + dir, "--node.id=abuse-stuck",
		"--mqtt.writeTimeout=" + writeTimeout.String()}
	g, stop := startGateway(args)
	defer stop()
	addr := g.MQTTAddr()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// The normal subscriber reads and acknowledges everything.
	sub, err := mqttlean.Dial(ctx, addr, mqttlean.Options{ClientID: "normal", Clean: true, BufSize: 64 << 10})
	if err != nil {
		fail(err)
	}
	defer sub.Close()
	if err := sub.Subscribe(1, 1, nil, "bench/#"); err != nil {
		fail(err)
	}
	var delivered atomic.Int64
	go func() {
		for {
			p, err := sub.ReadPacket()
			if err != nil {
				return
			}
			if p.Type == mqttlean.PUBLISH {
				delivered.Add(1)
				if p.QoS() == 1 {
					_ = sub.Puback(p.ID)
				}
			}
		}
	}()

	// The publisher: window tokens, given back by its PUBACKs.
	pub, err := mqttlean.Dial(ctx, addr, mqttlean.Options{ClientID: "publisher", Clean: true, BufSize: 64 << 10})
	if err != nil {
		fail(err)
	}
	defer pub.Close()
	tokens := make(chan struct{}, window)
	var acked atomic.Int64
	go func() {
		for {
			p, err := pub.ReadPacket()
			if err != nil {
				return
			}
			if p.Type == mqttlean.PUBACK {
				acked.Add(1)
				<-tokens
			}
		}
	}()
	payload := make([]byte, size)

	phase := func(stuck bool) float64 {
		if stuck {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			s, err := mqttlean.Dial(ctx, addr, mqttlean.Options{ClientID: "stuck", Clean: true, ReadBuffer: 1024})
			if err != nil {
				fail(err)
			}
			if err := s.Subscribe(1, 1, nil, "bench/#"); err != nil {
				fail(err)
			}
			defer s.Close() // never read until then
		}
		a0, d0 := acked.Load(), delivered.Load()
		start := time.Now()
		for i := range n {
			tokens <- struct{}{}
			if err := pub.Publish(uint16(i%65535)+1, "bench/t", payload, 1); err != nil {
				fail(err)
			}
		}
		deadline := time.Now().Add(5 * time.Minute)
		for acked.Load()-a0 < int64(n) || delivered.Load()-d0 < int64(n) {
			if time.Now().After(deadline) {
				fail(fmt.Errorf("stuck=%v: %d of %d PUBACKs and %d of %d deliveries after 5 minutes",
					stuck, acked.Load()-a0, n, delivered.Load()-d0, n))
			}
			time.Sleep(time.Millisecond)
		}
		return float64(n) / time.Since(start).Seconds()
	}

	var without, with []float64
	fmt.Printf("%d QoS 1 messages of %d B per phase, window %d, mqtt.writeTimeout %v\n", n, size, window, writeTimeout)
	for r := range rounds {
		order := []bool{false, true}
		if r%2 == 1 {
			order = []bool{true, false}
		}
		for _, stuck := range order {
			rate := phase(stuck)
			if stuck {
				with = append(with, rate)
			} else {
				without = append(without, rate)
			}
			fmt.Printf("round %d, stuck subscriber %-5v %8.0f msg/s\n", r+1, stuck, rate)
		}
	}
	mw, mo := median(with), median(without)
	fmt.Printf("median: %.0f msg/s without a stuck subscriber, %.0f msg/s with one (%.2fx)\n", mo, mw, mw/mo)
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// startGateway starts an in-process gateway with args (flags), quiet, or
// ends the program; stop stops it.
func startGateway(args []string) (*gateway.Gateway, func()) {
	cfg, err := gateway.LoadConfig(args, nil, io.Discard)
	if err != nil {
		fail(err)
	}
	g := gateway.New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err := g.Start(context.Background()); err != nil {
		fail(err)
	}
	return g, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = g.Stop(ctx)
	}
}
