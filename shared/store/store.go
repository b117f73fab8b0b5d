// Package store owns what every store of shared state has in common,
// whatever keeps it: the backends' names, the defaults of the timeouts and
// the key prefix, the failure policies, and the Guard that puts the
// circuit breaker and the failure policy in front of every call to a
// remote store (the limiter's buckets, the token budgets, the
// stored-response records, the shared cooldowns), so that the stores time
// out, fail and recover the same way. The Redis stores and the one
// builder of their clients are under shared/stores (redisclient).
package store

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/llmgw/gateway/shared/problem"
)

// Backends: where the shared state lives (the store section's backend,
// stores.Config.Backend, ratelimit.Config.Store).
const (
	// Memory keeps each part's state in its process.
	Memory = "memory"
	// Redis shares it between replicas through one Redis.
	Redis = "redis"
)

// CheckShared reports the problems with the settings every part on the
// shared store takes alike, under at: backend (under backendField) and
// dial_timeout. The gateway's config check runs it once for the store
// section (stores.Config.Check); the request limiter's New runs it on a
// Config built without the config file.
func CheckShared(at problem.At, backendField, backend string, dialTimeout time.Duration) {
	if backend != Memory && backend != Redis {
		at.Add(backendField, "must be %s or %s, not %q", Memory, Redis, backend)
	}
	problem.NotNegative(at, "dial_timeout", dialTimeout)
}

// Failure policies: what a caller does with a call the store could not
// answer (an error, a timeout or an open breaker).
const (
	// PolicyOpen goes ahead without the store (a degraded decision).
	PolicyOpen = "open"
	// PolicyClosed refuses with ErrUnavailable.
	PolicyClosed = "closed"
)

// Defaults for a store's timeouts.
const (
	// DefaultTimeout bounds a store's answer on the request path: a
	// healthy store never adds more than this to a request. It was 50 ms:
	// two replicas answering ten bursts of 200 concurrent first streams
	// with one core busy then refused up to 128 of the 2,000 503 from a
	// healthy redis-server (its answers late by the replica's queue and
	// the host's, not the store's own), and 100 ms still refused 70; at
	// 250 ms none of 12,000 (docs/operations.md, scripts/storeburst). A
	// store that answers nobody costs only the first calls this before
	// the breaker opens.
	DefaultTimeout = 250 * time.Millisecond
	// DefaultDialTimeout is the dial budget (ClientOptions.DialTimeout): a
	// TLS handshake and an Entra login to a managed Redis in the same
	// region take tens of milliseconds, a busy host's scheduler adds some.
	DefaultDialTimeout = time.Second
	// DefaultKeyPrefix prefixes every key of every part, so that several
	// gateways can share one Redis; each part adds its own below it.
	DefaultKeyPrefix = "llmgw:"
)

// ErrUnavailable is the cause of every refusal by PolicyClosed. Each
// caller wraps it in a sentinel of its own (ratelimit.ErrUnavailable,
// budget.ErrUnavailable), so that errors.Is finds both the caller's and
// this one.
var ErrUnavailable = errors.New("store unavailable")

// Guard is the failure policy in front of one remote store: the breaker,
// the log lines of its changes, the counters of failed calls and the
// decision on a call the store could not answer. It is safe for concurrent
// use.
type Guard struct {
	name    string // prefixes the log lines
	closed  bool
	breaker *Breaker
	log     *slog.Logger

	storeErrors, degraded atomic.Uint64
	misconfigured         atomic.Bool // logged once
}

// NewGuard returns the guard of the store that name's log lines speak of,
// applying policy (PolicyOpen or PolicyClosed; the caller validated it)
// behind b. log, when not nil, is told when the breaker opens and closes.
func NewGuard(name, policy string, b *Breaker, log *slog.Logger) *Guard {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Guard{name: name, closed: policy == PolicyClosed, breaker: b, log: log}
}

// Breaker is the guard's breaker.
func (g *Guard) Breaker() *Breaker { return g.breaker }

// Call runs fn through the breaker with a context bounded by within (0:
// ctx's own bound), and logs the breaker's changes; op, when not empty,
// names the operation in them. The breaker counts ctx's cancellation as
// the caller leaving, not as a store failure.
func (g *Guard) Call(ctx context.Context, op string, within time.Duration, fn func(context.Context) error) error {
	ch, err := g.breaker.call(ctx, func() error {
		if within <= 0 {
			return fn(ctx)
		}
		tctx, cancel := context.WithTimeout(ctx, within)
		defer cancel()
		return fn(tctx)
	})
	switch ch {
	case opened:
		args := []any{"cooldown", g.breaker.Cooldown(), "err", err}
		if op != "" {
			args = append([]any{"op", op}, args...)
		}
		g.log.Warn(g.name+": store failing, breaker open", args...)
	case recovered:
		g.log.Info(g.name + ": store recovered, breaker closed")
	}
	if errors.Is(err, ErrMisconfigured) && !g.misconfigured.Swap(true) {
		g.log.Error(g.name+": store misconfigured: calls are refused until the configuration is fixed", "err", err)
	}
	return err
}

// Failure decides a call that failed with err. When ctx ended, the caller
// left, which says nothing about the store: left is ctx's cause, no policy
// applies and nothing is counted. Otherwise the call counts as degraded
// (and as a store error unless the breaker skipped the store), and refuse
// reports that the policy is closed. A configuration error
// (ErrMisconfigured) is refused whatever the policy and is no store
// error: going ahead would hide it (a fail-open limiter that stops
// limiting the tenants whose keys are on another node).
func (g *Guard) Failure(ctx context.Context, err error) (refuse bool, left error) {
	if ctx.Err() != nil {
		return false, context.Cause(ctx)
	}
	g.degraded.Add(1)
	if errors.Is(err, ErrMisconfigured) {
		return true, nil
	}
	if !errors.Is(err, ErrBreakerOpen) {
		g.storeErrors.Add(1)
	}
	return g.closed, nil
}

// Closed reports whether the policy is PolicyClosed.
func (g *Guard) Closed() bool { return g.closed }

// Stats is a snapshot of a Guard's counters.
type Stats struct {
	// Degraded counts failed calls the policy decided.
	Degraded uint64
	// StoreErrors counts the calls the store failed or did not answer in
	// time (breaker skips excluded).
	StoreErrors uint64
	// BreakerOpens counts transitions of the breaker to open.
	BreakerOpens uint64
	// Breaker is the breaker's state now.
	Breaker BreakerState
}

// Stats returns a snapshot of the counters.
func (g *Guard) Stats() Stats {
	state, opens := g.breaker.Snapshot()
	return Stats{
		Degraded:     g.degraded.Load(),
		StoreErrors:  g.storeErrors.Load(),
		BreakerOpens: opens,
		Breaker:      state,
	}
}
