// Package budgettest holds the conformance tests every budget.Store must
// pass, so that the memory store and the Redis store are held to one
// semantics: reservations, refunds exactly once, leases, window roll-over,
// UTC quota periods and concurrency. Stores run them on a fake clock.
package budgettest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmgw/gateway/shared/budget"
)

// Clock is a fake clock, safe for concurrent use.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock returns a clock reading t.
func NewClock(t time.Time) *Clock { return &Clock{t: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Set sets the clock.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

// Advance moves the clock by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// NewStore returns a fresh, empty store that reads time from now.
type NewStore func(t *testing.T, now func() time.Time) budget.Store

// Base is the instant the tests start at unless they set the clock:
// mid-minute, so that a few seconds' steps stay in one window.
var Base = time.Date(2026, time.March, 10, 12, 0, 30, 0, time.UTC)

const lease = 10 * time.Minute

// h is one test's store and clock with helpers that fail the test on a
// store error.
type h struct {
	t     *testing.T
	s     budget.Store
	clock *Clock
	ctx   context.Context
	seq   atomic.Int64
}

func setup(t *testing.T, newStore NewStore, start time.Time) *h {
	t.Helper()
	c := NewClock(start)
	return &h{t: t, s: newStore(t, c.Now), clock: c, ctx: context.Background()}
}

func (h *h) reserve(tenant, id string, lim budget.Limits, minimum, want int64) budget.Decision {
	h.t.Helper()
	d, err := h.s.Reserve(h.ctx, tenant, id, budget.Request{Limits: lim, Min: minimum, Want: want, Lease: lease})
	if err != nil {
		h.t.Fatalf("reserve %s/%s: %v", tenant, id, err)
	}
	return d
}

func (h *h) settle(tenant, id string, actual int64) budget.Settlement {
	h.t.Helper()
	return h.charge(tenant, id, budget.Charge{Tokens: actual, Money: budget.KeepReserved})
}

func (h *h) charge(tenant, id string, actual budget.Charge) budget.Settlement {
	h.t.Helper()
	s, err := h.s.Settle(h.ctx, tenant, id, actual)
	if err != nil {
		h.t.Fatalf("settle %s/%s: %v", tenant, id, err)
	}
	return s
}

// spend reserves tokens and money in one request.
func (h *h) spend(tenant, id string, lim budget.Limits, minimum, want, mmin, mwant int64) budget.Decision {
	h.t.Helper()
	d, err := h.s.Reserve(h.ctx, tenant, id, budget.Request{Limits: lim, Min: minimum, Want: want, MoneyMin: mmin, MoneyWant: mwant, Lease: lease})
	if err != nil {
		h.t.Fatalf("reserve %s/%s: %v", tenant, id, err)
	}
	return d
}

// spent reads the tenant's money counters (minute, day, month) with a
// zero reservation, settled at once.
func (h *h) spent(tenant string, lim budget.Limits) [3]int64 {
	h.t.Helper()
	id := fmt.Sprintf("probe-%d", h.seq.Add(1))
	d := h.spend(tenant, id, lim, 0, 0, 0, 0)
	h.charge(tenant, id, budget.Charge{})
	return [3]int64{d.Spend[0].Used, d.Spend[1].Used, d.Spend[2].Used}
}

func (h *h) wantSpent(tenant string, lim budget.Limits, want [3]int64) {
	h.t.Helper()
	if got := h.spent(tenant, lim); got != want {
		h.t.Fatalf("spent (minute, day, month) %v, want %v", got, want)
	}
}

// used reads the tenant's counters with a zero reservation, settled at once.
func (h *h) used(tenant string, lim budget.Limits) (tpm, quota int64) {
	h.t.Helper()
	id := fmt.Sprintf("probe-%d", h.seq.Add(1))
	d := h.reserve(tenant, id, lim, 0, 0)
	h.settle(tenant, id, 0)
	return d.TPM.Used, d.Quota.Used
}

func (h *h) wantUsed(tenant string, lim budget.Limits, tpm, quota int64) {
	h.t.Helper()
	gt, gq := h.used(tenant, lim)
	if gt != tpm || gq != quota {
		h.t.Fatalf("used: tpm %d, quota %d; want %d, %d", gt, gq, tpm, quota)
	}
}

// Run runs the conformance tests against stores made by newStore, one
// named subtest per clause of the contract; the table below lists them all,
// so a store's author reads the whole contract in one place, and each
// clause is a function of its own beside it.
func Run(t *testing.T, newStore NewStore) {
	for _, c := range []struct {
		name string
		test func(*testing.T, NewStore)
	}{
		{"grants up to want and refuses below min", grantsUpToWantAndRefusesBelowMin},
		{"refusal codes name the limit", refusalCodesNameTheLimit},
		{"no limits grants want", noLimitsGrantsWant},
		{"settle refunds exactly once", settleRefundsExactlyOnce},
		{"overrun is charged", overrunIsCharged},
		{"keep charges the reservation", keepChargesTheReservation},
		{"estimate mode refuses only when over", estimateModeRefusesOnlyWhenOver},
		{"reserving a held id is idempotent", reservingAHeldIdIsIdempotent},
		{"tenants are isolated", tenantsAreIsolated},
		{"lease expiry charges the reservation, settled once", leaseExpiryChargesTheReservation},
		{"expiry record ends after another lease", expiryRecordEndsAfterAnotherLease},
		{"keep after expiry charges the reservation", keepAfterExpiryChargesTheReservation},
		{"window roll-over", windowRollOver},
		{"clock stepped back stays in the latest window", clockSteppedBackStaysInTheLatestWindow},
		{"day quota resets at 00:00 UTC", dayQuotaResetsAt0000UTC},
		{"month quota follows the UTC calendar", monthQuotaFollowsTheUTCCalendar},
		{"a changed period restarts the quota", aChangedPeriodRestartsTheQuota},
		{"concurrent settles refund once", concurrentSettlesRefundOnce},
		{"concurrent reservations never exceed the budget", concurrentReservationsNeverExceedTheBudget},
		{"spend grants up to want and names the limit", spendGrantsUpToWantAndNamesTheLimit},
		{"spend settles with the tokens, exactly once", spendSettlesWithTheTokensExactlyOnce},
		{"spend windows follow the UTC calendar", spendWindowsFollowTheUTCCalendar},
		{"spend lease expiry charges the reservation", spendLeaseExpiryChargesTheReservation},
		{"concurrent spend never exceeds the limits", concurrentSpendNeverExceedsTheLimits},
		{"levels grant the least left and name the level", levelsGrantTheLeastLeftAndNameTheLevel},
		{"levels settle with the tenant, exactly once", levelsSettleWithTheTenantExactlyOnce},
		{"levels lease expiry and windows", levelsLeaseExpiryAndWindows},
		{"concurrent levels never exceed any limit", concurrentLevelsNeverExceedAnyLimit},
		{"a release that finds no record leaves a tombstone", aReleaseThatFindsNoRecordLeavesATombstone},
		{"a settle of a record settled before is not lost", aSettleOfARecordSettledBeforeIsNotLost},
	} {
		t.Run(c.name, func(t *testing.T) { c.test(t, newStore) })
	}
}

// The limits the clauses share.
var (
	tpm   = budget.Limits{TokensPerMinute: 1000}
	day   = budget.Limits{TokenQuota: 1000, QuotaPeriod: budget.PeriodDay}
	month = budget.Limits{TokenQuota: 1000, QuotaPeriod: budget.PeriodMonth}
	both  = budget.Limits{TokensPerMinute: 1000, TokenQuota: 5000, QuotaPeriod: budget.PeriodDay}
)

func grantsUpToWantAndRefusesBelowMin(t *testing.T, newStore NewStore) {
	t.Parallel()
	h := setup(t, newStore, Base)
	minuteEnd := Base.Truncate(time.Minute).Add(time.Minute)
	for i, c := range []struct {
		minimum, want, granted int64
		refused                budget.Limit
		remaining              int64
	}{
		{100, 300, 300, 0, 700},
		{100, 600, 600, 0, 100},
		{50, 300, 100, 0, 0}, // clamped to what is left
		{1, 10, 0, budget.LimitTPM, 0},
	} {
		d := h.reserve("a", fmt.Sprint("r", i), tpm, c.minimum, c.want)
		if d.Allowed != (c.refused == 0) || d.Granted != c.granted || d.RefusedBy != c.refused ||
			d.TPM.Remaining != c.remaining || d.TPM.Limit != 1000 || d.Requested != c.minimum {
			t.Fatalf("step %d: %+v; want granted %d, refused %v, remaining %d", i, d, c.granted, c.refused, c.remaining)
		}
		if !d.TPM.Reset.Equal(minuteEnd) {
			t.Fatalf("step %d: reset %s, want %s", i, d.TPM.Reset, minuteEnd)
		}
		if d.Quota != (budget.Window{}) {
			t.Fatalf("step %d: quota window %+v without a quota", i, d.Quota)
		}
		if c.refused != 0 && d.RefusedBy.Code() != "rate_limit_exceeded" {
			t.Fatalf("code %q", d.RefusedBy.Code())
		}
	}
}

func refusalCodesNameTheLimit(t *testing.T, newStore NewStore) {
	t.Parallel()
	h := setup(t, newStore, Base)
	lim := budget.Limits{TokensPerMinute: 100, TokenQuota: 150, QuotaPeriod: budget.PeriodDay}
	if d := h.reserve("a", "1", lim, 90, 90); !d.Allowed {
		t.Fatalf("%+v", d)
	}
	// TPM has 10 left, quota 60: TPM refuses.
	d := h.reserve("a", "2", lim, 20, 20)
	if d.Allowed || d.RefusedBy != budget.LimitTPM || d.RefusedBy.Code() != "rate_limit_exceeded" || d.Refusal().Remaining != 10 {
		t.Fatalf("tpm: %+v", d)
	}
	// Next minute: TPM has 100, quota 60: the quota refuses.
	h.clock.Advance(time.Minute)
	d = h.reserve("a", "3", lim, 70, 70)
	if d.Allowed || d.RefusedBy != budget.LimitQuota || d.RefusedBy.Code() != "insufficient_quota" || d.Refusal().Remaining != 60 {
		t.Fatalf("quota: %+v", d)
	}
	if want := time.Date(2026, 3, 11, 0, 0, 0, 0, time.UTC); !d.Quota.Reset.Equal(want) {
		t.Fatalf("quota reset %s, want %s", d.Quota.Reset, want)
	}
	// Both refuse: the quota is named (waiting a minute does not help).
	if d := h.reserve("a", "4", lim, 60, 60); !d.Allowed {
		t.Fatalf("%+v", d)
	}
	d = h.reserve("a", "5", lim, 50, 50)
	if d.RefusedBy != budget.LimitQuota {
		t.Fatalf("both: %+v", d)
	}
}

func noLimitsGrantsWant(t *testing.T, newStore NewStore) {
	t.Parallel()
	h := setup(t, newStore, Base)
	d := h.reserve("a", "1", budget.Limits{}, 10, 500)
	if !d.Allowed || d.Granted != 500 {
		t.Fatalf("%+v", d)
	}
	if s := h.settle("a", "1", 20); !s.Found || s.Refunded != 480 {
		t.Fatalf("%+v", s)
	}
}

func settleRefundsExactlyOnce(t *testing.T, newStore NewStore) {
	t.Parallel()
	h := setup(t, newStore, Base)
	h.reserve("a", "1", both, 100, 400)
	h.wantUsed("a", both, 400, 400)
	s := h.settle("a", "1", 150)
	if want := (budget.Settlement{Found: true, Reserved: 400, Actual: 150, Refunded: 250}); s != want {
		t.Fatalf("settle %+v, want %+v", s, want)
	}
	h.wantUsed("a", both, 150, 150)
	if s := h.settle("a", "1", 0); s.Found {
		t.Fatalf("second settle %+v", s)
	}
	h.wantUsed("a", both, 150, 150)
	if s := h.settle("a", "never", 10); s.Found {
		t.Fatalf("unknown id %+v", s)
	}
}

func overrunIsCharged(t *testing.T, newStore NewStore) {
	t.Parallel()
	h := setup(t, newStore, Base)
	h.reserve("a", "1", both, 100, 100)
	s := h.settle("a", "1", 1300)
	if s.Overrun != 1200 || s.Refunded != 0 {
		t.Fatalf("%+v", s)
	}
	h.wantUsed("a", both, 1300, 1300)
	if d := h.reserve("a", "2", both, 1, 1); d.Allowed || d.RefusedBy != budget.LimitTPM || d.TPM.Remaining != 0 {
		t.Fatalf("after overrun %+v", d)
	}
}

func keepChargesTheReservation(t *testing.T, newStore NewStore) {
	t.Parallel()
	h := setup(t, newStore, Base)
	h.reserve("a", "1", both, 10, 321)
	s := h.settle("a", "1", budget.KeepReserved)
	if !s.Found || s.Actual != 321 || s.Refunded != 0 || s.Overrun != 0 {
		t.Fatalf("%+v", s)
	}
	h.wantUsed("a", both, 321, 321)
}

func estimateModeRefusesOnlyWhenOver(t *testing.T, newStore NewStore) {
	t.Parallel()
	h := setup(t, newStore, Base)
	d := h.reserve("a", "1", tpm, 1, 0)
	if !d.Allowed || d.Granted != 0 {
		t.Fatalf("%+v", d)
	}
	h.settle("a", "1", 999)
	if d := h.reserve("a", "2", tpm, 1, 0); !d.Allowed {
		t.Fatalf("999 of 1000: %+v", d)
	}
	h.settle("a", "2", 500) // overshoot: the in-flight request's usage
	h.wantUsed("a", tpm, 1499, 0)
	if d := h.reserve("a", "3", tpm, 1, 0); d.Allowed || d.RefusedBy != budget.LimitTPM {
		t.Fatalf("over: %+v", d)
	}
}

func reservingAHeldIdIsIdempotent(t *testing.T, newStore NewStore) {
	t.Parallel()
	h := setup(t, newStore, Base)
	h.reserve("a", "1", tpm, 100, 300)
	d := h.reserve("a", "1", tpm, 100, 300)
	if !d.Allowed || !d.Held || d.Granted != 300 {
		t.Fatalf("%+v", d)
	}
	h.wantUsed("a", tpm, 300, 0)
}

func tenantsAreIsolated(t *testing.T, newStore NewStore) {
	t.Parallel()
	h := setup(t, newStore, Base)
	h.reserve("a", "1", tpm, 100, 1000)
	if d := h.reserve("b", "1", tpm, 100, 1000); !d.Allowed || d.Held || d.Granted != 1000 {
		t.Fatalf("b: %+v", d)
	}
	if s := h.settle("c", "1", 0); s.Found {
		t.Fatalf("c settled a's reservation: %+v", s)
	}
	h.wantUsed("a", tpm, 1000, 0)
}

func leaseExpiryChargesTheReservation(t *testing.T, newStore NewStore) {
	t.Parallel()
	start := time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)
	h := setup(t, newStore, start)
	h.reserve("a", "dead", day, 100, 600)
	h.reserve("a", "live", day, 100, 100)
	h.clock.Advance(lease - time.Second)
	h.wantUsed("a", day, 0, 700)
	h.settle("a", "live", 50)
	h.wantUsed("a", day, 0, 650)
	h.clock.Advance(time.Second) // dead's lease ends: its 600 stay charged
	h.wantUsed("a", day, 0, 650)
	if d := h.reserve("a", "dead", day, 1, 1); d.Allowed || !d.Held {
		t.Fatalf("re-reserving an expired id: %+v", d)
	}
	// A late settle (a replayed one) settles the actual usage, once.
	s := h.settle("a", "dead", 200)
	if !s.Found || !s.Expired || s.Reserved != 600 || s.Overrun != 0 || s.Refunded != 400 {
		t.Fatalf("late settle %+v", s)
	}
	h.wantUsed("a", day, 0, 250)
	if s := h.settle("a", "dead", 200); s.Found {
		t.Fatalf("second late settle %+v", s)
	}
	h.wantUsed("a", day, 0, 250)
}

func expiryRecordEndsAfterAnotherLease(t *testing.T, newStore NewStore) {
	t.Parallel()
	h := setup(t, newStore, Base)
	h.reserve("a", "1", day, 10, 10)
	h.clock.Advance(lease)
	h.wantUsed("a", day, 0, 10) // expired, still charged
	h.clock.Advance(lease)
	h.wantUsed("a", day, 0, 10) // the expiry record is swept, the charge stays
	if s := h.settle("a", "1", 500); s.Found {
		t.Fatalf("settle after the expiry record ended: %+v", s)
	}
	h.wantUsed("a", day, 0, 10)
}

func keepAfterExpiryChargesTheReservation(t *testing.T, newStore NewStore) {
	t.Parallel()
	h := setup(t, newStore, Base)
	h.reserve("a", "1", day, 10, 70)
	h.clock.Advance(lease + time.Second)
	s := h.settle("a", "1", budget.KeepReserved)
	if !s.Expired || s.Actual != 70 || s.Overrun != 0 || s.Refunded != 0 {
		t.Fatalf("%+v", s)
	}
	h.wantUsed("a", day, 0, 70)
}

func windowRollOver(t *testing.T, newStore NewStore) {
	t.Parallel()
	h := setup(t, newStore, Base)
	h.reserve("a", "old", tpm, 900, 900)
	h.reserve("a", "old2", tpm, 50, 50)
	h.clock.Advance(time.Minute)
	d := h.reserve("a", "new", tpm, 1000, 1000)
	if !d.Allowed || d.Granted != 1000 {
		t.Fatalf("fresh window: %+v", d)
	}
	// A refund into the ended window goes nowhere.
	if s := h.settle("a", "old", 100); s.Refunded != 800 {
		t.Fatalf("%+v", s)
	}
	h.wantUsed("a", tpm, 1000, 0)
	// An overrun of a reservation from the ended window is charged now.
	if s := h.settle("a", "old2", 80); s.Overrun != 30 {
		t.Fatalf("%+v", s)
	}
	h.wantUsed("a", tpm, 1030, 0)
	// A refund into the current window returns.
	h.settle("a", "new", 400)
	h.wantUsed("a", tpm, 430, 0)
}

func clockSteppedBackStaysInTheLatestWindow(t *testing.T, newStore NewStore) {
	t.Parallel()
	h := setup(t, newStore, Base.Add(29*time.Second)) // 12:00:59
	h.clock.Advance(2 * time.Second)                  // 12:01:01
	h.reserve("a", "1", tpm, 600, 600)
	h.clock.Advance(-3 * time.Second) // 12:00:58: earlier window by the clock
	if d := h.reserve("a", "2", tpm, 500, 500); d.Allowed {
		t.Fatalf("a stepped-back clock reopened a window: %+v", d)
	}
}

func dayQuotaResetsAt0000UTC(t *testing.T, newStore NewStore) {
	t.Parallel()
	h := setup(t, newStore, time.Date(2026, 3, 10, 23, 59, 59, 0, time.UTC))
	d := h.reserve("a", "1", day, 1000, 1000)
	if !d.Allowed || !d.Quota.Reset.Equal(time.Date(2026, 3, 11, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("%+v", d)
	}
	h.settle("a", "1", budget.KeepReserved)
	if d := h.reserve("a", "2", day, 1, 1); d.Allowed {
		t.Fatalf("same day: %+v", d)
	}
	h.clock.Advance(time.Second)
	d = h.reserve("a", "3", day, 1000, 1000)
	if !d.Allowed || !d.Quota.Reset.Equal(time.Date(2026, 3, 12, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("next day: %+v", d)
	}
}

func monthQuotaFollowsTheUTCCalendar(t *testing.T, newStore NewStore) {
	t.Parallel()
	for i, c := range []struct {
		at, next time.Time // an instant, and the start of the month after it
		step     time.Duration
		sameNext bool // at+step is still in the same month
	}{
		{time.Date(2026, 1, 31, 23, 59, 59, 0, time.UTC), time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC), time.Second, false},
		{time.Date(2028, 2, 28, 23, 0, 0, 0, time.UTC), time.Date(2028, 3, 1, 0, 0, 0, 0, time.UTC), 24 * time.Hour, true}, // leap day
		{time.Date(2028, 2, 29, 23, 59, 59, 0, time.UTC), time.Date(2028, 3, 1, 0, 0, 0, 0, time.UTC), time.Second, false},
		{time.Date(2027, 2, 28, 23, 59, 59, 0, time.UTC), time.Date(2027, 3, 1, 0, 0, 0, 0, time.UTC), time.Second, false},
		{time.Date(2026, 12, 31, 23, 59, 59, 0, time.UTC), time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC), time.Second, false},
		{time.Date(2026, 4, 30, 12, 0, 0, 0, time.UTC), time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC), 11 * time.Hour, true},
		{time.Date(2100, 2, 28, 23, 59, 59, 0, time.UTC), time.Date(2100, 3, 1, 0, 0, 0, 0, time.UTC), time.Second, false}, // not a leap year
	} {
		t.Run(c.at.Format("2006-01-02"), func(t *testing.T) {
			t.Parallel()
			h := setup(t, newStore, c.at)
			d := h.reserve("a", "1", month, 1000, 1000)
			if !d.Allowed || !d.Quota.Reset.Equal(c.next) {
				t.Fatalf("case %d: %+v, want reset %s", i, d, c.next)
			}
			h.settle("a", "1", budget.KeepReserved)
			h.clock.Advance(c.step)
			d = h.reserve("a", "2", month, 1, 1)
			if d.Allowed == c.sameNext {
				t.Fatalf("case %d after %s: allowed %v, want %v (%+v)", i, c.step, d.Allowed, !c.sameNext, d)
			}
		})
	}
}

