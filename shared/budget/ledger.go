package budget

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llmgw/gateway/shared/store"
)

// Modes accepted in Config.Mode.
const (
	ModeStrict   = "strict"
	ModeEstimate = "estimate"
)

// Failure policies accepted in Config.FailurePolicy (shared/store's).
const (
	PolicyOpen   = store.PolicyOpen
	PolicyClosed = store.PolicyClosed
)

// Defaults for the zero values of Config.
const (
	DefaultLease        = 15 * time.Minute
	DefaultOutputTokens = 4096
	// DefaultCountAbove is the prompt bound above which strict mode asks
	// the pool for the prompt's exact count before reserving
	// (Config.CountAbove): a coding agent's first request bounds at
	// about four times its count (85k for 20k), while a chat turn
	// below it costs no extra call.
	DefaultCountAbove    = 32768
	DefaultTimeout       = store.DefaultTimeout
	DefaultDialTimeout   = store.DefaultDialTimeout
	DefaultSettleTimeout = time.Second
	// DefaultMaxPending bounds the settles a Ledger keeps for replay
	// (Config.MaxPending).
	DefaultMaxPending = 10000
)

// ErrUnavailable is returned when the store failed or timed out and the
// request may not go ahead without it: the failure policy is closed, or the
// tenant has a quota (a quota always fails closed). The server answers 503.
// It wraps store.ErrUnavailable.
var ErrUnavailable = fmt.Errorf("budget: %w", store.ErrUnavailable)

// Config tunes a Ledger. Its zero value is valid: strict mode, 15-minute
// leases, fail open. Its fields with yaml names are the config file's
// budget section's (Settings); the others are the program's.
type Config struct {
	// Mode is "strict" (the default) or "estimate".
	//
	// Strict reserves an upper bound of the request's tokens (the prompt
	// bound plus the output cap it writes into the request) before the
	// request is forwarded and refunds the difference when it settles, so a
	// budget is never overshot while backends honour the cap.
	//
	// Estimate reserves nothing: it refuses only a tenant that is already
	// at or over a limit and charges the usage when the request settles. It
	// overshoots by at most the usage of the requests in flight when the
	// limit was reached.
	Mode string `yaml:"mode" json:"mode"`

	// Lease is how long a reservation may stay unsettled (a replica killed
	// mid-stream never settles): then it stays charged, never refunded,
	// since the request may have used all of it. Set it to the
	// longest a request may live. A settle up to one more Lease after the
	// expiry still settles the actual usage. Default DefaultLease.
	Lease time.Duration `yaml:"lease" json:"lease"`

	// DefaultOutputTokens is the output reserved per choice (and written
	// as the cap) in strict mode when neither the client nor the tenant
	// caps the output. Default DefaultOutputTokens.
	DefaultOutputTokens int64 `yaml:"default_output_tokens" json:"default_output_tokens"`

	// CountAbove: in strict mode a request whose prompt bound is above
	// this many tokens has its prompt counted exactly by its pool
	// (count_tokens, input_tokens; one call, bounded by the count
	// timeout) before it is reserved, where the pool can count, so its
	// reservation is the prompt it sends rather than a bound of about
	// four times it. A number above the models' context length counts
	// only a bound a limit refuses. Default DefaultCountAbove.
	CountAbove int64 `yaml:"count_above" json:"count_above"`

	// MinOutputTokens is the least output per choice worth forwarding a
	// request for in strict mode: with less left the request is refused.
	// Default 1.
	MinOutputTokens int64 `yaml:"-" json:"-"`

	// Timeout bounds a remote store's answer to one Reserve. Default
	// DefaultTimeout.
	// A remote store's client bounds its socket reads and writes by it
	// (redisclient.NewClient's Timeout); the context a Reserve gets adds
	// DialTimeout.
	Timeout time.Duration `yaml:"timeout" json:"timeout"`

	// DialTimeout bounds a Reserve that waits for a connection being
	// established (dial, TLS, login, a pool turn while the pool fills): a
	// cold pool on a healthy store is not a failing store.
	// Default DefaultDialTimeout; the gateway passes store.dial_timeout.
	DialTimeout time.Duration `yaml:"-" json:"-"`

	// SettleTimeout bounds one Settle against a remote store. Settle runs
	// after the response, so it may wait longer; a settle that fails leaves
	// the reservation to its lease. Default DefaultSettleTimeout.
	SettleTimeout time.Duration `yaml:"-" json:"-"`

	// FailurePolicy decides a reservation the store could not answer:
	// "open" (the default) forwards the request uncounted (Decision.Degraded,
	// its output still capped), "closed" refuses it with ErrUnavailable. A
	// tenant with a TokenQuota always fails closed: a quota is spend.
	FailurePolicy string `yaml:"failure_policy" json:"failure_policy"`

	// BreakerThreshold and BreakerCooldown tune the circuit breaker in
	// front of a remote store (shared/store, the limiter's): after
	// BreakerThreshold failures in a row of calls begun after the store
	// last answered (default store.DefaultBreakerThreshold) reservations and settles skip the
	// store for BreakerCooldown (default store.DefaultBreakerCooldown) and the
	// failure policy applies at once, so a store that is down costs each
	// request nothing instead of its Timeout.
	BreakerThreshold int           `yaml:"-" json:"-"`
	BreakerCooldown  time.Duration `yaml:"-" json:"-"`

	// MaxPending bounds the settles kept for replay while a remote store
	// does not answer: a settle that fails, and the release of a
	// reservation whose Reserve failed (it may have landed). They are
	// replayed, oldest first, as soon as the store answers a later call;
	// settles are idempotent per request id, so a replay never charges
	// twice. A settle beyond the bound is dropped (its reservation is
	// charged whole when its lease ends: the safe side). Default
	// DefaultMaxPending when zero or negative.
	MaxPending int `yaml:"-" json:"-"`

	// Log, when set, is told when the breaker opens and closes, and of
	// replayed settles.
	Log *slog.Logger `yaml:"-" json:"-"`
}

