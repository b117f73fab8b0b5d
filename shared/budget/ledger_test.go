package budget_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmgw/gateway/shared/budget"
	"github.com/llmgw/gateway/shared/budget/budgettest"
	"github.com/llmgw/gateway/shared/prompt"
	"github.com/llmgw/gateway/shared/request"
	"github.com/llmgw/gateway/shared/store"
)

func newLedger(t testing.TB, cfg budget.Config, tenants []budget.TenantBudget, store budget.Store) *budget.Ledger {
	t.Helper()
	l, err := budget.New(cfg, tenants, store)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	_, err := budget.New(budget.Config{Mode: "lenient", FailurePolicy: "maybe", Lease: -1, Timeout: -1, DefaultOutputTokens: -1},
		[]budget.TenantBudget{
			{Tenant: ""},
			{Tenant: "a", Limits: budget.Limits{TokenQuota: 10}},
			{Tenant: "a", Limits: budget.Limits{TokensPerMinute: -1, MaxOutputTokens: -2}},
			{Tenant: "b", Limits: budget.Limits{TokensPerMinute: 1 << 60}},
		}, nil)
	if err == nil {
		t.Fatal("New accepted an invalid config")
	}
	for _, want := range []string{`mode: must be strict or estimate, not "lenient"`, `failure_policy: must be open or closed, not "maybe"`, "lease", "timeout", "default_output_tokens",
		"tenants[0].id: required", "tenants[1].quota_period: required with token_quota", `tenants[2].id: duplicate tenant "a"`,
		"tenants[2].tokens_per_minute: must not be negative, got -1", "tenants[2].max_output_tokens: must not be negative, got -2", "tenants[3].tokens_per_minute: must be at most"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
	if _, err := budget.New(budget.Config{Lease: 1500 * time.Nanosecond}, nil, nil); err == nil || !strings.Contains(err.Error(), "microseconds") {
		t.Errorf("sub-microsecond lease: %v", err)
	}
	if _, err := budget.New(budget.Config{}, nil, nil); err != nil {
		t.Errorf("zero config: %v", err)
	}
}

// TestLedgerStrict walks the request path: reserve (with the cap to write),
// refuse, settle, reserve again.
func TestLedgerStrict(t *testing.T) {
	t.Parallel()
	clock := budgettest.NewClock(budgettest.Base)
	l := newLedger(t, budget.Config{}, []budget.TenantBudget{
		{Tenant: "tpm", Limits: budget.Limits{TokensPerMinute: 1000}},
		{Tenant: "capped", Limits: budget.Limits{TokenQuota: 10000, QuotaPeriod: budget.PeriodMonth, MaxOutputTokens: 50}},
		{Tenant: "caponly", Limits: budget.Limits{MaxOutputTokens: 50}},
	}, budget.NewMemory(clock.Now))
	ctx := context.Background()
	type want struct {
		allowed   bool
		granted   int64
		cap       int64
		rewrite   bool
		refused   budget.Limit
		requested int64
	}
	check := func(step string, d budget.Decision, err error, w want) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		if d.Allowed != w.allowed || d.Granted != w.granted || d.OutputCap != w.cap || d.RewriteCap != w.rewrite || d.RefusedBy != w.refused ||
			(w.requested != 0 && d.Requested != w.requested) {
			t.Fatalf("%s: %+v, want %+v", step, d, w)
		}
	}

	// No client cap: the default output (4096) is wanted; 1000 is left, so
	// the grant is 1000 and the cap written is 1000-100.
	d, err := l.Reserve(ctx, "tpm", "r1", budget.Ask{PromptBound: 100})
	check("first", d, err, want{allowed: true, granted: 1000, cap: 900, rewrite: true})
	d, err = l.Reserve(ctx, "tpm", "r2", budget.Ask{PromptBound: 100})
	check("exhausted", d, err, want{refused: budget.LimitTPM, requested: 101})
	if d.RefusedBy.Code() != "rate_limit_exceeded" || !d.Refusal().Reset.Equal(budgettest.Base.Truncate(time.Minute).Add(time.Minute)) {
		t.Fatalf("refusal %+v", d)
	}
	if s, err := l.Settle(ctx, "tpm", "r1", 300); err != nil || s.Refunded != 700 {
		t.Fatalf("settle %+v, %v", s, err)
	}
	// A client cap below what is left is kept as sent.
	d, err = l.Reserve(ctx, "tpm", "r3", budget.Ask{PromptBound: 100, ClientCap: 200})
	check("client cap", d, err, want{allowed: true, granted: 300, cap: 200})
	// n=3: each choice gets (granted-bound)/3.
	d, err = l.Reserve(ctx, "tpm", "r4", budget.Ask{PromptBound: 100, ClientCap: 500, Choices: 3})
	check("n=3", d, err, want{allowed: true, granted: 400, cap: 100, rewrite: true})
	// Less than bound + one token left per choice: refused.
	d, err = l.Reserve(ctx, "tpm", "r5", budget.Ask{PromptBound: 100, Choices: 3})
	check("min per choice", d, err, want{refused: budget.LimitTPM, requested: 103})
	if s, err := l.Keep(ctx, "tpm", "r4"); err != nil || s.Actual != 400 {
		t.Fatalf("keep %+v, %v", s, err)
	}
	// A per-request minimum output (the Responses API's 16): with 300
	// left, refused below bound + 16, granted from bound + 16 up.
	if _, err := l.Settle(ctx, "tpm", "r3", 0); err != nil {
		t.Fatal(err)
	}
	d, err = l.Reserve(ctx, "tpm", "r6", budget.Ask{PromptBound: 290, MinOutput: 16})
	check("min output refused", d, err, want{refused: budget.LimitTPM, requested: 306})
	d, err = l.Reserve(ctx, "tpm", "r7", budget.Ask{PromptBound: 280, MinOutput: 16})
	check("min output granted", d, err, want{allowed: true, granted: 300, cap: 20, rewrite: true})
	// ...but never above what the client itself asked for.
	if _, err := l.Settle(ctx, "tpm", "r7", 0); err != nil {
		t.Fatal(err)
	}
	d, err = l.Reserve(ctx, "tpm", "r8", budget.Ask{PromptBound: 280, MinOutput: 16, ClientCap: 8})
	check("client cap below min output", d, err, want{allowed: true, granted: 288, cap: 8})

	// The tenant's cap wins over the client's and the default.
	d, err = l.Reserve(ctx, "capped", "c1", budget.Ask{PromptBound: 10, ClientCap: 4000})
	check("tenant cap", d, err, want{allowed: true, granted: 60, cap: 50, rewrite: true})
	// Embeddings reserve the prompt bound only, and write no cap.
	d, err = l.Reserve(ctx, "capped", "c2", budget.Ask{PromptBound: 40, NoOutput: true})
	check("embeddings", d, err, want{allowed: true, granted: 40})
	// No token limits: no store, but the tenant's cap still applies.
	d, err = l.Reserve(ctx, "caponly", "x", budget.Ask{PromptBound: 10})
	check("cap only", d, err, want{allowed: true, cap: 50, rewrite: true})
	d, err = l.Reserve(ctx, "stranger", "x", budget.Ask{PromptBound: 10, ClientCap: 7})
	check("no budget", d, err, want{allowed: true, cap: 7})
	if s, err := l.Settle(ctx, "stranger", "x", 10); err != nil || s.Found {
		t.Fatalf("settle without a budget: %+v, %v", s, err)
	}
}

