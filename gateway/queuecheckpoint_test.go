package gateway

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/tolsey/tolsey/core/coretest"
	queueembedded "github.com/tolsey/tolsey/core/queue/embedded"
)

// TestQueueCheckpointFailureShown: when the embedded queue store's
// checkpoints fail (here: a log segment it cannot delete, a directory
// in its place), /readyz stays 200 and names the cause, and /metrics
// says so (tolsey_queue_checkpoint_failing 1, failures counted); once
// they succeed again both clear.
func TestQueueCheckpointFailureShown(t *testing.T) {
	dir := t.TempDir()
	g := startGateway(t, "--queues.backend=embedded", "--data.dir="+dir)
	if code, body := call(t, g, "PUT", "/api/v1/queues/ck", `{"subscriptions": ["ck/#"]}`); code != http.StatusCreated {
		t.Fatalf("create: %d %s", code, body)
	}
	if _, body := get(t, g, "/metrics"); !strings.Contains(body, "tolsey_queue_checkpoint_failing 0") {
		t.Fatalf("/metrics before: no tolsey_queue_checkpoint_failing 0")
	}
	// Segment 0 sorts before any the store writes: every checkpoint
	// tries to delete it, and cannot (a directory that is not empty).
	blocker := filepath.Join(dir, queueembedded.FileName) + ".wal.0000000000000000"
	if err := os.MkdirAll(filepath.Join(blocker, "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	c := mqttClient(t, g, "pub")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.Publish(ctx, &paho.Publish{Topic: "ck/1", QoS: 1, Payload: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	coretest.Eventually(t, "/readyz to name the failing checkpoints", 20*time.Second, func() bool {
		code, body := get(t, g, "/readyz")
		if code != http.StatusOK {
			t.Fatalf("/readyz %d %s: a failing checkpoint leaves the gateway ready", code, body)
		}
		return strings.Contains(body, "queue store degraded: ") && strings.Contains(body, "checkpoints failing since")
	})
	_, body := get(t, g, "/metrics")
	if !strings.Contains(body, "tolsey_queue_checkpoint_failing 1") || strings.Contains(body, "tolsey_queue_checkpoint_failures_total 0") {
		t.Fatalf("/metrics while failing:\n%s", grepLines(body, "checkpoint"))
	}
	if err := os.RemoveAll(blocker); err != nil {
		t.Fatal(err)
	}
	coretest.Eventually(t, "/readyz to clear", 20*time.Second, func() bool {
		_, body := get(t, g, "/readyz")
		return !strings.Contains(body, "queue store")
	})
	if _, body := get(t, g, "/metrics"); !strings.Contains(body, "tolsey_queue_checkpoint_failing 0") {
		t.Fatalf("/metrics after:\n%s", grepLines(body, "checkpoint"))
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestQueueLogFullRefusesPublishes: while the embedded queue store's
// checkpoints fail, a publish to a durable queue is refused as by a
// failed store (MQTT 5 PUBACK 0x80, the reason naming the log) once the log
// holds queues.embedded.maxLog; /readyz says appends are refused; once
// checkpoints succeed again publishes are taken.
func TestQueueLogFullRefusesPublishes(t *testing.T) {
	dir := t.TempDir()
	g := startGateway(t, "--queues.backend=embedded", "--data.dir="+dir, "--queues.embedded.maxLog=1MiB")
	if code, body := call(t, g, "PUT", "/api/v1/queues/ck", `{"subscriptions": ["ck/#"]}`); code != http.StatusCreated {
		t.Fatalf("create: %d %s", code, body)
	}
	blocker := filepath.Join(dir, queueembedded.FileName) + ".wal.0000000000000000"
	if err := os.MkdirAll(filepath.Join(blocker, "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	c := mqttClient(t, g, "pub")
	publish := func(n int) (*paho.PublishResponse, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return c.Publish(ctx, &paho.Publish{Topic: "ck/1", QoS: 1, Payload: make([]byte, n)})
	}
	if _, err := publish(1); err != nil {
		t.Fatal(err)
	}
	coretest.Eventually(t, "/readyz to name the failing checkpoints", 20*time.Second, func() bool {
		_, body := get(t, g, "/readyz")
		return strings.Contains(body, "checkpoints failing since")
	})
	var refused *paho.PublishResponse
	for range 20 { // 5 MiB: past the 1 MiB log by far
		pr, err := publish(256 << 10)
		if err != nil {
			if pr == nil {
				t.Fatal(err)
			}
			refused = pr
			break
		}
	}
	if refused == nil {
		t.Fatal("20 publishes of 256 KiB taken: the log's limit refuses none")
	}
	if refused.ReasonCode != 0x80 || refused.Properties == nil ||
		!strings.Contains(refused.Properties.ReasonString, "write-ahead log") {
		t.Fatalf("refusal %#x %+v, want 0x80 naming the write-ahead log", refused.ReasonCode, refused.Properties)
	}
	if code, body := get(t, g, "/readyz"); code != http.StatusOK || !strings.Contains(body, "appends refused") {
		t.Fatalf("/readyz %d %s: does not say appends are refused", code, body)
	}
	if err := os.RemoveAll(blocker); err != nil {
		t.Fatal(err)
	}
	coretest.Eventually(t, "publishes to be taken again", 20*time.Second, func() bool {
		_, err := publish(1)
		return err == nil
	})
}
