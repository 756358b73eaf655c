// Package memory is the in-process retained store: a core.TopicIndex of
// messages, nothing on disk. It is for tests and for edge gateways that may
// lose their retained messages on restart. It starts no goroutines: expired
// messages are purged as a side effect of the calls that find them due.
package memory

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tolsey/tolsey/core"
	"github.com/tolsey/tolsey/core/codec"
	"github.com/tolsey/tolsey/retain"
	"github.com/tolsey/tolsey/retain/internal/catalog"
)

// Store is a retained store held in memory. It is safe for concurrent use.
type Store struct {
	limits retain.Limits
	now    func() time.Time
	// cat holds each message as stored: a private clone that is never
	// modified, so Match can hand out clones of it without holding a lock.
	cat    *catalog.Catalog[*core.Message]
	mu     sync.Mutex // serializes writes: quota check and write are one step
	closed atomic.Bool
}

var _ retain.Store = (*Store)(nil)

// New returns an empty store bounded by limits.
func New(limits retain.Limits) *Store {
	return &Store{
		limits: limits,
		now:    time.Now,
		cat:    catalog.New(codec.MetaOf),
	}
}

// purgeBatch bounds the work one call spends purging expired messages.
const purgeBatch = 1024

func (s *Store) nowNanos() int64 { return codec.ExpiryNanos(s.now()) }

// Set implements retain.Store.
func (s *Store) Set(ctx context.Context, m *core.Message) error {
	if s.closed.Load() {
		return retain.ErrClosed
	}
	if err := core.ValidateTopic(m.Topic); err != nil {
		return fmt.Errorf("retain: %w", err)
	}
	now := s.now()
	if len(m.Payload) == 0 || m.Expired(now) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.cat.Remove(m.Topic)
		return nil
	}
	if s.limits.MaxPayload > 0 && len(m.Payload) > s.limits.MaxPayload {
		return fmt.Errorf("%w: payload of %d bytes, limit %d", retain.ErrQuotaExceeded, len(m.Payload), s.limits.MaxPayload)
	}
	c := m.Clone()
	c.Topic = strings.Clone(m.Topic) // never pin the publisher's read buffer
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cat.Expire(codec.ExpiryNanos(now), purgeBatch)
	release, ok := s.cat.Reserve(c.Topic, s.limits.MaxMessages)
	if !ok {
		return fmt.Errorf("%w: %d retained messages held", retain.ErrQuotaExceeded, s.limits.MaxMessages)
	}
	defer release()
	s.cat.Put(c.Topic, c)
	return nil
}

// Get implements retain.Store.
func (s *Store) Get(ctx context.Context, topic string) (*core.Message, error) {
	if s.closed.Load() {
		return nil, retain.ErrClosed
	}
	m, ok := s.cat.Get(topic)
	if !ok || m.Expired(s.now()) {
		return nil, nil
	}
	return m.Clone(), nil
}

// MatchTopics implements retain.TopicLister.
func (s *Store) MatchTopics(_ context.Context, filter string, fn func(string) bool) error {
	if s.closed.Load() {
		return retain.ErrClosed
	}
	if err := retain.ValidFilter(filter); err != nil {
		return err
	}
	now := s.nowNanos()
	s.cat.EachTopic(filter, func(m *core.Message) bool { return !codec.MetaOf(m).Expired(now) }, fn)
	return nil
}

// Match implements retain.Store.
func (s *Store) Match(ctx context.Context, filter string, fn func(*core.Message) bool) error {
	if s.closed.Load() {
		return retain.ErrClosed
	}
	if err := retain.ValidFilter(filter); err != nil {
		return err
	}
	now := s.nowNanos()
	var found []*core.Message
	s.cat.Match(filter, func(_ string, m *core.Message) bool {
		if !codec.MetaOf(m).Expired(now) {
			found = append(found, m)
		}
		return true
	})
	// fn runs outside the index lock: it may call back into the store.
	for _, m := range found {
		if !fn(m.Clone()) {
			break
		}
	}
	return nil
}

// Delete implements retain.Store.
func (s *Store) Delete(ctx context.Context, filter string) (int, error) {
	if s.closed.Load() {
		return 0, retain.ErrClosed
	}
	if err := retain.ValidFilter(filter); err != nil {
		return 0, err
	}
	now := s.nowNanos()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cat.Expire(now, math.MaxInt)
	var topics []string
	s.cat.Match(filter, func(topic string, _ *core.Message) bool {
		topics = append(topics, topic)
		return true
	})
	for _, t := range topics {
		s.cat.Remove(t)
	}
	return len(topics), nil
}

// Stats implements retain.Store. It purges what has expired first, so that
// expired messages are not counted.
func (s *Store) Stats() retain.Stats {
	s.mu.Lock()
	s.cat.Expire(s.nowNanos(), math.MaxInt)
	s.mu.Unlock()
	return retain.Stats{Count: s.cat.Len(), Bytes: s.cat.Bytes()}
}

// Close implements retain.Store. The messages are dropped.
func (s *Store) Close() error {
	s.closed.Store(true)
	return nil
}
