// Package route owns model → pool → endpoint selection: priorities inside
// a pool (reserved capacity first, pay-as-you-go for its 429s), the least
// busy endpoint within a priority, prompt-cache affinity, per-endpoint
// cooldowns that obey the backend and are never shortened, outlier
// ejection for endpoints that cut streams, and cooldowns shared between
// replicas (Shared). The files: route.go (pools and the order), cooldown.go
// (cooldowns, ejection, sharing), advice.go (what a backend's headers ask
// for), affinity.go (the prompt-cache key and rendezvous hashing).
package route

import (
	"math/rand/v2"
	"sort"
	"sync/atomic"
	"time"

	"github.com/llmgw/gateway/shared/problem"
)

// MaxEndpoints bounds a pool (config checks it): the order is built on the
// stack.
const MaxEndpoints = 64

// Endpoint is one backend of a pool. Index is its position in the pool's
// config.
type Endpoint struct {
	Index    int
	Name     string // for logs: the endpoint URL
	Weight   int
	Priority int // 0 is tried first
	Pool     string

	// cool is the current cooldown's end in unix nanoseconds with its low
	// bit set when the backend asked for it (hard: skipped, not merely
	// tried last); it only ever grows while it lasts (Cooldown).
	cool atomic.Int64
	// ejected is the end of an outlier ejection (mid-stream failures):
	// tried last until then, and a stream's first event does not end it.
	ejected atomic.Int64
	// inflight counts the requests this endpoint is answering now.
	inflight atomic.Int64
	// fails counts consecutive attempts that failed before their answer
	// began (Failed); streamFails consecutive streams cut mid-way;
	// ejections the ejections in a row, which lengthen the next one.
	fails       atomic.Int32
	streamFails atomic.Int32
	ejections   atomic.Int32
	// unshared says a hard cooldown of e could not be published (the
	// store was away): Sync publishes what is left of it once the store
	// answers again.
	unshared atomic.Bool
	// hash is the endpoint's rendezvous identity, from its name: the same
	// on every replica.
	hash uint64
	// shares counts each tenant's asks against its share of the
	// endpoint's capacity (share.go); nil without a capacity.
	shares *shares
}

// InFlight is how many requests e is answering now.
func (e *Endpoint) InFlight() int64 { return e.inflight.Load() }

// Begin counts a request sent to e; End must follow when its answer is
// done (relayed, or abandoned).
func (e *Endpoint) Begin() { e.inflight.Add(1) }

// End ends what Begin counted.
func (e *Endpoint) End() { e.inflight.Add(-1) }

// Pool is a set of interchangeable endpoints.
type Pool struct {
	Name      string
	Endpoints []*Endpoint
	// byPriority is Endpoints sorted by priority (stable: config order
	// within one).
	byPriority []*Endpoint
}

// Router maps public model names to pools.
type Router struct {
	byModel map[string]*Pool
	pools   []*Pool // in spec order
	o       Options
}

// Options tunes a Router; the zero value works.
type Options struct {
	// Now is the clock; default time.Now.
	Now func() time.Time
	// Settings is what the config file sets of the router.
	Settings
	// EjectBase is the first outlier ejection's length; the n-th in a row
	// lasts n times it, bounded by MaxCooldown. Default DefaultEjectBase.
	EjectBase time.Duration
	// EjectAfter is how many streams in a row an endpoint may cut before
	// it is ejected. Default DefaultEjectAfter.
	EjectAfter int
	// FailAfter is how many attempts in a row, across requests, may fail
	// at an endpoint before its answer began (Router.Failed) before it is
	// ejected. Default DefaultFailAfter.
	FailAfter int
	// LoadFactor bounds prompt-cache affinity: an endpoint keeps its keys
	// while its in-flight requests stay within LoadFactor times its
	// weighted share of the priority's (consistent hashing with bounded
	// loads). Default DefaultLoadFactor.
	LoadFactor float64
	// Shared carries backend-asked cooldowns between replicas; nil keeps
	// them in this process.
	Shared Shared
	// WeightedRandom orders each priority by weighted random draw alone
	// (the choice before the least busy endpoint was preferred), and
	// NoAffinity ignores prompt-cache keys: both off by default, kept so that the routing bench
	// (shared/server BenchmarkRouting*) measures each part against its
	// absence on the same code.
	WeightedRandom, NoAffinity bool
}

