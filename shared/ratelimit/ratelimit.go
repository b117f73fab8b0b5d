// Package ratelimit owns the per-tenant request limit in front of
// go-limiter's Store: how long a take may wait for a store shared by every
// replica, and what happens when that store is down (the failure policy and
// a circuit breaker). Which store backs it is its owner's choice
// (Config.Shared, the gateway's stores.Open); without one the buckets live
// in this process (go-limiter's memorystore).
//
// The memory store is exact for one process only: every replica gets its own
// budget and a scale-in forgets it. Deployments that scale out or to zero use
// the Redis store (shared/stores/redislimit), whose buckets live in Redis and
// whose clock is Redis's.
package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sethvargo/go-limiter"
	"github.com/sethvargo/go-limiter/memorystore"

	"github.com/llmgw/gateway/shared/store"
)

// BreakerState is the state of the store circuit breaker (shared/store).
type BreakerState = store.BreakerState

// Store names accepted in Config.Store.
const (
	StoreMemory = store.Memory
	StoreRedis  = store.Redis
)

// Failure policies accepted in Config.FailurePolicy (shared/store's).
const (
	PolicyOpen   = store.PolicyOpen
	PolicyClosed = store.PolicyClosed
)

// Defaults for the zero values of Config.
const (
	DefaultTimeout     = store.DefaultTimeout
	DefaultDialTimeout = store.DefaultDialTimeout
)

// ErrUnavailable is returned by Take when the store failed (error, timeout or
// open breaker) and the failure policy is closed. The server answers 503 with
// Retry-After taken from Decision.Reset. It wraps store.ErrUnavailable.
var ErrUnavailable = fmt.Errorf("ratelimit: limit %w", store.ErrUnavailable)

// ErrUnknownTenant is returned by Take for a tenant that has no configured
// limit. It is a programming or configuration error, not a refusal.
var ErrUnknownTenant = errors.New("ratelimit: unknown tenant")

// TenantLimit is one tenant's bucket: Requests per Interval (go-limiter
// calls them tokens; each request takes one).
type TenantLimit struct {
	Tenant   string
	Requests uint64
	// Interval is the bucket's refill period. Default DefaultInterval.
	Interval time.Duration
	// Counts is the tenant's prompt counts (count_tokens, input_tokens)
	// per Interval, in a bucket of their own (TakeCount): a client sends
	// many at once (Claude Code's /context about 35), which would
	// otherwise spend the request bucket on a view. Default
	// DefaultCountsPerRequest times Requests.
	Counts uint64
}

// DefaultInterval is a tenant bucket's Interval when its limit names
// none: requests per minute is how operators and providers state a rate.
const DefaultInterval = time.Minute

// WithDefaults returns tl with its zero Interval replaced by
// DefaultInterval (New and Config.Check apply it).
func (tl TenantLimit) WithDefaults() TenantLimit {
	if tl.Interval == 0 {
		tl.Interval = DefaultInterval
	}
	return tl
}

// DefaultCountsPerRequest sizes a tenant's count bucket when its limit
// names none: ten counts per request allowed. A count generates nothing
// and its backend answers from a tokenizer, so it is weighed as a tenth
// of a request; a separate bucket (not a fraction taken from the
// request bucket) keeps a burst of counts from delaying any generation.
const DefaultCountsPerRequest = 10

// counts is tl's count bucket size, default applied. The default stays
// within what the bucket can refill per interval (see Config.Check), and
// is never below Requests.
func (tl TenantLimit) counts() uint64 {
	if tl.Counts > 0 {
		return tl.Counts
	}
	n := tl.Requests * DefaultCountsPerRequest
	if limit := uint64(math.Sqrt(float64(tl.Interval.Nanoseconds()))); n > limit || n < tl.Requests {
		n = max(limit, tl.Requests)
	}
	return n
}

// StoreFunc makes the store of the buckets of one shape, tokens per
// interval: New calls it once per shape of the tenants' limits.
type StoreFunc func(tokens uint64, interval time.Duration) (limiter.Store, error)

