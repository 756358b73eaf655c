package session

import (
	"errors"
	"fmt"
	"strconv"

	goredis "github.com/redis/go-redis/v9"
)

// Shared is a Backend several gateways read and write at once (Redis): a
// session stored by one can be carried on by another, which reads that
// one client's session when it connects (docs/cluster.md, "Persistent
// sessions that move").
//
// Each client id has an epoch in the store (0 until one is taken). A
// gateway taking a client's session (TakeClient, a move; DropClient, a
// clean start) raises it in the same transaction and writes the session
// with the new one from then on; Apply refuses an op whose Epoch is not
// the client's present one: a gateway that was slow to let go (it did not
// answer the claim in time) cannot write a session another gateway has
// taken or a clean start has deleted.
type Shared interface {
	Backend
	// TakeClient raises client's epoch and calls fn for its stored
	// session, in Load's order (its record, then its subscriptions, then
	// its messages; nothing when none is stored), in one round trip. It
	// returns the new epoch.
	TakeClient(client string, fn func(kind Kind, client string, key, value []byte) error) (epoch uint64, err error)
	// DropClient raises client's epoch and deletes its stored session, in
	// one round trip, and returns the new epoch.
	DropClient(client string) (epoch uint64, err error)
	// TakeEpoch raises client's epoch and returns it, reading nothing:
	// for a session new here while a connection of client here (one whose
	// session was not stored) holds the id.
	TakeEpoch(client string) (epoch uint64, err error)
	// Epoch returns client's present epoch (0 if never taken), raising
	// nothing: for a gateway that holds the session in memory and checks
	// whether another gateway has taken it since.
	Epoch(client string) (epoch uint64, err error)
	// Epochs returns every client's epoch (those never taken are absent:
	// 0), for a restore.
	Epochs() (map[string]uint64, error)
}

// Unfenced is the Epoch of an op written whatever the client's epoch: a
// gateway alone on its store (no cluster) has nobody to be fenced from,
// and a store once shared may hold epochs it never took.
const Unfenced = ^uint64(0)

var _ Shared = (*Redis)(nil)

func (r *Redis) epochs() string { return r.prefix + "epoch" }

// TakeClient raises client's epoch and reads its session in one MULTI/EXEC.
func (r *Redis) TakeClient(client string, fn func(kind Kind, client string, key, value []byte) error) (uint64, error) {
	ctx, cancel := r.ctx()
	defer cancel()
	var epoch *goredis.IntCmd
	var rec *goredis.StringCmd
	var subs, msgs *goredis.MapStringStringCmd
	_, err := r.c.TxPipelined(ctx, func(p goredis.Pipeliner) error {
		epoch = p.HIncrBy(ctx, r.epochs(), client, 1)
		rec = p.HGet(ctx, r.clients(), client)
		subs = p.HGetAll(ctx, r.subs(client))
		msgs = p.HGetAll(ctx, r.msgs(client))
		return nil
	})
	if err != nil && !errors.Is(err, goredis.Nil) {
		return 0, fmt.Errorf("session: redis: %w", err)
	}
	e := uint64(epoch.Val())
	if errors.Is(rec.Err(), goredis.Nil) {
		return e, nil // no record: the session is not stored
	}
	if err := fn(PutClient, client, nil, []byte(rec.Val())); err != nil {
		return e, err
	}
	for _, t := range []struct {
		m    map[string]string
		kind Kind
	}{{subs.Val(), PutSub}, {msgs.Val(), PutInflight}} {
		for k, v := range t.m {
			if err := fn(t.kind, client, []byte(k), []byte(v)); err != nil {
				return e, err
			}
		}
	}
	return e, nil
}

// DropClient raises client's epoch and deletes its session in one
// MULTI/EXEC.
func (r *Redis) DropClient(client string) (uint64, error) {
	ctx, cancel := r.ctx()
	defer cancel()
	var epoch *goredis.IntCmd
	_, err := r.c.TxPipelined(ctx, func(p goredis.Pipeliner) error {
		epoch = p.HIncrBy(ctx, r.epochs(), client, 1)
		p.HDel(ctx, r.clients(), client)
		p.Del(ctx, r.subs(client), r.msgs(client))
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("session: redis: %w", err)
	}
	return uint64(epoch.Val()), nil
}

// TakeEpoch raises client's epoch.
func (r *Redis) TakeEpoch(client string) (uint64, error) {
	ctx, cancel := r.ctx()
	defer cancel()
	e, err := r.c.HIncrBy(ctx, r.epochs(), client, 1).Result()
	if err != nil {
		return 0, fmt.Errorf("session: redis: %w", err)
	}
	return uint64(e), nil
}

// Epoch reads client's epoch (one HGET).
func (r *Redis) Epoch(client string) (uint64, error) {
	ctx, cancel := r.ctx()
	defer cancel()
	v, err := r.c.HGet(ctx, r.epochs(), client).Result()
	if errors.Is(err, goredis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("session: redis: %w", err)
	}
	e, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("session: redis: epoch of %q: %w", client, err)
	}
	return e, nil
}

// Epochs reads every client's epoch.
func (r *Redis) Epochs() (map[string]uint64, error) {
	ctx, cancel := r.ctx()
	defer cancel()
	m, err := r.c.HGetAll(ctx, r.epochs()).Result()
	if err != nil {
		return nil, fmt.Errorf("session: redis: %w", err)
	}
	out := make(map[string]uint64, len(m))
	for id, v := range m {
		e, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("session: redis: epoch of %q: %w", id, err)
		}
		out[id] = e
	}
	return out, nil
}

// applyScript applies a batch of ops (ARGV: the key prefix, then five
// per op: kind, client, epoch, key, value), each only while its client's
// epoch (absent: 0) is the op's, or the op's is Unfenced ("u"); it
// returns the number refused. A script
// runs alone on the server, so the test and the write are one step.
var applyScript = goredis.NewScript(`
local p = ARGV[1]
local ok = {}
local refused = 0
for i = 2, #ARGV, 5 do
  local kind, c, e, k, v = ARGV[i], ARGV[i+1], ARGV[i+2], ARGV[i+3], ARGV[i+4]
  local good = true
  if e ~= 'u' then
    local cur = ok[c]
    if cur == nil then
      cur = redis.call('HGET', p .. 'epoch', c) or '0'
      ok[c] = cur
    end
    good = (cur == e)
  end
  if not good then
    refused = refused + 1
  elseif kind == '1' then
    redis.call('HSET', p .. 'clients', c, v)
  elseif kind == '2' then
    redis.call('HDEL', p .. 'clients', c)
    redis.call('DEL', p .. 'subs:' .. c, p .. 'inflight:' .. c)
  elseif kind == '3' then
    redis.call('HSET', p .. 'subs:' .. c, k, v)
  elseif kind == '4' then
    redis.call('HDEL', p .. 'subs:' .. c, k)
  elseif kind == '5' then
    redis.call('HSET', p .. 'inflight:' .. c, k, v)
  elseif kind == '6' then
    redis.call('HDEL', p .. 'inflight:' .. c, k)
  end
end
return refused
`)

// Refused is the number of ops Apply refused because another gateway had
// taken their client's session meanwhile (docs/cluster.md).
func (r *Redis) Refused() uint64 { return r.refused.Load() }
