package budget_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmgw/gateway/internal/testing/syncbuf"
	"github.com/llmgw/gateway/shared/budget"
	"github.com/llmgw/gateway/shared/budget/budgettest"
)

// outage is a remote store (a Ledger replays its settles) over a memory
// store that can go down, lose its data (an empty restart), and hold a
// reservation back to deliver it after the gateway gave up on it.
type outage struct {
	mu   sync.Mutex
	st   budget.Store
	now  func() time.Time
	down bool
	hold bool
	late func() (budget.Decision, error)
}

func newOutage(now func() time.Time) *outage {
	return &outage{st: budget.NewMemory(now), now: now}
}

func (o *outage) Reserve(ctx context.Context, tenant, id string, r budget.Request) (budget.Decision, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.down {
		return budget.Decision{}, errDown
	}
	if o.hold {
		st := o.st
		o.late = func() (budget.Decision, error) { return st.Reserve(context.Background(), tenant, id, r) }
		return budget.Decision{}, errDown // the gateway's wait ended first
	}
	return o.st.Reserve(ctx, tenant, id, r)
}

func (o *outage) Settle(ctx context.Context, tenant, id string, c budget.Charge) (budget.Settlement, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.down {
		return budget.Settlement{}, errDown
	}
	return o.st.Settle(ctx, tenant, id, c)
}

func (o *outage) set(f func(o *outage)) {
	o.mu.Lock()
	defer o.mu.Unlock()
	f(o)
}

// wipe empties the store, as an empty Redis restart does.
func (o *outage) wipe() { o.set(func(o *outage) { o.st = budget.NewMemory(o.now) }) }

// waitFor waits, within a generous bound, until cond holds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(20 * time.Second); !cond(); {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

var surviveLimits = []budget.TenantBudget{{Tenant: "t", Limits: budget.Limits{TokensPerMinute: 100_000, SpendPerDay: 10_000_000}}}

// outageLedger is a ledger of surviveLimits over a new outage store on
// a fake clock, logging to logs.
func outageLedger(t *testing.T, logs *syncbuf.Buffer) (*budget.Ledger, *outage, *budgettest.Clock) {
	t.Helper()
	clock := budgettest.NewClock(budgettest.Base)
	st := newOutage(clock.Now)
	return newLedger(t, budget.Config{Log: slog.New(slog.NewTextHandler(logs, nil))}, surviveLimits, st), st, clock
}

// keptSettle runs request id of tenant "t" on a ledger over a new outage
// store, logging to logs: reserved, then settled at 300 tokens and 3,000
// µUSD while the store is down, so the ledger keeps the settle for replay.
func keptSettle(t *testing.T, id string, logs *syncbuf.Buffer) (*budget.Ledger, *outage, *budgettest.Clock, budget.Charge) {
	t.Helper()
	l, st, clock := outageLedger(t, logs)
	ctx := context.Background()
	d, err := l.Reserve(ctx, "t", id, budget.Ask{PromptBound: 100, ClientCap: 900, Spend: budget.Spend{Fixed: 5000}})
	if err != nil || !d.Allowed || d.ReservedAt.IsZero() {
		t.Fatalf("reserve: %+v, %v", d, err)
	}
	st.set(func(o *outage) { o.down = true })
	usage := budget.Charge{Tokens: 300, Money: 3000, ReservedAt: d.ReservedAt}
	if _, err := l.SettleCharge(ctx, "t", id, usage); err == nil {
		t.Fatal("settle against a store that is down: no error")
	}
	if s := l.Stats(); s.Pending != 1 {
		t.Fatalf("the settle is not kept: %+v", s)
	}
	return l, st, clock, usage
}

// tpmUsed reads the tenant's minute window as it stands.
func tpmUsed(t *testing.T, l *budget.Ledger, id string) (tokens, money int64) {
	t.Helper()
	d, err := l.Windows(context.Background(), "t", budget.Scope{}, id)
	if err != nil {
		t.Fatal(err)
	}
	return d.TPM.Used, d.Spend[1].Used
}

// TestLateReservationReservesNothing: a reservation the gateway gave up
// on (its reserve timed out, the request got its answer) and released
// reaches the store after the release. It reserved its whole want until
// its lease ended; the release's tombstone makes it reserve nothing.
func TestLateReservationReservesNothing(t *testing.T) {
	t.Parallel()
	l, st, _ := outageLedger(t, &syncbuf.Buffer{})
	ctx := context.Background()
	st.set(func(o *outage) { o.hold = true })
	// The spend limit fails closed: the request is answered 503.
	if d, err := l.Reserve(ctx, "t", "slow", budget.Ask{PromptBound: 100, ClientCap: 900}); err == nil || !d.Degraded {
		t.Fatalf("reserve: %+v, %v", d, err)
	}
	if s := l.Stats(); s.Pending != 1 {
		t.Fatalf("the release is not kept: %+v", s)
	}
	st.set(func(o *outage) { o.hold = false })
	// The store answers again: the release is replayed, and finds nothing.
	if d, err := l.Reserve(ctx, "t", "next", budget.Ask{PromptBound: 10, ClientCap: 10}); err != nil || !d.Allowed {
		t.Fatalf("next reserve: %+v, %v", d, err)
	}
	waitFor(t, "the release is replayed", func() bool { return l.Stats().Replayed == 1 })
	d, err := st.late()
	if err != nil || d.Allowed || !d.Released || d.Granted != 0 {
		t.Fatalf("the late reservation: %+v, %v", d, err)
	}
	if tokens, _ := tpmUsed(t, l, "probe"); tokens != 20 {
		t.Fatalf("minute used %d, want only the next request's 20", tokens)
	}
}

