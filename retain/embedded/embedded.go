// Package embedded is the default retained store: one bbolt file under the
// data directory, so that an edge gateway keeps its retained messages across
// restarts with no server to run. It owns that file and nothing else.
//
// bbolt holds the messages (key: topic, value: the codec encoding); memory
// holds only a core.TopicIndex of topics with their expiry and size, rebuilt
// from the file at open, so that Match costs O(matches) and skips expired
// messages without reading them, while 1M retained messages still fit in well
// under 1 KiB each. Payloads are never cached.
//
// Set is durable when it returns: its write is committed with fsync through
// bbolt's Batch, so concurrent Sets share one commit and one fsync.
package embedded

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/tolsey/tolsey/core"
	"github.com/tolsey/tolsey/core/codec"
	"github.com/tolsey/tolsey/retain"
	"github.com/tolsey/tolsey/retain/internal/catalog"
)

// FileName is the file the store keeps under its directory.
const FileName = "retained.db"

var (
	bucketMessages = []byte("retained.v1")
	bucketMeta     = []byte("meta")
	keyFormat      = []byte("format")
)

const formatVersion = "1"

// Option configures Open.
type Option func(*options)

type options struct {
	logger        *slog.Logger
	sweepInterval time.Duration
	openTimeout   time.Duration
	now           func() time.Time
}

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithSweepInterval sets how often expired messages are purged from the file
// (default 1 s). Reads that meet an expired message also trigger a purge.
func WithSweepInterval(d time.Duration) Option { return func(o *options) { o.sweepInterval = d } }

// WithOpenTimeout bounds the wait for the file lock held by another process
// (default 5 s).
func WithOpenTimeout(d time.Duration) Option { return func(o *options) { o.openTimeout = d } }

// batchDelay is how long a Set waits for others to share its commit
// (bbolt's MaxBatchDelay): longer batches more under load and adds latency
// to a lone Set.
const batchDelay = 2 * time.Millisecond

// stripes serialize the file write and the index update of one topic, so
// that two Sets racing on a topic leave the index describing the message the
// file holds; Sets on different topics still share commits.
const stripes = 64

// Store is the bbolt-backed retained store. It is safe for concurrent use.
type Store struct {
	db     *bolt.DB
	path   string
	limits retain.Limits
	opts   options
	cat    *catalog.Catalog[codec.Meta]
	seed   maphash.Seed
	locks  [stripes]sync.Mutex

	// life is held shared by every call and exclusively by Close, so that
	// Close waits for calls in flight before it closes the file.
	life   sync.RWMutex
	closed atomic.Bool
	stop   chan struct{}
	kick   chan struct{} // wakes the sweeper early; capacity 1
	wg     sync.WaitGroup
	once   sync.Once
}

var _ retain.Store = (*Store)(nil)

// Open opens (creating if needed) the store file under dir and rebuilds the
// topic index from it, purging what expired while it was closed.
func Open(dir string, limits retain.Limits, opts ...Option) (*Store, error) {
	o := options{
		logger:        slog.Default(),
		sweepInterval: time.Second,
		openTimeout:   5 * time.Second,
		now:           time.Now,
	}
	for _, f := range opts {
		f(&o)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("retain: embedded: %w", err)
	}
	path := filepath.Join(dir, FileName)
	db, err := bolt.Open(path, 0o600, &bolt.Options{
		Timeout: o.openTimeout,
		// The freelist is rebuilt by scanning at open instead of being
		// written on every commit: cheaper commits for a write-heavy store.
		NoFreelistSync: true,
		FreelistType:   bolt.FreelistMapType,
	})
	if err != nil {
		return nil, fmt.Errorf("retain: embedded: open %s: %w", path, err)
	}
	db.MaxBatchDelay = batchDelay
	s := &Store{
		db:     db,
		path:   path,
		limits: limits,
		opts:   o,
		cat:    catalog.New(func(m codec.Meta) codec.Meta { return m }),
		seed:   maphash.MakeSeed(),
		stop:   make(chan struct{}),
		kick:   make(chan struct{}, 1),
	}
	if err := s.load(); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("retain: embedded: %s: %w", path, err)
	}
	s.wg.Add(1)
	go s.sweeper()
	return s, nil
}

