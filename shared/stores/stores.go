// Package stores opens the gateway's shared state in one place: it
// chooses memory or Redis once, builds every Redis client the parts use
// (each answer timeout needs a client of its own: go-redis bounds every
// socket read by its client's ReadTimeout), hands each part its store as
// the interface the part declares (the limiter's go-limiter stores, the
// stored-response records, the backend-asked cooldowns, the token
// budgets', the gateway keys'), so that no part knows which backend it
// has, and closes them all. The Redis stores are the packages below it,
// named for what they depend on (redislimit, redisbudget, redisaffinity,
// rediscool, rediskeys, all on redisclient's clients); package store
// owns what every store's guard has in common.
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
	"github.com/llmgw/gateway/shared/keys"
	"github.com/llmgw/gateway/shared/ratelimit"
	"github.com/llmgw/gateway/shared/route"
	"github.com/llmgw/gateway/shared/store"
	"github.com/llmgw/gateway/shared/stores/redisaffinity"
	"github.com/llmgw/gateway/shared/stores/redisbudget"
	"github.com/llmgw/gateway/shared/stores/redisclient"
	"github.com/llmgw/gateway/shared/stores/rediscool"
	"github.com/llmgw/gateway/shared/stores/rediskeys"
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
	// RedisCluster builds Redis Cluster clients (redisclient.New's
	// Cluster: the OSS cluster API, whose nodes answer MOVED for another
	// node's keys) instead of single-node ones. At start the gateway asks
	// the server which it is and refuses a mismatch (Set.Misconfigured).
	// Default false: one node, or a proxy over shards (Azure Managed
	// Redis's EnterpriseCluster policy).
	RedisCluster bool `yaml:"redis_cluster" json:"redis_cluster"`
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
	// MaxConns bounds the connections every Redis client's pool may
	// hold together (Set.Conns), shared out evenly as each client's
	// redisclient MaxPoolSize (at least one each): the binary gives the
	// pools a share of its open-file limit. It only lowers go-redis's
	// default pools (10 per GOMAXPROCS each; 5 per node of a cluster).
	// 0: the defaults. A pool_size in the URL wins.
	MaxConns int `yaml:"-" json:"-"`
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
	// Keys holds the gateway keys made at run time (keys.Store).
	Keys keys.Store

	clients       []redis.UniversalClient
	gate          redisclient.Gate
	misconfigured chan error
}

// Misconfigured yields the configuration error found when the server
// was asked, in the background after Open, whether it is a Redis Cluster
// and it did not match Config.RedisCluster; by then every store's calls
// fail with it (store.ErrMisconfigured) and it has been logged. The
// binary stops on it: the gateway refuses to run on a store it would
// reach wrongly. Nothing is sent with Memory, with a kind that matches,
// or while the store cannot be reached (a call's MOVED or CROSSSLOT is
// then a configuration error of its own: redisclient.Classify).
func (s *Set) Misconfigured() <-chan error { return s.misconfigured }

// Open builds every part's store of c.Backend. It does no I/O in the
// caller's path: with Redis it establishes the pools (and loads the
// budget scripts) in the background, bounded by ctx, and logs a store not
// reachable yet. Close releases what it built.
func Open(ctx context.Context, c Config) (_ *Set, err error) {
	c = c.WithDefaults()
	s := &Set{misconfigured: make(chan error, 1)}
	switch c.Backend {
	case Memory:
		s.Affinity = affinity.NewMemory(0, time.Now)
		s.Keys = keys.NewMemory(nil)
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
	s.Keys = rediskeys.New(state, c.KeyPrefix, c.Log)
	warms := []warming{{"shared state", func(ctx context.Context) error { return redisclient.WarmPool(ctx, state) }}}
	// Cooldowns are read once per request: a client with the take's tight
	// answer timeout, so a slow store delays no request longer.
	cool, err := s.client(c, c.TakeTimeout)
	if err != nil {
		return nil, err
	}
	s.Cooldowns = rediscool.New(cool, c.KeyPrefix, c.Log)
	warms = append(warms, warming{"shared cooldowns", func(ctx context.Context) error { return redisclient.WarmPool(ctx, cool) }})
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
		warms = append(warms, warming{"budget", rs.Warm})
	}
	go s.check(ctx, c, state, warms)
	return s, nil
}

