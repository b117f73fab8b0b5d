package ratelimit

import (
	"context"
	"fmt"
	"time"

	"github.com/llmgw/gateway/shared/stores/redisclient"
	"github.com/llmgw/gateway/shared/stores/redislimit"
	"github.com/sethvargo/go-limiter"
)

// newRedisFactory makes the one Redis client every bucket shape shares
// (cfg.Client when given), a factory of stores on it, and the client's
// close and pool warm-up. Keys are KeyPrefix + "rl:" + tenant + limit.
func newRedisFactory(cfg Config) (factory storeFactory, closeFn func() error, warmPool func(context.Context) error, err error) {
	client, closeFn := cfg.Client, func() error { return nil } // the owner closes it
	if client == nil {
		if client, err = redisclient.NewClient(cfg.RedisClient(cfg.Timeout)); err != nil {
			return nil, nil, nil, fmt.Errorf("redis store: %w", err)
		}
		closeFn = client.Close
	}
	factory = func(tokens uint64, interval time.Duration) (limiter.Store, error) {
		return redislimit.New(client, redislimit.Config{
			Tokens:    tokens,
			Interval:  interval,
			KeyPrefix: cfg.KeyPrefix + "rl:",
		})
	}
	warmPool = func(ctx context.Context) error { return redisclient.WarmPool(ctx, client) }
	return factory, closeFn, warmPool, nil
}

// RedisClient is the options of a client on the limiter's Redis whose
// answers are bounded by timeout: the limiter's own (Timeout), and those
// of the stores that share its Redis with answer timeouts of their own.
func (c Config) RedisClient(timeout time.Duration) redisclient.ClientOptions {
	return redisclient.ClientOptions{
		URL:         c.RedisURL,
		Password:    c.RedisPassword,
		Credentials: c.RedisCredentials,
		Timeout:     timeout,
		DialTimeout: c.DialTimeout,
	}
}
