// Package redis is the queue.Backend that several gateways share: each
// durable queue is a Redis stream with one consumer group, each gateway a
// consumer of it named by its node id (docs/queues.md, "Storage"). A record
// read by one gateway is pending for that gateway until it removes it
// (XACK + XDEL); a record a gateway read and left pending longer than the
// claim time (its gateway died) is claimed by another. It knows no
// protocol; it imports only the standard library, go-redis, core and
// core/queue.
//
// Keys, under Options.Prefix (default "tolsey:queue:"):
//
//	<prefix>configs          hash: queue name → its queue.Config as JSON
//	<prefix>{<name>}:s       the queue's stream; entries hold s (the
//	                         message's core.Message.Size) and m (its
//	                         core/codec encoding); group "tolsey"
//	<prefix>{<name>}:b       the bytes the stream's entries hold (Sizes)
//
// The braces make a queue's two keys one Redis Cluster hash slot, so the
// scripts that change both may run there.
package redis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tolsey/tolsey/core"
	"github.com/tolsey/tolsey/core/codec"
	"github.com/tolsey/tolsey/core/groupcommit"
	"github.com/tolsey/tolsey/core/queue"
)

// DefaultPrefix is the default key prefix.
const DefaultPrefix = "tolsey:queue:"

// group is the consumer group of every queue's stream.
const group = "tolsey"

// maxBatch bounds one round trip: one script call per queue holds at most
// this many records (two arguments each, well under Lua's stack limit).
const maxBatch = 1024

// seqBits is how many low bits of a Record ID hold the stream ID's
// sequence number (IDs, below).
const seqBits = 20

// Options configure Open.
type Options struct {
	// URL is the Redis URL, redis://[user:pass@]host:port/db.
	URL string
	// Prefix of every key (default DefaultPrefix). Gateways that share
	// queues use the same prefix.
	Prefix string
	// Node is this gateway's node id: its consumer name in every queue's
	// group. Required; each gateway sharing the queues needs its own,
	// stable across restarts (its pending records come back to it).
	Node string
	// ClaimTime is how long a record read by a gateway may stay unremoved
	// before another gateway claims it (default 30 s). Longer than the
	// slowest consumer's acknowledgement, or records are delivered twice.
	ClaimTime time.Duration
	// Timeout bounds each round trip of the writer (default 10 s).
	Timeout time.Duration
}

// Backend is the Redis queue.Backend. Safe for concurrent use.
type Backend struct {
	opts   Options
	client *goredis.Client
	cfgKey string
	loop   *groupcommit.Loop[op]

	// Commits counts the writer's round trips (benchmarks).
	commits atomic.Uint64

	mu   sync.Mutex
	logs map[string]*rlog

	// Owned by the writer goroutine (the loop's commit).
	per   map[*rlog]*txQueue
	order []*rlog
}

// op is one Append (data set), Remove (ids set) or SetState (state set)
// queued to the writer.
type op struct {
	log   *rlog
	data  string // Append: the encoded message
	size  int
	done  func(id uint64, err error)
	ids   []uint64 // Remove; SetState: the one ID
	state []byte   // SetState: the encoded queue.DeliveryState

	id  uint64
	err error
}

// txQueue gathers one queue's share of a batch: one script call each for
// its appends and its removals.
type txQueue struct {
	appends    []int // indexes in the batch
	appendArgs []any
	removeArgs []any
	stateArgs  []any // field, value pairs for the states hash
	cmd        *goredis.Cmd
}

var (
	_ queue.Backend  = (*Backend)(nil)
	_ queue.StateLog = (*rlog)(nil)
)

// Open connects to Redis (and checks it answers).
func Open(ctx context.Context, o Options) (*Backend, error) {
	if o.Node == "" {
		return nil, errors.New("queue: redis: a node id is required (each gateway's consumer name)")
	}
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if o.ClaimTime == 0 {
		o.ClaimTime = 30 * time.Second
	}
	if o.Timeout == 0 {
		o.Timeout = 10 * time.Second
	}
	copts, err := goredis.ParseURL(o.URL)
	if err != nil {
		return nil, fmt.Errorf("queue: redis: %w", err)
	}
	c := goredis.NewClient(copts)
	if err := c.Ping(ctx).Err(); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("%w: redis %s: %w", queue.ErrUnavailable, copts.Addr, err)
	}
	b := &Backend{opts: o, client: c, cfgKey: o.Prefix + "configs", logs: map[string]*rlog{}, per: map[*rlog]*txQueue{}}
	b.loop = groupcommit.Start(maxBatch, b.commit)
	return b, nil
}

