// Package redislimit is a go-limiter Store kept in Redis, so that every
// replica of the gateway (and every replica after a scale to zero) draws on
// one budget per key. Its client comes from redisclient.NewClient.
//
// Each Take is one atomic Lua script, one round trip (EVALSHA; EVAL once
// after the server's script cache was emptied). The script reproduces
// go-limiter v0.7.1 memorystore's bucket exactly, with one change of clock:
// time is Redis's TIME, never the replica's, so replicas with skewed clocks
// agree on tick boundaries.
//
// The memorystore bucket, reproduced here:
//   - a bucket starts full (Tokens) at its first Take, Set or Burst; that
//     instant is its start time;
//   - time is cut into ticks of Interval counted from the start time;
//   - on the first Take in a later tick, the bucket is reset (not added to)
//     to min(max, floor((tick-lastTick) * (Interval in ns / max))); for any
//     realistic limit that is the full max;
//   - a Take succeeds while tokens remain; remaining is 0 after a refusal;
//   - reset is start + (tick+1)*Interval, Unix nanoseconds: the next tick;
//   - Get reports (max, available) without refilling, (0, 0) for no bucket;
//   - Set replaces the bucket with a full one of the given shape;
//   - Burst adds to the available tokens until the next tick, or creates a
//     bucket whose max is Tokens+burst.
//
// Redis TIME has microsecond resolution, so intervals must be whole
// microseconds and start times are microseconds (memorystore: nanoseconds).
// Keys expire after TTL without takes, so idle tenants cost nothing; a bucket
// recreated after expiry starts a new tick phase, as a memorystore bucket
// does after its sweep.
package redislimit

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sethvargo/go-limiter"

	"github.com/llmgw/gateway/shared/stores/redisclient"
)

var _ limiter.Store = (*Store)(nil)

// DefaultTTL is the idle time after which a bucket's key expires when
// Config.TTL is zero. The TTL is never shorter than two of the bucket's
// intervals, so an expiring bucket would have been refilled anyway.
const DefaultTTL = time.Minute

// Config is the shape of the buckets a Store makes.
type Config struct {
	// Tokens is the number of takes allowed per interval. Default 1.
	Tokens uint64
	// Interval is the bucket's tick. It must be whole microseconds. Default 1s.
	Interval time.Duration
	// KeyPrefix is prepended to every key. Default none.
	KeyPrefix string
	// TTL is how long a bucket's key lives after its last write. Default
	// DefaultTTL, and never less than two intervals.
	TTL time.Duration
}

// Store is a limiter.Store in Redis. It does not own the client: Close stops
// the store, the caller closes the client.
type Store struct {
	client     Client
	tokens     uint64
	intervalUS int64
	prefix     string
	ttlMS      int64
	stopped    atomic.Bool
}

// New returns a Store using client (a *redis.Client, *redis.ClusterClient or
// any UniversalClient). It does no I/O.
func New(client Client, cfg Config) (*Store, error) {
	if client == nil {
		return nil, errors.New("redisstore: nil client")
	}
	if cfg.Tokens == 0 {
		cfg.Tokens = 1
	}
	if err := checkTokens(cfg.Tokens); err != nil {
		return nil, err
	}
	if cfg.Interval == 0 {
		cfg.Interval = time.Second
	}
	if err := checkInterval(cfg.Interval); err != nil {
		return nil, err
	}
	if cfg.TTL == 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.TTL < 0 {
		return nil, fmt.Errorf("redisstore: negative TTL %s", cfg.TTL)
	}
	return &Store{
		client:     client,
		tokens:     cfg.Tokens,
		intervalUS: cfg.Interval.Microseconds(),
		prefix:     cfg.KeyPrefix,
		ttlMS:      max(cfg.TTL.Milliseconds(), 1),
	}, nil
}

// maxTokens is the largest count Lua's doubles hold exactly.
const maxTokens = 1 << 53

func checkTokens(n uint64) error {
	if n > maxTokens {
		return fmt.Errorf("redisstore: %d tokens exceed 2^53, the largest count Lua holds exactly", n)
	}
	return nil
}

func checkInterval(d time.Duration) error {
	if d < time.Microsecond || d%time.Microsecond != 0 {
		return fmt.Errorf("redisstore: interval %s must be a positive whole number of microseconds (Redis TIME resolution)", d)
	}
	return nil
}

