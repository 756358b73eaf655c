package embedded

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.uber.org/goleak"

	"github.com/tolsey/tolsey/core"
	"github.com/tolsey/tolsey/retain"
	"github.com/tolsey/tolsey/retain/retaintest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func open(t testing.TB, dir string, limits retain.Limits, opts ...Option) *Store {
	t.Helper()
	opts = append([]Option{WithSweepInterval(50 * time.Millisecond)}, opts...)
	s, err := Open(dir, limits, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	retaintest.Run(t, func(t *testing.T, limits retain.Limits) retain.Store {
		return open(t, t.TempDir(), limits)
	})
}

func TestReopen(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, retain.Limits{})
	keep := retaintest.Msg("a/b", "kept")
	retaintest.Set(t, s, keep)
	retaintest.Set(t, s, retaintest.Msg("$SYS/x", "sys"))
	retaintest.Set(t, s, retaintest.Msg("gone", "x"))
	retaintest.Set(t, s, &core.Message{Topic: "gone"})
	short := retaintest.Msg("short", "x")
	short.Expiry = time.Now().Add(100 * time.Millisecond)
	retaintest.Set(t, s, short)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(150 * time.Millisecond) // let "short" expire while closed

	s = open(t, dir, retain.Limits{})
	retaintest.Equal(t, keep, retaintest.Get(t, s, "a/b"))
	if st := s.Stats(); st.Count != 2 {
		t.Fatalf("after reopen: %+v, want a/b and $SYS/x", st)
	}
	if got := retaintest.Topics(t, s, "$SYS/#"); len(got) != 1 {
		t.Fatalf("$SYS after reopen: %v", got)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// The expired message was purged from the file at open, not just hidden.
	db, err := bolt.Open(dir+"/"+FileName, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	_ = db.View(func(tx *bolt.Tx) error {
		if n := tx.Bucket(bucketMessages).Stats().KeyN; n != 2 {
			t.Errorf("file holds %d messages, want 2", n)
		}
		return nil
	})
}

func TestCorruptValueDropped(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, retain.Limits{})
	retaintest.Set(t, s, retaintest.Msg("ok", "x"))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(dir+"/"+FileName, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketMessages).Put([]byte("bad"), []byte{1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f})
	})
	_ = db.Close()
	s = open(t, dir, retain.Limits{})
	if got := retaintest.Topics(t, s, "#"); len(got) != 1 || got[0] != "ok" {
		t.Fatalf("after reopen with a corrupt value: %v", got)
	}
}

func TestFormatMismatch(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, retain.Limits{})
	_ = s.Close()
	db, err := bolt.Open(dir+"/"+FileName, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Put(keyFormat, []byte("99")) })
	_ = db.Close()
	if s, err := Open(dir, retain.Limits{}); err == nil {
		_ = s.Close()
		t.Fatal("opened a file of an unknown format")
	}
}

func TestLockedByAnother(t *testing.T) {
	dir := t.TempDir()
	open(t, dir, retain.Limits{})
	if s, err := Open(dir, retain.Limits{}, WithOpenTimeout(100*time.Millisecond)); err == nil {
		_ = s.Close()
		t.Fatal("a second store opened the same file")
	}
}

const crashEnv = "RETAIN_EMBEDDED_CRASH_DIR"

// TestCrashChild is the child of TestKill9: it Sets messages, reports each
// one once Set has returned, then SIGKILLs itself mid-flight.
func TestCrashChild(t *testing.T) {
	dir := os.Getenv(crashEnv)
	if dir == "" {
		t.Skip("child of TestKill9 only")
	}
	s, err := Open(dir, retain.Limits{})
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(3)
	}
	for i := range 200 {
		m := retaintest.Msg(fmt.Sprintf("crash/%d", i), strconv.Itoa(i))
		if err := s.Set(retaintest.Ctx(t), m); err != nil {
			fmt.Println("set:", err)
			os.Exit(3)
		}
		fmt.Printf("acked %d\n", i)
	}
	// More Sets in flight while we die: they may or may not survive.
	for i := range 8 {
		go func() { _ = s.Set(retaintest.Ctx(t), retaintest.Msg(fmt.Sprintf("inflight/%d", i), "x")) }()
	}
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {}
}

func TestKill9(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashEnv+"="+dir)
	out, err := cmd.Output()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child did not die by SIGKILL: %v\n%s", err, out)
	}
	acked := 0
	for _, line := range strings.Split(string(out), "\n") {
		if _, err := fmt.Sscanf(line, "acked %d", new(int)); err == nil {
			acked++
		}
	}
	if acked != 200 {
		t.Fatalf("child acked %d Sets, want 200:\n%s", acked, out)
	}
	s := open(t, dir, retain.Limits{})
	for i := range acked {
		m := retaintest.Get(t, s, fmt.Sprintf("crash/%d", i))
		if m == nil || string(m.Payload) != strconv.Itoa(i) {
			t.Fatalf("acked Set %d lost after kill -9: %+v", i, m)
		}
	}
	if n := len(retaintest.Topics(t, s, "crash/+")); n != acked {
		t.Fatalf("Match finds %d of %d", n, acked)
	}
}