// Declared implements queue.Backend.
func (b *Backend) Declared(ctx context.Context) ([]queue.Config, error) {
	m, err := b.client.HGetAll(ctx, b.cfgKey).Result()
	if err != nil {
		return nil, unavailable(err)
	}
	out := make([]queue.Config, 0, len(m))
	for name, js := range m {
		var c queue.Config
		if err := json.Unmarshal([]byte(js), &c); err != nil {
			return nil, fmt.Errorf("queue %q: config: %w", name, err)
		}
		out = append(out, c)
	}
	return out, nil
}

// Open implements queue.Backend: the stream and its group are created if
// missing and the configuration goes into the hash, in one MULTI: a
// gateway that reads the configuration (Declaration, Declared) finds the
// stream to attach to (Attach), and another gateway's Drop (one MULTI too)
// cannot land between the two and leave a configuration without a stream
// (every append refused for good).
func (b *Backend) Open(ctx context.Context, cfg queue.Config) (queue.Log, error) {
	js, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	l := b.logs[cfg.Name]
	if l == nil {
		l = b.newLog(cfg.Name)
	}
	var xg *goredis.StatusCmd
	var hs *goredis.IntCmd
	_, _ = b.client.TxPipelined(ctx, func(p goredis.Pipeliner) error {
		xg = b.groupCreate(ctx, p, l)
		hs = p.HSet(ctx, b.cfgKey, cfg.Name, js)
		return nil
	})
	if err := groupCreated(xg); err != nil {
		return nil, unavailable(err)
	}
	if err := hs.Err(); err != nil {
		return nil, unavailable(err)
	}
	b.logs[cfg.Name] = l
	return l, nil
}

// Create implements queue.SharedBackend: Open's stream and group, and the
// configuration only if the store holds none (HSETNX), in one MULTI that
// also reads what the store holds then. created is false when another
// gateway's declaration was there first; stored is that one.
func (b *Backend) Create(ctx context.Context, cfg queue.Config) (stored queue.Config, created bool, err error) {
	js, err := json.Marshal(cfg)
	if err != nil {
		return queue.Config{}, false, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	l := b.logs[cfg.Name]
	if l == nil {
		l = b.newLog(cfg.Name)
	}
	var xg *goredis.StatusCmd
	var set *goredis.BoolCmd
	var get *goredis.StringCmd
	_, _ = b.client.TxPipelined(ctx, func(p goredis.Pipeliner) error {
		xg = b.groupCreate(ctx, p, l)
		set = p.HSetNX(ctx, b.cfgKey, cfg.Name, js)
		get = p.HGet(ctx, b.cfgKey, cfg.Name)
		return nil
	})
	if err := groupCreated(xg); err != nil {
		return queue.Config{}, false, unavailable(err)
	}
	if err := set.Err(); err != nil {
		return queue.Config{}, false, unavailable(err)
	}
	if set.Val() {
		return cfg, true, nil
	}
	if err := get.Err(); err != nil {
		return queue.Config{}, false, unavailable(err)
	}
	if err := json.Unmarshal([]byte(get.Val()), &stored); err != nil {
		return queue.Config{}, false, fmt.Errorf("queue %q: config: %w", cfg.Name, err)
	}
	return stored, false, nil
}

// groupCreate queues the creation of l's stream and consumer group. From
// 0: a stream another gateway created holds nothing the group has not
// seen, and the group must see all of it.
func (b *Backend) groupCreate(ctx context.Context, p goredis.Pipeliner, l *rlog) *goredis.StatusCmd {
	return p.XGroupCreateMkStream(ctx, l.stream, group, "0")
}

// groupCreated is groupCreate's error, but for a group that exists.
func groupCreated(xg *goredis.StatusCmd) error {
	if err := xg.Err(); err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
		return err
	}
	return nil
}

func (b *Backend) newLog(name string) *rlog {
	key := b.opts.Prefix + "{" + name + "}:"
	return &rlog{b: b, name: name, stream: key + "s", bytes: key + "b", states: key + "d", history: true, claimFrom: "-"}
}