func aChangedPeriodRestartsTheQuota(t *testing.T, newStore NewStore) {
	t.Parallel()
	h := setup(t, newStore, Base)
	h.reserve("a", "1", day, 900, 900)
	d := h.reserve("a", "2", month, 900, 900)
	if !d.Allowed {
		t.Fatalf("%+v", d)
	}
	// Settling the day reservation refunds nothing into the month.
	h.settle("a", "1", 0)
	h.wantUsed("a", month, 0, 900)
}

func concurrentSettlesRefundOnce(t *testing.T, newStore NewStore) {
	t.Parallel()
	h := setup(t, newStore, Base)
	h.reserve("a", "1", both, 500, 500)
	var found atomic.Int64
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			s, err := h.s.Settle(h.ctx, "a", "1", budget.Charge{Tokens: 100, Money: budget.KeepReserved})
			if err != nil {
				t.Error(err)
			}
			if s.Found {
				found.Add(1)
			}
		})
	}
	wg.Wait()
	if found.Load() != 1 {
		t.Fatalf("%d settles found the reservation", found.Load())
	}
	h.wantUsed("a", both, 100, 100)
}

func concurrentReservationsNeverExceedTheBudget(t *testing.T, newStore NewStore) {
	t.Parallel()
	for _, moving := range []bool{false, true} {
		t.Run(fmt.Sprintf("clock moving %v", moving), func(t *testing.T) {
			t.Parallel()
			h := setup(t, newStore, Base)
			property(t, h, moving)
		})
	}
}