// TenantBudget is one tenant's limits.
type TenantBudget struct {
	Tenant string
	Limits
}

// Stats is a snapshot of a Ledger's counters, for tests and for programs
// that embed the ledger; the gateway exports none of them.
type Stats struct {
	Reserves, Refused, Degraded, StoreErrors uint64
	Settles, Overruns, LateSettles           uint64
	SettleErrors                             uint64
	// Pending is the settles kept for replay now; Replayed those replayed
	// since start, Dropped those the bound (Config.MaxPending) turned away.
	Pending, Replayed, Dropped uint64
	// BreakerOpens counts openings of the store's breaker; Breaker is its
	// state now (always closed for the memory store).
	BreakerOpens uint64
	Breaker      store.BreakerState
}

// Ledger applies per-tenant token budgets on the request path: Reserve
// before forwarding, Settle (or Keep) once the usage is known. It is safe
// for concurrent use.
type Ledger struct {
	cfg     Config
	store   Store
	remote  bool
	tenants map[string]Limits
	guard   *store.Guard // used for remote stores only

	reserves, refused                     atomic.Uint64
	settles, overruns, late, settleErrors atomic.Uint64

	// pending is the settles a remote store did not confirm, replayed by
	// one goroutine at a time (replaying) once the store answers again.
	mu        sync.Mutex
	pending   []pendingSettle
	seq       uint64
	replaying atomic.Bool
	replayed  atomic.Uint64
	dropped   atomic.Uint64
}

// pendingSettle is a settle kept for replay.
type pendingSettle struct {
	tenant, id string
	actual     Charge
	seq        uint64 // tells it from the others while it is replayed
}

// New validates cfg and tenants (reporting every problem at once) and
// returns a Ledger on store; a nil store is a new Memory store. It does no
// I/O.
func New(cfg Config, tenants []TenantBudget, st Store) (*Ledger, error) {
	if err := cfg.check(tenants); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	l := &Ledger{
		cfg:     cfg,
		store:   st,
		tenants: make(map[string]Limits, len(tenants)),
	}
	for _, tb := range tenants {
		l.tenants[tb.Tenant] = tb.Limits
	}
	if l.store == nil {
		l.store = NewMemory(nil)
	}
	_, local := l.store.(*Memory)
	l.remote = !local
	l.guard = store.NewGuard("budget", cfg.FailurePolicy, store.NewBreaker(cfg.BreakerThreshold, cfg.BreakerCooldown), cfg.Log)
	return l, nil
}

