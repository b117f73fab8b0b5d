package ratelimit

import (
	"fmt"
	"time"

	"github.com/llmgw/gateway/shared/ratelimit/redisstore"
	"github.com/sethvargo/go-limiter"
)

// newRedisFactory makes the one Redis client every bucket shape shares, and
// a factory of stores on it. Keys are KeyPrefix + "rl:" + tenant + limit.
func newRedisFactory(cfg Config) (storeFactory, func() error, error) {
	client, err := redisstore.NewClient(redisstore.ClientOptions{
		URL:         cfg.RedisURL,
		Password:    cfg.RedisPassword,
		Credentials: cfg.RedisCredentials,
		Timeout:     cfg.Timeout,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("redis store: %w", err)
	}
	factory := func(tokens uint64, interval time.Duration) (limiter.Store, error) {
		return redisstore.New(client, redisstore.Config{
			Tokens:    tokens,
			Interval:  interval,
			KeyPrefix: cfg.KeyPrefix + "rl:",
		})
	}
	return factory, client.Close, nil
}