// property runs goroutines that reserve random amounts and settle random
// actuals no larger than their grants (a backend honouring the cap), and
// checks that no decision ever reports a window over its limit: a window's
// used only grows by a grant, and every grant reports the window after it.
// With a still clock it also checks the final totals exactly.
func property(t *testing.T, h *h, moving bool) {
	lim := budget.Limits{TokensPerMinute: 40000, TokenQuota: 100000, QuotaPeriod: budget.PeriodDay}
	const workers, ops = 12, 120
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	var charged, granted, refused atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			for op := range ops {
				if moving && rng.IntN(40) == 0 {
					h.clock.Advance(time.Duration(rng.IntN(20)) * time.Second)
				}
				id := fmt.Sprintf("w%d-%d", w, op)
				minimum := int64(rng.IntN(300) + 1)
				want := minimum + int64(rng.IntN(700))
				d, err := h.s.Reserve(h.ctx, "p", id, budget.Request{Limits: lim, Min: minimum, Want: want, Lease: lease})
				if err != nil {
					t.Error(err)
					return
				}
				for _, win := range []budget.Window{d.TPM, d.Quota} {
					if win.Used > win.Limit {
						t.Errorf("%s: window over its limit: %+v", id, win)
					}
				}
				if !d.Allowed {
					refused.Add(1)
					continue
				}
				if d.Granted < minimum || d.Granted > want {
					t.Errorf("%s: granted %d outside [%d, %d]", id, d.Granted, minimum, want)
				}
				granted.Add(1)
				actual := rng.Int64N(d.Granted + 1)
				s, err := h.s.Settle(h.ctx, "p", id, budget.Charge{Tokens: actual, Money: budget.KeepReserved})
				if err != nil || !s.Found || s.Refunded != d.Granted-actual {
					t.Errorf("%s: settle %+v, %v", id, s, err)
				}
				charged.Add(actual)
			}
		})
	}
	wg.Wait()
	t.Logf("%d granted, %d refused, %d tokens charged", granted.Load(), refused.Load(), charged.Load())
	if refused.Load() == 0 {
		t.Error("no reservation was refused: the budget was never tested")
	}
	if !moving {
		tu, qu := h.used("p", lim)
		if tu != charged.Load() || qu != charged.Load() {
			t.Errorf("used tpm %d, quota %d; want both %d", tu, qu, charged.Load())
		}
	}
}

