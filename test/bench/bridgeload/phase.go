package main

import (
	"context"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tolsey/tolsey/test/bench/internal/rig"
)

// phaser runs phases against the one gateway and nats-server.
type phaser struct {
	c  *config
	gw *rig.Child
	ns *natsServer
}

// run sets a flow's phase up with fresh clients, runs it and measures it,
// and profiles the gateway's CPU into profile meanwhile ("": not).
func (p *phaser) run(c *config, mk func(context.Context, env, *closers) (*load, error), tag string, profile string) (result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var cs closers
	defer func() { cs.close() }()
	e := env{c: c, gwAddr: p.gw.Addr, natsURL: p.ns.url(), tag: tag}
	l, err := mk(ctx, e, &cs)
	if err != nil {
		return result{}, err
	}
	drops0, _ := gwMetric(p.gw.Admin, "tolsey_bridge_dropped_total")
	mdrops0, _ := gwMetric(p.gw.Admin, "tolsey_mqtt_messages_dropped_total")
	gw0, err := p.gw.CPU()
	if err != nil {
		return result{}, err
	}
	ns0, err := p.ns.child.CPU()
	if err != nil {
		return result{}, err
	}
	cli0 := rig.SelfCPU()
	var profDone <-chan error
	if profile != "" {
		profDone = rig.ProfileGateway(p.gw.Admin, c.profileFor, profile)
	}
	t0 := time.Now()
	if err := l.start(ctx, t0); err != nil {
		return result{}, fmt.Errorf("publish: %w", err)
	}
	total := func() (n int64) {
		for _, s := range l.sinks {
			n += s.got.Load()
		}
		return n
	}
	prev, lastMove := total(), time.Now()
	for {
		n := total()
		if n >= int64(l.want) {
			break
		}
		if n != prev {
			prev, lastMove = n, time.Now()
		} else if time.Since(lastMove) > c.idle {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	gw1, err := p.gw.CPU()
	if err != nil {
		return result{}, err
	}
	ns1, err := p.ns.child.CPU()
	if err != nil {
		return result{}, err
	}
	cli1 := rig.SelfCPU()
	drops1, _ := gwMetric(p.gw.Admin, "tolsey_bridge_dropped_total")
	mdrops1, _ := gwMetric(p.gw.Admin, "tolsey_mqtt_messages_dropped_total")
	res := result{sent: l.want, got: int(total()), gwCPU: gw1 - gw0, natsCPU: ns1 - ns0, cliCPU: cli1 - cli0,
		bridgeDrops: int(drops1 - drops0), mqttDrops: int(mdrops1 - mdrops0)}
	res.lost = res.sent - res.got
	if l.stored != nil {
		stored, err := l.stored()
		if err != nil {
			return res, err
		}
		res.lost, res.isStore = res.sent-stored, true
	}
	if res.got == 0 {
		return res, fmt.Errorf("no message delivered")
	}
	var last int64
	var lat []time.Duration
	for _, s := range l.sinks {
		last = max(last, s.last.Load())
		s.mu.Lock()
		lat = append(lat, s.lat...)
		s.mu.Unlock()
	}
	res.elapsed = time.Unix(0, last).Sub(t0)
	lat = rig.Sorted(lat)
	res.p50, res.p99 = rig.Percentile(lat, 50), rig.Percentile(lat, 99)
	if l.acks != nil {
		a := rig.Sorted(l.acks.lat)
		res.ackP50, res.ackP99, res.hasAcks = rig.Percentile(a, 50), rig.Percentile(a, 99), true
	}
	if profDone != nil {
		if err := <-profDone; err != nil {
			fmt.Fprintf(os.Stderr, "profile: %v\n", err)
		} else {
			fmt.Fprintf(os.Stderr, "  gateway CPU profile of %s: %s\n", tag, profile)
		}
	}
	return res, nil
}

// drainPhase stops nats-server, fills the JetStream rule's buffer with
// c.drain QoS 1 publishes, starts nats-server again and times the drain.
func drainPhase(c *config, gw *rig.Child, ns *natsServer) error {
	const rule = `drain/#`
	buffered := func() (float64, error) {
		return gwMetric(gw.Admin, "tolsey_bridge_buffered_messages", rule)
	}
	connected := func() (float64, error) { return gwMetric(gw.Admin, "tolsey_bridge_connected") }
	if err := ns.stop(); err != nil {
		return err
	}
	if _, err := waitFor("bridge disconnected", 30*time.Second, 10*time.Millisecond, func() (bool, error) {
		v, err := connected()
		return v == 0, err
	}); err != nil {
		return err
	}

	// Fill the buffer: P publishers, window each, QoS 1: every PUBACK
	// follows the fsynced buffer write.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var cs closers
	defer func() { cs.close() }()
	fc := *c
	fc.pubs = max(c.drainPubs, 1)
	per := (c.drain + fc.pubs - 1) / fc.pubs
	total := per * fc.pubs
	a := &acks{}
	start, err := mqttPubs(ctx, env{c: &fc, gwAddr: gw.Addr, tag: "drain-fill"}, "drain", per, 1, a, &cs)
	if err != nil {
		return err
	}
	gw0, _ := gw.CPU()
	t0 := time.Now()
	if err := start(ctx, t0); err != nil {
		return fmt.Errorf("fill: %w", err)
	}
	fill := time.Since(t0)
	gw1, _ := gw.CPU()
	cs.close()
	cs = nil
	n, err := buffered()
	if err != nil {
		return err
	}
	if int(n) != total {
		return fmt.Errorf("buffer holds %v messages, want %d", n, total)
	}
	bytes, _ := gwMetric(gw.Admin, "tolsey_bridge_buffered_bytes", rule)

	// NATS back. The bridge reconnects on its own backoff (up to 10 s
	// with jitter after a long outage): the drain is timed from its
	// reconnect, which the bridge reports in tolsey_bridge_connected.
	var profDone <-chan error
	if c.profile["drain"] {
		profDone = rig.ProfileGateway(gw.Admin, c.profileFor+10*time.Second, c.profilePath("drain"))
	}
	tStart := time.Now()
	if err := ns.start(); err != nil {
		return err
	}
	tReady := time.Now()
	ns0, _ := ns.child.CPU()
	gw2, _ := gw.CPU()
	tUp, err := waitFor("bridge reconnected", 60*time.Second, 5*time.Millisecond, func() (bool, error) {
		v, err := connected()
		return v == 1, err
	})
	if err != nil {
		return err
	}
	nc, err := nats.Connect(ns.url())
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	tStored, err := waitFor("stream holds the drained messages", 10*time.Minute, 10*time.Millisecond, func() (bool, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		m, err := streamMsgs(ctx, js, streamDrain)
		return int(m) >= total, err
	})
	if err != nil {
		return err
	}
	tEmpty, err := waitFor("buffer empty", 5*time.Minute, 10*time.Millisecond, func() (bool, error) {
		v, err := buffered()
		return v == 0, err
	})
	if err != nil {
		return err
	}
	gw3, _ := gw.CPU()
	ns1, _ := ns.child.CPU()
	ctx2, cancel2 := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel2()
	stored, err := streamMsgs(ctx2, js, streamDrain)
	if err != nil {
		return err
	}
	if profDone != nil {
		if err := <-profDone; err != nil {
			fmt.Fprintf(os.Stderr, "profile: %v\n", err)
		} else {
			fmt.Fprintf(os.Stderr, "  gateway CPU profile of the drain: %s\n", c.profilePath("drain"))
		}
	}

	drainD := tStored.Sub(tUp)
	rate := float64(total) / drainD.Seconds()
	verdict := "PASS"
	if rate < 20000 {
		verdict = "FAIL"
	}
	a.lat = rig.Sorted(a.lat)
	fmt.Printf("\nDrain after an outage (rule drain/# → drain.>, JetStream stream %s)\n", streamDrain)
	tw := tabwriter.NewWriter(os.Stdout, 2, 8, 2, ' ', tabwriter.AlignRight)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\t\n", k, v) }
	row("QoS 1 publishes buffered while NATS was down", fmt.Sprintf("%d (%d publishers, window %d)", total, fc.pubs, c.window))
	row("buffer size", rig.MiB(int64(bytes)))
	row("buffer fill (publish → PUBACK after fsync)", fmt.Sprintf("%s, %.0f msgs/s, PUBACK p50 %s p99 %s, gateway CPU %s",
		fill.Round(time.Millisecond), float64(total)/fill.Seconds(), rig.Ms(rig.Percentile(a.lat, 50)), rig.Ms(rig.Percentile(a.lat, 99)), perMsg(gw1-gw0, total)))
	row("nats-server start → ready", tReady.Sub(tStart).Round(time.Millisecond).String())
	row("nats-server ready → bridge reconnected", tUp.Sub(tReady).Round(time.Millisecond).String())
	row("reconnected → stream holds all", drainD.Round(time.Millisecond).String())
	row("reconnected → buffer empty", tEmpty.Sub(tUp).Round(time.Millisecond).String())
	row("stream holds (duplicates would show as more)", fmt.Sprint(stored))
	row("CPU per drained msg (gateway / nats-server)", perMsg(gw3-gw2, total)+" / "+perMsg(ns1-ns0, total))
	row("drain rate (reconnected → stream holds all)", fmt.Sprintf("%.0f msgs/s", rate))
	row("goal ≥ 20000 msgs/s", verdict)
	return tw.Flush()
}
