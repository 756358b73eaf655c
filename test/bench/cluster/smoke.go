package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/tolsey/tolsey/test/bench/internal/rig"
)

// smoke checks a running cluster through its load balancer (run by
// deploy/cluster/run-local.sh): subs subscribers of smoke/# and members
// of $share/smoke/smoke/#, and pubs publishers, each a connection of its
// own, so that the balancer spreads them over the gateways; every message
// must reach every subscriber once and the shared group once. It waits
// for the interest summaries to cross (a probe until every subscriber got
// one) before it counts.
func smoke(addr string, subs, pubs, n int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var mu sync.Mutex
	perSub := make([]map[string]int, subs)
	group := map[string]int{}
	var clients []*paho.Client
	defer func() {
		for _, c := range clients {
			_ = c.Disconnect(&paho.Disconnect{})
		}
	}()
	for j := range subs {
		perSub[j] = map[string]int{}
		c, err := rig.Connect(ctx, addr, fmt.Sprintf("smoke-sub%d", j), func(p *paho.Publish) {
			mu.Lock()
			perSub[j][string(p.Payload)]++
			mu.Unlock()
		})
		if err != nil {
			return err
		}
		clients = append(clients, c)
		if err := rig.Subscribe(ctx, c, "smoke/#", 1); err != nil {
			return err
		}
		m, err := rig.Connect(ctx, addr, fmt.Sprintf("smoke-member%d", j), func(p *paho.Publish) {
			mu.Lock()
			group[string(p.Payload)]++
			mu.Unlock()
		})
		if err != nil {
			return err
		}
		clients = append(clients, m)
		if err := rig.Subscribe(ctx, m, "$share/smoke/smoke/#", 1); err != nil {
			return err
		}
	}
	var ps []*paho.Client
	for i := range pubs {
		c, err := rig.Connect(ctx, addr, fmt.Sprintf("smoke-pub%d", i), nil)
		if err != nil {
			return err
		}
		clients = append(clients, c)
		ps = append(ps, c)
	}
	// Probes until every subscriber has one from every publisher: the
	// gateways know each other's subscriptions by then.
	for probe := 0; ; probe++ {
		if ctx.Err() != nil {
			return fmt.Errorf("probes did not reach every subscriber")
		}
		for i, c := range ps {
			if _, err := c.Publish(ctx, &paho.Publish{Topic: "smoke/probe", QoS: 1, Payload: []byte(fmt.Sprintf("probe-%d-%d", i, probe))}); err != nil {
				return err
			}
		}
		time.Sleep(200 * time.Millisecond) // a tool, not production code
		mu.Lock()
		ok := true
		for j := range subs {
			for i := range ps {
				if perSub[j][fmt.Sprintf("probe-%d-%d", i, probe)] == 0 {
					ok = false
				}
			}
		}
		mu.Unlock()
		if ok {
			break
		}
	}
	var want []string
	for i, c := range ps {
		for k := range n {
			b := fmt.Sprintf("m-%d-%d", i, k)
			want = append(want, b)
			if _, err := c.Publish(ctx, &paho.Publish{Topic: "smoke/x", QoS: 1, Payload: []byte(b)}); err != nil {
				return err
			}
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		missing := 0
		for _, b := range want {
			for j := range subs {
				if perSub[j][b] == 0 {
					missing++
				}
			}
			if group[b] == 0 {
				missing++
			}
		}
		mu.Unlock()
		if missing == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d deliveries missing", missing)
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond) // late duplicates, if any, arrive
	mu.Lock()
	defer mu.Unlock()
	for _, b := range want {
		for j := range subs {
			if perSub[j][b] != 1 {
				return fmt.Errorf("subscriber %d got %s %d times", j, b, perSub[j][b])
			}
		}
		if group[b] != 1 {
			return fmt.Errorf("the shared group got %s %d times", b, group[b])
		}
	}
	fmt.Printf("smoke: %d publishers, %d subscribers, %d shared members through %s: %d messages, each once at every subscriber and once in the group\n",
		pubs, subs, subs, addr, len(want))
	return nil
}