// The spend limits' clauses: money is a second dimension of
// the same reservation, in micro-units.
var spendAll = budget.Limits{SpendPerMinute: 1000, SpendPerDay: 5000, SpendPerMonth: 20000}

func spendGrantsUpToWantAndNamesTheLimit(t *testing.T, newStore NewStore) {
	t.Parallel()
	h := setup(t, newStore, Base)
	lim := budget.Limits{TokensPerMinute: 10000, SpendPerMinute: 1000, SpendPerDay: 1500}
	d := h.spend("a", "1", lim, 10, 100, 200, 700)
	if !d.Allowed || d.Granted != 100 || d.MoneyGranted != 700 {
		t.Fatalf("first: %+v", d)
	}
	// 300 left in the minute: granted up to it.
	d = h.spend("a", "2", lim, 10, 100, 200, 700)
	if !d.Allowed || d.MoneyGranted != 300 || d.Spend[0].Remaining != 0 || d.Spend[1].Remaining != 500 {
		t.Fatalf("second: %+v", d)
	}
	d = h.spend("a", "3", lim, 10, 100, 1, 1)
	if d.Allowed || d.RefusedBy != budget.LimitSpendMinute || d.RefusedBy.Code() != "rate_limit_exceeded" || d.MoneyRequested != 1 || d.Requests() != 1 {
		t.Fatalf("third: %+v", d)
	}
	if w := d.Refusal(); w.Limit != 1000 || w.Used != 1000 || !w.Reset.Equal(Base.Truncate(time.Minute).Add(time.Minute)) {
		t.Fatalf("refusal window %+v", w)
	}
	// The next minute: the day refuses what the minute would grant.
	h.clock.Advance(time.Minute)
	d = h.spend("a", "4", lim, 10, 100, 600, 600)
	if d.Allowed || d.RefusedBy != budget.LimitSpendDay || d.RefusedBy.Code() != "insufficient_quota" {
		t.Fatalf("fourth: %+v", d)
	}
	// A refused reservation holds nothing: tokens and money unchanged.
	h.wantUsed("a", lim, 0, 0)
	h.wantSpent("a", lim, [3]int64{0, 1000, 0})
	// Money with no spend limit is neither kept nor granted.
	if d := h.spend("b", "1", tpm, 1, 1, 5, 5); !d.Allowed || d.MoneyGranted != 0 {
		t.Fatalf("no spend limit: %+v", d)
	}
}

