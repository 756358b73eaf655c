package session

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// sessionOps are the ops of n sessions named prefix-i, each with a
// subscription and an in-flight message of size bytes.
func sessionOps(prefix string, n, size int) []Op {
	val := strings.Repeat("m", size)
	var ops []Op
	for i := range n {
		c := fmt.Sprintf("%s-%d", prefix, i)
		ops = append(ops, Op{Kind: PutClient, Client: c, Value: []byte("rec-" + c)},
			Op{Kind: PutSub, Client: c, Key: []byte("t/" + c), Value: []byte{1}},
			Op{Kind: PutInflight, Client: c, Key: []byte{0, 1}, Value: []byte(val)})
	}
	return ops
}

func deleteOps(prefix string, n int) []Op {
	var ops []Op
	for i := range n {
		ops = append(ops, Op{Kind: DeleteSession, Client: fmt.Sprintf("%s-%d", prefix, i)})
	}
	return ops
}

func applyBatches(t testing.TB, b *Bolt, ops []Op) {
	if err := applyAll(b, ops); err != nil {
		t.Fatal(err)
	}
}

// applyAll applies ops in transactions of maxBatch, as the Log does,
// without compacting.
func applyAll(b *Bolt, ops []Op) error {
	for len(ops) > 0 {
		n := min(len(ops), maxBatch)
		if err := b.apply(ops[:n]); err != nil {
			return err
		}
		ops = ops[n:]
	}
	return nil
}

