package store

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
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

// The breaker's window: failures are counted over the last breakerWindow
// (in breakerSlots slots), and the breaker opens once they are at least
// the threshold and at least breakerRatio percent of the calls in it. A
// store that fails every call (down, blackholed) opens it after threshold
// failures as before; a burst on a loaded host that misses a few
// deadlines among many answers does not (issue 32: five timeouts in a
// burst of 100 from one tenant opened the breaker for every tenant).
const (
	breakerWindow = time.Second
	breakerSlots  = 10
	breakerRatio  = 50
)

// ErrBreakerOpen is what a call gets while the breaker skips the store.
var ErrBreakerOpen = errors.New("breaker open")

// Breaker skips a failing store. When the failures over its window reach
// threshold and half of the calls in it, it opens for cooldown; then
// exactly one call probes the store while the others keep failing at
// once; the probe's outcome closes or reopens it. A mutex is fine: a
// breaker is only on a store's path, next to a network round trip. The
// zero value is not usable: call NewBreaker.
type Breaker struct {
	threshold int
	cooldown  time.Duration

	mu        sync.Mutex
	state     BreakerState
	slots     [breakerSlots]slot
	openUntil time.Time
	opens     uint64
}

// slot counts the calls and failures of one slice of the window.
type slot struct {
	at              int64 // the slice's index (unix nanoseconds / slice length)
	calls, failures int
}

// NewBreaker returns a closed breaker that opens after threshold
// failures over its window (default DefaultBreakerThreshold) that are at
// least half of its calls, for cooldown (default DefaultBreakerCooldown).
func NewBreaker(threshold int, cooldown time.Duration) *Breaker {
	if threshold <= 0 {
		threshold = DefaultBreakerThreshold
	}
	if cooldown <= 0 {
		cooldown = DefaultBreakerCooldown
	}
	return &Breaker{threshold: threshold, cooldown: cooldown}
}

// countLocked adds one call at now, failed or not, and returns the
// window's totals.
func (b *Breaker) countLocked(now time.Time, failed bool) (calls, failures int) {
	const slice = int64(breakerWindow / breakerSlots)
	at := now.UnixNano() / slice
	s := &b.slots[at%breakerSlots]
	if s.at != at {
		*s = slot{at: at}
	}
	s.calls++
	if failed {
		s.failures++
	}
	for i := range b.slots {
		if at-b.slots[i].at < breakerSlots {
			calls += b.slots[i].calls
			failures += b.slots[i].failures
		}
	}
	return calls, failures
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
	if probe && b.state == BreakerHalfOpen {
		b.state = BreakerClosed
		b.slots = [breakerSlots]slot{} // a fresh window after the recovery
		return true
	}
	b.countLocked(now, false)
	return false
}

// Failure records a store failure at now; it reports whether the breaker
// opened.
func (b *Breaker) Failure(now time.Time, probe bool) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	calls, failures := b.countLocked(now, true)
	if probe || (b.state == BreakerClosed && failures >= b.threshold && failures*100 >= calls*breakerRatio) {
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
// canceled (the caller left, which says nothing about the store) or the
// call waited too long for a pooled connection (go-redis's
// ErrPoolTimeout: the gateway's own queue). A ctx that passed its
// deadline counts: the store did not answer in time.
func (b *Breaker) call(ctx context.Context, fn func() error) (change, error) {
	probe, ok := b.Allow(time.Now())
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
	case errors.Is(ctx.Err(), context.Canceled), errors.Is(err, redis.ErrPoolTimeout):
		// A pool turn not had in time is the gateway's own queue, not
		// the store: like a caller that left, it counts for nothing.
		b.Abandon(probe)
		return unchanged, err
	case b.Failure(time.Now(), probe):
		return opened, err
	}
	return unchanged, err
}