func spendSettlesWithTheTokensExactlyOnce(t *testing.T, newStore NewStore) {
	t.Parallel()
	h := setup(t, newStore, Base)
	lim := spendAll
	lim.TokenQuota, lim.QuotaPeriod = 10000, budget.PeriodMonth
	h.spend("a", "1", lim, 100, 1000, 500, 900)
	s := h.charge("a", "1", budget.Charge{Tokens: 400, Money: 300})
	if !s.Found || s.Actual != 400 || s.Refunded != 600 || s.MoneyReserved != 900 || s.MoneyActual != 300 {
		t.Fatalf("settle %+v", s)
	}
	if again := h.charge("a", "1", budget.Charge{Tokens: 0, Money: 0}); again.Found {
		t.Fatalf("second settle %+v", again)
	}
	h.wantSpent("a", lim, [3]int64{300, 300, 300})
	_, q := h.used("a", lim)
	if q != 400 {
		t.Fatalf("quota used %d, want 400", q)
	}
	// An overrun in money is charged; KeepReserved keeps the money.
	h.spend("a", "2", lim, 1, 10, 100, 100)
	h.charge("a", "2", budget.Charge{Tokens: 10, Money: 250})
	h.spend("a", "3", lim, 1, 10, 100, 100)
	h.charge("a", "3", budget.Kept)
	h.wantSpent("a", lim, [3]int64{650, 650, 650})
}

