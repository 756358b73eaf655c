package redis

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tolsey/tolsey/core/codec"
)

// This file keeps the index in step with Redis: connect (subscribe, then
// rebuild by SCAN), serve (apply events in order, probe liveness), and
// reconnect with backoff when either fails.

// run owns the subscription. ps is the one Open established, or nil.
func (s *Store) run(ps *goredis.PubSub) {
	backoff := 50 * time.Millisecond
	for {
		if ps == nil {
			var err error
			ps, err = s.connect(s.lifetime)
			if err != nil {
				if s.lifetime.Err() != nil {
					return
				}
				s.setUnready(err)
				s.log.Debug("reconnect failed", "err", err, "retry_in", backoff)
				select {
				case <-s.lifetime.Done():
					return
				case <-time.After(backoff):
				}
				backoff = min(2*backoff, s.opts.MaxBackoff)
				continue
			}
			s.log.Info("connected to redis; retained index rebuilt", "topics", s.cat.Load().Len())
		}
		backoff = 50 * time.Millisecond
		err := s.serve(ps)
		_ = ps.Close()
		ps = nil
		if s.lifetime.Err() != nil {
			return
		}
		s.setUnready(fmt.Errorf("redis connection lost: %w", err))
		s.log.Warn("redis connection lost; retained store unavailable until it is back", "err", err)
	}
}

// connect subscribes to the events channel, then rebuilds the index from a
// SCAN. Subscribing first means no change is lost: a change made during the
// scan is both maybe-seen by the scan and queued as an event, and applying
// events in order on top of the scan converges on Redis's state because
// each event fully determines its topic.
func (s *Store) connect(ctx context.Context) (*goredis.PubSub, error) {
	if err := s.client.Ping(ctx).Err(); err != nil {
		return nil, err
	}
	ps := s.client.Subscribe(ctx)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = ps.Close()
		return nil, errors.New("closed")
	}
	s.ps = ps
	s.mu.Unlock()
	fail := func(err error) (*goredis.PubSub, error) {
		_ = ps.Close()
		return nil, err
	}
	if err := ps.Subscribe(ctx, s.channel); err != nil {
		return fail(err)
	}
	msg, err := ps.ReceiveTimeout(ctx, 5*time.Second)
	if err != nil {
		return fail(err)
	}
	if _, ok := msg.(*goredis.Subscription); !ok {
		return fail(fmt.Errorf("subscribe answered %T", msg))
	}
	seq, err := s.client.Get(ctx, s.seqKey).Int64()
	if err != nil && !errors.Is(err, goredis.Nil) {
		return fail(err)
	}
	s.mu.Lock()
	s.reason = errors.New("rebuilding the retained index from redis")
	s.mu.Unlock()
	cat := newCatalog()
	now := codec.ExpiryNanos(s.now())
	pattern := escapeGlob(s.keys) + "*"
	var cursor uint64
	for {
		keys, next, err := s.client.Scan(ctx, cursor, pattern, scanCount).Result()
		if err != nil {
			return fail(err)
		}
		if len(keys) > 0 {
			vals, err := s.client.MGet(ctx, keys...).Result()
			if err != nil {
				return fail(err)
			}
			for i, v := range vals {
				str, ok := v.(string)
				if !ok {
					continue
				}
				m, err := codec.ReadMetaString(str)
				if err != nil {
					s.log.Warn("skipping undecodable retained message", "key", keys[i], "err", err)
					continue
				}
				if !m.Expired(now) {
					cat.Put(strings.Clone(keys[i][len(s.keys):]), m)
				}
			}
		}
		if cursor = next; cursor == 0 {
			break
		}
	}
	s.cat.Store(cat)
	s.mu.Lock()
	s.session++
	s.applied = seq
	s.ready, s.reason = true, nil
	s.broadcastLocked()
	s.mu.Unlock()
	return ps, nil
}

// serve applies events until the subscription fails; a pinger probes it so
// that a silent partition is noticed too.
func (s *Store) serve(ps *goredis.PubSub) error {
	ctx, cancel := context.WithCancel(s.lifetime)
	defer cancel()
	pinged := make(chan struct{})
	go func() {
		defer close(pinged)
		t := time.NewTicker(s.opts.PingInterval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if err := ps.Ping(ctx); err != nil && ctx.Err() == nil {
					s.log.Debug("ping on the events connection failed", "err", err)
				}
			}
		}
	}()
	defer func() { cancel(); <-pinged }()
	for {
		msg, err := ps.ReceiveTimeout(ctx, 3*s.opts.PingInterval+time.Second)
		if err != nil {
			return err
		}
		if m, ok := msg.(*goredis.Message); ok {
			if err := s.apply(m.Payload); err != nil {
				s.log.Warn("ignoring malformed event", "event", m.Payload, "err", err)
			}
		}
	}
}

// apply applies one event: "<seq> S <expiry ns> <size> <topic>" or
// "<seq> D <topic>". The topic comes last: it may contain spaces.
func (s *Store) apply(ev string) error {
	seqStr, rest, ok1 := strings.Cut(ev, " ")
	op, rest, ok2 := strings.Cut(rest, " ")
	seq, err := strconv.ParseInt(seqStr, 10, 64)
	if !ok1 || !ok2 || err != nil {
		return errors.New("bad header")
	}
	cat := s.cat.Load()
	switch op {
	case "S":
		expStr, rest, ok1 := strings.Cut(rest, " ")
		sizeStr, topic, ok2 := strings.Cut(rest, " ")
		exp, err1 := strconv.ParseInt(expStr, 10, 64)
		size, err2 := strconv.ParseInt(sizeStr, 10, 32)
		if !ok1 || !ok2 || err1 != nil || err2 != nil || topic == "" {
			return errors.New("bad set event")
		}
		// Clone: the topic must not pin the whole event string.
		cat.Put(strings.Clone(topic), codec.Meta{Expiry: exp, Size: int32(size)})
	case "D":
		cat.Remove(rest)
	default:
		return fmt.Errorf("unknown op %q", op)
	}
	s.mu.Lock()
	s.applied = max(s.applied, seq)
	s.wakeAppliedLocked()
	s.mu.Unlock()
	return nil
}

// sweeper removes expired topics from the index on a timer (Redis has
// already dropped, or will drop, the keys) and wakes Sets that have waited
// EventWait for their event.
func (s *Store) sweeper() {
	t := time.NewTicker(s.opts.SweepInterval)
	defer t.Stop()
	for {
		select {
		case <-s.lifetime.Done():
			return
		case <-t.C:
		}
		now := s.now()
		s.cat.Load().Expire(codec.ExpiryNanos(now), math.MaxInt)
		s.wakeLate(now.UnixNano())
	}
}

// escapeGlob escapes the glob characters of SCAN MATCH in a literal prefix.
func escapeGlob(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch r {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// scanCount is the SCAN COUNT hint of the rebuild: large pages mean fewer
// round trips (each page is followed by one MGET).
const scanCount = 1000