// load checks the file format and rebuilds the index.
func (s *Store) load() error {
	err := s.db.Update(func(tx *bolt.Tx) error {
		meta, err := tx.CreateBucketIfNotExists(bucketMeta)
		if err != nil {
			return err
		}
		switch v := meta.Get(keyFormat); {
		case v == nil:
			if err := meta.Put(keyFormat, []byte(formatVersion)); err != nil {
				return err
			}
		case string(v) != formatVersion:
			return fmt.Errorf("file format %q, this gateway reads %q", v, formatVersion)
		}
		_, err = tx.CreateBucketIfNotExists(bucketMessages)
		return err
	})
	if err != nil {
		return err
	}
	now := codec.ExpiryNanos(s.opts.now())
	var purge [][]byte
	err = s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketMessages).ForEach(func(k, v []byte) error {
			m, err := codec.ReadMeta(v)
			switch {
			case err != nil:
				s.opts.logger.Warn("retain: dropping unreadable retained message", "topic", string(k), "err", err)
				purge = append(purge, slices.Clone(k))
			case m.Expired(now):
				purge = append(purge, slices.Clone(k))
			default:
				s.cat.Put(string(k), m) // string(k) copies out of the mmap
			}
			return nil
		})
	})
	if err != nil || len(purge) == 0 {
		return err
	}
	return s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketMessages)
		for _, k := range purge {
			if err := b.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
}

func (s *Store) stripe(topic string) int {
	return int(maphash.String(s.seed, topic) % stripes)
}

// enter marks a call in flight; the caller must call s.life.RUnlock.
func (s *Store) enter() error {
	s.life.RLock()
	if s.closed.Load() {
		s.life.RUnlock()
		return retain.ErrClosed
	}
	return nil
}

func (s *Store) wake() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// Set implements retain.Store.
func (s *Store) Set(ctx context.Context, m *core.Message) error {
	if err := core.ValidateTopic(m.Topic); err != nil {
		return fmt.Errorf("retain: %w", err)
	}
	if err := s.enter(); err != nil {
		return err
	}
	defer s.life.RUnlock()
	now := s.opts.now()
	if len(m.Payload) == 0 || m.Expired(now) {
		_, err := s.delete([]string{m.Topic})
		return err
	}
	if s.limits.MaxPayload > 0 && len(m.Payload) > s.limits.MaxPayload {
		return fmt.Errorf("%w: payload of %d bytes, limit %d", retain.ErrQuotaExceeded, len(m.Payload), s.limits.MaxPayload)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	value := codec.Encode(m)
	meta := codec.MetaOf(m)
	mu := &s.locks[s.stripe(m.Topic)]
	mu.Lock()
	defer mu.Unlock()
	release, ok := s.cat.Reserve(m.Topic, s.limits.MaxMessages)
	if !ok {
		s.sweep() // expired messages do not hold quota
		if release, ok = s.cat.Reserve(m.Topic, s.limits.MaxMessages); !ok {
			return fmt.Errorf("%w: %d retained messages held", retain.ErrQuotaExceeded, s.limits.MaxMessages)
		}
	}
	defer release()
	key := []byte(m.Topic)
	err := s.db.Batch(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketMessages).Put(key, value)
	})
	if err != nil {
		return fmt.Errorf("retain: embedded: %w", err)
	}
	s.cat.Put(strings.Clone(m.Topic), meta)
	return nil
}

// Get implements retain.Store.
func (s *Store) Get(ctx context.Context, topic string) (*core.Message, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.life.RUnlock()
	var m *core.Message
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketMessages).Get([]byte(topic))
		if v == nil {
			return nil
		}
		var err error
		m, err = codec.Decode(v) // copies: v lives only as long as tx
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("retain: embedded: get %q: %w", topic, err)
	}
	if m != nil && m.Expired(s.opts.now()) {
		s.wake()
		return nil, nil
	}
	return m, nil
}

// matchChunk bounds the messages decoded per read transaction, so that a
// match of millions neither holds one transaction (blocking file growth) nor
// decodes everything before fn gets the first message.
const matchChunk = 512

// MatchTopics implements retain.TopicLister: the index walk alone.
func (s *Store) MatchTopics(_ context.Context, filter string, fn func(string) bool) error {
	if err := retain.ValidFilter(filter); err != nil {
		return err
	}
	if err := s.enter(); err != nil {
		return err
	}
	defer s.life.RUnlock()
	now := codec.ExpiryNanos(s.opts.now())
	s.cat.EachTopic(filter, func(m codec.Meta) bool { return !m.Expired(now) }, fn)
	return nil
}