var _ queue.SharedBackend = (*Backend)(nil)

// Declaration implements queue.SharedBackend: one field of the hash.
func (b *Backend) Declaration(ctx context.Context, name string) (queue.Config, bool, error) {
	js, err := b.client.HGet(ctx, b.cfgKey, name).Result()
	if errors.Is(err, goredis.Nil) {
		return queue.Config{}, false, nil
	}
	if err != nil {
		return queue.Config{}, false, unavailable(err)
	}
	var c queue.Config
	if err := json.Unmarshal([]byte(js), &c); err != nil {
		return queue.Config{}, false, fmt.Errorf("queue %q: config: %w", name, err)
	}
	return c, true, nil
}

// Attach implements queue.SharedBackend: no round trip. Open made the
// stream and its group before it stored the configuration read; if the
// queue has been dropped since, reads find nothing and appends are
// refused (appendScript), until this gateway follows the drop.
func (b *Backend) Attach(_ context.Context, cfg queue.Config) (queue.Log, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	l := b.logs[cfg.Name]
	if l == nil {
		l = b.newLog(cfg.Name)
		b.logs[cfg.Name] = l
	}
	return l, nil
}

// Forget implements queue.SharedBackend.
func (b *Backend) Forget(name string) {
	b.mu.Lock()
	delete(b.logs, name)
	b.mu.Unlock()
}

// Drop implements queue.Backend: the configuration, the stream (its
// records and group) and the byte count go in one MULTI.
func (b *Backend) Drop(ctx context.Context, name string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	key := b.opts.Prefix + "{" + name + "}:"
	_, err := b.client.TxPipelined(ctx, func(p goredis.Pipeliner) error {
		p.HDel(ctx, b.cfgKey, name)
		p.Del(ctx, key+"s", key+"b", key+"d")
		return nil
	})
	if err != nil {
		return unavailable(err)
	}
	delete(b.logs, name)
	return nil
}

// Close answers what is queued and closes the connections.
func (b *Backend) Close() error {
	b.loop.Close()
	return b.client.Close()
}

// Commits is the number of round trips the writer has made.
func (b *Backend) Commits() uint64 { return b.commits.Load() }

func unavailable(err error) error {
	return fmt.Errorf("%w: redis: %w", queue.ErrUnavailable, err)
}

// appendScript adds ARGV's (size, encoding) pairs to the stream KEYS[1] and
// their sizes to the count KEYS[2], atomically, and returns the new IDs; or
// nil when the stream is gone (the queue was dropped, maybe by another
// gateway), so that an append never recreates a dropped queue without
// its group.
var appendScript = `
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
local ids, total = {}, 0
for i = 1, #ARGV, 2 do
  ids[#ids+1] = redis.call('XADD', KEYS[1], '*', 's', ARGV[i], 'm', ARGV[i+1])
  total = total + tonumber(ARGV[i])
end
redis.call('INCRBY', KEYS[2], total)
return ids`

// removeScript acknowledges and deletes the IDs ARGV[2..] of the stream
// KEYS[1] in the group ARGV[1] and takes the sizes of those it deleted off
// KEYS[2]: an ID already deleted (removed twice, or by two gateways after
// a claim) is not counted twice, which a MULTI could not check.
var removeScript = `
local freed = 0
for i = 2, #ARGV do
  local e = redis.call('XRANGE', KEYS[1], ARGV[i], ARGV[i])
  if #e > 0 then
    freed = freed + tonumber(e[1][2][2])
    redis.call('XDEL', KEYS[1], ARGV[i])
  end
  redis.call('XACK', KEYS[1], ARGV[1], ARGV[i])
  redis.call('HDEL', KEYS[3], ARGV[i])
end
if freed > 0 then redis.call('DECRBY', KEYS[2], freed) end
return freed`

// stateScript stores delivery states (ARGV: stream ID, state pairs) in
// the hash KEYS[3], for the records still in the stream KEYS[1]: a state
// never outlives its record (removed by this or another gateway).
var stateScript = `
for i = 1, #ARGV, 2 do
  if #redis.call('XRANGE', KEYS[1], ARGV[i], ARGV[i]) > 0 then
    redis.call('HSET', KEYS[3], ARGV[i], ARGV[i+1])
  end
end
return 0`

