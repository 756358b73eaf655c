// Package redis is the retained store shared by several gateways: Redis
// holds every retained message (docs/architecture.md, decision 2) and each
// gateway keeps an in-process index of retained topics so that a wildcard
// subscription costs O(matches). It owns the keys under its prefix and the
// events channel; it must not touch other keys in the same Redis.
//
// Layout in Redis, for prefix P (default "gateway:retained:"):
//
//	P msg:<topic>   the codec encoding of the message; PEXPIREAT when it expires
//	P seq           a counter: every change takes the next number
//	P events        pub/sub channel: one event per change, in the order applied
//
// Every change is a Lua script that writes the key, takes a sequence number
// and PUBLISHes the event atomically, so every gateway sees the changes in
// the order Redis applied them and converges on Redis's own last value. A
// gateway applies its own changes through the same event stream (Set waits
// for its event), so its index never disagrees with the order in Redis.
// Concurrent Sets share round trips: they go to Redis as one pipeline per
// batch, up to 32 messages per script call, each message with its own
// event and seq and each caller with its own reply (pipeline.go).
//
// Outages: Open never fails because Redis is down. While the store is not
// connected, or is rebuilding its index, every call returns an error wrapping
// retain.ErrUnavailable and Ready says why; a background loop reconnects with
// backoff, resubscribes, rebuilds the index by SCAN (events were missed) and
// only then serves again.
package redis

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/tolsey/tolsey/core"
	"github.com/tolsey/tolsey/core/codec"
	"github.com/tolsey/tolsey/retain"
	"github.com/tolsey/tolsey/retain/internal/catalog"
)

// DefaultPrefix prefixes every key and channel the store uses.
const DefaultPrefix = "gateway:retained:"

// Options configure Open. Only URL is required.
type Options struct {
	// URL is the Redis URL, redis://[user:pass@]host:port/db (rediss://
	// for TLS). go-redis query options such as dial_timeout apply; unless
	// given there, dial_timeout is 2 s and max_retries 1, so that calls fail
	// fast in an outage instead of piling up.
	URL string
	// Prefix of every key and of the events channel (default DefaultPrefix).
	// Gateways that share retained state use the same prefix.
	Prefix string
	Limits retain.Limits
	Logger *slog.Logger // default slog.Default()
	// PingInterval is how often the connection is probed (default 1 s); an
	// outage is noticed within about three of them even when no
	// connection error is seen.
	PingInterval time.Duration
	// SweepInterval is how often expired topics leave the index (default
	// 1 s). Redis expires the keys itself (PEXPIREAT).
	SweepInterval time.Duration
	// MaxBackoff caps the wait between reconnect attempts (default 1 s;
	// the first wait is 50 ms). It bounds how long the store stays
	// unavailable after Redis is back, whatever the outage's length
	// (docs/reliability.md, drill 2: /readyz 200 within 2 s after); an
	// attempt against a Redis that is down costs one refused dial.
	MaxBackoff time.Duration
	// MatchBatch is the number of keys fetched per MGET (default 512).
	MatchBatch int
	// EventWait bounds how long Set and Delete wait for their own event to
	// come back through the channel before returning anyway (default 5 s).
	EventWait time.Duration
}

func (o *Options) defaults() {
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.PingInterval <= 0 {
		o.PingInterval = time.Second
	}
	if o.SweepInterval <= 0 {
		o.SweepInterval = time.Second
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = time.Second
	}
	if o.MatchBatch <= 0 {
		o.MatchBatch = 512
	}
	if o.EventWait <= 0 {
		o.EventWait = 5 * time.Second
	}
}

// Store is the Redis-backed retained store. It is safe for concurrent use.
type Store struct {
	opts     Options
	client   *goredis.Client
	keys     string // Prefix + "msg:"
	seqKey   string
	channel  string
	now      func() time.Time
	log      *slog.Logger
	lifetime context.Context // cancelled by Close
	cancel   context.CancelFunc

	// cat is replaced whole by every rebuild. Only the run goroutine
	// applies events to it; sweeps remove expired topics only.
	cat atomic.Pointer[catalog.Catalog[codec.Meta]]

	mu      sync.Mutex
	ready   bool    // connected, subscribed, index rebuilt
	reason  error   // why not ready
	session uint64  // counts (re)connections; seqs compare within one
	applied int64   // highest event seq applied in this session
	waitq   seqHeap // Sets and Deletes waiting for their event
	ps      *goredis.PubSub
	closed  bool
	wg      sync.WaitGroup

	// Between Set's callers (pipeline.go).
	wmu       sync.Mutex
	wqueue    []*setCall // calls waiting for a flusher
	wflushers int        // places taken, of flushers
}

