package fault

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/tolsey/tolsey/core/coretest"
)

// Drill 3 (docs/reliability.md), disk full: data.dir on a 4 MiB tmpfs, filled up by a
// file while the gateway runs. Promised: publishers of retained messages
// and of messages for a durable queue are refused (MQTT 5 PUBACK 0x80, the
// store failed; 0x97 would be a quota of ours) while live traffic goes on;
// nothing in the stores is corrupted (bbolt's Tx.Check on both files);
// once the filler is removed the same connections are served again, with
// no restart; what was stored before the disk filled is still there.
func TestDiskFull(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=4m"); err != nil {
		t.Fatalf("mount -t tmpfs -o size=4m %s: %v (the drill needs root, or CAP_SYS_ADMIN, for a small file system of its own)", dir, err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, 0) })
	args := []string{"--data.dir=" + dir, `--queues.declare=[{"name":"drill","subscriptions":["data/#"]}]`}
	gw := start(t, args...)

	c := dial5(t, gw.mqtt, "pub", true, 1)
	if code, err := c.pub("ret/before", []byte("kept"), true); err != nil || code != 0 {
		t.Fatalf("retained publish before the fill: %#x %v", code, err)
	}
	if code, err := c.pub("data/before", []byte("queued"), false); err != nil || code != 0 {
		t.Fatalf("queued publish before the fill: %#x %v", code, err)
	}
	sub := dial5(t, gw.mqtt, "live", true, 1<<12)
	sub.subscribe(t, "live/#", 1)

	// Fill the file system to the last byte.
	filler := filepath.Join(dir, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	chunk := bytes.Repeat([]byte{'x'}, 64<<10)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("fill: %v", err)
			}
			break
		}
	}
	for small := chunk[:512]; ; { // the last partial pages
		if _, err := f.Write(small); err != nil {
			break
		}
	}
	_ = f.Close()

	// Publish until refused: the stores may have free pages left in their
	// files, so the first few can still succeed.
	payload := bytes.Repeat([]byte{'p'}, 16<<10)
	refusedCode := func(topic string, retain bool) (byte, int) {
		for n := 0; n < 2000; n++ {
			code, err := c.pub(fmt.Sprintf("%s/%d", topic, n), payload, retain)
			if err != nil {
				t.Fatalf("%s: no PUBACK with the disk full: %v", topic, err)
			}
			if code != 0 {
				return code, n
			}
		}
		t.Fatalf("%s: 2000 publishes of 16 KiB accepted on a full 4 MiB disk", topic)
		return 0, 0
	}
	retCode, retOK := refusedCode("ret/full", true)
	qCode, qOK := refusedCode("data/full", false)
	t.Logf("disk full: retained publish refused %#02x (after %d accepted), queued publish refused %#02x (after %d accepted)", retCode, retOK, qCode, qOK)
	for what, code := range map[string]byte{"retained": retCode, "queued": qCode} {
		if code != 0x80 && code != 0x97 {
			t.Errorf("a %s publish on a full disk got %#02x; want 0x80 (store failed) or 0x97", what, code)
		}
	}
	// Live traffic (no queue, no retain) is not touched.
	if code, err := c.pub("live/x", []byte("live"), false); err != nil || code != 0 {
		t.Errorf("live publish with the disk full: %#x %v", code, err)
	}
	select {
	case m := <-sub.msgs:
		if string(m.Payload) != "live" {
			t.Errorf("live subscriber got %q", m.Payload)
		}
	case <-time.After(10 * time.Second):
		t.Error("live message not delivered with the disk full")
	}
	t.Logf("/readyz with the disk full: %d", gw.readyz())

	// Space freed: the same connection is served again, no restart.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	coretest.Eventually(t, "a retained publish accepted once space is freed", 15*time.Second, func() bool {
		code, err := c.pub("ret/after", []byte("back"), true)
		return err == nil && code == 0
	})
	coretest.Eventually(t, "a queued publish accepted once space is freed", 15*time.Second, func() bool {
		code, err := c.pub("data/after", []byte("back"), false)
		return err == nil && code == 0
	})
	t.Logf("recovered %v after the filler was removed, without restart", time.Since(t0).Round(time.Millisecond))
	if got := retainedOf(t, gw.mqtt, "ret/after"); got != "back" {
		t.Errorf("ret/after = %q", got)
	}

	// Stopped: both files pass bbolt's consistency check, and what was
	// stored before the fill is still there after a restart.
	if code, _ := gw.Term(15 * time.Second); code != 0 {
		t.Errorf("exit %d after the drill; log:\n%s", code, gw.Output())
	}
	for _, name := range []string{"retained.db", "queues.db"} {
		checkBolt(t, filepath.Join(dir, name))
	}
	gw2 := start(t, args...)
	if got := retainedOf(t, gw2.mqtt, "ret/before"); got != "kept" {
		t.Errorf("ret/before after the drill and a restart = %q, want kept", got)
	}
	inQueue := drainQueue(t, gw2.mqtt, "drill", "data/fence")
	if inQueue["queued"] != 1 || inQueue["back"] == 0 {
		t.Errorf("the durable queue after the drill holds %d messages, without what was acknowledged before and after the fill", len(inQueue))
	}
	t.Logf("durable queue after the drill and a restart: %d messages", len(inQueue))
}

// checkBolt opens a bbolt file read-only and fails the test on any error
// Tx.Check reports.
func checkBolt(t *testing.T, path string) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	defer db.Close()
	n := 0
	if err := db.View(func(tx *bolt.Tx) error {
		for err := range tx.Check() {
			n++
			t.Errorf("%s: %v", filepath.Base(path), err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Logf("%s: bbolt check clean", filepath.Base(path))
	}
}
