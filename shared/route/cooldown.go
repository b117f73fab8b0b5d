package route

import (
	"context"
	"sync/atomic"
	"time"
)

// Shared carries the cooldowns backends asked for between replicas, so a
// replica that starts from zero does not pay a 429 to learn that an
// endpoint is full. An implementation never shortens a longer cooldown
// (rediscool keeps one key per endpoint whose TTL only grows).
type Shared interface {
	// Publish records that e cools for d from now.
	Publish(ctx context.Context, e *Endpoint, d time.Duration) error
	// Fetch writes into left, one per endpoint of p in config order, how
	// long each still cools (0 = not at all): one store read.
	Fetch(ctx context.Context, p *Pool, left []time.Duration) error
}

// cooling says until when (unix nanoseconds; 0 = not cooling) e sits out,
// and whether the backend asked for it (hard). An ejection counts as a
// soft cooldown.
func (e *Endpoint) cooling(now int64) (until int64, hard bool) {
	c := e.cool.Load()
	if c > now {
		until, hard = c&^1, c&1 == 1
	}
	if ej := e.ejected.Load(); ej > now && !hard && ej > until {
		until = ej
	}
	return until, hard
}

// Cooldown takes e out of rotation for d, bounded by
// Options.MaxCooldown, and returns how long it set (0: nothing). hard says
// the backend asked for it (retry-after and its kin, see Advice): the
// endpoint is then not tried at all until it ends; a soft one puts it
// last. A cooldown never shortens a longer one that is still running,
// whoever set it (a peer gateway once kept the shorter deadline). A hard one is published to Shared, if
// any, within the caller's ctx; one the store could not take is published
// by a later Sync that reaches it, if it still runs.
func (r *Router) Cooldown(ctx context.Context, e *Endpoint, d time.Duration, hard bool) time.Duration {
	d = min(d, r.o.MaxCooldown)
	if d <= 0 {
		return 0
	}
	r.extend(e, r.o.Now().Add(d).UnixNano(), hard)
	if hard && r.o.Shared != nil && r.o.Shared.Publish(ctx, e, d) != nil {
		e.unshared.Store(true) // this replica knows already; the others when the store returns
	}
	return d
}

// extend sets e's cooldown to end at until unless a longer one runs; a
// hard cooldown also replaces a soft one that ends no later.
func (r *Router) extend(e *Endpoint, until int64, hard bool) {
	v := until &^ 1
	if hard {
		v |= 1
	}
	for {
		old := e.cool.Load()
		if old >= v {
			return
		}
		if e.cool.CompareAndSwap(old, v) {
			return
		}
	}
}

// Healthy ends e's soft cooldown after a success, and its run of failed
// attempts (Failed). A hard one stays: a request sent before the backend
// asked for a pause may still succeed, and the pause is the backend's to
// end. An ejection stays too: a stream's first event says nothing of how
// it ends.
func (r *Router) Healthy(e *Endpoint) {
	if e.fails.Load() != 0 {
		e.fails.Store(0)
	}
	for {
		old := e.cool.Load()
		if old == 0 || old&1 == 1 && old > r.o.Now().UnixNano() {
			return
		}
		if e.cool.CompareAndSwap(old, 0) {
			return
		}
	}
}

// Sync reads the cooldowns other replicas published for p's endpoints
// (one store read) and applies them here, never shortening one; then it
// publishes what is left of each hard cooldown of p that this replica
// learned while the store was away, so that the others stop paying a 429
// to learn it. Without Shared it does nothing; a store that fails leaves
// this replica's own view, which is still right for everything it saw
// itself.
func (r *Router) Sync(ctx context.Context, p *Pool) {
	if r.o.Shared == nil {
		return
	}
	var left [MaxEndpoints]time.Duration
	if err := r.o.Shared.Fetch(ctx, p, left[:len(p.Endpoints)]); err != nil {
		return
	}
	now := r.o.Now()
	for i, e := range p.Endpoints {
		if d := left[i]; d > 0 {
			r.extend(e, now.Add(min(d, r.o.MaxCooldown)).UnixNano(), true)
		}
		if !e.unshared.Load() || !e.unshared.CompareAndSwap(true, false) {
			continue
		}
		if until, hard := e.cooling(now.UnixNano()); hard && r.o.Shared.Publish(ctx, e, time.Duration(until-now.UnixNano())) != nil {
			e.unshared.Store(true)
		}
	}
}

// Failed counts an attempt at e that failed before its answer began: a
// 5xx or 429 without a pause, a connect failure, a timeout, a stall or
// an end before a stream's first event, an answer the gateway cannot
// relay. Such a failure may be its request's own (a body that trips a
// backend bug, a prompt slow to its first token), so it benches nothing
// by itself: that request moves on, and everyone else's next one still
// tries e. Options.FailAfter of them in a row, across requests (a request
// tries an endpoint once), eject e as StreamFailed does: Envoy's
// consecutive_5xx outlier detection. A success (Healthy) starts the
// count again.
func (r *Router) Failed(e *Endpoint) { r.count(e, &e.fails, r.o.FailAfter) }

// StreamFailed counts a stream e cut mid-way (a reset, a stall, an end
// without the terminal event). Options.EjectAfter of them in a row eject
// e (tried last) for EjectBase times the ejections in a row, bounded by
// MaxCooldown: Envoy's outlier detection, so an endpoint that cuts every
// stream after its first events stops getting first attempts.
func (r *Router) StreamFailed(e *Endpoint) { r.count(e, &e.streamFails, r.o.EjectAfter) }

// count adds one to e's consecutive failures n and ejects e when they
// reach after, starting n again.
func (r *Router) count(e *Endpoint, n *atomic.Int32, after int) {
	if int(n.Add(1)) < after {
		return
	}
	n.Store(0)
	k := time.Duration(e.ejections.Add(1))
	d := min(r.o.EjectBase*k, r.o.MaxCooldown)
	until := r.o.Now().Add(d).UnixNano()
	for {
		old := e.ejected.Load()
		if old >= until || e.ejected.CompareAndSwap(old, until) {
			return
		}
	}
}

// StreamDone records a stream e finished with its terminal event: the
// consecutive count starts again, and the next ejection is one step
// shorter.
func (r *Router) StreamDone(e *Endpoint) {
	if e.streamFails.Load() != 0 {
		e.streamFails.Store(0)
	}
	for {
		n := e.ejections.Load()
		if n == 0 || e.ejections.CompareAndSwap(n, n-1) {
			return
		}
	}
}