func fileSize(t testing.TB, path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// checkFile runs bbolt's consistency check on the closed file at path.
func checkFile(t *testing.T, path string) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.View(func(tx *bolt.Tx) error {
		for err := range tx.Check() {
			return err
		}
		return nil
	}); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// A file that grew with thousands of sessions shrinks once most of them
// are gone, at the next commit after the check is due, and keeps the rest
// whole. Before compaction, the file kept its peak size.
func TestCompactionShrinksFile(t *testing.T) {
	dir := t.TempDir()
	b, err := OpenBolt(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { b.Close() }()
	b.minCompactSize = 1 << 20
	applyBatches(t, b, sessionOps("gone", 4000, 512))
	applyBatches(t, b, sessionOps("kept", 20, 512))
	applyBatches(t, b, deleteOps("gone", 4000))
	path := filepath.Join(dir, FileName)
	peak := fileSize(t, path)

	b.nextCheck = time.Time{} // due now
	if err := b.Apply([]Op{{Kind: PutClient, Client: "late", Value: []byte("rec-late")}}); err != nil {
		t.Fatal(err)
	}
	b.Maintain() // as the Log does after the commit's answers
	after := fileSize(t, path)
	t.Logf("sessions.db: %d bytes at the peak, %d after compaction", peak, after)
	if b.compactions != 1 || after > peak/4 {
		t.Fatalf("compactions %d; file %d bytes after, %d at the peak: want one compaction, a quarter of the size at most", b.compactions, after, peak)
	}
	if _, err := os.Stat(path + compactSuffix); !os.IsNotExist(err) {
		t.Fatalf("the compaction's copy is left: %v", err)
	}

	// Data intact, and the store goes on writing to the new file.
	if err := b.Apply([]Op{{Kind: PutSub, Client: "late", Key: []byte("t/late"), Value: []byte{2}}}); err != nil {
		t.Fatal(err)
	}
	got := loadAll(t, b)
	var want []entry
	for i := range 20 {
		c := fmt.Sprintf("kept-%d", i)
		want = append(want, entry{PutClient, c, "", "rec-" + c})
	}
	want = append(want, entry{PutClient, "late", "", "rec-late"})
	for i := range 20 {
		c := fmt.Sprintf("kept-%d", i)
		want = append(want, entry{PutSub, c, "t/" + c, "\x01"})
	}
	want = append(want, entry{PutSub, "late", "t/late", "\x02"})
	for i := range 20 {
		c := fmt.Sprintf("kept-%d", i)
		want = append(want, entry{PutInflight, c, "\x00\x01", strings.Repeat("m", 512)})
	}
	cmp := func(a, b entry) int { return strings.Compare(fmt.Sprint(a), fmt.Sprint(b)) }
	slices.SortFunc(got, cmp)
	slices.SortFunc(want, cmp)
	if !slices.Equal(got, want) {
		t.Fatalf("after compaction: %d entries, want %d:\n%v", len(got), len(want), got)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	checkFile(t, path)
	if b, err = OpenBolt(dir); err != nil { // the deferred Close closes this one
		t.Fatal(err)
	}
}

// A file under minCompactSize, or with little free space, is left alone.
func TestCompactionLeavesSmallOrFullFiles(t *testing.T) {
	b, err := OpenBolt(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	applyBatches(t, b, sessionOps("s", 2000, 512))
	b.minCompactSize = 1 << 40
	applyBatches(t, b, deleteOps("s", 2000))
	b.maybeCompact(time.Now())
	b.minCompactSize = 0
	b.maybeCompact(time.Now()) // not due yet
	if b.compactions != 0 {
		t.Fatalf("%d compactions, want none", b.compactions)
	}
	applyBatches(t, b, sessionOps("s", 2000, 512)) // the free pages are used again
	b.maybeCompact(time.Now().Add(time.Hour))
	if b.compactions != 0 {
		t.Fatalf("%d compactions of a file with little free space, want none", b.compactions)
	}
}

const compactChildEnv = "TOLSEY_SESSION_COMPACT_CHILD"

// TestCompactionSurvivesKill kills (SIGKILL) a process that does nothing
// but fill the file with sessions, delete them and compact, at random
// moments, several times; after each kill the store opens, the file passes
// bbolt's check, and the sessions written before the first start are all
// there.
func TestCompactionSurvivesKill(t *testing.T) {
	if dir := os.Getenv(compactChildEnv); dir != "" {
		compactForever(dir)
		return
	}
	dir := t.TempDir()
	b, err := OpenBolt(dir)
	if err != nil {
		t.Fatal(err)
	}
	applyBatches(t, b, sessionOps("kept", 50, 256))
	want := loadAll(t, b)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, FileName)
	const kills = 6
	midCopy := 0
	for k := range kills {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCompactionSurvivesKill$")
		cmd.Env = append(os.Environ(), compactChildEnv+"="+dir)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Kill it after a random number of its compactions have begun:
		// in the middle of one, or of the writes between two.
		r := bufio.NewScanner(out)
		n := 1 + rand.IntN(4)
		for seen := 0; seen < n && r.Scan(); {
			if r.Text() == "compacting" {
				seen++
			}
		}
		time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond) // a random point, not a wait for something
		if err := cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()

		if _, err := os.Stat(path + compactSuffix); err == nil {
			midCopy++
		}
		b, err := OpenBolt(dir)
		if err != nil {
			t.Fatalf("kill %d: open after the kill: %v", k, err)
		}
		got := loadAll(t, b)
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
		var kept []entry
		for _, e := range got {
			if strings.HasPrefix(e.client, "kept-") {
				kept = append(kept, e)
			}
		}
		if !slices.Equal(kept, want) {
			t.Fatalf("kill %d: %d entries of the kept sessions, want %d", k, len(kept), len(want))
		}
		checkFile(t, path)
		if _, err := os.Stat(path + compactSuffix); !os.IsNotExist(err) {
			t.Fatalf("kill %d: the unfinished copy is still there after an open: %v", k, err)
		}
	}
	t.Logf("%d kills, %d of them with a compaction's copy left behind", kills, midCopy)
}

// compactForever is the killed process of TestCompactionSurvivesKill.
func compactForever(dir string) {
	b, err := OpenBolt(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	b.minCompactSize = 0
	for round := 0; ; round++ {
		prefix := fmt.Sprintf("churn%d", round)
		err := applyAll(b, sessionOps(prefix, 1000, 512))
		if err == nil {
			err = applyAll(b, deleteOps(prefix, 1000))
		}
		if err == nil {
			fmt.Println("compacting")
			err = b.compact()
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
}