// Match implements retain.Store: an index walk, then one read transaction
// per matchChunk messages (one for the usual handful).
func (s *Store) Match(ctx context.Context, filter string, fn func(*core.Message) bool) error {
	if err := retain.ValidFilter(filter); err != nil {
		return err
	}
	if err := s.enter(); err != nil {
		return err
	}
	defer s.life.RUnlock()
	now := codec.ExpiryNanos(s.opts.now())
	var topics []string
	expired := false
	s.cat.Match(filter, func(topic string, m codec.Meta) bool {
		if m.Expired(now) {
			expired = true
		} else {
			topics = append(topics, topic)
		}
		return true
	})
	if expired {
		s.wake()
	}
	msgs := make([]*core.Message, 0, min(len(topics), matchChunk))
	var key []byte
	for len(topics) > 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		chunk := topics[:min(len(topics), matchChunk)]
		topics = topics[len(chunk):]
		msgs = msgs[:0]
		err := s.db.View(func(tx *bolt.Tx) error {
			// One cursor reused for every seek: Bucket.Get would build a
			// cursor (and allocate its stack) per key.
			c := tx.Bucket(bucketMessages).Cursor()
			for _, t := range chunk {
				key = append(key[:0], t...)
				k, v := c.Seek(key)
				if v == nil || !bytes.Equal(k, key) {
					continue // deleted since the index walk
				}
				m, err := codec.Decode(v)
				if err != nil {
					return fmt.Errorf("%q: %w", t, err)
				}
				if !m.Expired(time.Unix(0, now)) {
					msgs = append(msgs, m)
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("retain: embedded: match %q: %w", filter, err)
		}
		// fn runs outside the transaction: it may call back into the
		// store, and a Set that grows the file waits for open readers.
		for _, m := range msgs {
			if !fn(m) {
				return nil
			}
		}
	}
	return nil
}

// Delete implements retain.Store.
func (s *Store) Delete(ctx context.Context, filter string) (int, error) {
	if err := retain.ValidFilter(filter); err != nil {
		return 0, err
	}
	if err := s.enter(); err != nil {
		return 0, err
	}
	defer s.life.RUnlock()
	var topics []string
	s.cat.Match(filter, func(topic string, _ codec.Meta) bool {
		topics = append(topics, topic)
		return true
	})
	return s.delete(topics)
}

// delete removes topics from the file, then from the index, and returns how
// many unexpired messages it removed.
func (s *Store) delete(topics []string) (int, error) {
	if len(topics) == 0 {
		return 0, nil
	}
	var held []int
	for _, t := range topics {
		held = append(held, s.stripe(t))
	}
	slices.Sort(held)
	held = slices.Compact(held)
	for _, i := range held { // ascending order: no deadlock between deletes
		s.locks[i].Lock()
	}
	defer func() {
		for _, i := range held {
			s.locks[i].Unlock()
		}
	}()
	err := s.db.Batch(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketMessages)
		for _, t := range topics {
			if err := b.Delete([]byte(t)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("retain: embedded: delete: %w", err)
	}
	now := codec.ExpiryNanos(s.opts.now())
	n := 0
	for _, t := range topics {
		if m, ok := s.cat.Remove(t); ok && !m.Expired(now) {
			n++
		}
	}
	return n, nil
}

// Stats implements retain.Store. Expired messages count until the sweep
// (which Stats triggers when one is due) removes them.
func (s *Store) Stats() retain.Stats {
	if next := s.cat.NextExpiry(); next != 0 && next <= codec.ExpiryNanos(s.opts.now()) {
		s.wake()
	}
	return retain.Stats{Count: s.cat.Len(), Bytes: s.cat.Bytes()}
}

// Close stops the sweeper, waits for calls in flight and closes the file.
func (s *Store) Close() error {
	var err error
	s.once.Do(func() {
		s.closed.Store(true)
		close(s.stop)
		s.wg.Wait()
		s.life.Lock()
		defer s.life.Unlock()
		err = s.db.Close()
	})
	return err
}

func (s *Store) sweeper() {
	defer s.wg.Done()
	t := time.NewTicker(s.opts.sweepInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		case <-s.kick:
		}
		s.sweep()
	}
}

// sweepBatch bounds the topics purged per write transaction.
const sweepBatch = 4096

// sweep purges expired messages: from the index first (so they stop counting
// at once), then from the file, each only if still expired there, because a
// Set may have replaced it meanwhile. No stripe lock is needed for that
// reason; a crash in between is repaired by the purge at open.
func (s *Store) sweep() {
	for {
		now := codec.ExpiryNanos(s.opts.now())
		topics := s.cat.Expire(now, sweepBatch)
		if len(topics) == 0 {
			return
		}
		err := s.db.Update(func(tx *bolt.Tx) error {
			b := tx.Bucket(bucketMessages)
			for _, t := range topics {
				k := []byte(t)
				v := b.Get(k)
				if v == nil {
					continue
				}
				if m, err := codec.ReadMeta(v); err == nil && !m.Expired(now) {
					continue
				}
				if err := b.Delete(k); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			if !errors.Is(err, bolterrors.ErrDatabaseNotOpen) {
				s.opts.logger.Error("retain: embedded: purging expired messages", "err", err)
			}
			return
		}
		if len(topics) < sweepBatch {
			return
		}
	}
}