var (
	_ retain.Store  = (*Store)(nil)
	_ retain.Health = (*Store)(nil)
)

// Open connects to Redis, subscribes to the events channel and builds the
// topic index by SCAN. It returns an error only for bad options: when Redis
// cannot be reached it returns a store that is not Ready and keeps trying in
// the background.
func Open(ctx context.Context, opts Options) (*Store, error) {
	opts.defaults()
	copts, err := clientOptions(opts.URL)
	if err != nil {
		return nil, err
	}
	lifetime, cancel := context.WithCancel(context.Background())
	s := &Store{
		opts:     opts,
		client:   goredis.NewClient(copts),
		keys:     opts.Prefix + "msg:",
		seqKey:   opts.Prefix + "seq",
		channel:  opts.Prefix + "events",
		now:      time.Now,
		log:      opts.Logger.With("component", "retain/redis"),
		lifetime: lifetime,
		cancel:   cancel,
		reason:   errors.New("connecting"),
	}
	s.cat.Store(newCatalog())
	ps, err := s.connect(ctx)
	if err != nil {
		s.setUnready(err)
		s.log.Warn("redis unreachable at start; retained store unavailable until it answers", "err", err)
	}
	s.goroutine(func() { s.run(ps) })
	s.goroutine(s.sweeper)
	return s, nil
}

func clientOptions(rawURL string) (*goredis.Options, error) {
	if rawURL == "" {
		return nil, errors.New("retain: redis: no URL")
	}
	o, err := goredis.ParseURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("retain: redis: URL: %w", err)
	}
	u, _ := url.Parse(rawURL)
	q := u.Query()
	if !q.Has("dial_timeout") {
		o.DialTimeout = 2 * time.Second
	}
	if !q.Has("max_retries") {
		o.MaxRetries = 1
	}
	if !q.Has("protocol") {
		// RESP3 makes go-redis look for push notifications before every
		// reply it reads (~7% of a bulk load's CPU here); the store uses
		// none of RESP3's additions, and pub/sub works the same on RESP2.
		o.Protocol = 2
	}
	o.DialerRetries = 1
	o.DisableIdentity = true
	o.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	return o, nil
}

func newCatalog() *catalog.Catalog[codec.Meta] {
	return catalog.New(func(m codec.Meta) codec.Meta { return m })
}

// goroutine starts fn tracked by Close, unless Close has begun.
func (s *Store) goroutine(fn func()) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		fn()
	}()
	return true
}

// Ready implements retain.Health.
func (s *Store) Ready() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return retain.ErrClosed
	}
	if !s.ready {
		return fmt.Errorf("%w: %w", retain.ErrUnavailable, s.reason)
	}
	return nil
}

// available returns the session to compare event seqs in, or why calls
// cannot be served now.
func (s *Store) available() (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return 0, retain.ErrClosed
	case !s.ready:
		return 0, fmt.Errorf("%w: %w", retain.ErrUnavailable, s.reason)
	}
	return s.session, nil
}

func (s *Store) setUnready(reason error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ready, s.reason = false, reason
	s.broadcastLocked()
}

// fail classifies a command error: Redis replies are plain errors, anything
// else (connection refused, reset, timeout) means Redis is unavailable.
func (s *Store) fail(ctx context.Context, op string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("retain: redis: %s: %w", op, ctx.Err())
	}
	var reply goredis.Error
	if errors.As(err, &reply) && !unavailableReply(err.Error()) {
		return fmt.Errorf("retain: redis: %s: %w", op, err)
	}
	return fmt.Errorf("%w: redis: %s: %w", retain.ErrUnavailable, op, err)
}