// Settings is the router's settings as the config file's upstream
// section writes them (their yaml names). A zero field is the default
// its comment names, which New applies.
type Settings struct {
	// MaxCooldown bounds the cooldown any one backend answer can set
	// (retry-after-ms, Retry-After, x-ratelimit-reset-*,
	// anthropic-ratelimit-*-reset), so that neither a backend's nor a
	// hostile caller's provoked answer can bench an endpoint for long.
	// Default DefaultMaxCooldown.
	MaxCooldown time.Duration `yaml:"max_cooldown" json:"max_cooldown"`
}

// Check reports every problem with s under at, by the config file's
// field names.
func (s Settings) Check(at problem.At) {
	problem.NotNegative(at, "max_cooldown", s.MaxCooldown)
}

// CheckBound reports field when d, its value as the part that takes it
// defaults it, exceeds max_cooldown (its default when unset): every
// cooldown is bounded by max_cooldown, so a longer setting (dispatch's
// default_cooldown) would be refused at start rather than silently cut.
func (s Settings) CheckBound(at problem.At, field string, d time.Duration) {
	if m := s.maxCooldown(); d > m {
		at.Add(field, "must not exceed max_cooldown (%s), got %s", m, d)
	}
}

// maxCooldown is MaxCooldown, or its default when unset.
func (s Settings) maxCooldown() time.Duration {
	if s.MaxCooldown <= 0 {
		return DefaultMaxCooldown
	}
	return s.MaxCooldown
}

// Defaults for Options.
const (
	DefaultMaxCooldown = time.Minute
	DefaultEjectBase   = 5 * time.Second
	DefaultEjectAfter  = 3
	DefaultFailAfter   = 5 // Envoy's consecutive_5xx default
	DefaultLoadFactor  = 1.25
)

// PoolSpec describes a pool for New.
type PoolSpec struct {
	Name      string
	Models    []string
	Endpoints []EndpointSpec
}

// EndpointSpec describes an endpoint for New.
type EndpointSpec struct {
	Name     string
	Weight   int
	Priority int
	// Capacity is the tokens a minute the endpoint admits (a PTU's), and
	// TenantShare the fraction of it one tenant's requests may ask for
	// (Router.Admit); 0: no capacity, every request admitted.
	Capacity    int64
	TenantShare float64
}

