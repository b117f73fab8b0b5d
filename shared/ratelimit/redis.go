package ratelimit

import (
	"context"
	"fmt"
	"time"

	"github.com/llmgw/gateway/shared/ratelimit/redisstore"
	"github.com/llmgw/gateway/shared/store"
	"github.com/sethvargo/go-limiter"
)

// newRedisFactory makes the one Redis client every bucket shape shares, and
// a factory of stores on it, and the client's close and pool warm-up. Keys
// are KeyPrefix + "rl:" + tenant + limit.
func newRedisFactory(cfg Config) (factory storeFactory, closeFn func() error, warmPool func(context.Context) error, err error) {
	client, err := store.NewClient(store.ClientOptions{
		URL:         cfg.RedisURL,
		Password:    cfg.RedisPassword,
		Credentials: cfg.RedisCredentials,
		Timeout:     cfg.Timeout,
		DialTimeout: cfg.DialTimeout,
	})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("redis store: %w", err)
	}
	factory = func(tokens uint64, interval time.Duration) (limiter.Store, error) {
		return redisstore.New(client, redisstore.Config{
			Tokens:    tokens,
			Interval:  interval,
			KeyPrefix: cfg.KeyPrefix + "rl:",
		})
	}
	warmPool = func(ctx context.Context) error { return store.WarmPool(ctx, client) }
	return factory, client.Close, warmPool, nil
}
