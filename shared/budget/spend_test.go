package budget_test

import (
	"context"
	"testing"

	"github.com/llmgw/gateway/shared/budget"
	"github.com/llmgw/gateway/shared/budget/budgettest"
	"github.com/llmgw/gateway/shared/price"
	"github.com/llmgw/gateway/shared/problem"
)

// model prices 2.00 per million input tokens and 10.00 per million output
// tokens (2 and 10 micro-units a token), priority at twice that.
func model(t *testing.T) *price.Model {
	t.Helper()
	var p []string
	c := price.New(price.Spec{Currency: "USD", Version: "t", Models: []price.ModelSpec{{Model: "m",
		RateSpec: price.RateSpec{Input: "2", Output: "10"}, Tiers: []price.TierSpec{{Name: "priority", Multiplier: "2"}}}}},
		nil, problem.Into(&p, "prices"))
	if len(p) > 0 {
		t.Fatal(p)
	}
	m, _ := c.Model("m")
	return m
}

// TestLedgerSpend: the worst case in money is reserved with the tokens,
// at the dearest tier the request may be served at; when less is left, the
// output cap written is what the money left affords; the settle charges
// both dimensions; a refusal names the spend limit.
func TestLedgerSpend(t *testing.T) {
	t.Parallel()
	clock := budgettest.NewClock(budgettest.Base)
	lim := budget.Limits{TokensPerMinute: 1 << 40, SpendPerMonth: 100_000} // 0.10
	l := newLedger(t, budget.Config{DefaultOutputTokens: 4000}, []budget.TenantBudget{{Tenant: "a", Limits: lim}}, budget.NewMemory(clock.Now))
	ctx := context.Background()
	m := model(t)
	std := price.Tiers(0).OrStandard()

	// 1000 prompt tokens + 4000 output at standard: 2,000 + 40,000.
	d, err := l.Reserve(ctx, "a", "1", budget.Ask{PromptBound: 1000, Spend: budget.Spend{Model: m, Tiers: std}})
	if err != nil || !d.Allowed || d.MoneyGranted != 42_000 || d.OutputCap != 4000 {
		t.Fatalf("first: %+v, %v", d, err)
	}
	// At priority (auto with priority permitted): twice that, 84,000,
	// and 58,000 left: the cap is what 58,000 affords at priority,
	// (58,000 - 4,000) / 20 = 2,700.
	both := std.With(price.TierPriority)
	d, err = l.Reserve(ctx, "a", "2", budget.Ask{PromptBound: 1000, Spend: budget.Spend{Model: m, Tiers: both}})
	if err != nil || !d.Allowed || d.MoneyGranted != 58_000 || d.OutputCap != 2700 {
		t.Fatalf("second: %+v, %v", d, err)
	}
	// Nothing left: refused by the month's spend, naming what it needs.
	d, err = l.Reserve(ctx, "a", "3", budget.Ask{PromptBound: 10, Spend: budget.Spend{Model: m, Tiers: std}})
	if err != nil || d.Allowed || d.RefusedBy != budget.LimitSpendMonth || d.Requests() != 30 || d.Refusal().Remaining != 0 {
		t.Fatalf("third: %+v, %v", d, err)
	}
	// Settles: the first cost 12,000, the second is kept whole.
	if s, err := l.SettleCharge(ctx, "a", "1", budget.Charge{Tokens: 2000, Money: 12_000}); err != nil || s.MoneyReserved != 42_000 || s.MoneyActual != 12_000 {
		t.Fatalf("settle: %+v, %v", s, err)
	}
	if s, err := l.Keep(ctx, "a", "2"); err != nil || s.MoneyActual != 58_000 {
		t.Fatalf("keep: %+v, %v", s, err)
	}
	d, err = l.Reserve(ctx, "a", "4", budget.Ask{PromptBound: 10, ClientCap: 100, Spend: budget.Spend{Model: m, Tiers: std, Fixed: 5000}})
	if err != nil || !d.Allowed || d.MoneyGranted != 20+1000+5000 || d.Spend[2].Used != 70_000+6020 {
		t.Fatalf("fourth: %+v, %v", d, err)
	}
}

// TestLedgerSpendEstimate: estimate mode reserves no money and refuses
// only a tenant with nothing left.
func TestLedgerSpendEstimate(t *testing.T) {
	t.Parallel()
	lim := budget.Limits{SpendPerDay: 1000}
	l := newLedger(t, budget.Config{Mode: budget.ModeEstimate}, []budget.TenantBudget{{Tenant: "a", Limits: lim}}, nil)
	ctx := context.Background()
	d, err := l.Reserve(ctx, "a", "1", budget.Ask{PromptBound: 1000, Spend: budget.Spend{Model: model(t), Tiers: 1}})
	if err != nil || !d.Allowed || d.MoneyGranted != 0 {
		t.Fatalf("reserve: %+v, %v", d, err)
	}
	if _, err := l.SettleCharge(ctx, "a", "1", budget.Charge{Tokens: 5000, Money: 1200}); err != nil {
		t.Fatal(err)
	}
	if d, _ := l.Reserve(ctx, "a", "2", budget.Ask{}); d.Allowed || d.RefusedBy != budget.LimitSpendDay || d.Spend[1].Used != 1200 {
		t.Fatalf("over: %+v", d)
	}
}