// commit sends batch in one pipeline, one script call per queue for its
// appends and one for its removals, then answers the appends in order. On
// the writer goroutine.
func (b *Backend) commit(batch []op) {
	clear(b.per)
	b.order = b.order[:0]
	for i := range batch {
		o := &batch[i]
		o.id, o.err = 0, nil
		q := b.per[o.log]
		if q == nil {
			q = &txQueue{}
			b.per[o.log] = q
			b.order = append(b.order, o.log)
		}
		if o.done != nil {
			q.appends = append(q.appends, i)
			q.appendArgs = append(q.appendArgs, o.size, o.data)
			continue
		}
		if o.state != nil {
			q.stateArgs = append(q.stateArgs, streamID(o.ids[0]), o.state)
			continue
		}
		if q.removeArgs == nil {
			q.removeArgs = append(q.removeArgs, group)
		}
		for _, id := range o.ids {
			q.removeArgs = append(q.removeArgs, streamID(id))
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), b.opts.Timeout)
	defer cancel()
	pipe := b.client.Pipeline()
	for _, l := range b.order {
		q := b.per[l]
		keys := []string{l.stream, l.bytes, l.states}
		if len(q.appends) > 0 {
			q.cmd = pipe.Eval(ctx, appendScript, keys, q.appendArgs...)
		}
		if len(q.stateArgs) > 0 {
			// Before the removals of the same batch, which delete it again.
			pipe.Eval(ctx, stateScript, keys, q.stateArgs...)
		}
		if len(q.removeArgs) > 0 {
			pipe.Eval(ctx, removeScript, keys, q.removeArgs...)
		}
	}
	_, err := pipe.Exec(ctx)
	b.commits.Add(1)
	if err != nil && !errors.Is(err, goredis.Nil) {
		err = unavailable(err)
	} else {
		err = nil
	}
	for _, l := range b.order {
		q := b.per[l]
		if q.cmd != nil {
			l.answer(batch, q, err)
		}
	}
	for i := range batch {
		if o := &batch[i]; o.done != nil {
			o.done(o.id, o.err)
		}
	}
}

// answer sets the IDs (or the error) of q's appends from its script's reply.
func (l *rlog) answer(batch []op, q *txQueue, err error) {
	ids, cerr := q.cmd.StringSlice()
	switch {
	case errors.Is(cerr, goredis.Nil):
		err = fmt.Errorf("queue %q: dropped", l.name)
	case err == nil && cerr != nil:
		err = unavailable(cerr)
	case err == nil && len(ids) != len(q.appends):
		err = fmt.Errorf("queue %q: %d IDs for %d appends", l.name, len(ids), len(q.appends))
	}
	for j, i := range q.appends {
		o := &batch[i]
		if err != nil {
			o.err = err
			continue
		}
		o.id, o.err = recordID(ids[j])
	}
}

// recordID maps a stream ID ("ms-seq") to a Record ID: ms<<20 | seq.
// Stream IDs increase, and so do these while seq stays below 2^20 (a
// million entries added to one stream within one millisecond, which Redis
// cannot do); ms fits in the 44 bits left until the year 2527.
func recordID(s string) (uint64, error) {
	msPart, seqPart, ok := strings.Cut(s, "-")
	ms, err1 := strconv.ParseUint(msPart, 10, 64)
	seq, err2 := strconv.ParseUint(seqPart, 10, 64)
	if !ok || err1 != nil || err2 != nil || seq >= 1<<seqBits || ms >= 1<<(64-seqBits) {
		return 0, fmt.Errorf("queue: redis: stream ID %q does not fit a record ID", s)
	}
	return ms<<seqBits | seq, nil
}

// streamID is recordID's inverse.
func streamID(id uint64) string {
	return strconv.FormatUint(id>>seqBits, 10) + "-" + strconv.FormatUint(id&(1<<seqBits-1), 10)
}

// rlog is one queue's queue.Log, for this gateway's consumer.
type rlog struct {
	b                   *Backend
	name, stream, bytes string
	states              string // the hash of delivery states: stream ID → queue.DeliveryState

	// Owned by Read (readMu).
	readMu    sync.Mutex
	history   bool   // still reading this consumer's pending records (from before a restart)
	historyAt string // the last of them returned
	claimFrom string // where the next look for others' stale records starts
	claimedAt time.Time
}

