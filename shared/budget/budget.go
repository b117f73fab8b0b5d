package budget

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// Period is the span of a token quota. Periods follow UTC calendar
// boundaries: a day quota resets at 00:00 UTC, a month quota at 00:00 UTC
// on the first of the month.
type Period uint8

// Quota periods. PeriodNone is the zero value: no quota.
const (
	PeriodNone Period = iota
	PeriodDay
	PeriodMonth
)

func (p Period) String() string {
	switch p {
	case PeriodDay:
		return "day"
	case PeriodMonth:
		return "month"
	}
	return "none"
}

// ParsePeriod reads "day" or "month" (the config spelling).
func ParsePeriod(s string) (Period, error) {
	switch s {
	case "day":
		return PeriodDay, nil
	case "month":
		return PeriodMonth, nil
	}
	return PeriodNone, fmt.Errorf("budget: quota period %q: want \"day\" or \"month\"", s)
}

// Limits is one tenant's token budget. Every limit counts prompt plus
// completion tokens; a zero field is no limit.
type Limits struct {
	// TokensPerMinute caps the tokens charged to one UTC calendar minute
	// (a fixed window; see the package doc for its semantics).
	TokensPerMinute int64
	// TokenQuota caps the tokens charged to one QuotaPeriod.
	TokenQuota int64
	// QuotaPeriod is the quota's span; required when TokenQuota is set.
	QuotaPeriod Period
	// MaxOutputTokens caps the output of every request, whatever the
	// client asks. It is applied by Ledger (the stores ignore it).
	MaxOutputTokens int64

	// SpendPerMinute, SpendPerDay and SpendPerMonth cap the money charged
	// to one UTC calendar minute, day and month, in micro-units of the
	// price catalogue's currency. A store reserves and settles
	// them in the same atomic operation as the tokens.
	SpendPerMinute, SpendPerDay, SpendPerMonth int64

	// Levels are the limits below the tenant (nil: none), which a Ledger
	// turns into a Request's Levels from the request's Scope. The stores
	// ignore it.
	Levels *LevelLimits
}

// LevelLimits are a tenant's limits below it: per named project, a
// default for every other project, and a default per user. A zero Limits
// is no such level.
type LevelLimits struct {
	Projects                    map[string]Limits
	ProjectDefault, UserDefault Limits
}

// Of is the levels of scope s, the project's before the user's: the
// accounts a request of s reserves at below the tenant. A user's account
// is the tenant's, whatever its project.
func (ll *LevelLimits) Of(s Scope) []Level {
	if ll == nil {
		return nil
	}
	var out []Level
	if s.Project != "" {
		p, ok := ll.Projects[s.Project]
		if !ok {
			p = ll.ProjectDefault
		}
		if p.Enforced() {
			out = append(out, Level{Name: "project:" + s.Project, Limits: p})
		}
	}
	if s.User != "" && ll.UserDefault.Enforced() {
		out = append(out, Level{Name: "user:" + s.User, Limits: ll.UserDefault})
	}
	return out
}

// each calls f with every level's limits.
func (ll *LevelLimits) each(f func(Limits) bool) bool {
	if ll == nil {
		return false
	}
	for _, p := range ll.Projects {
		if f(p) {
			return true
		}
	}
	return f(ll.ProjectDefault) || f(ll.UserDefault)
}

// Enforced reports whether l limits anything a store keeps, at its level
// or below.
func (l Limits) Enforced() bool {
	return l.TokensPerMinute > 0 || l.TokenQuota > 0 || l.Spends() || l.Levels.each(Limits.Enforced)
}

// unrefusing is the tenant level of l with every limit it sets raised to
// MaxTokens: the same windows, none of which refuses, so a charge made
// through a reservation of nothing (Ledger.recreate) is taken by a
// window already over its limit.
func (l Limits) unrefusing() Limits {
	for _, n := range [...]*int64{&l.TokensPerMinute, &l.TokenQuota, &l.SpendPerMinute, &l.SpendPerDay, &l.SpendPerMonth} {
		if *n > 0 {
			*n = MaxTokens
		}
	}
	l.Levels = nil
	return l
}

