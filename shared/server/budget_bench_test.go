package server

import (
	"context"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/llmgw/gateway/internal/testing/redistest"
	"github.com/llmgw/gateway/shared/billing"
	"github.com/llmgw/gateway/shared/budget"
	"github.com/llmgw/gateway/shared/request"
	"github.com/llmgw/gateway/shared/sse"
	"github.com/llmgw/gateway/shared/tenant"
)

// BenchmarkBudgetStep is the time a token budget adds to one request: the
// prompt bound's byte scan of a realistic 1.2 KB chat body, the
// reservation, the token headers, and the settle, on each store ("none":
// a tenant without a budget, one lookup; with no tenant budgets at all,
// Deps.Budgets is nil and the step is one nil check). The output cap's
// splice is in the body rewrite every request pays anyway.
func BenchmarkBudgetStep(b *testing.B) {
	raw := []byte(`{"model":"m","stream":true,"messages":[{"role":"system","content":"You are a helpful assistant. Answer briefly and cite sources."},` +
		`{"role":"user","content":"` + strings.Repeat("Summarise the history of token buckets in rate limiting. ", 18) + `"}],"temperature":0.7}`)
	body, err := request.ParseBody(raw)
	if err != nil {
		b.Fatal(err)
	}
	limits := budget.Limits{TokensPerMinute: 1 << 50, TokenQuota: 1 << 50, QuotaPeriod: budget.PeriodMonth}
	// spend adds the three spend limits: priced by the catalogue,
	// reserved and settled in the same store operation.
	spend := limits
	spend.SpendPerMinute, spend.SpendPerDay, spend.SpendPerMonth = 1<<50, 1<<50, 1<<50
	// levels adds a project and a user below the tenant, each with the
	// spend limits: three accounts in the one reserve and the one
	// settle.
	levels := spend
	levels.Levels = &budget.LevelLimits{Projects: map[string]budget.Limits{"p": spend}, UserDefault: spend}
	var trips atomic.Int64 // the Redis commands sent: one round trip each
	// "auto" for a tenant of the standard tier.
	std, _ := billing.CheckTier(&tenant.Tenant{}, "")
	redisStore := func(b *testing.B) budget.Store {
		srv := redistest.Start(b)
		s, c := redisBudgetStore(b, srv.URL(), time.Second)
		if err := s.Warm(context.Background()); err != nil {
			b.Fatal(err)
		}
		c.AddHook(countTrips{&trips})
		return s
	}
	stores := []struct {
		name  string
		store func(b *testing.B) budget.Store
		lim   budget.Limits
	}{
		{"none", func(*testing.B) budget.Store { return nil }, budget.Limits{}},
		{"memory", func(*testing.B) budget.Store { return budget.NewMemory(nil) }, limits},
		{"memory+spend", func(*testing.B) budget.Store { return budget.NewMemory(nil) }, spend},
		{"redis", redisStore, limits},
		{"redis+spend", redisStore, spend},
		{"memory+levels", func(*testing.B) budget.Store { return budget.NewMemory(nil) }, levels},
		{"redis+levels", redisStore, levels},
	}
	for _, st := range stores {
		b.Run(st.name, func(b *testing.B) {
			var tenants []budget.TenantBudget
			if st.lim.Enforced() {
				tenants = append(tenants, budget.TenantBudget{Tenant: "t1", Limits: st.lim})
			}
			l, err := budget.New(budget.Config{}, tenants, st.store(b))
			if err != nil {
				b.Fatal(err)
			}
			s := New(Deps{Budgets: l, Prices: tieredPrices(b)})
			trips.Store(0)
			b.Cleanup(func() { b.ReportMetric(float64(trips.Load())/float64(max(b.N, 1)), "roundtrips/op") })
			w := httptest.NewRecorder()
			ctx := context.Background()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				ex := &exchange{logEntry: logEntry{id: strconv.Itoa(i)}, bill: billing.Request{Tier: std, Scope: budget.Scope{Project: "p", User: strconv.Itoa(i % 50)}}}
				if err := s.reserveBudget(ctx, w, ex, nil, nil, "t1", request.ChatCompletions, &body, raw); err != nil {
					b.Fatalf("refused: %v", err)
				}
				ex.SetUsage(sseUsage(300, 120), true)
				ex.UsageFinal = true // the answer's bill
				s.settleBudget(w, ex)
				if st.lim.Enforced() && ex.budget.Charged != 420 {
					b.Fatalf("charged %d", ex.budget.Charged)
				}
			}
		})
	}
}

// countTrips counts the commands a Redis client sends.
type countTrips struct{ n *atomic.Int64 }

func (countTrips) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c countTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}
func (c countTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmds)
	}
}

func sseUsage(prompt, completion int64) sse.Usage {
	return sse.Usage{PromptTokens: prompt, CompletionTokens: completion, TotalTokens: prompt + completion}
}
