package store

import (
	"context"
	"errors"
	"sync"
	"time"
)

// BreakerState is the state of a Breaker.
type BreakerState int

// Breaker states: closed (the store is used), open (the store is skipped
// until the cooldown ends), half-open (one probe call is in flight).
const (
	BreakerClosed BreakerState = iota
	BreakerOpen
	BreakerHalfOpen
)

func (s BreakerState) String() string {
	switch s {
	case BreakerClosed:
		return "closed"
	case BreakerOpen:
		return "open"
	case BreakerHalfOpen:
		return "half-open"
	}
	return "unknown"
}

// Defaults for the zero values of NewBreaker's arguments.
const (
	DefaultBreakerThreshold = 5
	DefaultBreakerCooldown  = 2 * time.Second
)

// ErrBreakerOpen is what a call gets while the breaker skips the store.
var ErrBreakerOpen = errors.New("breaker open")

// ErrQueued marks an error that is the caller's own queue, not the
// store's failure: a pooled connection not had in time. The breaker
// counts a call that failed with it for nothing, as it does a caller that
// left. A Redis store marks go-redis's pool timeout with it
// (redisclient.Queued), so that this package needs no Redis client.
var ErrQueued = errors.New("store: queued for a connection")

// ErrMisconfigured marks an error that is the gateway's configuration,
// not the store's health: a Redis Cluster's MOVED, ASK or CROSSSLOT
// answer (the client kind does not match the server, or a script's keys
// span slots), or a client kind the server was found not to match at
// start. The breaker counts it for nothing, since one tenant's keys on
// another node must not skip the store for every tenant; the guard logs
// it as a configuration error and every policy refuses the call (a
// fail-open limiter would otherwise silently stop limiting). A Redis
// store marks those answers with it (redisclient.Classify).
var ErrMisconfigured = errors.New("store: misconfigured")

// Breaker skips a failing store. After threshold failures in a row of
// calls that began after the store last answered, it opens for cooldown;
// then exactly one call probes the store while the others keep failing
// at once; the probe's outcome closes or reopens it. A call that missed
// its deadline although the store answered another call after it began
// is not counted: the store was there, the miss was this host's (a burst
// queued behind the scheduler on a loaded machine: counted, five such
// misses in one tenant's burst of 100 opened the one breaker for every
// tenant). A store that answers nobody (down, blackholed) opens it after
// threshold calls, as before, however long each takes to fail: a window
// of time would either forget a blackhole's slow failures or remember a
// burst's. A mutex is fine: a breaker is only on a store's path, next to
// a network round trip. The zero value is not usable: call NewBreaker.
type Breaker struct {
	threshold int
	cooldown  time.Duration

	mu          sync.Mutex
	state       BreakerState
	failures    int       // counted failures since the last answer
	lastSuccess time.Time // when the store last answered
	openUntil   time.Time
	opens       uint64
}

// NewBreaker returns a closed breaker that opens after threshold counted
// failures in a row (default DefaultBreakerThreshold) for cooldown
// (default DefaultBreakerCooldown).
func NewBreaker(threshold int, cooldown time.Duration) *Breaker {
	if threshold <= 0 {
		threshold = DefaultBreakerThreshold
	}
	if cooldown <= 0 {
		cooldown = DefaultBreakerCooldown
	}
	return &Breaker{threshold: threshold, cooldown: cooldown}
}

// Cooldown is how long the breaker stays open before a probe.
func (b *Breaker) Cooldown() time.Duration { return b.cooldown }

// Allow reports whether this call may use the store, and whether it is the
// half-open probe. A call that was allowed must end with exactly one of
// Success, Failure or Abandon, passing probe on.
func (b *Breaker) Allow(now time.Time) (probe, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case BreakerClosed:
		return false, true
	case BreakerOpen:
		if now.Before(b.openUntil) {
			return false, false
		}
		b.state = BreakerHalfOpen
		return true, true
	default: // half-open: a probe is already in flight
		return false, false
	}
}

// Success records a store answer at now; it reports whether the breaker
// closed.
func (b *Breaker) Success(now time.Time, probe bool) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.failures = 0
	if now.After(b.lastSuccess) {
		b.lastSuccess = now
	}
	if probe && b.state == BreakerHalfOpen {
		b.state = BreakerClosed
		return true
	}
	return false
}

// Failure records a store failure at now of a call that began at start;
// it reports whether the breaker opened. A failure of a call that began
// before the store's last answer is not counted (see Breaker), unless it
// is the probe.
func (b *Breaker) Failure(start, now time.Time, probe bool) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !probe && start.Before(b.lastSuccess) {
		return false
	}
	b.failures++
	if probe || (b.state == BreakerClosed && b.failures >= b.threshold) {
		wasOpen := b.state != BreakerClosed
		b.state = BreakerOpen
		b.openUntil = now.Add(b.cooldown)
		if !wasOpen {
			b.opens++
			return true
		}
	}
	return false
}

// Abandon hands back a probe whose caller left before the store answered,
// so the next call probes instead.
func (b *Breaker) Abandon(probe bool) {
	if !probe {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state == BreakerHalfOpen {
		b.state = BreakerOpen
	}
}

// RetryAt is when a caller refused because of the store may try again: the
// end of the cooldown while open, else one cooldown from now.
func (b *Breaker) RetryAt(now time.Time) time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state != BreakerClosed && b.openUntil.After(now) {
		return b.openUntil
	}
	return now.Add(b.cooldown)
}

// Snapshot is the state now and the number of times the breaker opened.
func (b *Breaker) Snapshot() (BreakerState, uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state, b.opens
}

// change is what one call did to the breaker, for the caller's log.
type change int

// Changes reported by call.
const (
	unchanged change = iota
	opened
	recovered
)

// call runs fn through the breaker: ErrBreakerOpen at once while the store
// is skipped; else fn's error, counted as a store failure unless ctx was
// canceled (the caller left, which says nothing about the store), the
// call waited too long for a pooled connection (ErrQueued: the gateway's
// own queue), the call failed for the gateway's configuration
// (ErrMisconfigured), or the store answered another
// call meanwhile (Breaker). A ctx that passed its deadline counts
// otherwise: the store did not answer in time.
func (b *Breaker) call(ctx context.Context, fn func() error) (change, error) {
	start := time.Now()
	probe, ok := b.Allow(start)
	if !ok {
		return unchanged, ErrBreakerOpen
	}
	err := fn()
	switch {
	case err == nil:
		if b.Success(time.Now(), probe) {
			return recovered, nil
		}
		return unchanged, nil
	case errors.Is(ctx.Err(), context.Canceled), errors.Is(err, ErrQueued), errors.Is(err, ErrMisconfigured):
		// A pool turn not had in time is the gateway's own queue, and a
		// configuration error is the gateway's, not the store: like a
		// caller that left, they count for nothing.
		b.Abandon(probe)
		return unchanged, err
	case b.Failure(start, time.Now(), probe):
		return opened, err
	}
	return unchanged, err
}
