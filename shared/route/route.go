// Package route owns model → pool → endpoint selection: weighted choice among
// a pool's endpoints, per-endpoint cooldown after failures (Retry-After
// honoured), and the order in which failover tries them.
package route

import (
	"math/rand/v2"
	"sync/atomic"
	"time"
)

// Endpoint is one backend of a pool. Index is its position in the pool's
// config.
type Endpoint struct {
	Index  int
	Name   string // for logs: the endpoint URL
	Weight int

	// until is the unix-nano end of the current cooldown; hard means the
	// backend asked for it (Retry-After), so the endpoint is skipped, not
	// merely tried last.
	until atomic.Int64
	hard  atomic.Bool
}

// Pool is a set of interchangeable endpoints.
type Pool struct {
	Name      string
	Endpoints []*Endpoint
	total     int
}

// Router maps public model names to pools.
type Router struct {
	byModel map[string]*Pool
	pools   []*Pool // in spec order
	now     func() time.Time
}

// PoolSpec describes a pool for New.
type PoolSpec struct {
	Name      string
	Models    []string
	Endpoints []EndpointSpec
}

// EndpointSpec describes an endpoint for New.
type EndpointSpec struct {
	Name   string
	Weight int
}

// New builds a router. now may be nil (time.Now).
func New(pools []PoolSpec, now func() time.Time) *Router {
	if now == nil {
		now = time.Now
	}
	r := &Router{byModel: map[string]*Pool{}, now: now}
	for _, ps := range pools {
		p := &Pool{Name: ps.Name}
		for i, es := range ps.Endpoints {
			w := es.Weight
			if w <= 0 {
				w = 1
			}
			p.Endpoints = append(p.Endpoints, &Endpoint{Index: i, Name: es.Name, Weight: w})
			p.total += w
		}
		for _, m := range ps.Models {
			r.byModel[m] = p
		}
		r.pools = append(r.pools, p)
	}
	return r
}

// Pools returns the pools in the order of the specs given to New, each
// with its endpoints in spec order: the caller pairs them with its own
// per-endpoint data (the server's backend targets) once, by pointer.
func (r *Router) Pools() []*Pool { return r.pools }

// Pool returns the pool serving model, or nil.
func (r *Router) Pool(model string) *Pool { return r.byModel[model] }

// Order appends to dst up to max endpoints in the order failover should try
// them: endpoints not cooling down first, in a weighted random order; then
// those in a soft cooldown (after an error without Retry-After), soonest to
// recover first. Endpoints in a hard cooldown (Retry-After) are left out.
// When nothing is left, wait says how long until the first one recovers.
func (r *Router) Order(p *Pool, dst []*Endpoint, max int) (order []*Endpoint, wait time.Duration) {
	now := r.now().UnixNano()
	start := len(dst)
	// Weighted random permutation of healthy endpoints (Efraimidis–Spirakis
	// would need floats and a sort; pools are small, so draw without
	// replacement over the remaining weight).
	var healthyW int
	for _, e := range p.Endpoints {
		if e.until.Load() <= now {
			healthyW += e.Weight
		}
	}
	var picked uint64 // bitmask; pools hold at most 64 endpoints (config checks)
	for healthyW > 0 && len(dst)-start < max {
		n := rand.IntN(healthyW)
		for i, e := range p.Endpoints {
			if picked&(1<<i) != 0 || e.until.Load() > now {
				continue
			}
			if n < e.Weight {
				dst = append(dst, e)
				picked |= 1 << i
				healthyW -= e.Weight
				break
			}
			n -= e.Weight
		}
	}
	// Soft-cooled endpoints, soonest first (insertion sort: tiny n).
	soft := len(dst)
	for i, e := range p.Endpoints {
		if len(dst)-start >= max {
			break
		}
		if picked&(1<<i) != 0 || e.hard.Load() && e.until.Load() > now {
			continue
		}
		dst = append(dst, e)
		for j := len(dst) - 1; j > soft && dst[j].until.Load() < dst[j-1].until.Load(); j-- {
			dst[j], dst[j-1] = dst[j-1], dst[j]
		}
	}
	if len(dst) == start {
		first := int64(0)
		for _, e := range p.Endpoints {
			if u := e.until.Load(); first == 0 || u < first {
				first = u
			}
		}
		return dst, time.Duration(first - now)
	}
	return dst, 0
}

// Cooldown takes e out of rotation for d. hard says the backend asked for it
// (Retry-After): the endpoint is then not tried at all until it ends.
func (r *Router) Cooldown(e *Endpoint, d time.Duration, hard bool) {
	e.until.Store(r.now().Add(d).UnixNano())
	e.hard.Store(hard)
}

// Healthy ends e's cooldown after a success.
func (r *Router) Healthy(e *Endpoint) {
	if e.until.Load() != 0 {
		e.until.Store(0)
		e.hard.Store(false)
	}
}
