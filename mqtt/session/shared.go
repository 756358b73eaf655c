package session

import (
	"errors"
	"fmt"

	goredis "github.com/redis/go-redis/v9"
)

// Shared is a Backend several gateways read and write at once (Redis): a
// session stored by one can be carried on by another, which reads that
// one client's session when it connects (docs/cluster.md, "Persistent
// sessions that move").
type Shared interface {
	Backend
	// LoadClient calls fn for the stored session of client only, in
	// Load's order (its record, then its subscriptions, then its
	// messages); nothing when none is stored.
	LoadClient(client string, fn func(kind Kind, client string, key, value []byte) error) error
}

var _ Shared = (*Redis)(nil)

// LoadClient reads one client's session in one pipelined round trip.
func (r *Redis) LoadClient(client string, fn func(kind Kind, client string, key, value []byte) error) error {
	ctx, cancel := r.ctx()
	defer cancel()
	var rec *goredis.StringCmd
	var subs, msgs *goredis.MapStringStringCmd
	_, err := r.c.Pipelined(ctx, func(p goredis.Pipeliner) error {
		rec = p.HGet(ctx, r.clients(), client)
		subs = p.HGetAll(ctx, r.subs(client))
		msgs = p.HGetAll(ctx, r.msgs(client))
		return nil
	})
	if errors.Is(err, goredis.Nil) {
		return nil // no record: the session is not stored
	}
	if err != nil {
		return fmt.Errorf("session: redis: %w", err)
	}
	if err := fn(PutClient, client, nil, []byte(rec.Val())); err != nil {
		return err
	}
	for _, t := range []struct {
		m    map[string]string
		kind Kind
	}{{subs.Val(), PutSub}, {msgs.Val(), PutInflight}} {
		for k, v := range t.m {
			if err := fn(t.kind, client, []byte(k), []byte(v)); err != nil {
				return err
			}
		}
	}
	return nil
}