// Config chooses and tunes the store. Its zero value is a valid memory
// limiter; every field's zero value means its documented default. Its
// fields with yaml names (timeout, failure_policy) are the config file's
// limiter section as written; the others are the program's, or the store
// section's (Store, DialTimeout).
type Config struct {
	// Store is "memory" (the default) or "redis", the store section's
	// backend, which New and Check validate the limits against. Memory is
	// per process: use redis whenever more than one replica serves, or the
	// host scales to zero. Redis needs Shared.
	Store string `yaml:"-" json:"-"`

	// Shared, when set, makes the buckets' stores in a store every replica
	// shares (the gateway's stores.Set.Limiter, on the store section's
	// Redis); its owner builds and closes what they use. A take then waits
	// at most Timeout + DialTimeout for it, behind the breaker and the
	// failure policy. Nil keeps the buckets in this process.
	Shared StoreFunc `yaml:"-" json:"-"`

	// Timeout bounds the shared store's answer to one Take (the socket
	// reads and writes on an established connection: the owner's client's
	// answer timeout), so a healthy store never adds more than this to a
	// request. Default DefaultTimeout. Unused for memory.
	Timeout time.Duration `yaml:"timeout" json:"timeout"`

	// DialTimeout bounds a Take that must wait for a connection being
	// established (dial, TLS, login, or a pool turn while the pool fills):
	// such a take gets DialTimeout on top of Timeout, so a cold pool on a
	// healthy store, a burst after scale-from-zero, is not a store failure.
	// The pool is warmed in the background at start (Warm).
	// Default DefaultDialTimeout. Unused for memory.
	DialTimeout time.Duration `yaml:"-" json:"-"`

	// FailurePolicy decides a take when the store fails, times out or the
	// breaker is open: "open" allows the request (Decision.Degraded), "closed"
	// refuses it with ErrUnavailable.
	//
	// The default is "open": the limit protects fairness and spend, not
	// safety, and an outage of the limit store should not become an outage of
	// every model behind the gateway. The exposure is bounded: each failed
	// take costs at most Timeout, the breaker then answers at once, every
	// degraded decision is logged (one line a second at most, with the
	// number it stands for) and, with telemetry on, counted (the limit
	// decision "degraded"), and backends still enforce their own quotas.
	// Choose "closed" where a hard cap matters more than availability.
	FailurePolicy string `yaml:"failure_policy" json:"failure_policy"`

	// BreakerThreshold is the number of store failures in a row (of takes
	// begun after the store last answered; store.Breaker) after which the
	// breaker opens: takes skip the store and apply FailurePolicy at once.
	// Default store.DefaultBreakerThreshold.
	BreakerThreshold int `yaml:"-" json:"-"`

	// BreakerCooldown is how long the breaker stays open before one take
	// probes the store again; success closes it, failure reopens it. So
	// recovery after the store returns is automatic. Default
	// store.DefaultBreakerCooldown.
	BreakerCooldown time.Duration `yaml:"-" json:"-"`
}

// Decision is the outcome of one Take.
type Decision struct {
	// Allowed reports whether the request may proceed.
	Allowed bool
	// Limit is the tenant's tokens per interval; Remaining the tokens left in
	// the current interval after this take.
	Limit, Remaining uint64
	// Reset is when the bucket refills (Retry-After, x-ratelimit-reset-*).
	// With ErrUnavailable it is when the store will next be tried.
	Reset time.Time
	// Degraded reports that the store failed and the failure policy decided;
	// Remaining and Reset are then estimates (a fresh bucket).
	Degraded bool
}

// Stats is a snapshot of the limiter's health counters, for tests and for
// programs that embed the limiter; the gateway exports none of them.
type Stats struct {
	// Takes counts calls to Take for known tenants.
	Takes uint64
	// Degraded counts decisions made by the failure policy.
	Degraded uint64
	// StoreErrors counts takes the store failed or timed out (breaker skips
	// excluded).
	StoreErrors uint64
	// BreakerOpens counts transitions of the breaker to open.
	BreakerOpens uint64
	// Breaker is the breaker's state now.
	Breaker BreakerState
}

// tenantBucket is what Take needs for one tenant, resolved at New so the
// memory path does no lookups or allocation beyond one map read.
type tenantBucket struct {
	store    limiter.Store
	key      string
	tokens   uint64
	interval time.Duration
}