// Spends reports whether l limits money, at its level or below.
func (l Limits) Spends() bool {
	return l.SpendPerMinute > 0 || l.SpendPerDay > 0 || l.SpendPerMonth > 0 || l.Levels.each(Limits.Spends)
}

// FailsClosed reports whether a reservation the store could not answer is
// refused whatever the failure policy: a quota or a spend limit is money,
// at any level.
func (l Limits) FailsClosed() bool {
	return l.TokenQuota > 0 || l.SpendPerDay > 0 || l.SpendPerMonth > 0 || l.Levels.each(Limits.FailsClosed)
}

// MaxTokens is the largest limit or amount a store accepts: Lua's numbers
// are doubles, exact for integers below 2^53.
const MaxTokens = 1 << 53

// Limit names the limit that refused a reservation.
type Limit uint8

// Limits that refuse.
const (
	LimitNone        Limit = iota
	LimitTPM               // tokens per minute: 429 rate_limit_exceeded
	LimitQuota             // token quota: 429 insufficient_quota
	LimitSpendMinute       // spend per minute: 429 rate_limit_exceeded
	LimitSpendDay          // spend per day: 429 insufficient_quota
	LimitSpendMonth        // spend per month: 429 insufficient_quota
)

// Code is the OpenAI error code for a refusal by k: "rate_limit_exceeded"
// for a per-minute limit, "insufficient_quota" for a quota or a daily or
// monthly spend limit, "" for none.
func (k Limit) Code() string {
	switch k {
	case LimitTPM, LimitSpendMinute:
		return "rate_limit_exceeded"
	case LimitQuota, LimitSpendDay, LimitSpendMonth:
		return "insufficient_quota"
	}
	return ""
}

// longer reports whether k refuses for longer than o (LimitNone: never):
// a quota, then spend per month, day, minute, then tokens per minute.
// Across levels the longest is named: waiting a minute does not help a
// month.
func (k Limit) longer(o Limit) bool {
	rank := [...]int{LimitNone: 0, LimitTPM: 1, LimitSpendMinute: 2, LimitSpendDay: 3, LimitSpendMonth: 4, LimitQuota: 5}
	return rank[k] > rank[o]
}

// Money reports whether k is a spend limit.
func (k Limit) Money() bool { return k >= LimitSpendMinute && k <= LimitSpendMonth }

func (k Limit) String() string {
	switch k {
	case LimitTPM:
		return "tokens_per_minute"
	case LimitQuota:
		return "token_quota"
	case LimitSpendMinute:
		return "spend_per_minute"
	case LimitSpendDay:
		return "spend_per_day"
	case LimitSpendMonth:
		return "spend_per_month"
	}
	return "none"
}

// Window is one limit's state after an operation. Limit 0 means the limit
// is not configured (the other fields are then zero).
type Window struct {
	Limit int64
	// Used is the tokens charged to the current window, reservations
	// included. It may exceed Limit only through overruns (a backend that
	// ignored the output cap) or estimate mode.
	Used int64
	// Remaining is max(0, Limit-Used).
	Remaining int64
	// Reset is when the current window ends (x-ratelimit-reset-tokens,
	// Retry-After).
	Reset time.Time
}

// NewWindow returns the window of a limit with used tokens charged, ending
// at reset; the zero Window when limit is 0 (not configured).
func NewWindow(limit, used int64, reset time.Time) Window {
	if limit <= 0 {
		return Window{}
	}
	return Window{Limit: limit, Used: used, Remaining: max(0, limit-used), Reset: reset}
}

