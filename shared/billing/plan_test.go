package billing

import (
	"testing"

	"github.com/llmgw/gateway/shared/budget"
	"github.com/llmgw/gateway/shared/price"
	"github.com/llmgw/gateway/shared/prompt"
	"github.com/llmgw/gateway/shared/request"
)

// TestPlan: what a request asks of its tenant's budget, rule by rule.
func TestPlan(t *testing.T) {
	cat := prices(t)
	tokens := budget.Limits{TokensPerMinute: 1 << 40}
	capped := budget.Limits{TokensPerMinute: 1 << 40, MaxOutputTokens: 1500}
	spends := budget.Limits{TokensPerMinute: 1 << 40, SpendPerDay: 1 << 40}
	capOnly := budget.Limits{MaxOutputTokens: 1500} // enforces no limit
	standard, _ := CheckTier(tenants().Lookup("searcher"), "")
	priority, _ := CheckTier(tenants().Lookup("searcher"), "priority")
	searches, err := Features(tenants().Lookup("searcher"), request.Messages, search("4"), func() bool { return true }, cat)
	if err != nil {
		t.Fatal(err)
	}
	const chat = `{"model":"m","max_tokens":100,"n":3,"messages":[{"role":"user","content":"hello there"}]}`
	const thinking = `{"model":"m","max_tokens":4000,"thinking":{"type":"enabled","budget_tokens":2000},"messages":[{"role":"user","content":"hi"}]}`
	const thinkingOver = `{"model":"m","max_tokens":4000,"thinking":{"type":"enabled","budget_tokens":1000},"messages":[{"role":"user","content":"hi"}]}`
	const batch = `{"model":"m","max_tokens":10,"n":2,"prompt":["a","b","c"]}`
	bound := func(op request.Operation, raw string) int64 {
		return prompt.Scanner{}.Bound([]byte(raw), op.Prompt()).Tokens
	}
	for _, c := range []struct {
		name string
		op   request.Operation
		raw  string
		lim  budget.Limits
		// edit sets the request's other inputs.
		edit func(q *Request)
		want budget.Ask
		// code is the refusal's ("" for none).
		code string
	}{
		{"cap and choices", request.ChatCompletions, chat, tokens, nil,
			budget.Ask{PromptBound: bound(request.ChatCompletions, chat), Choices: 3, ClientCap: 100}, ""},
		{"no limit enforced: no prompt bound", request.ChatCompletions, chat, capOnly, nil,
			budget.Ask{Choices: 3, ClientCap: 100}, ""},
		{"each prompt of a batch gets its choices", request.Completions, batch, tokens, nil,
			budget.Ask{PromptBound: bound(request.Completions, batch), Choices: 6, ClientCap: 10}, ""},
		{"the Responses API's least cap", request.Responses, `{"model":"m","input":"hi"}`, tokens, nil,
			budget.Ask{PromptBound: bound(request.Responses, `{"model":"m","input":"hi"}`), Choices: 1, MinOutput: 16}, ""},
		{"a background response is held", request.Responses, `{"model":"m","input":"hi","background":true}`, tokens, nil,
			budget.Ask{PromptBound: bound(request.Responses, `{"model":"m","input":"hi","background":true}`), Choices: 1, MinOutput: 16, Hold: true}, ""},
		{"embeddings generate nothing", request.Embeddings, `{"model":"m","input":"hi"}`, tokens, nil,
			budget.Ask{PromptBound: bound(request.Embeddings, `{"model":"m","input":"hi"}`), Choices: 1, NoOutput: true}, ""},
		{"a thinking budget's least output", request.Messages, thinking, tokens, nil,
			budget.Ask{PromptBound: bound(request.Messages, thinking), Choices: 1, ClientCap: 4000, MinOutput: 2001}, ""},
		{"a thinking budget at the tenant's cap", request.Messages, thinking, budget.Limits{TokensPerMinute: 1 << 40, MaxOutputTokens: 2000}, nil,
			budget.Ask{}, "thinking_budget_over_cap"},
		{"a thinking budget below the tenant's cap", request.Messages, thinkingOver, capped, nil,
			budget.Ask{PromptBound: bound(request.Messages, thinkingOver), Choices: 1, ClientCap: 4000, MinOutput: 1001}, ""},
		{"features' priced uses are prompt tokens", request.Messages, string(search("4")), tokens, func(q *Request) { q.Features = searches },
			budget.Ask{PromptBound: bound(request.Messages, string(search("4"))) + 400, Choices: 1, ClientCap: 16, Unbounded: true}, ""},
		{"a continued response's stored tokens", request.Responses, `{"model":"m","input":"hi"}`, tokens, func(q *Request) { q.PreviousTokens = 5000 },
			budget.Ask{PromptBound: bound(request.Responses, `{"model":"m","input":"hi"}`) + 5000, Choices: 1, MinOutput: 16}, ""},
		{"the scope it is charged to", request.ChatCompletions, chat, tokens, func(q *Request) { q.Scope = budget.Scope{Project: "p", User: "u"} },
			budget.Ask{PromptBound: bound(request.ChatCompletions, chat), Choices: 3, ClientCap: 100, Scope: budget.Scope{Project: "p", User: "u"}}, ""},
		{"spend: priced at the tiers it may be served at, features' money", request.Messages, string(search("4")), spends,
			func(q *Request) { q.Features, q.Tier = searches, priority },
			budget.Ask{PromptBound: bound(request.Messages, string(search("4"))) + 400, Choices: 1, ClientCap: 16, Unbounded: true,
				Spend: budget.Spend{Model: mustModel(t, cat), Tiers: price.Tiers(0).OrStandard().With(price.TierPriority), Fixed: 40_000}}, ""},
		{"spend: a model without a price", request.ChatCompletions, `{"model":"unpriced","messages":[]}`, spends, nil, budget.Ask{}, "budget_error"},
	} {
		t.Run(c.name, func(t *testing.T) {
			q := Request{Tenant: "searcher", Op: c.op, Body: body(t, c.op, c.raw), Raw: []byte(c.raw), Limits: c.lim, Tier: standard, Prices: cat}
			if c.edit != nil {
				c.edit(&q)
			}
			ask, err := Plan(&q)
			if c.code != "" {
				if r := refusal(t, err); r.Code != c.code {
					t.Fatalf("refused %+v, want %s", r, c.code)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if ask != c.want {
				t.Fatalf("asked\n%+v, want\n%+v", ask, c.want)
			}
		})
	}
}

func mustModel(t testing.TB, cat *price.Catalogue) *price.Model {
	m, ok := cat.Model("m")
	if !ok {
		t.Fatal("no model m")
	}
	return m
}

// TestRecount: only a bound a limit refused, of a prompt the body holds
// whole, is worth the pool's exact count.
func TestRecount(t *testing.T) {
	refused := budget.Decision{RefusedBy: budget.LimitTPM}
	for _, c := range []struct {
		name string
		ask  budget.Ask
		d    budget.Decision
		want bool
	}{
		{"refused by a limit", budget.Ask{PromptBound: 900}, refused, true},
		{"allowed", budget.Ask{PromptBound: 900}, budget.Decision{Allowed: true}, false},
		{"a prompt the body does not hold", budget.Ask{PromptBound: 900, Unbounded: true}, refused, false},
		{"no prompt bound", budget.Ask{}, refused, false},
		{"a repeated id", budget.Ask{PromptBound: 900}, budget.Decision{}, false},
		{"held", budget.Ask{PromptBound: 900}, budget.Decision{RefusedBy: budget.LimitTPM, Held: true}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := Recount(c.ask, c.d); got != c.want {
				t.Fatalf("Recount = %v, want %v", got, c.want)
			}
		})
	}
}

// TestNewReservation: what is kept of a grant, and the output cap
// written.
func TestNewReservation(t *testing.T) {
	cat := prices(t)
	standard, _ := CheckTier(tenants().Lookup("plain"), "")
	ask := budget.Ask{PromptBound: 50, Choices: 2, Hold: true, Scope: budget.Scope{Project: "p"}}
	d := budget.Decision{Allowed: true, Granted: 250, OutputCap: 100, MoneyGranted: 7, Levels: make([]budget.Windows, 1)}
	for _, c := range []struct {
		name      string
		op        request.Operation
		lim       budget.Limits
		d         budget.Decision
		held      bool
		cap       int64
		spendFrom bool
	}{
		{"tokens", request.ChatCompletions, budget.Limits{TokensPerMinute: 1}, d, true, 100, false},
		{"an API without a cap field", request.ResponsesCompact, budget.Limits{TokensPerMinute: 1}, d, true, 0, false},
		{"the store did not answer", request.ChatCompletions, budget.Limits{TokensPerMinute: 1}, budget.Decision{Allowed: true, Degraded: true, Granted: 250, OutputCap: 100}, false, 100, false},
		{"spend", request.ChatCompletions, budget.Limits{SpendPerDay: 1}, d, true, 100, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			q := Request{Tenant: "plain", Op: c.op, Limits: c.lim, Scope: ask.Scope, Tier: standard, Prices: cat}
			r := NewReservation(&q, ask, c.d)
			if r.Held != c.held || r.Cap != c.cap || r.Bound != 50 || r.Choices != 2 || !r.Background || r.Granted != 250 || r.Scope != ask.Scope {
				t.Fatalf("%+v", r)
			}
			if r.Levels != (len(c.d.Levels) > 0) {
				t.Fatalf("levels %v", r.Levels)
			}
			if c.spendFrom != (r.Spend.Granted == 7 && r.Spend.Version == "v1") {
				t.Fatalf("spend %+v", r.Spend)
			}
		})
	}
}

