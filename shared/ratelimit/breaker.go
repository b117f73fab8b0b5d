package ratelimit

import (
	"sync"
	"time"
)

// BreakerState is the state of the store circuit breaker.
type BreakerState int

// Breaker states: closed (the store is used), open (the store is skipped
// until the cooldown ends), half-open (one probe take is in flight).
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

// breaker skips a failing store so that, during an outage, a take costs no
// store timeout at all. After threshold consecutive failures it opens for
// cooldown; then exactly one take probes the store while the others keep
// applying the policy; the probe's outcome closes or reopens it. A mutex is
// fine: the breaker is only on the Redis path, next to a network round trip.
type breaker struct {
	threshold int
	cooldown  time.Duration

	mu        sync.Mutex
	state     BreakerState
	failures  int
	openUntil time.Time
	opens     uint64
}

// allow reports whether this take may use the store, and whether it is the
// half-open probe.
func (b *breaker) allow(now time.Time) (probe, ok bool) {
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

// success records a store answer; it reports whether the breaker closed.
func (b *breaker) success(probe bool) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.failures = 0
	if probe && b.state == BreakerHalfOpen {
		b.state = BreakerClosed
		return true
	}
	return false
}

// failure records a store failure; it reports whether the breaker opened.
func (b *breaker) failure(now time.Time, probe bool) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
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

// abandon hands back a probe whose caller left before the store answered,
// so the next take probes instead.
func (b *breaker) abandon(probe bool) {
	if !probe {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state == BreakerHalfOpen {
		b.state = BreakerOpen
	}
}

// retryAt is when a caller refused by the closed policy may try again: the
// end of the cooldown while open, else one cooldown from now.
func (b *breaker) retryAt(now time.Time) time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state != BreakerClosed && b.openUntil.After(now) {
		return b.openUntil
	}
	return now.Add(b.cooldown)
}

func (b *breaker) snapshot() (BreakerState, uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state, b.opens
}