func TestLedgerEstimate(t *testing.T) {
	t.Parallel()
	clock := budgettest.NewClock(budgettest.Base)
	l := newLedger(t, budget.Config{Mode: budget.ModeEstimate}, []budget.TenantBudget{
		{Tenant: "a", Limits: budget.Limits{TokenQuota: 1000, QuotaPeriod: budget.PeriodDay, MaxOutputTokens: 300}},
	}, budget.NewMemory(clock.Now))
	ctx := context.Background()
	// No reservation, and no cap of the budget's: only the tenant's.
	d, err := l.Reserve(ctx, "a", "1", budget.Ask{PromptBound: 5000, ClientCap: 100})
	if err != nil || !d.Allowed || d.Granted != 0 || d.OutputCap != 100 || d.RewriteCap {
		t.Fatalf("%+v, %v", d, err)
	}
	d, err = l.Reserve(ctx, "a", "2", budget.Ask{PromptBound: 5000})
	if err != nil || !d.Allowed || d.OutputCap != 300 || !d.RewriteCap {
		t.Fatalf("%+v, %v", d, err)
	}
	// Both in flight were admitted; their usage overshoots the quota.
	for _, id := range []string{"1", "2"} {
		if s, err := l.Settle(ctx, "a", id, 700); err != nil || s.Overrun != 700 {
			t.Fatalf("%+v, %v", s, err)
		}
	}
	d, err = l.Reserve(ctx, "a", "3", budget.Ask{PromptBound: 1})
	if err != nil || d.Allowed || d.RefusedBy != budget.LimitQuota || d.Quota.Used != 1400 {
		t.Fatalf("over: %+v, %v", d, err)
	}
}

