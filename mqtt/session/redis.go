package session

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// Redis is the backend for retain.backend=redis: one MULTI/EXEC round
// trip per batch. Per prefix P: the hash P+"clients" (client id →
// record), and per client the hashes P+"subs:"+id (filter →
// subscription) and P+"inflight:"+id (packet id → message), and the
// hash P+"epoch" (client id → its epoch, shared.go). How durable
// a commit is depends on the server's appendfsync (always: as the
// embedded file; everysec, Redis's default: up to a second lost if Redis
// itself dies; a gateway's kill -9 loses nothing EXEC answered).
type Redis struct {
	c       *goredis.Client
	prefix  string
	refused atomic.Uint64 // ops Apply left out: their client's epoch moved on
}

var _ Backend = (*Redis)(nil)

// OpenRedis connects to the Redis at url (redis://host:port/db) with the
// key prefix (the gateway's retain.redis.prefix plus "mqttsess:").
func OpenRedis(ctx context.Context, url, prefix string) (*Redis, error) {
	o, err := goredis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("session: redis URL: %w", err)
	}
	o.DisableIdentity = true // CLIENT SETINFO is refused by Redis < 7.2
	o.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	c := goredis.NewClient(o)
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := c.Ping(pctx).Err(); err != nil {
		c.Close()
		return nil, fmt.Errorf("session: redis %s: %w", o.Addr, err)
	}
	return &Redis{c: c, prefix: prefix}, nil
}

func (r *Redis) clients() string           { return r.prefix + "clients" }
func (r *Redis) subs(client string) string { return r.prefix + "subs:" + client }
func (r *Redis) msgs(client string) string { return r.prefix + "inflight:" + client }
func (r *Redis) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 10*time.Second)
}

// Apply writes ops in one script (applyScript), which the server runs
// alone, nothing else in between; an op whose client's epoch has moved on
// (Shared) is left out, and Refused counts those. Unlike MULTI/EXEC, a
// script stopped by a command's error (a key of another type than the
// store's) keeps the writes it made before it.
func (r *Redis) Apply(ops []Op) error {
	args := make([]any, 1, 1+5*len(ops))
	args[0] = r.prefix
	for _, op := range ops {
		if op.Kind < PutClient || op.Kind > DeleteInflight {
			return fmt.Errorf("session: unknown op %d", op.Kind)
		}
		e := "u"
		if op.Epoch != Unfenced {
			e = strconv.FormatUint(op.Epoch, 10)
		}
		args = append(args, strconv.Itoa(int(op.Kind)), op.Client, e, op.Key, op.Value)
	}
	ctx, cancel := r.ctx()
	defer cancel()
	n, err := applyScript.Run(ctx, r.c, nil, args...).Int64()
	if err != nil {
		return fmt.Errorf("session: redis: %w", err)
	}
	if n > 0 {
		r.refused.Add(uint64(n))
	}
	return nil
}

// Load reads every session: the clients, then each one's subscriptions
// and messages (one pipelined round trip each).
func (r *Redis) Load(fn func(kind Kind, client string, key, value []byte) error) error {
	ctx, cancel := r.ctx()
	defer cancel()
	clients, err := r.c.HGetAll(ctx, r.clients()).Result()
	if err != nil {
		return fmt.Errorf("session: redis: %w", err)
	}
	ids := make([]string, 0, len(clients))
	for id, v := range clients {
		if err := fn(PutClient, id, nil, []byte(v)); err != nil {
			return err
		}
		ids = append(ids, id)
	}
	for _, t := range []struct {
		key  func(string) string
		kind Kind
	}{{r.subs, PutSub}, {r.msgs, PutInflight}} {
		cmds := make([]*goredis.MapStringStringCmd, len(ids))
		_, err := r.c.Pipelined(ctx, func(p goredis.Pipeliner) error {
			for i, id := range ids {
				cmds[i] = p.HGetAll(ctx, t.key(id))
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("session: redis: %w", err)
		}
		for i, id := range ids {
			for k, v := range cmds[i].Val() {
				if err := fn(t.kind, id, []byte(k), []byte(v)); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// Close closes the connection pool.
func (r *Redis) Close() error { return r.c.Close() }
