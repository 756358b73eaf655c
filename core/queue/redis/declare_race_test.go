package redis

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tolsey/tolsey/core"
	"github.com/tolsey/tolsey/core/queue"
	"github.com/tolsey/tolsey/retain/redistest"
)

// TestOpenAndDropOfOtherGatewaysStayWhole: gateway A declares a queue
// (Open) while gateway B deletes it (Drop). Whichever comes first, the
// store ends with both the configuration and the stream, or neither.
// Before, Open made the stream and then stored the configuration in two
// round trips, and a Drop between them left a configuration without a
// stream: every engine then held (or, restarted, attached to) a queue
// whose appends were refused for good.
func TestOpenAndDropOfOtherGatewaysStayWhole(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	a, b := open(t, srv, "gw-a", time.Minute), open(t, srv, "gw-b", time.Minute)
	t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
	putChecked := false
	for i := range 300 {
		name := fmt.Sprintf("q%d", i)
		var wg sync.WaitGroup
		var errOpen, errDrop error
		wg.Add(2)
		go func() { defer wg.Done(); _, errOpen = a.Open(ctx, queue.Config{Name: name}) }()
		go func() { defer wg.Done(); errDrop = b.Drop(ctx, name) }()
		wg.Wait()
		if errOpen != nil || errDrop != nil {
			t.Fatal(errOpen, errDrop)
		}
		cfg, err := a.client.HExists(ctx, a.cfgKey, name).Result()
		if err != nil {
			t.Fatal(err)
		}
		n, err := a.client.Exists(ctx, a.opts.Prefix+"{"+name+"}:s").Result()
		if err != nil {
			t.Fatal(err)
		}
		if cfg != (n == 1) {
			t.Fatalf("queue %q (try %d): configuration stored %v, stream there %v", name, i, cfg, n == 1)
		}
		if !cfg || putChecked {
			continue
		}
		// Declared last (once is enough): a gateway that starts now can
		// put into it.
		putChecked = true
		e, err := queue.New(ctx, queue.Options{Backend: b, FollowEvery: -1})
		if err != nil {
			t.Fatal(err)
		}
		ch := make(chan error, 1)
		e.Put(name, &core.Message{Topic: "t", Payload: []byte("x"), QoS: 1}, func(err error) { ch <- err })
		err = <-ch
		e.Close()
		if err != nil {
			t.Fatalf("queue %q (try %d): a put into the declared queue: %v", name, i, err)
		}
	}
}

// TestEnsureNeverOverwritesADeclare: gateway A declares a queue with a
// configuration of its own while gateway B makes it on first use
// (Ensure, queues.autoCreate). Whichever comes first, A's configuration
// is what the store holds in the end. Before, Ensure read the store and
// then declared in two steps, and a Declare between them was overwritten
// with B's defaults, everywhere once A followed B's news.
func TestEnsureNeverOverwritesADeclare(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	engine := func(node string) *queue.Engine {
		b := open(t, srv, node, time.Minute)
		t.Cleanup(func() { _ = b.Close() })
		e, err := queue.New(ctx, queue.Options{Backend: b, FollowEvery: -1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(e.Close)
		return e
	}
	a, b := engine("gw-a"), engine("gw-b")
	check := open(t, srv, "check", time.Minute)
	t.Cleanup(func() { _ = check.Close() })
	for i := range 300 {
		name := fmt.Sprintf("q%d", i)
		var wg sync.WaitGroup
		var errA, errB error
		wg.Add(2)
		go func() { defer wg.Done(); _, errA = a.Declare(ctx, queue.Config{Name: name, MaxMessages: 7}) }()
		go func() { defer wg.Done(); _, errB = b.Ensure(ctx, queue.Config{Name: name}) }()
		wg.Wait()
		if errA != nil || errB != nil {
			t.Fatal(errA, errB)
		}
		// Both follow the store, as each other's news would make them.
		for _, e := range []*queue.Engine{a, b} {
			if err := e.Follow(ctx, name); err != nil {
				t.Fatal(err)
			}
		}
		cfg, _, err := check.Declaration(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if got := cfg.MaxMessages; got != 7 {
			t.Fatalf("queue %q (try %d): A declared maxMessages 7 and succeeded; after B's first use the store holds %d", name, i, got)
		}
		for _, e := range []*queue.Engine{a, b} {
			if q, ok := e.Queue(name); !ok || q.Info().Config.MaxMessages != 7 {
				t.Fatalf("queue %q (try %d): an engine holds %v (ok %v), want maxMessages 7", name, i, q, ok)
			}
		}
	}
}