func spendWindowsFollowTheUTCCalendar(t *testing.T, newStore NewStore) {
	t.Parallel()
	h := setup(t, newStore, time.Date(2026, time.January, 31, 23, 59, 30, 0, time.UTC))
	h.spend("a", "1", spendAll, 0, 0, 100, 100)
	h.charge("a", "1", budget.Kept)
	h.wantSpent("a", spendAll, [3]int64{100, 100, 100})
	// 00:00 UTC on the first of February: minute, day and month restart.
	h.clock.Set(time.Date(2026, time.February, 1, 0, 0, 0, 0, time.UTC))
	h.wantSpent("a", spendAll, [3]int64{0, 0, 0})
	h.spend("a", "2", spendAll, 0, 0, 100, 100)
	h.charge("a", "2", budget.Kept)
	// The next day: the month keeps it.
	h.clock.Set(time.Date(2026, time.February, 2, 0, 0, 1, 0, time.UTC))
	h.wantSpent("a", spendAll, [3]int64{0, 0, 100})
	d := h.spend("a", "3", spendAll, 0, 0, 1, 1)
	if got := d.Spend[2].Reset; !got.Equal(time.Date(2026, time.March, 1, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("month reset %s", got)
	}
	if got := d.Spend[1].Reset; !got.Equal(time.Date(2026, time.February, 3, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("day reset %s", got)
	}
	// A refund into an ended window goes nowhere; an overrun lands in the
	// current one.
	h.clock.Set(time.Date(2026, time.March, 1, 0, 0, 0, 0, time.UTC))
	h.charge("a", "3", budget.Charge{Money: 0})
	h.wantSpent("a", spendAll, [3]int64{0, 0, 0})
	h.clock.Set(time.Date(2026, time.March, 1, 23, 55, 0, 0, time.UTC))
	h.spend("a", "4", spendAll, 0, 0, 10, 10)
	h.clock.Set(time.Date(2026, time.March, 2, 0, 1, 0, 0, time.UTC))
	h.charge("a", "4", budget.Charge{Money: 50})
	h.wantSpent("a", spendAll, [3]int64{40, 40, 50})
}

func spendLeaseExpiryChargesTheReservation(t *testing.T, newStore NewStore) {
	t.Parallel()
	h := setup(t, newStore, Base)
	lim := budget.Limits{SpendPerMonth: 1000}
	h.spend("a", "1", lim, 0, 0, 400, 400)
	h.clock.Advance(lease + time.Second)
	h.wantSpent("a", lim, [3]int64{0, 0, 400})
	// A late settle still refunds.
	if s := h.charge("a", "1", budget.Charge{Money: 100}); !s.Found || !s.Expired {
		t.Fatalf("late settle %+v", s)
	}
	h.wantSpent("a", lim, [3]int64{0, 0, 100})
}

// concurrentSpendNeverExceedsTheLimits runs the token property's workers
// with money beside the tokens: no decision reports a spend window over its
// limit, and with a still clock the totals are exact.
func concurrentSpendNeverExceedsTheLimits(t *testing.T, newStore NewStore) {
	t.Parallel()
	h := setup(t, newStore, Base)
	lim := budget.Limits{TokensPerMinute: 1 << 40, SpendPerMinute: 30000, SpendPerDay: 60000, SpendPerMonth: 1 << 40}
	const workers, ops = 12, 80
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	var charged, refused atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			for op := range ops {
				id := fmt.Sprintf("w%d-%d", w, op)
				mmin := int64(rng.IntN(300) + 1)
				mwant := mmin + int64(rng.IntN(700))
				d, err := h.s.Reserve(h.ctx, "p", id, budget.Request{Limits: lim, Min: 1, Want: 10, MoneyMin: mmin, MoneyWant: mwant, Lease: lease})
				if err != nil {
					t.Error(err)
					return
				}
				for _, win := range d.Spend {
					if win.Used > win.Limit {
						t.Errorf("%s: spend window over its limit: %+v", id, win)
					}
				}
				if !d.Allowed {
					refused.Add(1)
					continue
				}
				if d.MoneyGranted < mmin || d.MoneyGranted > mwant {
					t.Errorf("%s: money granted %d outside [%d, %d]", id, d.MoneyGranted, mmin, mwant)
				}
				actual := rng.Int64N(d.MoneyGranted + 1)
				s, err := h.s.Settle(h.ctx, "p", id, budget.Charge{Tokens: 1, Money: actual})
				if err != nil || !s.Found || s.MoneyActual != actual {
					t.Errorf("%s: settle %+v, %v", id, s, err)
				}
				charged.Add(actual)
			}
		})
	}
	wg.Wait()
	if refused.Load() == 0 {
		t.Error("no reservation was refused: the limit was never tested")
	}
	if got := h.spent("p", lim); got[1] != charged.Load() || got[2] != charged.Load() {
		t.Errorf("spent %v, want day and month %d", got, charged.Load())
	}
}

// The levels the level clauses share: a project of 1000 in money per
// month and its users of 400 each, below a tenant of 100000 tokens a
// minute.
var (
	levelTenant = budget.Limits{TokensPerMinute: 100000}
	project     = budget.Limits{SpendPerMonth: 1000, TokenQuota: 5000, QuotaPeriod: budget.PeriodMonth}
	userLimit   = budget.Limits{SpendPerMonth: 400}
)

func levelsOf(user string) []budget.Level {
	return []budget.Level{{Name: "project:search", Limits: project}, {Name: "user:" + user, Limits: userLimit}}
}

// level reserves at the tenant and user's levels.
func (h *h) level(user, id string, mn, want, mmin, mwant int64) budget.Decision {
	h.t.Helper()
	d, err := h.s.Reserve(h.ctx, "a", id, budget.Request{Limits: levelTenant, Min: mn, Want: want, MoneyMin: mmin, MoneyWant: mwant, Lease: lease, Levels: levelsOf(user)})
	if err != nil {
		h.t.Fatalf("reserve %s: %v", id, err)
	}
	if len(d.Levels) != 2 {
		h.t.Fatalf("reserve %s: %d levels' windows, want 2", id, len(d.Levels))
	}
	return d
}