// Strict reports whether the ledger runs in strict mode (Config.Mode).
func (l *Ledger) Strict() bool { return l.cfg.Mode == ModeStrict }

// CountAbove is the prompt bound above which a request's prompt is
// counted before it is reserved (Config.CountAbove).
func (l *Ledger) CountAbove() int64 { return l.cfg.CountAbove }

// Limits returns tenant's limits; ok is false for a tenant without any.
func (l *Ledger) Limits(tenant string) (lim Limits, ok bool) {
	lim, ok = l.tenants[tenant]
	return lim, ok
}

// Reserve decides whether request id of tenant may be forwarded, reserving
// its tokens in strict mode, and returns the output cap to write into the
// request (Decision.OutputCap, RewriteCap). A refusal is Allowed=false with
// a nil error; RefusedBy.Code() is the OpenAI error code.
//
// The reservation in strict mode is one atomic store operation asking for
// Min = bound + choices*MinOutputTokens and Want = bound + choices*output,
// where output is OutputWant of the client's and tenant's caps; the grant
// g is the most that is left up to Want, and the output cap written is
// GrantedOutput(g): what the grant leaves after the prompt bound.
//
// A tenant without token limits costs no store call. Errors: ErrUnavailable
// (store failed, policy closed or tenant has a quota), the caller's context
// error when ctx ended, or a Request validation error.
func (l *Ledger) Reserve(ctx context.Context, tenant, id string, ask Ask) (Decision, error) {
	lim := l.tenants[tenant]
	strict := l.cfg.Mode == ModeStrict || ask.Hold
	n := ask.choices()
	out := int64(0)
	if !ask.NoOutput {
		def := int64(0) // estimate mode writes no cap of its own
		if strict {
			def = l.cfg.DefaultOutputTokens
		}
		out = OutputWant(ask.ClientCap, lim.MaxOutputTokens, def)
	}
	if !lim.Enforced() {
		d := Decision{Allowed: true}
		if !ask.NoOutput {
			d.OutputCap, d.RewriteCap = OutputCap(ask.ClientCap, lim.MaxOutputTokens, 0)
		}
		return d, nil
	}
	req := Request{Limits: lim, Lease: l.cfg.Lease, Min: 1, Levels: lim.Levels.Of(ask.Scope)}
	spends := lim.Spends()
	if spends {
		req.MoneyMin = 1
	}
	bound := max(ask.PromptBound, 0)
	minOut := min(max(l.cfg.MinOutputTokens, ask.MinOutput), out)
	if strict {
		req.Min = satAdd(bound, satMul(n, minOut))
		req.Want = satAdd(bound, satMul(n, out))
		if ask.NoOutput || req.Min == 0 {
			req.Min = max(req.Min, 1)
		}
		if spends {
			// The worst case in money: the prompt bound and the output
			// cap at the dearest tier the request may be served at.
			req.MoneyMin = max(ask.Spend.Worst(bound, satMul(n, minOut)), 1)
			req.MoneyWant = max(ask.Spend.Worst(bound, satMul(n, out)), req.MoneyMin)
		}
	}
	l.reserves.Add(1)
	d, err := l.reserve(ctx, tenant, id, req)
	if err != nil && l.remote && strict {
		// The reservation may have landed after the gateway gave up on
		// it: released (settled at 0) once the store answers, so it does
		// not hold the tenant's quota until its lease ends.
		// A release that reaches the store first leaves a tombstone, so
		// the reservation, landing later, reserves nothing.
		l.keep(pendingSettle{tenant: tenant, id: id, actual: Charge{Levels: req.Levels, Lease: l.cfg.Lease}})
	}
	if err != nil {
		refuse, left := l.guard.Failure(ctx, err)
		if left != nil {
			return Decision{}, fmt.Errorf("budget: reserve: %w", left)
		}
		d = Decision{Requested: req.Min, MoneyRequested: req.MoneyMin, Degraded: true}
		if refuse || lim.FailsClosed() {
			return d, fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		d.Allowed = true
		if !ask.NoOutput {
			d.OutputCap, d.RewriteCap = OutputCap(ask.ClientCap, lim.MaxOutputTokens, out)
		}
		return d, nil
	}
	if !d.Allowed {
		l.refused.Add(1)
		return d, nil
	}
	if !ask.NoOutput {
		budget := int64(0)
		if strict {
			budget = max(1, GrantedOutput(d.Granted, bound, n))
			if spends && d.MoneyGranted < req.MoneyWant {
				// A spend limit with less left than the worst case: the
				// cap is what the money granted affords.
				budget = min(budget, max(1, ask.Spend.affordable(d.MoneyGranted, bound, n, minOut, out)))
			}
		}
		d.OutputCap, d.RewriteCap = OutputCap(ask.ClientCap, lim.MaxOutputTokens, budget)
	}
	return d, nil
}

func (l *Ledger) reserve(ctx context.Context, tenant, id string, req Request) (d Decision, err error) {
	if !l.remote {
		return l.store.Reserve(ctx, tenant, id, req)
	}
	err = l.guard.Call(ctx, "reserve", l.cfg.Timeout+l.cfg.DialTimeout, func(tctx context.Context) error {
		var err error
		d, err = l.store.Reserve(tctx, tenant, id, req)
		return err
	})
	if err == nil {
		l.replay()
	}
	return d, err
}

// Windows reads tenant's windows and its levels' for scope, tokens and
// money, as they stand: a
// reservation of nothing under id (never refused), settled at once at
// nothing. Two store operations; for the spend view, not the request
// path. A tenant without limits costs nothing and returns the zero
// Decision.
func (l *Ledger) Windows(ctx context.Context, tenant string, scope Scope, id string) (Decision, error) {
	lim := l.tenants[tenant]
	if !lim.Enforced() {
		return Decision{}, nil
	}
	d, err := l.reserve(ctx, tenant, id, Request{Limits: lim, Lease: l.cfg.Lease, Levels: lim.Levels.Of(scope)})
	if err != nil {
		return Decision{}, fmt.Errorf("budget: windows: %w", err)
	}
	if _, err := l.settle(ctx, tenant, id, Charge{Scope: scope}); err != nil {
		return Decision{}, fmt.Errorf("budget: windows: %w", err)
	}
	return d, nil
}

// Settle ends request id's reservation with the tokens it actually used
// (prompt plus completion, as the backend reported them): the reservation
// minus actual is refunded, or an overrun charged, exactly once. It is
// detached from ctx's cancellation (a client that hung up is exactly when
// a settle must still happen) and bounded by SettleTimeout instead. A
// tenant without token limits costs no store call.
//
// Its money stays as reserved: SettleCharge settles both dimensions.
func (l *Ledger) Settle(ctx context.Context, tenant, id string, actual int64) (Settlement, error) {
	return l.SettleCharge(ctx, tenant, id, Charge{Tokens: max(actual, 0), Money: KeepReserved})
}

// SettleCharge is Settle with the money the request cost (micro-units)
// beside its tokens, both in the one store operation, at the tenant and
// the levels of actual.Scope (the Ask's); a negative amount is
// KeepReserved. actual.ReservedAt (the Decision's) lets a settle whose
// record the store lost with its data be charged (Settlement.Lost).
func (l *Ledger) SettleCharge(ctx context.Context, tenant, id string, actual Charge) (Settlement, error) {
	return l.settle(ctx, tenant, id, Charge{Tokens: max(actual.Tokens, KeepReserved), Money: max(actual.Money, KeepReserved),
		Scope: actual.Scope, ReservedAt: actual.ReservedAt})
}

// Keep settles request id charging exactly what was reserved: for a request
// whose usage was never reported (the reservation is the best bound known).
func (l *Ledger) Keep(ctx context.Context, tenant, id string) (Settlement, error) {
	return l.settle(ctx, tenant, id, Kept)
}

func (l *Ledger) settle(ctx context.Context, tenant, id string, actual Charge) (Settlement, error) {
	lim := l.tenants[tenant]
	if !lim.Enforced() {
		return Settlement{}, nil
	}
	if actual.Levels == nil {
		actual.Levels = lim.Levels.Of(actual.Scope)
	}
	actual.Lease = l.cfg.Lease // a settle finding no record leaves a tombstone
	var s Settlement
	var err error
	if l.remote {
		// Detached: the settle's own end, not the client's, is what counts.
		dctx := context.WithoutCancel(ctx)
		err = l.guard.Call(dctx, "settle", l.cfg.SettleTimeout, func(tctx context.Context) error {
			var err error
			s, err = l.store.Settle(tctx, tenant, id, actual)
			return err
		})
		if err == nil {
			defer l.replay()
		}
	} else {
		s, err = l.store.Settle(ctx, tenant, id, actual)
	}
	if err != nil {
		l.settleErrors.Add(1)
		if l.remote {
			l.keep(pendingSettle{tenant: tenant, id: id, actual: actual})
		}
		return s, fmt.Errorf("%w: settle: %w", ErrUnavailable, err)
	}
	s = l.recreate(context.WithoutCancel(ctx), tenant, id, actual, s)
	l.settled(s)
	return s, nil
}

// recreate answers a settle that found no counter (Settlement.NoCounter:
// the store lost its data), or no record in a counter made after the
// reservation (Settlement.Lost: the store lost its data and a
// reservation made the counter again before this settle came), by
// charging the actual usage to the tenant's counter, and logs it: both
// were once charged 0 (the first said nothing, the second only at
// INFO). The
// store's tombstone of id makes the charge once: a second settle of id
// finds it and is neither. The counter is charged by a reservation
// of nothing, which sets the tenant's windows (its quota period
// included), settled at actual under an id of its own. Anything else is
// returned as it is.
func (l *Ledger) recreate(ctx context.Context, tenant, id string, actual Charge, s Settlement) Settlement {
	if !(s.NoCounter || s.Lost) || (actual.Tokens <= 0 && actual.Money <= 0) {
		return s
	}
	actual = Charge{Tokens: max(actual.Tokens, 0), Money: max(actual.Money, 0)}
	rid := id + "/recreated"
	req := Request{Limits: l.tenants[tenant].unrefusing(), Lease: l.cfg.Lease}
	do := func(tctx context.Context) error {
		if _, err := l.store.Reserve(tctx, tenant, rid, req); err != nil {
			return err
		}
		rs, err := l.store.Settle(tctx, tenant, rid, actual)
		if err == nil && !rs.Found {
			err = errors.New("the recreated reservation was not found")
		}
		return err
	}
	var err error
	if l.remote {
		err = l.guard.Call(ctx, "settle", l.cfg.SettleTimeout, do)
	} else {
		err = do(ctx)
	}
	if l.cfg.Log != nil {
		msg := "token budget: a settle found no counter (the store lost its data): recreated with the usage"
		if s.Lost {
			msg = "token budget: a settle's reservation was lost with the store's data (its counter was made again since): charged the usage"
		}
		l.cfg.Log.Warn(msg, "tenant", tenant, "request_id", id, "tokens", actual.Tokens, "money_micros", actual.Money, "error", err)
	}
	if err != nil {
		return s
	}
	s.Recreated, s.Actual, s.Overrun = true, actual.Tokens, actual.Tokens
	s.MoneyActual = actual.Money
	return s
}

func (l *Ledger) settled(s Settlement) {
	l.settles.Add(1)
	if s.Overrun > 0 {
		l.overruns.Add(1)
	}
	if s.Expired {
		l.late.Add(1)
	}
}

// keep queues a settle for replay (MaxPending bounds the queue). One
// beyond the bound is logged as a line an operator can reconcile.
func (l *Ledger) keep(p pendingSettle) {
	l.mu.Lock()
	full := len(l.pending) >= l.cfg.MaxPending
	if !full {
		l.seq++
		p.seq = l.seq
		l.pending = append(l.pending, p)
	}
	l.mu.Unlock()
	if full {
		l.dropped.Add(1)
		l.unreplayed(p, "the replay queue is full")
	}
}

// unreplayed logs a settle that will not be replayed, with what an
// operator needs to charge it by hand: the tenant, the request id and
// the amount (tokens and money in micro-units; -1 is what was reserved,
// a release is 0 and 0: the reservation, if it landed, is to be
// refunded).
func (l *Ledger) unreplayed(p pendingSettle, why string) {
	if l.cfg.Log == nil {
		return
	}
	l.cfg.Log.Error("token budget: a settle the store did not confirm is not replayed: reconcile it by hand",
		"why", why, "tenant", p.tenant, "request_id", p.id, "tokens", p.actual.Tokens, "money_micros", p.actual.Money,
		"reserved_at", p.actual.ReservedAt, "scope", p.actual.Scope)
}

// replay starts replaying the kept settles unless a replay runs or none
// is kept; the caller has just had an answer from the store.
func (l *Ledger) replay() {
	l.mu.Lock()
	n := len(l.pending)
	l.mu.Unlock()
	if n == 0 || !l.replaying.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer l.replaying.Store(false)
		_ = l.replayAll(context.Background())
	}()
}

