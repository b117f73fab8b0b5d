package server

import (
	"context"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/gateway/scripts/redistest"
	"github.com/llmgw/gateway/shared/budget"
	"github.com/llmgw/gateway/shared/budget/redisbudget"
	"github.com/llmgw/gateway/shared/request"
	"github.com/llmgw/gateway/shared/sse"
	"github.com/llmgw/gateway/shared/store"
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
	stores := []struct {
		name  string
		store func(b *testing.B) budget.Store
		lim   budget.Limits
	}{
		{"none", func(*testing.B) budget.Store { return nil }, budget.Limits{}},
		{"memory", func(*testing.B) budget.Store { return budget.NewMemory(nil) }, limits},
		{"redis", func(b *testing.B) budget.Store {
			srv := redistest.Start(b)
			c, err := store.NewClient(store.ClientOptions{URL: srv.URL(), Timeout: time.Second})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = c.Close() })
			s, err := redisbudget.New(c, redisbudget.Config{})
			if err != nil {
				b.Fatal(err)
			}
			if err := s.Warm(context.Background()); err != nil {
				b.Fatal(err)
			}
			return s
		}, limits},
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
			s := New(Deps{Budgets: l})
			w := httptest.NewRecorder()
			ctx := context.Background()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				rec := &exchange{logEntry: logEntry{id: strconv.Itoa(i)}}
				if err := s.reserveBudget(ctx, w, rec, nil, nil, "t1", request.ChatCompletions, &body, raw); err != nil {
					b.Fatalf("refused: %v", err)
				}
				rec.setUsage(sseUsage(300, 120), true)
				s.settleBudget(w, rec)
				if st.lim.Enforced() && rec.budget.charged != 420 {
					b.Fatalf("charged %d", rec.budget.charged)
				}
			}
		})
	}
}

func sseUsage(prompt, completion int64) sse.Usage {
	return sse.Usage{PromptTokens: prompt, CompletionTokens: completion, TotalTokens: prompt + completion}
}