// Take takes a token from key's bucket, creating a full bucket on first use.
// It returns the bucket's max, the tokens left, the next tick in Unix
// nanoseconds and whether a token was taken; err only for Redis failures.
func (s *Store) Take(ctx context.Context, key string) (tokens, remaining, reset uint64, ok bool, err error) {
	if s.stopped.Load() {
		return 0, 0, 0, false, limiter.ErrStopped
	}
	res, err := takeScript.Run(ctx, s.client, []string{s.prefix + key}, s.tokens, s.intervalUS, s.ttlMS).Int64Slice()
	if err != nil {
		return 0, 0, 0, false, fmt.Errorf("redisstore: take: %w", redisclient.Classify(err))
	}
	if len(res) != 4 {
		return 0, 0, 0, false, fmt.Errorf("redisstore: take: unexpected reply of %d values", len(res))
	}
	return uint64(res[0]), uint64(res[1]), uint64(res[2]) * uint64(time.Microsecond), res[3] == 1, nil
}

// Get returns key's max and available tokens without changing them (and
// without the refill a Take would do); (0, 0) when there is no bucket.
func (s *Store) Get(ctx context.Context, key string) (tokens, remaining uint64, err error) {
	if s.stopped.Load() {
		return 0, 0, limiter.ErrStopped
	}
	vals, err := s.client.HMGet(ctx, s.prefix+key, "mx", "av").Result()
	if err != nil {
		return 0, 0, fmt.Errorf("redisstore: get: %w", err)
	}
	if tokens, err = parseField(vals[0]); err != nil {
		return 0, 0, fmt.Errorf("redisstore: get: %w", err)
	}
	if remaining, err = parseField(vals[1]); err != nil {
		return 0, 0, fmt.Errorf("redisstore: get: %w", err)
	}
	return tokens, remaining, nil
}

// Client is what the store needs of a Redis client. *redis.Client,
// *redis.ClusterClient, *redis.Ring and every redis.UniversalClient have it.
type Client interface {
	redis.Scripter
	HMGet(ctx context.Context, key string, fields ...string) *redis.SliceCmd
}

func parseField(v any) (uint64, error) {
	switch v := v.(type) {
	case nil:
		return 0, nil
	case string:
		return strconv.ParseUint(v, 10, 64)
	}
	return 0, fmt.Errorf("unexpected field type %T", v)
}

// Set replaces key's bucket with a full one of tokens per interval.
func (s *Store) Set(ctx context.Context, key string, tokens uint64, interval time.Duration) error {
	if s.stopped.Load() {
		return limiter.ErrStopped
	}
	if err := checkInterval(interval); err != nil {
		return err
	}
	if err := checkTokens(tokens); err != nil {
		return err
	}
	if err := setScript.Run(ctx, s.client, []string{s.prefix + key}, tokens, interval.Microseconds(), s.ttlMS).Err(); err != nil {
		return fmt.Errorf("redisstore: set: %w", err)
	}
	return nil
}

// Burst adds tokens to key's bucket until its next tick; with no bucket it
// creates one whose max is the store's Tokens plus tokens.
func (s *Store) Burst(ctx context.Context, key string, tokens uint64) error {
	if s.stopped.Load() {
		return limiter.ErrStopped
	}
	if err := checkTokens(s.tokens + tokens); err != nil {
		return err
	}
	if err := burstScript.Run(ctx, s.client, []string{s.prefix + key}, s.tokens, s.intervalUS, s.ttlMS, tokens).Err(); err != nil {
		return fmt.Errorf("redisstore: burst: %w", err)
	}
	return nil
}

// Warm loads the scripts into Redis, which also dials a connection, so that
// the first Take is a single EVALSHA round trip; then, when the client is a
// redis.UniversalClient, it establishes the client's connection pools
// (redisclient.WarmPool), so that a burst of first takes finds connections
// ready. Call it in the background at start, once for the stores that share
// a client.
func (s *Store) Warm(ctx context.Context) error {
	// With streaming credentials, wait for the first token here, where the
	// budget is the dial timeout, rather than in a take's.
	if c, ok := s.client.(interface{ Options() *redis.Options }); ok {
		if err := redisclient.PrimeCredentials(ctx, c); err != nil {
			return fmt.Errorf("redisstore: warm: %w", err)
		}
	}
	for _, sc := range []*redis.Script{takeScript, setScript, burstScript} {
		if err := sc.Load(ctx, s.client).Err(); err != nil {
			return fmt.Errorf("redisstore: warm: %w", err)
		}
	}
	if c, ok := s.client.(redis.UniversalClient); ok {
		return redisclient.WarmPool(ctx, c) // its error names itself
	}
	return nil
}

// Close stops the store: later calls return limiter.ErrStopped. The client
// stays open; its owner closes it.
func (s *Store) Close(context.Context) error {
	s.stopped.Store(true)
	return nil
}