// failing is a remote store that fails every call, and records whether a
// call's context was already cancelled.
type failing struct {
	calls, cancelled atomic.Int64
	block            bool
}

var errDown = errors.New("connection refused")

func (f *failing) Reserve(ctx context.Context, _, _ string, _ budget.Request) (budget.Decision, error) {
	return budget.Decision{}, f.fail(ctx)
}

func (f *failing) Settle(ctx context.Context, _, _ string, _ budget.Charge) (budget.Settlement, error) {
	return budget.Settlement{}, f.fail(ctx)
}

func (f *failing) fail(ctx context.Context) error {
	f.calls.Add(1)
	if ctx.Err() != nil {
		f.cancelled.Add(1)
		return ctx.Err()
	}
	if f.block {
		<-ctx.Done()
		return ctx.Err()
	}
	return errDown
}

func TestLedgerFailurePolicy(t *testing.T) {
	t.Parallel()
	tenants := []budget.TenantBudget{
		{Tenant: "tpm", Limits: budget.Limits{TokensPerMinute: 1000}},
		{Tenant: "quota", Limits: budget.Limits{TokenQuota: 1000, QuotaPeriod: budget.PeriodDay}},
	}
	ask := budget.Ask{PromptBound: 10} // no client cap: the default output is written
	for _, tc := range []struct {
		name          string
		policy        string
		block         bool
		tenant        string
		allowed       bool
		wantErr       error
		wantOutputCap int64
	}{
		{"open: allowed, capped at the default", budget.PolicyOpen, false, "tpm", true, nil, 4096},
		{"open, timeout: allowed", budget.PolicyOpen, true, "tpm", true, nil, 4096},
		{"closed: unavailable", budget.PolicyClosed, false, "tpm", false, budget.ErrUnavailable, 0},
		{"quota fails closed under open", budget.PolicyOpen, false, "quota", false, budget.ErrUnavailable, 0},
		{"quota fails closed on timeout", budget.PolicyOpen, true, "quota", false, budget.ErrUnavailable, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st := &failing{block: tc.block}
			l := newLedger(t, budget.Config{FailurePolicy: tc.policy, Timeout: 20 * time.Millisecond, DialTimeout: 20 * time.Millisecond}, tenants, st)
			start := time.Now()
			d, err := l.Reserve(context.Background(), tc.tenant, "1", ask)
			if took := time.Since(start); took > time.Second {
				t.Errorf("took %s", took)
			}
			if !errors.Is(err, tc.wantErr) || d.Allowed != tc.allowed || !d.Degraded || d.OutputCap != tc.wantOutputCap {
				t.Fatalf("%+v, %v", d, err)
			}
			if s := l.Stats(); s.Degraded != 1 || s.StoreErrors != 1 {
				t.Errorf("stats %+v", s)
			}
		})
	}

	t.Run("caller gone is not a store failure", func(t *testing.T) {
		t.Parallel()
		l := newLedger(t, budget.Config{}, tenants, &failing{block: true})
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		d, err := l.Reserve(ctx, "tpm", "1", ask)
		if !errors.Is(err, context.Canceled) || d.Allowed || d.Degraded {
			t.Fatalf("%+v, %v", d, err)
		}
		if s := l.Stats(); s.Degraded != 0 {
			t.Errorf("stats %+v", s)
		}
	})

	t.Run("settle outlives the caller's context", func(t *testing.T) {
		t.Parallel()
		st := &failing{}
		l := newLedger(t, budget.Config{}, tenants, st)
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // the client hung up; the usage must still be settled
		if _, err := l.Settle(ctx, "tpm", "1", 5); !errors.Is(err, budget.ErrUnavailable) || !errors.Is(err, errDown) {
			t.Fatalf("settle: %v", err)
		}
		if st.cancelled.Load() != 0 {
			t.Error("the store saw the caller's cancellation")
		}
	})
}