func unavailableReply(msg string) bool {
	for _, p := range []string{"LOADING", "BUSY", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN", "READONLY"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// Close stops every goroutine and closes the connections.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.ready, s.reason = false, retain.ErrClosed
	s.broadcastLocked()
	ps := s.ps
	s.mu.Unlock()
	s.cancel()
	if ps != nil {
		_ = ps.Close() // unblocks Receive
	}
	s.wg.Wait()
	return s.client.Close()
}

// expireAtMillis is the PEXPIREAT argument for an expiry in unix ns,
// rounded up so Redis never drops a message before we stop serving it; "0"
// for none. Beyond 2^52 ms (142,000 years) Redis is not asked to expire it.
func expireAtMillis(ns int64) string {
	if ns == 0 {
		return "0"
	}
	ms := ns / 1e6
	if ns%1e6 != 0 {
		ms++
	}
	if ms <= 0 {
		ms = 1
	}
	if ms > 1<<52 {
		return "0"
	}
	return strconv.FormatInt(ms, 10)
}

// setScript writes messages and publishes one event for each, atomically.
// KEYS: seq key, then one msg key per message. ARGV: channel, then five
// per message: value, PEXPIREAT ms or "0", expiry ns, size, topic.
// Returns the last message's seq; the others precede it one by one.
var setScript = goredis.NewScript(`
local seq = 0
for i = 2, #KEYS do
  local a = (i - 2) * 5 + 1
  redis.call('SET', KEYS[i], ARGV[a + 1])
  if ARGV[a + 2] ~= '0' then redis.call('PEXPIREAT', KEYS[i], ARGV[a + 2]) end
  seq = redis.call('INCR', KEYS[1])
  redis.call('PUBLISH', ARGV[1], seq .. ' S ' .. ARGV[a + 3] .. ' ' .. ARGV[a + 4] .. ' ' .. ARGV[a + 5])
end
return seq
`)

// deleteScript deletes messages and publishes one event per topic, even
// for keys already gone (expired in Redis), so that every index drops them.
// KEYS: seq key, msg keys. ARGV: channel, topics (ARGV[i] goes with KEYS[i]).
// Returns {deleted, last seq}.
var deleteScript = goredis.NewScript(`
local n, seq = 0, 0
for i = 2, #KEYS do
  n = n + redis.call('DEL', KEYS[i])
  seq = redis.call('INCR', KEYS[1])
  redis.call('PUBLISH', ARGV[1], seq .. ' D ' .. ARGV[i])
end
return {n, seq}
`)

// Set implements retain.Store.
func (s *Store) Set(ctx context.Context, m *core.Message) error {
	if err := core.ValidateTopic(m.Topic); err != nil {
		return fmt.Errorf("retain: %w", err)
	}
	session, err := s.available()
	if err != nil {
		return err
	}
	if len(m.Payload) == 0 || m.Expired(s.now()) {
		_, err := s.delete(ctx, session, []string{m.Topic})
		return err
	}
	if max := s.opts.Limits.MaxPayload; max > 0 && len(m.Payload) > max {
		return fmt.Errorf("%w: payload of %d bytes, limit %d", retain.ErrQuotaExceeded, len(m.Payload), max)
	}
	cat := s.cat.Load()
	release, ok := cat.Reserve(m.Topic, s.opts.Limits.MaxMessages)
	if !ok {
		cat.Expire(codec.ExpiryNanos(s.now()), math.MaxInt) // expired ones hold no quota
		if release, ok = cat.Reserve(m.Topic, s.opts.Limits.MaxMessages); !ok {
			return fmt.Errorf("%w: %d retained messages held", retain.ErrQuotaExceeded, s.opts.Limits.MaxMessages)
		}
	}
	defer release() // after our event has put the topic in the index
	meta := codec.MetaOf(m)
	seq, err := s.enqueue(&setCall{
		ctx: ctx,
		key: s.keys + m.Topic,
		args: [5]any{codec.Encode(m), expireAtMillis(meta.Expiry),
			strconv.FormatInt(meta.Expiry, 10), strconv.Itoa(int(meta.Size)), m.Topic},
		done: make(chan struct{}),
		lead: make(chan struct{}),
	})
	if err != nil {
		return s.fail(ctx, "set", err)
	}
	s.await(ctx, session, seq)
	return nil
}

// await waits until the event with seq has been applied to the index, so
// that a Match after Set sees it (read your writes), or until the session
// ends (the rebuild reads Redis itself), ctx ends or EventWait passes.
func (s *Store) await(ctx context.Context, session uint64, seq int64) {
	// No timer per call: the sweeper wakes waiters past their deadline
	// (within SweepInterval), which costs a bulk load nothing.
	deadline := s.now().Add(s.opts.EventWait).UnixNano()
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.session == session && s.ready && s.applied < seq {
		w := &seqWaiter{seq: seq, deadline: deadline, ch: make(chan struct{})}
		heap.Push(&s.waitq, w)
		s.mu.Unlock()
		select {
		case <-w.ch:
		case <-ctx.Done():
		}
		s.mu.Lock()
		switch {
		case w.late:
			s.log.Warn("own event not seen in time; the index catches up when it arrives", "seq", seq)
			return
		case ctx.Err() != nil:
			if w.index >= 0 {
				heap.Remove(&s.waitq, w.index)
			}
			return
		}
	}
}

// Get implements retain.Store.
func (s *Store) Get(ctx context.Context, topic string) (*core.Message, error) {
	if _, err := s.available(); err != nil {
		return nil, err
	}
	v, err := s.client.Get(ctx, s.keys+topic).Result()
	if errors.Is(err, goredis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, s.fail(ctx, "get", err)
	}
	m, err := codec.DecodeString(v)
	if err != nil {
		return nil, fmt.Errorf("retain: redis: get %q: %w", topic, err)
	}
	if m.Expired(s.now()) {
		return nil, nil
	}
	return m, nil
}

// MatchTopics implements retain.TopicLister: the index walk alone.
func (s *Store) MatchTopics(_ context.Context, filter string, fn func(string) bool) error {
	if err := retain.ValidFilter(filter); err != nil {
		return err
	}
	if _, err := s.available(); err != nil {
		return err
	}
	now := codec.ExpiryNanos(s.now())
	s.cat.Load().EachTopic(filter, func(m codec.Meta) bool { return !m.Expired(now) }, fn)
	return nil
}

// Match implements retain.Store: an index walk, then one MGET per
// MatchBatch topics (a single round trip for the usual handful).
func (s *Store) Match(ctx context.Context, filter string, fn func(*core.Message) bool) error {
	if err := retain.ValidFilter(filter); err != nil {
		return err
	}
	if _, err := s.available(); err != nil {
		return err
	}
	cat := s.cat.Load()
	now := codec.ExpiryNanos(s.now())
	var keys, expired []string
	cat.Match(filter, func(topic string, m codec.Meta) bool {
		if m.Expired(now) {
			expired = append(expired, topic)
		} else {
			keys = append(keys, s.keys+topic)
		}
		return true
	})
	for _, t := range expired { // lazy purge; Redis expires the keys itself
		cat.RemoveExpired(t, now)
	}
	batch := make([]*core.Message, 0, min(len(keys), s.opts.MatchBatch))
	for len(keys) > 0 {
		chunk := keys[:min(len(keys), s.opts.MatchBatch)]
		keys = keys[len(chunk):]
		vals, err := s.client.MGet(ctx, chunk...).Result()
		if err != nil {
			return s.fail(ctx, "match", err)
		}
		batch = batch[:0]
		at := time.Unix(0, now)
		for i, v := range vals {
			str, ok := v.(string)
			if !ok {
				continue // deleted or expired in Redis since the walk
			}
			m, err := codec.DecodeString(str)
			if err != nil {
				s.log.Warn("skipping undecodable retained message", "key", chunk[i], "err", err)
				continue
			}
			if !m.Expired(at) {
				batch = append(batch, m)
			}
		}
		for _, m := range batch {
			if !fn(m) {
				return nil
			}
		}
	}
	return nil
}

// deleteBatch bounds the keys one delete script touches: a script blocks
// Redis while it runs.
const deleteBatch = 256

// Delete implements retain.Store.
func (s *Store) Delete(ctx context.Context, filter string) (int, error) {
	if err := retain.ValidFilter(filter); err != nil {
		return 0, err
	}
	session, err := s.available()
	if err != nil {
		return 0, err
	}
	var topics []string
	s.cat.Load().Match(filter, func(topic string, _ codec.Meta) bool {
		topics = append(topics, topic)
		return true
	})
	return s.delete(ctx, session, topics)
}

func (s *Store) delete(ctx context.Context, session uint64, topics []string) (int, error) {
	total := 0
	for len(topics) > 0 {
		chunk := topics[:min(len(topics), deleteBatch)]
		topics = topics[len(chunk):]
		keys := make([]string, 0, len(chunk)+1)
		args := make([]any, 0, len(chunk)+1)
		keys = append(keys, s.seqKey)
		args = append(args, s.channel)
		for _, t := range chunk {
			keys = append(keys, s.keys+t)
			args = append(args, t)
		}
		res, err := deleteScript.Run(ctx, s.client, keys, args...).Int64Slice()
		if err != nil {
			return total, s.fail(ctx, "delete", err)
		}
		if len(res) != 2 {
			return total, fmt.Errorf("retain: redis: delete: unexpected reply %v", res)
		}
		total += int(res[0])
		s.await(ctx, session, res[1])
	}
	return total, nil
}

// Stats implements retain.Store, from the index. Expired topics are swept
// first so that they are not counted.
func (s *Store) Stats() retain.Stats {
	cat := s.cat.Load()
	cat.Expire(codec.ExpiryNanos(s.now()), math.MaxInt)
	return retain.Stats{Count: cat.Len(), Bytes: cat.Bytes()}
}