func (h *h) settleLevel(user, id string, c budget.Charge) budget.Settlement {
	h.t.Helper()
	c.Levels = levelsOf(user)
	return h.charge("a", id, c)
}

// levelSpent reads (tenant tokens per minute, project month spend,
// project quota, user month spend) with a reservation of nothing.
func (h *h) levelSpent(user string) [4]int64 {
	h.t.Helper()
	id := fmt.Sprintf("probe-%d", h.seq.Add(1))
	d := h.level(user, id, 0, 0, 0, 0)
	h.settleLevel(user, id, budget.Charge{})
	return [4]int64{d.TPM.Used, d.Levels[0].Spend[2].Used, d.Levels[0].Quota.Used, d.Levels[1].Spend[2].Used}
}

func levelsGrantTheLeastLeftAndNameTheLevel(t *testing.T, newStore NewStore) {
	t.Parallel()
	h := setup(t, newStore, Base)
	// The user's 400 is the least left: granted to all three levels.
	d := h.level("u1", "1", 10, 100, 100, 700)
	if !d.Allowed || d.MoneyGranted != 400 || d.Granted != 100 || d.TPM.Used != 100 ||
		d.Levels[0].Spend[2].Used != 400 || d.Levels[0].Quota.Used != 100 || d.Levels[1].Spend[2].Remaining != 0 {
		t.Fatalf("first: %+v", d)
	}
	// The same user has nothing left: refused by its level, the others
	// unchanged.
	d = h.level("u1", "2", 10, 100, 1, 1)
	if d.Allowed || d.RefusedLevel != 2 || d.RefusedBy != budget.LimitSpendMonth || d.Refusal().Limit != 400 || d.Refusal().Used != 400 {
		t.Fatalf("second: %+v", d)
	}
	if !d.Refusal().Reset.Equal(time.Date(2026, time.April, 1, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("refusal reset %s", d.Refusal().Reset)
	}
	// Another user: 400 more; a third finds the project's 200 the least.
	if d = h.level("u2", "3", 10, 100, 100, 700); !d.Allowed || d.MoneyGranted != 400 {
		t.Fatalf("third: %+v", d)
	}
	if d = h.level("u3", "4", 10, 100, 100, 700); !d.Allowed || d.MoneyGranted != 200 || d.Levels[1].Spend[2].Used != 200 {
		t.Fatalf("fourth: %+v", d)
	}
	d = h.level("u4", "5", 10, 100, 1, 1)
	if d.Allowed || d.RefusedLevel != 1 || d.RefusedBy != budget.LimitSpendMonth || d.Refusal().Limit != 1000 {
		t.Fatalf("fifth: %+v", d)
	}
	// A refusal holds nothing anywhere.
	if got, want := h.levelSpent("u4"), [4]int64{300, 1000, 300, 0}; got != want {
		t.Fatalf("spent %v, want %v", got, want)
	}
	// The longest limit refusing is named, whatever its level: the
	// tenant's minute and the project's month both refuse.
	h.spend("a", "tpm", levelTenant, 99700, 99700, 0, 0)
	d = h.level("u5", "6", 10, 100, 1, 1)
	if d.Allowed || d.RefusedLevel != 1 || d.RefusedBy != budget.LimitSpendMonth {
		t.Fatalf("sixth: %+v", d)
	}
	h.clock.Set(time.Date(2026, time.April, 1, 0, 0, 0, 0, time.UTC))
	h.charge("a", "tpm", budget.Charge{})
	if d = h.level("u4", "7", 10, 100, 1, 1); !d.Allowed {
		t.Fatalf("next month: %+v", d)
	}
}

func levelsSettleWithTheTenantExactlyOnce(t *testing.T, newStore NewStore) {
	t.Parallel()
	h := setup(t, newStore, Base)
	h.level("u1", "1", 10, 100, 100, 300)
	s := h.settleLevel("u1", "1", budget.Charge{Tokens: 40, Money: 120})
	if !s.Found || s.Reserved != 100 || s.Actual != 40 || s.MoneyReserved != 300 || s.MoneyActual != 120 {
		t.Fatalf("settle %+v", s)
	}
	if again := h.settleLevel("u1", "1", budget.Charge{}); again.Found {
		t.Fatalf("second settle %+v", again)
	}
	if got, want := h.levelSpent("u1"), [4]int64{40, 120, 40, 120}; got != want {
		t.Fatalf("spent %v, want %v", got, want)
	}
	// An overrun reaches every level; Kept keeps the reservation.
	h.level("u1", "2", 10, 100, 100, 100)
	h.settleLevel("u1", "2", budget.Charge{Tokens: 150, Money: 250})
	h.level("u2", "3", 10, 100, 100, 100)
	h.settleLevel("u2", "3", budget.Kept)
	if got, want := h.levelSpent("u1"), [4]int64{290, 470, 290, 370}; got != want {
		t.Fatalf("spent %v, want %v", got, want)
	}
	if got := h.levelSpent("u2"); got[3] != 100 {
		t.Fatalf("u2 spent %v", got)
	}
}

func levelsLeaseExpiryAndWindows(t *testing.T, newStore NewStore) {
	t.Parallel()
	h := setup(t, newStore, time.Date(2026, time.March, 31, 23, 40, 0, 0, time.UTC))
	h.level("u1", "1", 10, 100, 100, 300)
	// The lease ends unsettled: every level keeps the reservation.
	h.clock.Advance(lease + time.Second)
	if got, want := h.levelSpent("u1"), [4]int64{0, 300, 100, 300}; got != want {
		t.Fatalf("spent after the lease %v, want %v", got, want)
	}
	// A late settle refunds at every level.
	if s := h.settleLevel("u1", "1", budget.Charge{Tokens: 10, Money: 50}); !s.Found || !s.Expired {
		t.Fatalf("late settle %+v", s)
	}
	if got, want := h.levelSpent("u1"), [4]int64{0, 50, 10, 50}; got != want {
		t.Fatalf("spent after the settle %v, want %v", got, want)
	}
	// April: every level's month restarts.
	h.clock.Set(time.Date(2026, time.April, 1, 0, 0, 0, 0, time.UTC))
	if got, want := h.levelSpent("u1"), [4]int64{0, 0, 0, 0}; got != want {
		t.Fatalf("spent in April %v, want %v", got, want)
	}
}

// concurrentLevelsNeverExceedAnyLimit: workers as users of one project
// reserve and settle at random; no decision reports a level over its
// limit and, the clock still, every level's total is exact.
func concurrentLevelsNeverExceedAnyLimit(t *testing.T, newStore NewStore) {
	t.Parallel()
	h := setup(t, newStore, Base)
	const workers, ops = 8, 60
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	var charged, refused atomic.Int64
	var users [workers]atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			user := fmt.Sprintf("u%d", w)
			for op := range ops {
				id := fmt.Sprintf("w%d-%d", w, op)
				mmin := int64(rng.IntN(30) + 1)
				d, err := h.s.Reserve(h.ctx, "a", id, budget.Request{Limits: levelTenant, Min: 1, Want: 1,
					MoneyMin: mmin, MoneyWant: mmin + int64(rng.IntN(60)), Lease: lease, Levels: levelsOf(user)})
				if err != nil {
					t.Error(err)
					return
				}
				for _, lw := range d.Levels {
					if win := lw.Spend[2]; win.Used > win.Limit {
						t.Errorf("%s: a level over its limit: %+v", id, win)
					}
				}
				if !d.Allowed {
					refused.Add(1)
					continue
				}
				actual := rng.Int64N(d.MoneyGranted + 1)
				if _, err := h.s.Settle(h.ctx, "a", id, budget.Charge{Tokens: 1, Money: actual, Levels: levelsOf(user)}); err != nil {
					t.Error(err)
				}
				charged.Add(actual)
				users[w].Add(actual)
			}
		})
	}
	wg.Wait()
	if refused.Load() == 0 {
		t.Error("no reservation was refused: the limits were never tested")
	}
	for w := range workers {
		got := h.levelSpent(fmt.Sprintf("u%d", w))
		if got[1] != charged.Load() || got[3] != users[w].Load() {
			t.Errorf("u%d: spent %v, want project %d, user %d", w, got, charged.Load(), users[w].Load())
		}
	}
}