// Limiter takes one token per request from the caller's tenant bucket. It is
// safe for concurrent use.
type Limiter struct {
	tenants map[string]*tenantBucket
	counts  map[string]*tenantBucket // the tenants' count buckets (TakeCount)
	stores  []limiter.Store
	remote  bool
	timeout time.Duration // Timeout + DialTimeout: the most one take may wait
	log     *slog.Logger
	guard   *store.Guard

	takes      atomic.Uint64
	lastWarn   atomic.Int64 // unix ns of the last degraded warning
	suppressed atomic.Uint64
	closeOnce  sync.Once
}

// New validates cfg and limits (reporting every problem at once) and builds
// the limiter. It does no network I/O: the shared store connects on the
// first Take (or on Warm), so a cold start is not held up by it.
func New(cfg Config, limits []TenantLimit, log *slog.Logger) (*Limiter, error) {
	if errs := problems(cfg, limits); len(errs) > 0 {
		return nil, fmt.Errorf("ratelimit: invalid config: %w", errors.Join(errs...))
	}
	cfg = cfg.WithDefaults()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	l := &Limiter{
		tenants: make(map[string]*tenantBucket, len(limits)),
		counts:  make(map[string]*tenantBucket, len(limits)),
		remote:  cfg.Shared != nil,
		timeout: cfg.Timeout + cfg.DialTimeout,
		log:     log,
		guard:   store.NewGuard("ratelimit", cfg.FailurePolicy, store.NewBreaker(cfg.BreakerThreshold, cfg.BreakerCooldown), log),
	}
	factory := cfg.Shared
	if factory == nil {
		factory = newMemoryStore
	}

	type shape struct {
		tokens   uint64
		interval time.Duration
	}
	byShape := make(map[shape]limiter.Store)
	bucket := func(tokens uint64, interval time.Duration, key string) (*tenantBucket, error) {
		sh := shape{tokens, interval}
		st, ok := byShape[sh]
		if !ok {
			var err error
			if st, err = factory(tokens, interval); err != nil {
				return nil, fmt.Errorf("ratelimit: store for %d/%s: %w", tokens, interval, err)
			}
			byShape[sh] = st
			l.stores = append(l.stores, st)
		}
		return &tenantBucket{store: st, key: key, tokens: tokens, interval: interval}, nil
	}
	for _, tl := range limits {
		tl = tl.WithDefaults()
		b, err := bucket(tl.Requests, tl.Interval, bucketKey(tl))
		if err == nil {
			l.tenants[tl.Tenant] = b
			b, err = bucket(tl.counts(), tl.Interval, countKey(tl))
		}
		if err != nil {
			_ = l.Close()
			return nil, err
		}
		l.counts[tl.Tenant] = b
	}
	return l, nil
}

// bucketKey names a tenant's bucket. The limit is part of the name so a
// changed limit takes effect at once instead of when the old bucket expires;
// during a rolling deploy the two versions then count separately.
func bucketKey(tl TenantLimit) string {
	return tl.Tenant + ":" + strconv.FormatUint(tl.Requests, 10) + "/" + strconv.FormatInt(int64(tl.Interval), 10)
}

// countKey names a tenant's count bucket, apart from its request bucket.
func countKey(tl TenantLimit) string {
	return tl.Tenant + ":counts:" + strconv.FormatUint(tl.counts(), 10) + "/" + strconv.FormatInt(int64(tl.Interval), 10)
}

// newMemoryStore is the StoreFunc of buckets in this process.
func newMemoryStore(tokens uint64, interval time.Duration) (limiter.Store, error) {
	return memorystore.New(&memorystore.Config{Tokens: tokens, Interval: interval})
}

// Take takes one token from tenant's bucket. A refused take is Allowed=false
// with a nil error. Errors: ErrUnknownTenant; ErrUnavailable when the store
// failed and the policy is closed; the caller's context error when ctx ended.
func (l *Limiter) Take(ctx context.Context, tenant string) (Decision, error) {
	return l.take(ctx, l.tenants, tenant)
}

// TakeCount is Take on tenant's count bucket (TenantLimit.Counts), for a
// request that only counts a prompt.
func (l *Limiter) TakeCount(ctx context.Context, tenant string) (Decision, error) {
	return l.take(ctx, l.counts, tenant)
}