// replayAll replays the kept settles, oldest first, until none is left
// (nil) or the store fails (kept: the next answer from the store replays
// it). The caller holds replaying.
func (l *Ledger) replayAll(ctx context.Context) error {
	for {
		l.mu.Lock()
		if len(l.pending) == 0 {
			l.mu.Unlock()
			return nil
		}
		p := l.pending[0]
		l.mu.Unlock()
		var s Settlement
		err := l.guard.Call(ctx, "settle", l.cfg.SettleTimeout, func(tctx context.Context) error {
			var err error
			s, err = l.store.Settle(tctx, p.tenant, p.id, p.actual)
			return err
		})
		if err != nil {
			return err
		}
		l.mu.Lock()
		// Drain may have taken the queue meanwhile (and logged p).
		head := len(l.pending) > 0 && l.pending[0].seq == p.seq
		if head {
			l.pending = l.pending[1:]
			if len(l.pending) == 0 {
				l.pending = nil // the backing array goes
			}
		}
		l.mu.Unlock()
		if !head && l.cfg.Log != nil {
			l.cfg.Log.Warn("token budget: a settle logged for reconciling at shutdown was replayed after all: nothing to reconcile",
				"tenant", p.tenant, "request_id", p.id)
		}
		l.replayed.Add(1)
		s = l.recreate(context.WithoutCancel(ctx), p.tenant, p.id, p.actual, s)
		l.settled(s)
		if l.cfg.Log != nil {
			l.cfg.Log.Info("token budget: a settle the store had not confirmed was replayed",
				"tenant", p.tenant, "request_id", p.id, "tokens", p.actual.Tokens, "money_micros", p.actual.Money,
				"found", s.Found, "expired", s.Expired, "recreated", s.Recreated)
		}
	}
}