// Decision is the outcome of a reservation.
type Decision struct {
	// Allowed reports whether the request may be forwarded.
	Allowed bool
	// Granted is the tokens reserved: at least the request's minimum, at
	// most its want. Zero in estimate mode.
	Granted int64
	// Requested is the minimum that was asked for, for the refusal message
	// ("requested N, limit L"): a Requested above a Window's Limit can never
	// be granted, however long the caller waits.
	Requested int64
	// MoneyGranted and MoneyRequested are Granted and Requested in money
	// (micro-units): what a spend limit reserved, and the least it had to
	// have left.
	MoneyGranted, MoneyRequested int64
	// RefusedBy names the limit that refused; LimitNone when allowed. When
	// several would refuse, the longest is named (a quota, a month, a day
	// before a minute): waiting a minute does not help.
	RefusedBy Limit
	// TPM and Quota are the two token limits' windows after this
	// operation; Spend the spend limits' (in micro-units), by period.
	TPM, Quota Window
	Spend      [3]Window // SpendMinute, SpendDay, SpendMonth
	// RefusedLevel is the level that refused: 0 the tenant, i the
	// Request's Levels[i-1].
	RefusedLevel int
	// Levels are the windows of the Request's Levels after this
	// operation, in their order (nil without levels).
	Levels []Windows
	// Held reports that the request id already had a reservation: a live
	// one is returned unchanged and nothing new is reserved (an idempotent
	// retry); an id whose lease has expired is not reserved again (Allowed
	// false, RefusedBy LimitNone: request ids must be unique).
	Held bool
	// Degraded reports that the store failed and the failure policy decided
	// without a reservation: its usage is not counted, and its Settle is a
	// no-op (the caller may skip it).
	Degraded bool
	// Released reports that id had been released before this reservation
	// reached the store (a settle that found no record left a tombstone,
	// Charge.Lease): a reservation delivered late, after the gateway gave
	// up on it. Nothing is reserved (Allowed false, Held true).
	Released bool
	// ReservedAt is the store's time of the reservation (zero when none
	// was made), for Charge.ReservedAt.
	ReservedAt time.Time

	// OutputCap is the output cap per choice to write into the request
	// (max_completion_tokens, max_tokens or max_output_tokens); 0 when the
	// request needs no cap. Set by Ledger; a Store leaves it zero.
	OutputCap int64
	// RewriteCap reports that OutputCap differs from what the client sent
	// (or the client sent none), so the body must be rewritten.
	RewriteCap bool
}

// Windows is one level's windows after an operation (Decision.Levels).
type Windows struct {
	// Name is the level's (Level.Name; "" for the tenant).
	Name       string
	TPM, Quota Window
	Spend      [3]Window // SpendMinute, SpendDay, SpendMonth
}

// Window is the window of limit k (zero for LimitNone).
func (w Windows) Window(k Limit) Window {
	switch k {
	case LimitTPM:
		return w.TPM
	case LimitQuota:
		return w.Quota
	case LimitSpendMinute, LimitSpendDay, LimitSpendMonth:
		return w.Spend[k-LimitSpendMinute]
	}
	return Window{}
}

// Tenant is the tenant level's windows.
func (d Decision) Tenant() Windows { return Windows{TPM: d.TPM, Quota: d.Quota, Spend: d.Spend} }

// Level is the windows of level i: 0 the tenant, i Levels[i-1].
func (d Decision) Level(i int) Windows {
	if i > 0 && i <= len(d.Levels) {
		return d.Levels[i-1]
	}
	return d.Tenant()
}

// Refusal is the window of the limit that refused, at the level that
// refused (zero when allowed).
func (d Decision) Refusal() Window { return d.Level(d.RefusedLevel).Window(d.RefusedBy) }

// Requests is the least the refusing limit had to have left: Requested,
// or MoneyRequested for a spend limit.
func (d Decision) Requests() int64 {
	if d.RefusedBy.Money() {
		return d.MoneyRequested
	}
	return d.Requested
}

