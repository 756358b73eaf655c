package session

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
)

// FileName is the embedded store's file under data.dir. A file of its own,
// not a bucket in the retained store's: bbolt lets one write transaction
// run per file, so sharing one would put the session commits and the
// retained store's in one line, and the session file can be removed (all
// sessions forgotten) without touching retained messages.
const FileName = "sessions.db"

var (
	bucketClients  = []byte("clients")  // client id → record
	bucketSubs     = []byte("subs")     // client id, 0, filter → subscription
	bucketInflight = []byte("inflight") // client id, 0, packet id (2 bytes) → message
)

// Bolt is the embedded backend: one bbolt file, one transaction per batch.
// Its methods run on one goroutine at a time (Backend), the compaction too.
type Bolt struct {
	db   *bolt.DB
	path string

	// Compaction (compact.go): bbolt reuses the pages it frees but never
	// gives them back, so a file that once held many sessions stays that
	// large. minCompactSize, compactRatio and compactEvery are fields
	// so that tests can lower them.
	minCompactSize int64   // smaller files are left as they are
	compactRatio   float64 // compact once this share of the file is free
	compactEvery   time.Duration
	nextCheck      time.Time // the free space is looked at no sooner
	compactions    int       // done since open

	// open opens the file (openFile; tests make it fail). db is nil after
	// a compaction could not reopen the file: the next Apply tries again.
	open func(path string) (*bolt.DB, error)
	// compactHook, when set (tests), runs as a compaction begins.
	compactHook func()
}

var _ Backend = (*Bolt)(nil)

// OpenBolt opens (creating if needed) dir/sessions.db.
func OpenBolt(dir string) (*Bolt, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("session: %w", err)
	}
	path := filepath.Join(dir, FileName)
	// A copy a compaction left unfinished (the process was killed before
	// the rename) is incomplete: the file it copied is whole.
	if err := os.Remove(path + compactSuffix); err != nil && !os.IsNotExist(err) {
		return nil, fmt.Errorf("session: %w", err)
	}
	db, err := openFile(path)
	if err != nil {
		return nil, fmt.Errorf("session: open %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketClients, bucketSubs, bucketInflight} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("session: %s: %w", path, err)
	}
	return &Bolt{db: db, path: path, minCompactSize: defaultMinCompactSize, compactRatio: defaultCompactRatio,
		compactEvery: defaultCompactEvery, open: openFile}, nil
}

// openFile opens a session file with the store's options.
func openFile(path string) (*bolt.DB, error) {
	return bolt.Open(path, 0o600, &bolt.Options{
		Timeout: 5 * time.Second, // another gateway on the same data.dir
		// Cheaper commits for a write-heavy file, as the retained store:
		// the freelist is rebuilt by a scan at open.
		NoFreelistSync: true,
		FreelistType:   bolt.FreelistMapType,
	})
}

// key is the client id, a 0 byte (no MQTT string holds U+0000
// [MQTT-1.5.4-2]) and k: one client's entries are one range.
func key(client string, k []byte) []byte {
	b := make([]byte, 0, len(client)+1+len(k))
	b = append(b, client...)
	b = append(b, 0)
	return append(b, k...)
}

// Apply writes ops in one transaction: one commit, one fsync round.
func (s *Bolt) Apply(ops []Op) error {
	return s.apply(ops)
}

// Maintain runs after a commit's waiters are answered (Maintainer): at
// most once every compactEvery, it looks at the file's free space and
// compacts it when too much of it is free (maybeCompact).
func (s *Bolt) Maintain() { s.maybeCompact(time.Now()) }

func (s *Bolt) apply(ops []Op) error {
	if s.db == nil {
		// A compaction swapped the file but could not reopen it.
		db, err := s.open(s.path)
		if err != nil {
			return fmt.Errorf("session: reopen %s: %w", s.path, err)
		}
		s.db = db
	}
	return s.db.Update(func(tx *bolt.Tx) error {
		clients, subs, inflight := tx.Bucket(bucketClients), tx.Bucket(bucketSubs), tx.Bucket(bucketInflight)
		for _, op := range ops {
			var err error
			switch op.Kind {
			case PutClient:
				err = clients.Put([]byte(op.Client), op.Value)
			case DeleteSession:
				if err = clients.Delete([]byte(op.Client)); err == nil {
					if err = deleteRange(subs, key(op.Client, nil)); err == nil {
						err = deleteRange(inflight, key(op.Client, nil))
					}
				}
			case PutSub:
				err = subs.Put(key(op.Client, op.Key), op.Value)
			case DeleteSub:
				err = subs.Delete(key(op.Client, op.Key))
			case PutInflight:
				err = inflight.Put(key(op.Client, op.Key), op.Value)
			case DeleteInflight:
				err = inflight.Delete(key(op.Client, op.Key))
			default:
				err = fmt.Errorf("session: unknown op %d", op.Kind)
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
}

func deleteRange(b *bolt.Bucket, prefix []byte) error {
	c := b.Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Seek(prefix) {
		if err := b.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

// Load reads every entry, clients first. key and value are valid only
// during fn.
func (s *Bolt) Load(fn func(kind Kind, client string, key, value []byte) error) error {
	return s.db.View(func(tx *bolt.Tx) error {
		err := tx.Bucket(bucketClients).ForEach(func(k, v []byte) error {
			return fn(PutClient, string(k), nil, v)
		})
		if err != nil {
			return err
		}
		for _, t := range []struct {
			b    []byte
			kind Kind
		}{{bucketSubs, PutSub}, {bucketInflight, PutInflight}} {
			err := tx.Bucket(t.b).ForEach(func(k, v []byte) error {
				i := bytes.IndexByte(k, 0)
				if i < 0 {
					return fmt.Errorf("session: bad key %q", k)
				}
				return fn(t.kind, string(k[:i]), k[i+1:], v)
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
}

// Close closes the file.
func (s *Bolt) Close() error {
	if s.db == nil {
		return nil // closed by a compaction that could not reopen it
	}
	return s.db.Close()
}
