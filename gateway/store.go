package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tolsey/tolsey/retain"
	"github.com/tolsey/tolsey/retain/embedded"
	"github.com/tolsey/tolsey/retain/memory"
	redisstore "github.com/tolsey/tolsey/retain/redis"
)

// openStore opens the retained store retain.backend names. A Redis store
// opens even when Redis is down: the gateway serves live traffic, /readyz
// reports the outage and the store reconnects by itself.
func (g *Gateway) openStore(ctx context.Context) (retain.Store, error) {
	limits := retain.Limits{MaxPayload: int(g.cfg.RetainMaxPayload), MaxMessages: g.cfg.RetainMaxMessages}
	switch g.cfg.RetainBackend {
	case "memory":
		return memory.New(limits), nil
	case "embedded":
		if err := os.MkdirAll(g.cfg.DataDir, 0o755); err != nil {
			return nil, &ConfigError{Key: "data.dir", Msg: err.Error()}
		}
		s, err := embedded.Open(g.cfg.DataDir, limits, embedded.WithLogger(g.log.With("part", "retain.embedded")))
		if err != nil {
			return nil, fmt.Errorf("retained store (data.dir %s): %w", g.cfg.DataDir, err)
		}
		return s, nil
	case "redis":
		redisLogOnce.Do(func() { goredis.SetLogger(redisLog{g.log.With("part", "go-redis")}) })
		s, err := redisstore.Open(ctx, redisstore.Options{
			URL: g.cfg.RedisURL, Prefix: g.cfg.RedisPrefix, Limits: limits, Logger: g.log.With("part", "retain.redis"),
		})
		if err != nil {
			return nil, &ConfigError{Key: "retain.redis.url", Msg: err.Error()}
		}
		return s, nil
	}
	return nil, &ConfigError{Key: "retain.backend", Msg: fmt.Sprintf("unknown backend %q", g.cfg.RetainBackend)}
}

// go-redis logs every failed dial through a process-wide logger; during an
// outage that would flood stderr in its own format. Route it to slog at debug
// level: the outage itself is reported by /readyz and the store's own log.
var redisLogOnce sync.Once

type redisLog struct{ l *slog.Logger }

func (r redisLog) Printf(ctx context.Context, format string, v ...any) {
	r.l.DebugContext(ctx, fmt.Sprintf(format, v...))
}