// drainRetry is how often Drain tries a store that failed again.
const drainRetry = 50 * time.Millisecond

// Drain replays the settles kept for replay until none is left or ctx
// ends (at shutdown: within the grace), trying a failing store again
// every drainRetry; each still kept then is logged as a line an operator
// can reconcile (tenant, request id, tokens and money) and forgotten, so
// that no settle is lost silently with the process. It returns how many
// were not replayed. The memory store keeps none.
func (l *Ledger) Drain(ctx context.Context) int {
	for {
		if l.replaying.CompareAndSwap(false, true) {
			err := l.replayAll(ctx)
			l.replaying.Store(false)
			if err == nil {
				break
			}
		}
		t := time.NewTimer(drainRetry)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
			continue
		}
		break
	}
	l.mu.Lock()
	left := l.pending
	l.pending = nil
	l.mu.Unlock()
	for _, p := range left {
		l.unreplayed(p, "shutdown: the store did not answer within the grace")
	}
	return len(left)
}

// Stats returns a snapshot of the counters.
func (l *Ledger) Stats() Stats {
	g := l.guard.Stats()
	l.mu.Lock()
	pending := len(l.pending)
	l.mu.Unlock()
	return Stats{
		BreakerOpens: g.BreakerOpens,
		Breaker:      g.Breaker,
		Reserves:     l.reserves.Load(),
		Refused:      l.refused.Load(),
		Degraded:     g.Degraded,
		StoreErrors:  g.StoreErrors,
		Settles:      l.settles.Load(),
		Overruns:     l.overruns.Load(),
		LateSettles:  l.late.Load(),
		SettleErrors: l.settleErrors.Load(),
		Pending:      uint64(pending),
		Replayed:     l.replayed.Load(),
		Dropped:      l.dropped.Load(),
	}
}
