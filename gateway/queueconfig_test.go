package gateway

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/tolsey/tolsey/core"
	"github.com/tolsey/tolsey/core/queue"
)

func TestConfigQueuesDefaults(t *testing.T) {
	q := DefaultConfig().Queues
	want := queue.Limits{MaxQueues: 10_000, MaxTemporary: 100, MaxMessages: 100_000, MaxBytes: 64 << 20}
	if q.Backend != "embedded" || q.AutoCreate || q.V311Full != "disconnect" || q.Limits != want || q.Window != 1000 || len(q.Declare) != 0 {
		t.Fatalf("queues defaults: %+v", q)
	}
}

// queues: holds the settings and, under declare:, the queues as a YAML
// list; env and flags give the list as a JSON array. Every field of a
// declared queue reaches its queue.Config.
func TestConfigQueues(t *testing.T) {
	f := filepath.Join(t.TempDir(), "g.yaml")
	os.WriteFile(f, []byte(`queues:
  backend: memory
  autoCreate: true
  v311Full: drop
  maxQueues: 50
  maxTemporary: 3
  maxMessages: 10
  maxBytes: 1MiB
  window: 20
  declare:
    - name: foxes-and-frogs
      subscriptions: ["animals/f*", "!animals/fox"]
      access: exclusive
      maxMessages: 5
      maxBytes: 10KiB
      ttl: 1h
      deadLetter: parked
      maxDeliveries: 3
    - name: parked
      maxBytes: 2048
      ttl: 0
`), 0o644)
	c, err := LoadConfig([]string{"--config", f}, nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	q := c.Queues
	if q.Backend != "memory" || !q.AutoCreate || q.V311Full != "drop" || q.Window != 20 ||
		q.Limits != (queue.Limits{MaxQueues: 50, MaxTemporary: 3, MaxMessages: 10, MaxBytes: 1 << 20}) {
		t.Errorf("settings: %+v", q)
	}
	if len(q.Declare) != 2 {
		t.Fatalf("declared: %+v", q.Declare)
	}
	d := q.Declare[0]
	if d.Name != "foxes-and-frogs" || !slices.Equal(d.Subscriptions, []string{"animals/f*", "!animals/fox"}) ||
		d.Access != queue.Exclusive || d.MaxMessages != 5 || d.MaxBytes != 10<<10 || d.TTL != queue.Duration(time.Hour) ||
		d.DeadLetter != "parked" || d.MaxDeliveries != 3 {
		t.Errorf("queue 0: %+v", d)
	}
	if d := q.Declare[1]; d.Name != "parked" || d.Access != queue.NonExclusive || d.MaxBytes != 2048 || d.TTL != 0 {
		t.Errorf("queue 1: %+v", d)
	}

	// A section whose keys are all commented out is no key at all.
	empty := filepath.Join(t.TempDir(), "empty.yaml")
	os.WriteFile(empty, []byte("queues:\n  # backend: memory\nlog:\n  level: warn\n"), 0o644)
	if c, err := LoadConfig([]string{"--config", empty}, nil, io.Discard); err != nil || c.LogLevel != "warn" {
		t.Fatalf("an empty queues: section: %v", err)
	}

	env := []string{`TOLSEY_QUEUES_DECLARE=[{"name":"q1","subscriptions":["a/>"],"maxBytes":"1KiB","ttl":"30s"}]`}
	c, err = LoadConfig(nil, env, io.Discard)
	if err != nil || len(c.Queues.Declare) != 1 || c.Queues.Declare[0].MaxBytes != 1024 || c.Queues.Declare[0].TTL != queue.Duration(30*time.Second) {
		t.Fatalf("env: %v %+v", err, c)
	}
}

// A bad queues value stops the gateway (exit 2) naming the key down to the
// field of the declared queue at fault, on one line.
func TestConfigQueuesErrorsNameTheKey(t *testing.T) {
	dir := t.TempDir()
	list := filepath.Join(dir, "list.yaml")
	os.WriteFile(list, []byte("queues:\n  - name: a\n"), 0o644)
	decl := func(s string) []string { return []string{"--queues.declare=" + s} }
	cases := []struct {
		args []string
		key  string
		msg  string
	}{
		{args: []string{"--queues.backend=mongo"}, key: "queues.backend"},
		{args: []string{"--queues.v311Full=ignore"}, key: "queues.v311Full"},
		{args: []string{"--queues.autoCreate=yes"}, key: "queues.autoCreate"},
		{args: []string{"--queues.maxQueues=0"}, key: "queues.maxQueues"},
		{args: []string{"--queues.maxTemporary=0"}, key: "queues.maxTemporary"},
		{args: []string{"--queues.maxMessages=0"}, key: "queues.maxMessages"},
		{args: []string{"--queues.maxBytes=lots"}, key: "queues.maxBytes"},
		{args: []string{"--queues.window=0"}, key: "queues.window"},
		{args: []string{"--queues.embedded.maxLog=64KiB"}, key: "queues.embedded.maxLog", msg: "at least 1MiB"},
		{args: decl(`[{"name":"a"},{"name":"b"},{"name":"c","access":"shared"}]`), key: "queues.declare[2].access", msg: "exclusive or non-exclusive"},
		{args: decl(`[{"name":"a","subscriptions":["x","a/#/b"]}]`), key: "queues.declare[0].subscriptions[1]", msg: "a/#/b"},
		{args: decl(`[{"name":"a","subscriptions":["$share/g/x"]}]`), key: "queues.declare[0].subscriptions[0]"},
		{args: decl(`[{"name":"a","subscriptions":"x"}]`), key: "queues.declare[0].subscriptions"},
		{args: append(decl(`[{"name":"a","subscriptions":["!x/y/z"]}]`), "--mqtt.maxTopicLevels=2"), key: "queues.declare[0].subscriptions[0]", msg: "mqtt.maxTopicLevels"},
		{args: decl(`[{"name":"a","deadLetter":"nowhere"}]`), key: "queues.declare[0].deadLetter", msg: `"nowhere" is not declared`},
		{args: decl(`[{"name":"a","deadLetter":"a"}]`), key: "queues.declare[0].deadLetter"},
		{args: decl(`[{"name":"a"},{"name":"a"}]`), key: "queues.declare[1].name", msg: "declared already"},
		{args: decl(`[{"subscriptions":["x"]}]`), key: "queues.declare[0].name", msg: "required"},
		{args: decl(`[{"name":"a/#"}]`), key: "queues.declare[0].name", msg: "wildcard"},
		{args: decl(`[{"name":"a","colour":"red"}]`), key: "queues.declare[0].colour", msg: "unknown field"},
		{args: decl(`[{"name":"a","ttl":"soon"}]`), key: "queues.declare[0].ttl"},
		{args: decl(`[{"name":"a","ttl":30}]`), key: "queues.declare[0].ttl"},
		{args: decl(`[{"name":"a","maxBytes":"lots"}]`), key: "queues.declare[0].maxBytes"},
		{args: decl(`[{"name":"a","maxMessages":-1}]`), key: "queues.declare[0].maxMessages"},
		{args: decl(`[{"name":"a","maxDeliveries":1.5}]`), key: "queues.declare[0].maxDeliveries"},
		{args: decl(`{"name":"a"}`), key: "queues.declare"},
		{args: decl(`[nope`), key: "queues.declare"},
		{args: append(decl(`[{"name":"a"},{"name":"b"}]`), "--queues.maxQueues=1"), key: "queues.declare", msg: "queues.maxQueues"},
		// The list cannot sit at queues: itself, beside queues.backend.
		{args: []string{"--config", list}, key: "queues", msg: "declare"},
	}
	for _, c := range cases {
		wantConfigError(t, c.args, nil, c.key, c.msg)
	}
}

// The backends not in this build are refused at start, naming the key;
// main exits 2 on a ConfigError.
func TestQueueBackendEmbeddedKeepsMessages(t *testing.T) {
	dir := t.TempDir()
	args := []string{"--queues.backend=embedded", "--data.dir=" + dir,
		`--queues.declare=[{"name":"kept","subscriptions":["k/#"]}]`}
	g := New(testConfig(t, args...), quiet())
	if err := g.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	res := g.router.Publish(context.Background(), &core.Message{Topic: "k/1", Payload: []byte("durable"), QoS: 1})
	if res.Err != nil || res.Matched == 0 {
		t.Fatalf("publish %+v", res)
	}
	if err := g.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	g = New(testConfig(t, args...), quiet())
	if err := g.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer g.Stop(context.Background())
	q, ok := g.Queues().Queue("kept")
	if !ok {
		t.Fatal("queue gone after a restart")
	}
	if n := q.Info().Messages; n != 1 {
		t.Fatalf("%d messages after a restart, want 1", n)
	}
}

// queues.addresses: read from the file's YAML list, checked (exit 2
// naming the entry's field), and wired into the engine. (What the engine
// parks is tested in core/queue and amqp: here the MQTT front-end's "#"
// counts as a live consumer of every non-MQTT publish until it answers
// core.Interest.)
func TestConfigQueueAddresses(t *testing.T) {
	f := filepath.Join(t.TempDir(), "g.yaml")
	os.WriteFile(f, []byte(`queues:
  declare:
    - name: parked
  addresses:
    - prefix: orders/
      alternate: parked
`), 0o644)
	c, err := LoadConfig([]string{"--config", f}, nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if want := []queue.Alternate{{Prefix: "orders/", Queue: "parked"}}; !slices.Equal(c.Queues.Addresses, want) {
		t.Fatalf("addresses %+v", c.Queues.Addresses)
	}

	decl := `--queues.declare=[{"name":"parked"}]`
	addr := func(s string) []string { return []string{decl, "--queues.addresses=" + s} }
	for _, tc := range []struct {
		args     []string
		key, msg string
	}{
		{args: addr(`[{"prefix":"orders/","alternate":"nowhere"}]`), key: "queues.addresses[0].alternate", msg: `"nowhere" is not declared`},
		{args: addr(`[{"prefix":"a","alternate":"parked"},{"prefix":"orders/#","alternate":"parked"}]`), key: "queues.addresses[1].prefix", msg: "wildcards"},
		{args: addr(`[{"prefix":"orders","alternate":"parked"},{"prefix":"orders/","alternate":"parked"}]`), key: "queues.addresses[1].prefix", msg: "given already"},
		{args: addr(`[{"alternate":"parked"}]`), key: "queues.addresses[0].prefix", msg: "required"},
		{args: addr(`[{"prefix":"a"}]`), key: "queues.addresses[0].alternate", msg: "required"},
		{args: addr(`[{"prefix":"a","alternate":"parked","colour":"red"}]`), key: "queues.addresses[0].colour", msg: "unknown field"},
		{args: addr(`{"prefix":"a"}`), key: "queues.addresses"},
		{args: append(addr(`[{"prefix":"a/b/c","alternate":"parked"}]`), "--mqtt.maxTopicLevels=2"), key: "queues.addresses[0].prefix", msg: "mqtt.maxTopicLevels"},
	} {
		wantConfigError(t, tc.args, nil, tc.key, tc.msg)
	}

	g := New(testConfig(t, addr(`[{"prefix":"orders/","alternate":"parked"}]`)...), quiet())
	if err := g.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer g.Stop(context.Background())
	if got := g.Queues().Alternates(); !slices.Equal(got, []queue.Alternate{{Prefix: "orders", Queue: "parked"}}) {
		t.Fatalf("the engine's alternates: %+v", got)
	}
}
