// Package breaker is the circuit breaker in front of every store the
// request path calls (the limiter's buckets, token budgets, stored-response
// records): while a store is failing, a call costs no store timeout at all
// and the caller applies its failure policy at once. One type for every
// store, so they fail and recover the same way (issue 20, section 6).
package breaker

import (
	"context"
	"errors"
	"sync"
	"time"
)

// State is the state of a Breaker.
type State int

// Breaker states: closed (the store is used), open (the store is skipped
// until the cooldown ends), half-open (one probe call is in flight).
const (
	Closed State = iota
	Open
	HalfOpen
)

func (s State) String() string {
	switch s {
	case Closed:
		return "closed"
	case Open:
		return "open"
	case HalfOpen:
		return "half-open"
	}
	return "unknown"
}

// Defaults for the zero values of New's arguments.
const (
	DefaultThreshold = 5
	DefaultCooldown  = 2 * time.Second
)

// ErrOpen is returned by Call while the breaker skips the store.
var ErrOpen = errors.New("breaker open")

// Breaker skips a failing store. After threshold consecutive failures it
// opens for cooldown; then exactly one call probes the store while the
// others keep failing at once; the probe's outcome closes or reopens it. A
// mutex is fine: a breaker is only on a store's path, next to a network
// round trip. The zero value is not usable: call New.
type Breaker struct {
	threshold int
	cooldown  time.Duration

	mu        sync.Mutex
	state     State
	failures  int
	openUntil time.Time
	opens     uint64
}

// New returns a closed breaker that opens after threshold consecutive
// failures (default DefaultThreshold) for cooldown (default
// DefaultCooldown).
func New(threshold int, cooldown time.Duration) *Breaker {
	if threshold <= 0 {
		threshold = DefaultThreshold
	}
	if cooldown <= 0 {
		cooldown = DefaultCooldown
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
	case Closed:
		return false, true
	case Open:
		if now.Before(b.openUntil) {
			return false, false
		}
		b.state = HalfOpen
		return true, true
	default: // half-open: a probe is already in flight
		return false, false
	}
}

// Success records a store answer; it reports whether the breaker closed.
func (b *Breaker) Success(probe bool) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.failures = 0
	if probe && b.state == HalfOpen {
		b.state = Closed
		return true
	}
	return false
}

// Failure records a store failure; it reports whether the breaker opened.
func (b *Breaker) Failure(now time.Time, probe bool) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.failures++
	if probe || (b.state == Closed && b.failures >= b.threshold) {
		wasOpen := b.state != Closed
		b.state = Open
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
	if b.state == HalfOpen {
		b.state = Open
	}
}

// RetryAt is when a caller refused because of the store may try again: the
// end of the cooldown while open, else one cooldown from now.
func (b *Breaker) RetryAt(now time.Time) time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state != Closed && b.openUntil.After(now) {
		return b.openUntil
	}
	return now.Add(b.cooldown)
}

// Snapshot is the state now and the number of times the breaker opened.
func (b *Breaker) Snapshot() (State, uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state, b.opens
}

// Change is what one Call did to the breaker, for the caller's log.
type Change int

// Changes reported by Call.
const (
	Unchanged Change = iota
	Opened
	Recovered
)

// Call runs call through the breaker: ErrOpen at once while the store is
// skipped; else call's error, counted as a store failure unless ctx was
// canceled (the caller left, which says nothing about the store). A ctx
// that passed its deadline counts: the store did not answer in time.
func (b *Breaker) Call(ctx context.Context, call func() error) (Change, error) {
	probe, ok := b.Allow(time.Now())
	if !ok {
		return Unchanged, ErrOpen
	}
	err := call()
	switch {
	case err == nil:
		if b.Success(probe) {
			return Recovered, nil
		}
		return Unchanged, nil
	case errors.Is(ctx.Err(), context.Canceled):
		b.Abandon(probe)
		return Unchanged, err
	case b.Failure(time.Now(), probe):
		return Opened, err
	}
	return Unchanged, err
}
