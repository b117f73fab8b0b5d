// Package stores opens the gateway's shared state in one place: it
// chooses memory or Redis once, builds every Redis client the parts use
// (each answer timeout needs a client of its own: go-redis bounds every
// socket read by its client's ReadTimeout), hands each part its store as
// the interface the part declares (the limiter's go-limiter stores, the
// stored-response records, the backend-asked cooldowns, the token
// budgets'), so that no part knows which backend it has, and closes them
// all. The Redis stores are the packages below it, named for what they
// depend on (redislimit, redisbudget, redisaffinity, rediscool, all on
// redisclient's clients); package store owns what every store's guard
// has in common.
package stores

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sethvargo/go-limiter"

	"github.com/llmgw/gateway/shared/affinity"
	"github.com/llmgw/gateway/shared/budget"
	"github.com/llmgw/gateway/shared/ratelimit"
	"github.com/llmgw/gateway/shared/route"
	"github.com/llmgw/gateway/shared/store"
	"github.com/llmgw/gateway/shared/stores/redisaffinity"
	"github.com/llmgw/gateway/shared/stores/redisbudget"
	"github.com/llmgw/gateway/shared/stores/redisclient"
	"github.com/llmgw/gateway/shared/stores/rediscool"
	"github.com/llmgw/gateway/shared/stores/redislimit"
)

// Backends (store's).
const (
	// Memory keeps each part's state in this process.
	Memory = store.Memory
	// Redis shares it between replicas through one Redis.
	Redis = store.Redis
)

// DefaultStateTimeout bounds one call for shared state other than a take
// or a reservation (stored-response records, budget settles): they may
// take longer than a take's tight budget.
const DefaultStateTimeout = time.Second

// Config is where the shared state lives and the answer timeout of each
// part's calls. Its fields with yaml names are the config file's store
// section as written, its secrets by the environment variables that hold
// them (WithSecrets reads them); the others are the program's. The
// binary resolves the secrets before Open.
type Config struct {
	// Backend is memory (per process) or redis (shared by replicas,
	// survives scale-to-zero). Default Memory.
	Backend       string `yaml:"backend" json:"backend"`
	RedisSettings `yaml:",inline"`
	// URL, Password and Credentials reach Redis (redisclient.ClientOptions).
	URL         string                                                           `yaml:"-" json:"-"`
	Password    string                                                           `yaml:"-" json:"-"`
	Credentials func(ctx context.Context) (username, password string, err error) `yaml:"-" json:"-"`
	// TakeTimeout bounds the limiter's takes and the cooldown reads (once
	// per request). Default store.DefaultTimeout.
	TakeTimeout time.Duration `yaml:"-" json:"-"`
	// ReserveTimeout bounds a budget reservation. Default
	// store.DefaultTimeout.
	ReserveTimeout time.Duration `yaml:"-" json:"-"`
	// StateTimeout bounds every other call. Default DefaultStateTimeout.
	StateTimeout time.Duration `yaml:"-" json:"-"`
	// Budgets asks for the budgets' store; without it no reservation
	// client is built.
	Budgets bool `yaml:"-" json:"-"`
	// Log is told when a store is not reachable at start.
	Log *slog.Logger `yaml:"-" json:"-"`
}

// Set is each part's store. With Memory, Limiter and Cooldowns are nil:
// the limiter keeps its buckets and the router its cooldowns in this
// process.
type Set struct {
	// Limiter makes the request limiter's bucket stores
	// (ratelimit.Config.Shared).
	Limiter ratelimit.StoreFunc
	// Affinity holds the stored-response records.
	Affinity affinity.Store
	// Cooldowns carries backend-asked cooldowns between replicas.
	Cooldowns route.Shared
	// Budget is the token budgets' store (nil without Config.Budgets).
	Budget budget.Store

	clients []*redis.Client
}