// Settlement is the outcome of settling a reservation.
type Settlement struct {
	// Found reports that this call settled the reservation. False for an id
	// never reserved, already settled (a second Settle is a no-op) or whose
	// expiry record is gone.
	Found bool
	// Expired reports that the lease had run out before this settle: the
	// reservation had stayed charged since, and is settled now as a live
	// one is.
	Expired bool
	// Reserved is what the reservation held; Actual what was settled.
	Reserved, Actual int64
	// Lost: the store had no record of the id but a counter created after
	// Charge.ReservedAt, less than two leases after it: the store lost
	// its data (an empty restart) and a reservation recreated the counter
	// before this settle came. The ledger charges the actual usage to the
	// current windows (Recreated), as for NoCounter. Found is false.
	Lost bool
	// NoCounter: the store had neither a record of the id nor a counter
	// for the tenant: it lost its data (a Redis restarted without
	// persistence, flushed). The ledger then recreates the counter with
	// the actual usage (Recreated) and logs it, so a wiped store does not
	// forget what was used. Found is false.
	NoCounter bool
	// Recreated: the ledger recreated the tenant's counter after a
	// NoCounter settle, charging Actual to the current windows.
	Recreated bool
	// Refunded is the tokens given back (Reserved-Actual when positive);
	// Overrun the tokens charged beyond the
	// reservation. Where the reservation's window had ended, a refund goes
	// nowhere and an overrun is charged to the current window.
	Refunded, Overrun int64
	// MoneyReserved and MoneyActual are Reserved and Actual in money
	// (micro-units; 0 without a spend limit).
	MoneyReserved, MoneyActual int64
}

// Charge is what a settle charges: tokens and money (micro-units), each
// KeepReserved to charge what was reserved.
type Charge struct {
	Tokens, Money int64
	// Levels are the levels the reservation was made at (Request.Levels;
	// their limits are not read): every level is settled with the tenant,
	// in the same operation. A Ledger sets them from Scope.
	Levels []Level
	// Scope is who below the tenant the request was charged to, for
	// Ledger's settles (a Store reads Levels).
	Scope Scope
	// ReservedAt is the reservation's Decision.ReservedAt (zero: unknown).
	// A settle that finds no record in a counter created after it, less
	// than two Leases after it, is Settlement.Lost: the store lost the
	// record with its data, not a settle already made.
	ReservedAt time.Time
	// Lease, when positive, is how long a settle that finds no record
	// leaves a tombstone of id (and the lease ReservedAt is read with): a
	// reservation of id that reaches the store after its release (a slow
	// connection, a retransmission after a partition) reserves nothing
	// (Decision.Released) instead of staying charged to its lease end.
	// A Ledger sets it to its Lease.
	Lease time.Duration
}

// Label names level i of d for people: `tenant "t1"` for 0, else
// `project "search"` or `user "u1"` from its Name.
func (d Decision) Label(tenant string, i int) string {
	if i <= 0 || i > len(d.Levels) {
		return fmt.Sprintf("tenant %q", tenant)
	}
	kind, name, _ := strings.Cut(d.Levels[i-1].Name, ":")
	return fmt.Sprintf("%s %q", kind, name)
}

// Level is one account below a tenant (a project, a user): its own
// windows and records, reserved and settled with the tenant's in one
// atomic store operation. Name identifies it within the tenant.
type Level struct {
	Name   string
	Limits Limits
}

// Scope is who a request is charged to below its tenant, from the
// verified token's claims (never from the request): a project and a user.
// An empty field is no such level.
type Scope struct {
	Project, User string
}

// Kept is the charge of a request whose usage was never reported: the
// reservation, in both dimensions.
var Kept = Charge{Tokens: KeepReserved, Money: KeepReserved}

// NewSettlement returns the settlement of a reservation of reserved tokens
// settled with actual tokens (KeepReserved already resolved); expired when
// its lease had run out (its tokens stayed charged).
func NewSettlement(expired bool, reserved, actual int64) Settlement {
	s := Settlement{Found: true, Expired: expired, Reserved: reserved, Actual: actual}
	// An expired reservation is still charged (its lease ended without a
	// settle: the safe side), so a late settle refunds or overruns it as
	// a live one does.
	if delta := actual - reserved; delta < 0 {
		s.Refunded = -delta
	} else {
		s.Overrun = delta
	}
	return s
}

// KeepReserved as the actual amount of a Settle charges exactly what was
// reserved: for a request whose usage was never reported.
const KeepReserved int64 = -1