// ErrUnreachable is Check's answer when the store did not answer: the
// kind is then not checked.
var ErrUnreachable = errors.New("store not reachable")

// Check asks the Redis store c names, within ctx, whether it is
// reachable and whether its kind (cluster or not) matches
// c.RedisCluster, as Open's background check does
// (redisclient.CheckKind): nil when it is and does, or with Memory; an
// error wrapping store.ErrMisconfigured (naming redisclient.ClusterSetting)
// when the kind does not match; one wrapping ErrUnreachable when the
// store did not answer. The config check (-check) runs it.
func Check(ctx context.Context, c Config) error {
	c = c.WithDefaults()
	if c.Backend != Redis {
		return nil
	}
	s := &Set{}
	defer s.Close()
	cl, err := s.client(c, c.StateTimeout)
	if err != nil {
		return err
	}
	err = redisclient.CheckKind(ctx, cl)
	if err == nil || errors.Is(err, store.ErrMisconfigured) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrUnreachable, err)
}

// warming is one store's warm-up: what it warms, for the log, and how.
type warming struct {
	what string
	fn   func(context.Context) error
}

// check runs in the background: it asks the server whether its kind
// matches c.RedisCluster (on cl, within the dial budget), then warms
// every store in parallel; readiness waits for neither. On a mismatch it
// shuts every client's gate, logs the error with the setting to fix and
// sends it on Misconfigured, and warms nothing.
func (s *Set) check(ctx context.Context, c Config, cl redis.UniversalClient, warms []warming) {
	kctx, cancel := context.WithTimeout(ctx, c.DialTimeout+c.StateTimeout)
	err := redisclient.CheckKind(kctx, cl)
	cancel()
	switch {
	case errors.Is(err, store.ErrMisconfigured):
		s.gate.Shut(err)
		c.Log.Error("store misconfigured: every shared-state call is refused", "setting", redisclient.ClusterSetting, "err", err)
		s.misconfigured <- err
		return
	case err != nil:
		c.Log.Warn("store not reachable yet: its kind (cluster or not) is not checked", "err", err)
	}
	for _, w := range warms {
		go func() {
			if err := w.fn(ctx); err != nil {
				c.Log.Warn(w.what+" store not reachable yet", "err", err)
			}
		}()
	}
}

// Conns is the most connections the set's pools may hold together,
// hence the descriptors they may take (redisclient.Conns of each client;
// 0 with Memory). The binary reserves them beside its client connections.
func (s *Set) Conns() int {
	n := 0
	for _, c := range s.clients {
		n += redisclient.Conns(c)
	}
	return n
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
// behind the set's gate, closed by Close.
func (s *Set) client(c Config, timeout time.Duration) (redis.UniversalClient, error) {
	cl, err := redisclient.New(redisclient.ClientOptions{
		URL: c.URL, Password: c.Password, Credentials: c.Credentials,
		Timeout: timeout, DialTimeout: c.DialTimeout, Cluster: c.RedisCluster,
		MaxPoolSize: c.poolSize(),
	})
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	cl.AddHook(&s.gate)
	s.clients = append(s.clients, cl)
	return cl, nil
}

// poolSize is each client's share of MaxConns (0: the default pool): the
// take, state and cooldown clients, and the reservation client with
// Budgets, each of a cluster's nodes counted as redisclient.Conns does.
func (c Config) poolSize() int {
	if c.MaxConns <= 0 {
		return 0
	}
	clients := 3
	if c.Budgets {
		clients++
	}
	if c.RedisCluster {
		clients *= redisclient.ClusterNodes
	}
	return max(1, c.MaxConns/clients)
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