// Open builds every part's store of c.Backend. It does no I/O in the
// caller's path: with Redis it establishes the pools (and loads the
// budget scripts) in the background, bounded by ctx, and logs a store not
// reachable yet. Close releases what it built.
func Open(ctx context.Context, c Config) (_ *Set, err error) {
	c = c.WithDefaults()
	s := &Set{}
	switch c.Backend {
	case Memory:
		s.Affinity = affinity.NewMemory(0, time.Now)
		if c.Budgets {
			s.Budget = budget.NewMemory(nil)
		}
		return s, nil
	case Redis:
	default:
		return nil, fmt.Errorf("stores: backend must be %s or %s, not %q", Memory, Redis, c.Backend)
	}
	defer func() {
		if err != nil {
			_ = s.Close()
		}
	}()
	take, err := s.client(c, c.TakeTimeout)
	if err != nil {
		return nil, err
	}
	s.Limiter = func(tokens uint64, interval time.Duration) (limiter.Store, error) {
		st, err := redislimit.New(take, redislimit.Config{Tokens: tokens, Interval: interval, KeyPrefix: c.KeyPrefix + "rl:"})
		if err != nil {
			return nil, err
		}
		return st, nil
	}
	state, err := s.client(c, c.StateTimeout)
	if err != nil {
		return nil, err
	}
	s.Affinity = redisaffinity.New(state, c.KeyPrefix, c.Log)
	warm(ctx, c.Log, "shared state", func(ctx context.Context) error { return redisclient.WarmPool(ctx, state) })
	// Cooldowns are read once per request: a client with the take's tight
	// answer timeout, so a slow store delays no request longer.
	cool, err := s.client(c, c.TakeTimeout)
	if err != nil {
		return nil, err
	}
	s.Cooldowns = rediscool.New(cool, c.KeyPrefix, c.Log)
	warm(ctx, c.Log, "shared cooldowns", func(ctx context.Context) error { return redisclient.WarmPool(ctx, cool) })
	if c.Budgets {
		reserve, err := s.client(c, c.ReserveTimeout)
		if err != nil {
			return nil, err
		}
		rs, err := redisbudget.New(state, redisbudget.Config{KeyPrefix: c.KeyPrefix + "budget:", ReserveClient: reserve})
		if err != nil {
			return nil, err
		}
		s.Budget = rs
		// The scripts loaded and the reservation pool established, the
		// first reservations are one EVALSHA each.
		warm(ctx, c.Log, "budget", rs.Warm)
	}
	return s, nil
}

// Close closes every client Open built.
func (s *Set) Close() error {
	var errs []error
	for _, c := range s.clients {
		errs = append(errs, c.Close())
	}
	s.clients = nil
	return errors.Join(errs...)
}

// client is a client on c's Redis whose answers are bounded by timeout,
// closed by Close.
func (s *Set) client(c Config, timeout time.Duration) (*redis.Client, error) {
	cl, err := redisclient.NewClient(redisclient.ClientOptions{
		URL: c.URL, Password: c.Password, Credentials: c.Credentials,
		Timeout: timeout, DialTimeout: c.DialTimeout,
	})
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	s.clients = append(s.clients, cl)
	return cl, nil
}

// WithDefaults returns c with its zero values replaced by their defaults.
func (c Config) WithDefaults() Config {
	c.Backend = cmp.Or(c.Backend, Memory)
	c.KeyPrefix = cmp.Or(c.KeyPrefix, store.DefaultKeyPrefix)
	c.DialTimeout = cmp.Or(c.DialTimeout, store.DefaultDialTimeout)
	c.TakeTimeout = cmp.Or(c.TakeTimeout, store.DefaultTimeout)
	c.ReserveTimeout = cmp.Or(c.ReserveTimeout, store.DefaultTimeout)
	c.StateTimeout = cmp.Or(c.StateTimeout, DefaultStateTimeout)
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	return c
}

// warm runs fn in the background; readiness does not wait for it.
func warm(ctx context.Context, log *slog.Logger, what string, fn func(context.Context) error) {
	go func() {
		if err := fn(ctx); err != nil {
			log.Warn(what+" store not reachable yet", "err", err)
		}
	}()
}