// TestSettleAfterAnEmptyRestartIsCharged: the store restarts empty while
// a stream runs; its settle fails and is kept. The first reservation
// after the restart makes the tenant's counter again, so the replayed
// settle found a counter without its record and was dropped (logged at
// INFO). It carries its reservation's time, the counter is younger: it
// is charged, once.
func TestSettleAfterAnEmptyRestartIsCharged(t *testing.T) {
	t.Parallel()
	var logs syncbuf.Buffer
	l, st, clock, usage := keptSettle(t, "1", &logs)
	ctx := context.Background()
	st.wipe()
	st.set(func(o *outage) { o.down = false })
	clock.Advance(time.Second)
	if d, err := l.Reserve(ctx, "t", "2", budget.Ask{PromptBound: 10, ClientCap: 10}); err != nil || !d.Allowed {
		t.Fatalf("reserve after the restart: %+v, %v", d, err)
	}
	waitFor(t, "the settle is replayed", func() bool { return l.Stats().Replayed == 1 })
	tokens, money := tpmUsed(t, l, "probe")
	if tokens != 300+20 || money != 3000+1 {
		t.Fatalf("after the replay: minute used %d, day spent %d; want 320 and 3001 (the replayed usage and the next reservation)", tokens, money)
	}
	if !strings.Contains(logs.String(), "lost with the store's data") {
		t.Errorf("not logged: %s", logs.String())
	}
	// A settle of the same id again is charged nothing more.
	if s, err := l.SettleCharge(ctx, "t", "1", usage); err != nil || s.Found || s.Lost || s.Recreated {
		t.Fatalf("second settle: %+v, %v", s, err)
	}
	if tokens, _ := tpmUsed(t, l, "probe2"); tokens != 320 {
		t.Fatalf("after a second settle: minute used %d, want 320", tokens)
	}
}

// TestDrainAtShutdown: settles kept for replay are replayed within the
// grace when the store answers, and else logged, each, as a line an
// operator can reconcile; before, they went with the process.
func TestDrainAtShutdown(t *testing.T) {
	t.Parallel()
	for _, back := range []bool{true, false} {
		t.Run(map[bool]string{true: "store back", false: "store down"}[back], func(t *testing.T) {
			t.Parallel()
			var logs syncbuf.Buffer
			l, st, _, _ := keptSettle(t, "r1", &logs)
			ctx := context.Background()
			if back {
				st.set(func(o *outage) { o.down = false })
			}
			dctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			defer cancel()
			left := l.Drain(dctx)
			if s := l.Stats(); s.Pending != 0 {
				t.Errorf("pending after the drain: %+v", s)
			}
			if back {
				if left != 0 {
					t.Fatalf("%d left with the store back", left)
				}
				if tokens, money := tpmUsed(t, l, "probe"); tokens != 300 || money != 3000 {
					t.Fatalf("after the drain: %d tokens, %d money; want 300, 3000", tokens, money)
				}
				return
			}
			line := logs.String()
			if left != 1 || !strings.Contains(line, "reconcile") || !strings.Contains(line, "tenant=t request_id=r1 tokens=300 money_micros=3000") {
				t.Fatalf("%d left; logged: %s", left, line)
			}
		})
	}
}

// TestLostSettleChargedOverTheLimit: after an empty restart, the window
// the store made again is already over its limit (a backend that ignored
// the cap) when a stream's settle, whose record was lost, comes. Its
// charge went through a reservation of nothing, which a window over its
// limit refuses: the usage was lost again. It is charged whatever the
// window holds.
func TestLostSettleChargedOverTheLimit(t *testing.T) {
	t.Parallel()
	l, st, clock := outageLedger(t, &syncbuf.Buffer{})
	ctx := context.Background()
	d, err := l.Reserve(ctx, "t", "1", budget.Ask{PromptBound: 100, ClientCap: 900})
	if err != nil || !d.Allowed {
		t.Fatalf("reserve: %+v, %v", d, err)
	}
	st.wipe()
	clock.Advance(time.Second)
	if d, err := l.Reserve(ctx, "t", "2", budget.Ask{PromptBound: 10, ClientCap: 10}); err != nil || !d.Allowed {
		t.Fatalf("reserve after the restart: %+v, %v", d, err)
	}
	if _, err := l.SettleCharge(ctx, "t", "2", budget.Charge{Tokens: 150_000, Money: 1}); err != nil {
		t.Fatal(err)
	}
	s, err := l.SettleCharge(ctx, "t", "1", budget.Charge{Tokens: 300, Money: 3000, ReservedAt: d.ReservedAt})
	if err != nil || !s.Lost || !s.Recreated {
		t.Fatalf("the lost settle, the window over its limit: %+v, %v", s, err)
	}
	if tokens, money := tpmUsed(t, l, "probe"); tokens != 150_000+300 || money != 1+3000 {
		t.Fatalf("minute used %d, day spent %d; want 150,300 and 3,001", tokens, money)
	}
}
