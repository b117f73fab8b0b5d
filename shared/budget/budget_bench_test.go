package budget_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/llmgw/gateway/shared/budget"
)

// BenchmarkMemoryReserveSettle is one request's budget cost on the memory
// store: a Reserve and its Settle, with token limits only and with spend
// limits beside them (the money is the same operation).
func BenchmarkMemoryReserveSettle(b *testing.B) {
	for _, c := range benchKinds() {
		b.Run(c.name, func(b *testing.B) {
			s := budget.NewMemory(nil)
			ctx := context.Background()
			ids := make([]string, 1024)
			for i := range ids {
				ids[i] = "req-" + strconv.Itoa(i)
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				id := ids[i%len(ids)]
				i++
				if d, err := s.Reserve(ctx, "t", id, c.req); err != nil || !d.Allowed {
					b.Fatalf("%+v, %v", d, err)
				}
				if _, err := s.Settle(ctx, "t", id, c.charge); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

type benchKind struct {
	name   string
	req    budget.Request
	charge budget.Charge
}

// benchKinds are a tokens-only reservation and one with spend limits.
func benchKinds() []benchKind {
	tokens := budget.Request{
		Limits: budget.Limits{TokensPerMinute: 1 << 50, TokenQuota: 1 << 50, QuotaPeriod: budget.PeriodMonth},
		Min:    100, Want: 4196, Lease: 15 * time.Minute,
	}
	spend := tokens
	spend.Limits.SpendPerMinute, spend.Limits.SpendPerDay, spend.Limits.SpendPerMonth = 1<<50, 1<<50, 1<<50
	spend.MoneyMin, spend.MoneyWant = 1000, 42000
	return []benchKind{
		{"tokens", tokens, budget.Charge{Tokens: 300, Money: budget.KeepReserved}},
		{"tokens+spend", spend, budget.Charge{Tokens: 300, Money: 3000}},
	}
}

// BenchmarkLedgerReserveSettle adds the Ledger's arithmetic on top.
func BenchmarkLedgerReserveSettle(b *testing.B) {
	l, err := budget.New(budget.Config{}, []budget.TenantBudget{
		{Tenant: "t", Limits: budget.Limits{TokensPerMinute: 1 << 50, TokenQuota: 1 << 50, QuotaPeriod: budget.PeriodDay}},
	}, nil)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	ask := budget.Ask{PromptBound: 120, ClientCap: 256}
	b.ReportAllocs()
	for b.Loop() {
		if d, err := l.Reserve(ctx, "t", "req", ask); err != nil || !d.Allowed {
			b.Fatalf("%+v, %v", d, err)
		}
		if _, err := l.Settle(ctx, "t", "req", 300); err != nil {
			b.Fatal(err)
		}
	}
}