// Append implements queue.Log: encoded on the caller's goroutine, queued
// to the writer, done once Redis has answered. codec.Encode, not the
// compact form the embedded backend writes: several gateways share a
// queue's stream, and during a rolling upgrade one of an older version
// could not decode a version-2 record (its reads of the queue would fail
// until another gateway claimed the record).
func (l *rlog) Append(m *core.Message, done func(uint64, error)) {
	o := op{log: l, data: string(codec.Encode(m)), size: m.Size(), done: done}
	if !l.b.loop.Add(o) {
		done(0, fmt.Errorf("%w: redis: closed", queue.ErrUnavailable))
	}
}

// Remove implements queue.Log: XACK and XDEL, queued to the writer.
// Shared implements queue.SharedLog: other gateways append to the stream.
func (l *rlog) Shared() bool { return true }

// SetState implements queue.StateLog: HSET in the states hash, queued
// to the writer. The hash, not XPENDING's delivery counter: that one
// counts reads by the group (a claim, a read back after a restart), not
// the deliveries that failed, and cannot hold undeliverable-here marks.
func (l *rlog) SetState(id uint64, st queue.DeliveryState) {
	b, _ := st.AppendBinary(nil)
	l.b.loop.Add(op{log: l, ids: []uint64{id}, state: b})
}

func (l *rlog) Remove(ids ...uint64) {
	if len(ids) == 0 {
		return
	}
	l.b.loop.Add(op{log: l, ids: append([]uint64(nil), ids...)})
}

// Stats implements queue.Log: XLEN and the byte count, in one round trip.
func (l *rlog) Stats(ctx context.Context) (int, int64, error) {
	pipe := l.b.client.Pipeline()
	n := pipe.XLen(ctx, l.stream)
	bytes := pipe.Get(ctx, l.bytes)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, goredis.Nil) {
		return 0, 0, unavailable(err)
	}
	nb, _ := bytes.Int64() // missing: 0
	return int(n.Val()), nb, nil
}