// aReleaseThatFindsNoRecordLeavesATombstone: the gateway gave up on a
// reservation (its reserve timed out) and released it; the release
// reached the store first, the reservation later (a slow connection, a
// retransmission after a partition). The late reservation must reserve
// nothing, not stay charged to its lease end; the tombstone ends with
// about a lease, and a settle without a lease leaves none.
func aReleaseThatFindsNoRecordLeavesATombstone(t *testing.T, newStore NewStore) {
	t.Parallel()
	h := setup(t, newStore, Base)
	lim := budget.Limits{TokensPerMinute: 100_000, TokenQuota: 100_000, QuotaPeriod: budget.PeriodDay, SpendPerDay: 1_000_000}
	if s := h.charge("a", "late", budget.Charge{Lease: lease}); s.Found || s.Lost {
		t.Fatalf("release of an unknown id: %+v", s)
	}
	d := h.spend("a", "late", lim, 100, 5000, 10, 50_000)
	if d.Allowed || !d.Released || !d.Held || d.Granted != 0 || d.MoneyGranted != 0 {
		t.Fatalf("late reservation after its release: %+v", d)
	}
	h.wantUsed("a", lim, 0, 0)
	h.wantSpent("a", lim, [3]int64{0, 0, 0})
	// A second release, or a settle with usage, finds the tombstone: no
	// record, nothing charged, the tombstone stays.
	if s := h.charge("a", "late", budget.Charge{Tokens: 300, Money: 3000, Lease: lease}); s.Found || s.Lost || s.NoCounter {
		t.Fatalf("settle of a tombstone: %+v", s)
	}
	if d := h.spend("a", "late", lim, 100, 5000, 10, 50_000); d.Allowed || !d.Released {
		t.Fatalf("late reservation after a second release: %+v", d)
	}
	h.wantUsed("a", lim, 0, 0)
	// A settle without a lease (a caller outside a ledger) leaves none.
	h.charge("a", "plain", budget.Charge{})
	if d := h.reserve("a", "plain", lim, 100, 500); !d.Allowed || d.Released || d.Granted != 500 {
		t.Fatalf("reservation after a settle without a lease: %+v", d)
	}
	// The tombstone ends with its lease: the id is free again.
	h.clock.Advance(lease + time.Second)
	if d := h.reserve("a", "late", lim, 100, 500); !d.Allowed || d.Released || d.Granted != 500 {
		t.Fatalf("reservation a lease after the release: %+v", d)
	}
}

// aSettleOfARecordSettledBeforeIsNotLost: a settle that carries its
// reservation's time and finds no record in a counter older than the
// reservation is a repeat (the record was settled), not a record the
// store lost: nothing is charged.
func aSettleOfARecordSettledBeforeIsNotLost(t *testing.T, newStore NewStore) {
	t.Parallel()
	h := setup(t, newStore, Base)
	d := h.reserve("a", "1", tpm, 100, 400)
	if d.ReservedAt.IsZero() {
		t.Fatalf("a reservation without its time: %+v", d)
	}
	c := budget.Charge{Tokens: 300, Money: budget.KeepReserved, ReservedAt: d.ReservedAt, Lease: lease}
	h.clock.Advance(time.Second)
	if s := h.charge("a", "1", c); !s.Found || s.Lost {
		t.Fatalf("settle: %+v", s)
	}
	h.clock.Advance(time.Second)
	if s := h.charge("a", "1", c); s.Found || s.Lost || s.NoCounter {
		t.Fatalf("repeated settle: %+v", s)
	}
	h.wantUsed("a", tpm, 300, 0)
}