// TestWindows: the headers' window is the refusing limit's, else the one
// with the least left at any level.
func TestWindows(t *testing.T) {
	w := func(limit, left int64) budget.Window { return budget.Window{Limit: limit, Remaining: left} }
	d := budget.Decision{TPM: w(100, 60), Quota: w(1000, 70), Spend: [3]budget.Window{w(10, 9), w(100, 5)},
		Levels: []budget.Windows{{TPM: w(100, 40), Spend: [3]budget.Window{{}, w(50, 3)}}}}
	if got := TokenWindow(d); got != w(100, 40) {
		t.Errorf("tokens: %+v, want the project's TPM", got)
	}
	if got := SpendWindow(d); got != w(50, 3) {
		t.Errorf("spend: %+v, want the project's day", got)
	}
	d.RefusedBy = budget.LimitQuota
	if got := TokenWindow(d); got != w(1000, 70) {
		t.Errorf("tokens, refused: %+v, want the quota", got)
	}
	d.RefusedBy = budget.LimitSpendMinute
	if got := SpendWindow(d); got != w(10, 9) {
		t.Errorf("spend, refused: %+v, want the minute", got)
	}
	if got := TokenWindow(budget.Decision{Degraded: true, Allowed: true}); got.Limit != 0 {
		t.Errorf("degraded: %+v, want none", got)
	}
}