// TestLedgerBreaker: a remote store that keeps failing is skipped after
// the breaker's threshold, so the policy applies at once (the limiter's
// breaker); a reservation the breaker refused is no store error.
func TestLedgerBreaker(t *testing.T) {
	t.Parallel()
	tenants := []budget.TenantBudget{{Tenant: "quota", Limits: budget.Limits{TokenQuota: 1000, QuotaPeriod: budget.PeriodDay}}}
	st := &failing{}
	l := newLedger(t, budget.Config{BreakerThreshold: 3, BreakerCooldown: time.Hour}, tenants, st)
	for i := range 10 {
		if _, err := l.Reserve(context.Background(), "quota", strconv.Itoa(i), budget.Ask{PromptBound: 10}); !errors.Is(err, budget.ErrUnavailable) {
			t.Fatalf("reserve %d: %v, want ErrUnavailable", i, err)
		}
	}
	if _, err := l.Settle(context.Background(), "quota", "1", 5); !errors.Is(err, budget.ErrUnavailable) {
		t.Fatalf("settle: %v", err)
	}
	if n := st.calls.Load(); n != 3 {
		t.Errorf("the store was called %d times, want 3 (the threshold)", n)
	}
	if s := l.Stats(); s.StoreErrors != 3 || s.Degraded != 10 || s.BreakerOpens != 1 || s.Breaker != store.BreakerOpen {
		t.Errorf("stats %+v", s)
	}
}

