package buffer

import (
	"bytes"
	"encoding/binary"
	"errors"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/tolsey/tolsey/core/coretest"
)

// filled makes a buffer file holding n records of 200 bytes in queue q and
// returns its path, closed.
func filled(t *testing.T, n int) string {
	t.Helper()
	dir := t.TempDir()
	b := open(t, dir, Options{})
	rec := bytes.Repeat([]byte("c"), 200)
	var wg sync.WaitGroup
	for w := range 32 { // concurrent: a few commits, not n
		wg.Go(func() {
			for i := w; i < n; i += 32 {
				if _, err := b.Append(ctx(t), "q", rec); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, FileName)
}

// wantCorrupt opens path's directory and wants an error that wraps
// ErrCorrupt and names the file (and no panic, which would end the test
// binary).
func wantCorrupt(t *testing.T, path, mentions string) {
	t.Helper()
	b, err := Open(filepath.Dir(path), Options{OpenTimeout: time.Second})
	if err == nil {
		_ = b.Close()
		t.Fatal("opened a damaged file")
	}
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), mentions) {
		t.Fatalf("error %q: want ErrCorrupt naming %s and saying %q", err, path, mentions)
	}
	t.Log(err)
}

func TestCorruptGarbage(t *testing.T) {
	for _, size := range []int{100, 64 << 10} {
		path := filepath.Join(t.TempDir(), FileName)
		junk := make([]byte, size)
		for i := range junk {
			junk[i] = byte(rand.N(256))
		}
		if err := os.WriteFile(path, junk, 0o600); err != nil {
			t.Fatal(err)
		}
		wantCorrupt(t, path, "")
	}
}

// TestCorruptTruncated cuts the file at several points: bbolt maps it
// larger than it is, and reading a page past the cut (the freelist in
// bbolt's own Open, a bucket page in ours) would fault, killing the process.
func TestCorruptTruncated(t *testing.T) {
	ps := int64(os.Getpagesize())
	for _, cut := range []func(hw int64) int64{
		func(int64) int64 { return 3 * ps },
		func(hw int64) int64 { return hw / 2 / ps * ps },
		func(hw int64) int64 { return hw - ps },
		func(hw int64) int64 { return hw - 100 },
	} {
		path := filled(t, 2000)
		db, err := bolt.Open(path, 0o600, nil)
		if err != nil {
			t.Fatal(err)
		}
		var hw int64 // high water: the end of the last page in use
		_ = db.View(func(tx *bolt.Tx) error { hw = tx.Size(); return nil })
		_ = db.Close()
		if err := os.Truncate(path, cut(hw)); err != nil {
			t.Fatal(err)
		}
		wantCorrupt(t, path, "")
	}
}

// TestCorruptPages overwrites every page but the two meta pages: bbolt
// would panic reading them; Open must say the file is damaged.
func TestCorruptPages(t *testing.T) {
	path := filled(t, 200)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := 2 * os.Getpagesize(); i < len(data); i++ {
		data[i] = 0xa5
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	wantCorrupt(t, path, "")
}

// TestCorruptFoundLater: a damaged page that Open does not read (the middle
// of a long queue) is found by Next, which fails with ErrCorrupt naming
// the file instead of panicking, and every call fails from then on.
func TestCorruptFoundLater(t *testing.T) {
	path := filled(t, 3000)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// Mark as no known page type every leaf page whose first key is a
	// record in the middle of q (stale copies included: one is live).
	ps, hit := os.Getpagesize(), 0
	for off := 2 * ps; off+ps <= len(data); off += ps {
		p := data[off : off+ps]
		const leaf, header = 0x02, 16
		if binary.LittleEndian.Uint16(p[8:]) != leaf || binary.LittleEndian.Uint16(p[10:]) == 0 {
			continue
		}
		pos, ksize := binary.LittleEndian.Uint32(p[header+4:]), binary.LittleEndian.Uint32(p[header+8:])
		if k := header + int(pos); ksize == 8 && k+8 <= ps {
			if seq := binary.BigEndian.Uint64(p[k:]); seq > 1000 && seq < 2000 {
				binary.LittleEndian.PutUint16(p[8:], 0x0f00)
				hit++
			}
		}
	}
	if hit == 0 {
		t.Fatal("found no leaf page to damage")
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	var log coretest.SyncBuffer
	b := open(t, filepath.Dir(path), Options{Logger: slog.New(slog.NewTextHandler(&log, nil))})
	_, err = b.Next("q", 0, 3000)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), path) {
		t.Fatalf("Next over a damaged page: %v", err)
	}
	t.Log(err)
	if _, err := b.Append(ctx(t), "q", []byte("x")); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Append after damage was found: %v", err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log.String(), "file damaged") {
		t.Fatalf("damage not logged: %q", log.String())
	}
}

func TestFormatMismatch(t *testing.T) {
	path := filled(t, 1)
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Put(keyFormat, []byte("99")) })
	_ = db.Close()
	wantCorrupt(t, path, `file format "99"`)
}

func TestLockedByAnother(t *testing.T) {
	dir := t.TempDir()
	open(t, dir, Options{})
	b, err := Open(dir, Options{OpenTimeout: 100 * time.Millisecond})
	if err == nil {
		_ = b.Close()
		t.Fatal("a second buffer opened the same file")
	}
	if !strings.Contains(err.Error(), filepath.Join(dir, FileName)) || !strings.Contains(err.Error(), "locked") {
		t.Fatalf("error %q does not name the file and the lock", err)
	}
}

// TestEmptyFile: a file created but never initialised (a crash between
// create and bbolt's first write) is a new, empty buffer, not damage.
func TestEmptyFile(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, FileName), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	b := open(t, dir, Options{})
	if seq, err := b.Append(ctx(t), "q", []byte("x")); seq != 1 || err != nil {
		t.Fatalf("append: %d, %v", seq, err)
	}
}