func (l *Limiter) take(ctx context.Context, buckets map[string]*tenantBucket, tenant string) (Decision, error) {
	tb, ok := buckets[tenant]
	if !ok {
		return Decision{}, fmt.Errorf("%w: %q", ErrUnknownTenant, tenant)
	}
	l.takes.Add(1)
	if !l.remote {
		// The memory store never blocks and fails only after Close.
		tokens, remaining, reset, ok, err := tb.store.Take(ctx, tb.key)
		if err != nil {
			return Decision{}, fmt.Errorf("ratelimit: take: %w", err)
		}
		return Decision{Allowed: ok, Limit: tokens, Remaining: remaining, Reset: time.Unix(0, int64(reset))}, nil
	}
	return l.takeRemote(ctx, tb)
}

func (l *Limiter) takeRemote(ctx context.Context, tb *tenantBucket) (Decision, error) {
	now := time.Now()
	var tokens, remaining, reset uint64
	var ok bool
	// The store's answer is bounded by Timeout (the client's socket
	// deadlines); the context adds DialTimeout for a take that waits for a
	// connection being established.
	err := l.guard.Call(ctx, "", l.timeout, func(tctx context.Context) error {
		var err error
		tokens, remaining, reset, ok, err = tb.store.Take(tctx, tb.key)
		return err
	})
	if err != nil {
		refuse, left := l.guard.Failure(ctx, err)
		if left != nil {
			return Decision{}, fmt.Errorf("ratelimit: take: %w", left)
		}
		return l.degrade(tb, now, refuse, err)
	}
	return Decision{Allowed: ok, Limit: tokens, Remaining: remaining, Reset: time.Unix(0, int64(reset))}, nil
}

// degrade applies the failure policy to a take the store could not answer.
func (l *Limiter) degrade(tb *tenantBucket, now time.Time, refuse bool, cause error) (Decision, error) {
	l.warnDegraded(now, cause)
	if refuse {
		retry := l.guard.Breaker().RetryAt(now)
		return Decision{Limit: tb.tokens, Reset: retry, Degraded: true}, fmt.Errorf("%w: %w", ErrUnavailable, cause)
	}
	rem := uint64(0)
	if tb.tokens > 0 {
		rem = tb.tokens - 1
	}
	return Decision{Allowed: true, Limit: tb.tokens, Remaining: rem, Reset: now.Add(tb.interval), Degraded: true}, nil
}

// warnDegraded logs at most one warning per second, with the number of
// degraded decisions it stood for, so an outage does not flood the log.
func (l *Limiter) warnDegraded(now time.Time, cause error) {
	last := l.lastWarn.Load()
	if now.UnixNano()-last < int64(time.Second) || !l.lastWarn.CompareAndSwap(last, now.UnixNano()) {
		l.suppressed.Add(1)
		return
	}
	policy := PolicyOpen
	if l.guard.Closed() {
		policy = PolicyClosed
	}
	l.log.Warn("ratelimit: store unavailable, failure policy applied",
		"policy", policy, "err", cause, "suppressed", l.suppressed.Swap(0))
}

// Stats returns a snapshot of the health counters.
func (l *Limiter) Stats() Stats {
	g := l.guard.Stats()
	return Stats{
		Takes:        l.takes.Load(),
		Degraded:     g.Degraded,
		StoreErrors:  g.StoreErrors,
		BreakerOpens: g.BreakerOpens,
		Breaker:      g.Breaker,
	}
}

// Warm connects to the shared store ahead of the first request, from a
// background goroutine at start, through the first store that has a
// Warm method (the stores share one client): the Redis store loads its
// scripts, then establishes the whole connection pool (dial, TLS, login),
// so that a burst of first takes finds connections ready instead of
// waiting up to DialTimeout for them. The memory store needs nothing.
func (l *Limiter) Warm(ctx context.Context) error {
	for _, st := range l.stores {
		if w, ok := st.(interface{ Warm(context.Context) error }); ok {
			if err := w.Warm(ctx); err != nil {
				return fmt.Errorf("ratelimit: warm: %w", err)
			}
			break
		}
	}
	return nil
}

// Close stops the stores; the shared store's owner closes its client.
// Calling it again does nothing.
func (l *Limiter) Close() error {
	var err error
	l.closeOnce.Do(func() { err = l.close() })
	return err
}

func (l *Limiter) close() error {
	var errs []error
	for _, st := range l.stores {
		if err := st.Close(context.Background()); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("ratelimit: close: %w", err)
	}
	return nil
}