// Request is what a Store needs for one reservation.
type Request struct {
	// Limits are the tenant's limits (MaxOutputTokens is ignored).
	Limits Limits
	// Min is the least the request can run with; the reservation is
	// refused when less than Min is left in any limit. Want is the most it
	// may take. The grant is min(Want, left), or Want when no limit is set.
	// Estimate mode asks Min 1, Want 0: refuse only when nothing is left.
	Min, Want int64
	// MoneyMin and MoneyWant are Min and Want in money (micro-units), for
	// the spend limits, granted as tokens are: min(MoneyWant, left), or
	// refused when less than MoneyMin is left in any spend limit.
	MoneyMin, MoneyWant int64
	// Lease is how long the reservation lives unsettled before its tokens
	// return (and, after that, how long its expiry record lets a late
	// Settle charge the actual usage).
	Lease time.Duration
	// Levels are accounts below the tenant, reserved in the same atomic
	// operation: the request passes only if the tenant and every level
	// have room; the grant is the least any has left, charged to each,
	// and each keeps its own record of id. A refusal names the first
	// level without room (Decision.RefusedLevel).
	Levels []Level
}

// spends reports whether the tenant or a level limits money.
func (r Request) spends() bool {
	if r.Limits.Spends() {
		return true
	}
	for _, l := range r.Levels {
		if l.Limits.Spends() {
			return true
		}
	}
	return false
}

// Validate reports a request a store must not run.
func (r Request) Validate() error {
	if r.Min < 0 || r.Want < 0 || r.Min > MaxTokens || r.Want > MaxTokens {
		return fmt.Errorf("budget: reservation min %d, want %d: out of range", r.Min, r.Want)
	}
	if r.MoneyMin < 0 || r.MoneyWant < 0 || r.MoneyMin > MaxTokens || r.MoneyWant > MaxTokens {
		return fmt.Errorf("budget: reservation money min %d, want %d: out of range", r.MoneyMin, r.MoneyWant)
	}
	if r.Lease <= 0 {
		return fmt.Errorf("budget: lease %s must be positive", r.Lease)
	}
	return nil
}

// Store keeps reservations and window counters. Both operations are atomic
// and, for a remote store, one round trip. Errors are store failures only,
// never refusals.
type Store interface {
	// Reserve reserves up to r.Want tokens for request id of tenant; see
	// Request. Reserving an id that already holds a live reservation
	// returns it (Held) without reserving again.
	Reserve(ctx context.Context, tenant, id string, r Request) (Decision, error)
	// Settle ends id's reservation with the tokens and money actually
	// used (each or both KeepReserved): the difference is refunded or
	// charged exactly once, however many times or how concurrently Settle
	// is called. One that finds no record leaves a tombstone of id for
	// actual.Lease and reports Lost or NoCounter (Settlement).
	Settle(ctx context.Context, tenant, id string, actual Charge) (Settlement, error)
}

// windowOf returns the index of the window of kind p that holds t (minutes
// since the epoch for the per-minute window, PeriodNone; days since the
// epoch for PeriodDay; months since year 0 for PeriodMonth). The Redis
// scripts compute the same from Redis TIME.
func windowOf(t time.Time, p Period) int64 {
	switch p {
	case PeriodDay:
		return floorDiv(t.Unix(), 86400)
	case PeriodMonth:
		u := t.UTC()
		return int64(u.Year())*12 + int64(u.Month()) - 1
	default:
		return floorDiv(t.Unix(), 60)
	}
}

// windowEnd returns when window idx of kind p ends.
func windowEnd(idx int64, p Period) time.Time {
	switch p {
	case PeriodDay:
		return time.Unix((idx+1)*86400, 0)
	case PeriodMonth:
		y, m := floorDiv(idx, 12), idx-floorDiv(idx, 12)*12 // m in 0..11
		return time.Date(int(y), time.Month(m+2), 1, 0, 0, 0, 0, time.UTC)
	default:
		return time.Unix((idx+1)*60, 0)
	}
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}
