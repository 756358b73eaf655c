package session

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Compaction of sessions.db. bbolt frees the pages of deleted sessions for
// later writes but never shrinks its file: after a storm of devices with
// persistent sessions that then expired, the file stays at its peak. So,
// after a commit (Apply, on the committer's goroutine: writes queue in the
// Log meanwhile and go in the next batch), at most once every
// compactEvery, the store looks at its free pages; when the file is over
// minCompactSize and more than compactRatio of it is free, it copies the
// live data into a new file (bolt.Compact), syncs it, closes the old file,
// renames the copy over it, syncs the directory and reopens.
//
// kill -9 at any point loses nothing: until the rename the old file is
// whole and the copy (sessions.db.compact) is removed at the next open; the
// rename is atomic, and the copy was synced before it, so after it the new
// file is whole. TestCompactionSurvivesKill kills a process looping over
// compactions and checks the file each time.
const (
	compactSuffix         = ".compact"
	defaultMinCompactSize = 8 << 20 // below this the space is not worth a copy
	defaultCompactRatio   = 0.5
	defaultCompactEvery   = time.Minute
	// compactTxSize bounds the bytes copied per transaction of the copy.
	compactTxSize = 4 << 20
)

// maybeCompact compacts the file if it is due and worth it; a failure is
// logged and leaves the store on its old file (or, if even reopening
// failed, closed: the next commit opens it again).
func (s *Bolt) maybeCompact(now time.Time) {
	if now.Before(s.nextCheck) || s.db == nil {
		return
	}
	s.nextCheck = now.Add(s.compactEvery)
	size, free := s.space()
	if size < s.minCompactSize || float64(free) < s.compactRatio*float64(size) {
		return
	}
	start := time.Now()
	if err := s.compact(); err != nil {
		slog.Error("session store: compaction failed", "file", s.path, "error", err)
		return
	}
	after, _ := s.space()
	slog.Info("session store compacted", "file", s.path, "before_bytes", size, "after_bytes", after,
		"took", time.Since(start))
}

// space is the file's size and the bytes of its free pages.
func (s *Bolt) space() (size, free int64) {
	_ = s.db.View(func(tx *bolt.Tx) error {
		size = tx.Size()
		return nil
	})
	st := s.db.Stats()
	return size, int64(st.FreePageN+st.PendingPageN) * int64(s.db.Info().PageSize)
}

// compact swaps the file for a compacted copy.
func (s *Bolt) compact() error {
	if s.compactHook != nil {
		s.compactHook()
	}
	tmp := s.path + compactSuffix
	_ = os.Remove(tmp)
	dst, err := s.open(tmp)
	if err != nil {
		return err
	}
	if err := bolt.Compact(dst, s.db, compactTxSize); err != nil {
		dst.Close()
		os.Remove(tmp)
		return fmt.Errorf("copy: %w", err)
	}
	// Each copy transaction was committed with an fsync (NoSync is off):
	// the copy is on disk before the rename below.
	if err := dst.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := s.db.Close(); err != nil {
		// bbolt marks the handle closed even when Close fails: the next
		// Apply opens the file again.
		s.db = nil
		os.Remove(tmp)
		return err
	}
	renameErr := os.Rename(tmp, s.path)
	if renameErr == nil {
		renameErr = syncDir(filepath.Dir(s.path))
	}
	// Reopen whichever file is now at path: the copy, or after a failed
	// rename the old file.
	db, err := s.open(s.path)
	if err != nil {
		s.db = nil // the next Apply opens it again
		return fmt.Errorf("reopen: %w", err)
	}
	s.db = db
	if renameErr != nil {
		os.Remove(tmp)
		return renameErr
	}
	s.compactions++
	return nil
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