// Read implements queue.Log for a shared queue: after is ignored. First,
// once, the records this consumer read before a restart and did not
// remove; then, at most every quarter of the claim time, records other
// consumers left pending longer than the claim time; then records no
// consumer has read.
func (l *rlog) Read(ctx context.Context, _ uint64, max int) ([]queue.Record, error) {
	l.readMu.Lock()
	defer l.readMu.Unlock()
	var out []queue.Record
	if l.history {
		msgs, err := l.readGroup(ctx, l.historyAt, max)
		if err != nil {
			return nil, err
		}
		if len(msgs) < max {
			l.history = false
		}
		if len(msgs) > 0 {
			l.historyAt = msgs[len(msgs)-1].ID
		}
		if out, err = l.records(ctx, out, msgs); err != nil {
			return nil, err
		}
	}
	if len(out) < max && time.Since(l.claimedAt) >= l.b.opts.ClaimTime/4 {
		msgs, err := l.claim(ctx, max-len(out))
		if err != nil {
			return nil, err
		}
		if out, err = l.records(ctx, out, msgs); err != nil {
			return nil, err
		}
	}
	// Only records read before (by this gateway before a restart, or by
	// another that left them) can have been given back with a state: new
	// ones cost no HMGET.
	if err := l.readStates(ctx, out); err != nil {
		return nil, err
	}
	if len(out) < max {
		msgs, err := l.readGroup(ctx, ">", max-len(out))
		if err != nil {
			return nil, err
		}
		if out, err = l.records(ctx, out, msgs); err != nil {
			return nil, err
		}
	}
	slices.SortFunc(out, func(a, b queue.Record) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
	return out, nil
}

// readStates fills the State of the records that have one: one HMGET.
func (l *rlog) readStates(ctx context.Context, out []queue.Record) error {
	if len(out) == 0 {
		return nil
	}
	fields := make([]string, len(out))
	for i, r := range out {
		fields[i] = streamID(r.ID)
	}
	vals, err := l.b.client.HMGet(ctx, l.states, fields...).Result()
	if err != nil {
		return unavailable(err)
	}
	for i, v := range vals {
		if s, ok := v.(string); ok {
			if err := out[i].State.UnmarshalBinary([]byte(s)); err != nil {
				return fmt.Errorf("queue %q record %s: %w", l.name, fields[i], err)
			}
		}
	}
	return nil
}

// Browse implements queue.Log: XRANGE from after, which hands the records
// to no consumer of the group.
func (l *rlog) Browse(ctx context.Context, after uint64, max int) ([]queue.Record, error) {
	msgs, err := l.b.client.XRangeN(ctx, l.stream, "("+streamID(after), "+", int64(max)).Result()
	if err != nil && !errors.Is(err, goredis.Nil) {
		return nil, unavailable(err)
	}
	var out []queue.Record
	for _, m := range msgs {
		r, ok, err := l.record(m)
		if err != nil {
			return nil, err
		}
		if ok { // else deleted since: being removed
			out = append(out, r)
		}
	}
	return out, nil
}

// record decodes a stream entry; ok is false for an entry whose fields
// are gone (deleted since it was read).
func (l *rlog) record(m goredis.XMessage) (r queue.Record, ok bool, err error) {
	data, ok := m.Values["m"].(string)
	if !ok {
		return queue.Record{}, false, nil
	}
	id, err := recordID(m.ID)
	if err != nil {
		return queue.Record{}, false, err
	}
	msg, err := codec.DecodeString(data)
	if err != nil {
		return queue.Record{}, false, fmt.Errorf("queue %q record %s: %w", l.name, m.ID, err)
	}
	return queue.Record{ID: id, Msg: msg}, true, nil
}

// readGroup is XREADGROUP from id ("0" and on: this consumer's pending
// records; ">": records nobody has read), without blocking.
func (l *rlog) readGroup(ctx context.Context, id string, count int) ([]goredis.XMessage, error) {
	if id == "" {
		id = "0"
	}
	res, err := l.b.client.XReadGroup(ctx, &goredis.XReadGroupArgs{
		Group:    group,
		Consumer: l.b.opts.Node,
		Streams:  []string{l.stream, id},
		Count:    int64(count),
		Block:    -1, // no BLOCK: Read returns what there is
	}).Result()
	if errors.Is(err, goredis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, unavailable(err)
	}
	if len(res) == 0 {
		return nil, nil
	}
	return res[0].Messages, nil
}

// claim takes over up to count records that other consumers read and left
// pending longer than the claim time. It looks them up with XPENDING IDLE
// and claims them with XCLAIM rather than XAUTOCLAIM, which would take
// this consumer's own pending records too: those the engine is delivering
// right now to a slow consumer, which it would then deliver twice. XCLAIM
// checks the idle time again, so of two gateways claiming one record only
// one gets it.
func (l *rlog) claim(ctx context.Context, count int) ([]goredis.XMessage, error) {
	l.claimedAt = time.Now()
	const page = 256
	pending, err := l.b.client.XPendingExt(ctx, &goredis.XPendingExtArgs{
		Stream: l.stream, Group: group, Idle: l.b.opts.ClaimTime,
		Start: l.claimFrom, End: "+", Count: page,
	}).Result()
	if err != nil {
		return nil, unavailable(err)
	}
	// Page through the pending list over successive claims, so that many
	// records of our own in front cannot hide others' forever.
	l.claimFrom = "-"
	if len(pending) == page {
		l.claimFrom = "(" + pending[len(pending)-1].ID
	}
	var ids []string
	for _, p := range pending {
		if p.Consumer != l.b.opts.Node && len(ids) < count {
			ids = append(ids, p.ID)
		}
	}
	if len(ids) == 0 {
		return nil, nil
	}
	msgs, err := l.b.client.XClaim(ctx, &goredis.XClaimArgs{
		Stream: l.stream, Group: group, Consumer: l.b.opts.Node,
		MinIdle: l.b.opts.ClaimTime, Messages: ids,
	}).Result()
	if err != nil && !errors.Is(err, goredis.Nil) {
		return nil, unavailable(err)
	}
	return msgs, nil
}

// records decodes msgs onto out. An entry deleted since it was read (its
// fields are gone) is acknowledged, so that it leaves the pending list.
func (l *rlog) records(ctx context.Context, out []queue.Record, msgs []goredis.XMessage) ([]queue.Record, error) {
	for _, m := range msgs {
		r, ok, err := l.record(m)
		if err != nil {
			return nil, err
		}
		if !ok {
			if err := l.b.client.XAck(ctx, l.stream, group, m.ID).Err(); err != nil {
				return nil, unavailable(err)
			}
			continue
		}
		out = append(out, r)
	}
	return out, nil
}