// TestStrictUsesBudget: 40 concurrent streams of realistic requests drain a
// strict quota. The budget is never exceeded, and at least 90% of it is
// used: the prompt bound's slack is refunded at each settle and re-granted.
func TestStrictUsesBudget(t *testing.T) {
	t.Parallel()
	type req struct {
		body   []byte
		prompt int64 // true prompt tokens (package prompt's fixtures)
	}
	var reqs []req
	for _, fx := range []struct {
		file   string
		tokens int64
	}{{"short_chat.json", 25}, {"cookbook.json", 129}, {"long_english.json", 175}, {"multi_turn.json", 137},
		{"code_escapes.json", 72}, {"tools.json", 94}, {"chinese.json", 45}, {"escaped_unicode.json", 40}, {"emoji.json", 113}} {
		b, err := os.ReadFile(filepath.Join("..", "prompt", "testdata", fx.file))
		if err != nil {
			t.Fatal(err)
		}
		reqs = append(reqs, req{b, fx.tokens})
	}
	for _, tc := range []struct {
		name   string
		limits budget.Limits
	}{
		{"quota", budget.Limits{TokenQuota: 200_000, QuotaPeriod: budget.PeriodDay}},
		{"tokens per minute", budget.Limits{TokensPerMinute: 200_000}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clock := budgettest.NewClock(budgettest.Base)
			l := newLedger(t, budget.Config{DefaultOutputTokens: 512}, []budget.TenantBudget{{Tenant: "t", Limits: tc.limits}}, budget.NewMemory(clock.Now))
			ctx := context.Background()
			limit := max(tc.limits.TokenQuota, tc.limits.TokensPerMinute)
			var used, inflight, seq atomic.Int64
			var wg sync.WaitGroup
			for w := range 40 {
				wg.Go(func() {
					for i := 0; ; i++ {
						r := reqs[(w+i)%len(reqs)]
						id := fmt.Sprint(seq.Add(1))
						ask := budget.Ask{PromptBound: prompt.Scanner{}.Bound(r.body, request.ChatCompletions.Prompt()).Tokens}
						inflight.Add(1)
						d, err := l.Reserve(ctx, "t", id, ask)
						if err != nil {
							t.Error(err)
							return
						}
						if !d.Allowed {
							if inflight.Add(-1) == 0 {
								return // nothing in flight will refund: drained
							}
							runtime.Gosched()
							continue
						}
						if w := d.TPM.Used + d.Quota.Used; w > limit {
							t.Errorf("window over the limit: %+v", d)
						}
						// The backend honours the cap; its natural answer is
						// 100 to 600 tokens.
						natural := int64(100 + (w*37+i*11)%500)
						actual := r.prompt + min(natural, d.OutputCap*max(ask.Choices, 1))
						runtime.Gosched() // the stream
						s, err := l.Settle(ctx, "t", id, actual)
						if err != nil || s.Overrun != 0 {
							t.Errorf("settle %+v, %v", s, err)
						}
						used.Add(actual)
						inflight.Add(-1)
					}
				})
			}
			wg.Wait()
			frac := float64(used.Load()) / float64(limit)
			t.Logf("used %d of %d (%.1f%%); %+v", used.Load(), limit, 100*frac, l.Stats())
			if used.Load() > limit || frac < 0.9 {
				t.Errorf("used %.1f%% of the budget, want 90%% to 100%%", 100*frac)
			}
		})
	}
}

// wipeable is a store whose data can be lost between calls, as a
// memory store's is when its process restarts.
type wipeable struct {
	budget.Store
	now func() time.Time
}

func (w *wipeable) wipe() { w.Store = budget.NewMemory(w.now) }

// TestSettleRecreatesCounter: a settle that finds neither its
// reservation nor the tenant's counter (the store lost its data) is
// charged to a recreated counter and logged; before, it charged 0.
func TestSettleRecreatesCounter(t *testing.T) {
	t.Parallel()
	clock := budgettest.NewClock(budgettest.Base)
	st := &wipeable{now: clock.Now}
	st.wipe()
	var logs strings.Builder
	lim := budget.Limits{TokensPerMinute: 10_000, TokenQuota: 100_000, QuotaPeriod: budget.PeriodDay}
	l := newLedger(t, budget.Config{Log: slog.New(slog.NewTextHandler(&logs, nil))}, []budget.TenantBudget{{Tenant: "t", Limits: lim}}, st)
	ctx := context.Background()
	if d, err := l.Reserve(ctx, "t", "1", budget.Ask{PromptBound: 100, ClientCap: 400}); err != nil || !d.Allowed {
		t.Fatalf("reserve: %+v, %v", d, err)
	}
	st.wipe()
	s, err := l.Settle(ctx, "t", "1", 300)
	if err != nil || !s.NoCounter || !s.Recreated || s.Actual != 300 {
		t.Fatalf("settle: %+v, %v", s, err)
	}
	if !strings.Contains(logs.String(), "found no counter") {
		t.Errorf("not logged: %s", logs.String())
	}
	d, err := l.Reserve(ctx, "t", "2", budget.Ask{PromptBound: 10, ClientCap: 10})
	if err != nil || d.TPM.Used != 320 || d.Quota.Used != 320 {
		t.Fatalf("after: %+v, %v", d, err)
	}
	// With the counter there, an unknown id is the no-op it was.
	if s, err := l.Settle(ctx, "t", "nope", 50); err != nil || s.Found || s.NoCounter || s.Recreated {
		t.Fatalf("unknown id: %+v, %v", s, err)
	}
}