// New builds a router.
func New(pools []PoolSpec, o Options) *Router {
	if o.Now == nil {
		o.Now = time.Now
	}
	o.MaxCooldown = o.maxCooldown()
	if o.EjectBase <= 0 {
		o.EjectBase = DefaultEjectBase
	}
	if o.EjectAfter <= 0 {
		o.EjectAfter = DefaultEjectAfter
	}
	if o.FailAfter <= 0 {
		o.FailAfter = DefaultFailAfter
	}
	if o.LoadFactor < 1 {
		o.LoadFactor = DefaultLoadFactor
	}
	r := &Router{byModel: map[string]*Pool{}, o: o}
	for _, ps := range pools {
		p := &Pool{Name: ps.Name}
		for i, es := range ps.Endpoints {
			w := es.Weight
			if w <= 0 {
				w = 1
			}
			p.Endpoints = append(p.Endpoints, &Endpoint{Index: i, Name: es.Name, Weight: w, Priority: es.Priority, Pool: ps.Name, hash: hashString(fnvOffset, es.Name),
				shares: newShares(es.Capacity, es.TenantShare)})
		}
		p.byPriority = append([]*Endpoint(nil), p.Endpoints...)
		sort.SliceStable(p.byPriority, func(i, j int) bool { return p.byPriority[i].Priority < p.byPriority[j].Priority })
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

// Order appends to dst up to max endpoints in the order failover should
// try them. Endpoints not cooling come first, by priority (0 first);
// within a priority the least busy by in-flight requests per weight
// (ties in weighted random order), except that with an affinity key
// (CacheKey; 0 = none) the key's rendezvous choice goes first unless it is
// busier than its bounded share. Then the soft-cooled ones (an error the
// backend gave no pause for, or an ejection), by priority and soonest to
// recover. Endpoints in a hard cooldown (the backend asked for it) are
// left out. When nothing is left, wait says how long until the first one
// recovers. A caller that moves on after a 429 skips the rest of that
// priority itself (the order does not know why an attempt failed).
func (r *Router) Order(p *Pool, dst []*Endpoint, max int, key uint64) (order []*Endpoint, wait time.Duration) {
	now := r.o.Now().UnixNano()
	start := len(dst)
	eps := p.byPriority
	for lo := 0; lo < len(eps) && len(dst)-start < max; {
		hi := lo
		for hi < len(eps) && eps[hi].Priority == eps[lo].Priority {
			hi++
		}
		var group [MaxEndpoints]*Endpoint
		n := r.healthy(eps[lo:hi], now, group[:0])
		r.rank(group[:n], key)
		for _, e := range group[:n] {
			if len(dst)-start >= max {
				break
			}
			dst = append(dst, e)
		}
		lo = hi
	}
	// Soft-cooled endpoints, by priority then soonest first (insertion
	// sort: tiny n).
	soft := len(dst)
	for _, e := range eps {
		if len(dst)-start >= max {
			break
		}
		c, hard := e.cooling(now)
		if c == 0 || hard {
			continue
		}
		dst = append(dst, e)
		for j := len(dst) - 1; j > soft && before(dst[j], dst[j-1], now); j-- {
			dst[j], dst[j-1] = dst[j-1], dst[j]
		}
	}
	if len(dst) == start {
		first := int64(0)
		for _, e := range eps {
			if c, _ := e.cooling(now); c != 0 && (first == 0 || c < first) {
				first = c
			}
		}
		return dst, time.Duration(first - now)
	}
	return dst, 0
}

// before orders soft-cooled endpoints: better priority, then sooner back.
func before(a, b *Endpoint, now int64) bool {
	if a.Priority != b.Priority {
		return a.Priority < b.Priority
	}
	ca, _ := a.cooling(now)
	cb, _ := b.cooling(now)
	return ca < cb
}

// healthy appends to dst the endpoints of one priority that are not
// cooling, in a weighted random order (drawn without replacement over the
// remaining weight: pools are small), and says how many.
func (r *Router) healthy(group []*Endpoint, now int64, dst []*Endpoint) int {
	var total int
	var picked uint64 // bitmask over group
	for i, e := range group {
		if c, _ := e.cooling(now); c != 0 {
			picked |= 1 << i
			continue
		}
		total += e.Weight
	}
	for total > 0 {
		n := rand.IntN(total)
		for i, e := range group {
			if picked&(1<<i) != 0 {
				continue
			}
			if n < e.Weight {
				dst = append(dst, e)
				picked |= 1 << i
				total -= e.Weight
				break
			}
			n -= e.Weight
		}
	}
	return len(dst)
}

// rank orders one priority's healthy endpoints: least in-flight requests
// per weight first (a stable insertion sort, so ties keep their weighted
// random order), then the affinity key's choice moved to the front.
func (r *Router) rank(g []*Endpoint, key uint64) {
	if r.o.WeightedRandom {
		return
	}
	for i := 1; i < len(g); i++ {
		for j := i; j > 0 && busier(g[j-1], g[j]); j-- {
			g[j], g[j-1] = g[j-1], g[j]
		}
	}
	if key == 0 || len(g) < 2 || r.o.NoAffinity {
		return
	}
	if i := r.affine(g, key); i > 0 {
		e := g[i]
		copy(g[1:i+1], g[:i])
		g[0] = e
	}
}

// busier reports whether a has more in-flight requests per weight than b
// (a/wa > b/wb, in integers). Idle endpoints tie, so at low load the
// weighted random order stands and weights keep their meaning.
func busier(a, b *Endpoint) bool {
	return a.inflight.Load()*int64(b.Weight) > b.inflight.Load()*int64(a.Weight)
}
