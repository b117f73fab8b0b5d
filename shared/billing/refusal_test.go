package billing

import (
	"strings"
	"testing"
	"time"

	"github.com/llmgw/gateway/shared/budget"
	"github.com/llmgw/gateway/shared/price"
)

// TestCheckTier: a tenant asks only for the tiers it may use; "auto" or
// none leaves the backend every one of them.
func TestCheckTier(t *testing.T) {
	tab := tenants()
	both := price.Tiers(0).With(price.TierStandard).With(price.TierPriority)
	for _, c := range []struct {
		name, tenant, asked string
		may                 price.Tiers
		explicit            bool
		refused             bool
	}{
		{"none", "searcher", "", both, false, false},
		{"auto", "searcher", "auto", both, false, false},
		{"priority, allowed", "searcher", "priority", price.Tiers(0).OrStandard().With(price.TierPriority), true, false},
		{"standard_only", "searcher", "standard_only", price.Tiers(0).With(price.TierStandard), true, false},
		{"priority, not allowed", "plain", "priority", 0, false, true},
		{"flex, not allowed", "searcher", "flex", 0, false, true},
		{"a tier nobody knows", "searcher", "turbo", 0, false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			ask, err := CheckTier(tab.Lookup(c.tenant), c.asked)
			if c.refused {
				r := refusal(t, err)
				if r.Kind != Invalid || r.Code != "service_tier_not_allowed" || r.Param != "service_tier" || !strings.Contains(r.Message, c.asked) {
					t.Fatalf("refused %+v", r)
				}
				return
			}
			if err != nil || ask.may != c.may || ask.explicit != c.explicit {
				t.Fatalf("%+v %v, want may %s explicit %v", ask, err, c.may, c.explicit)
			}
		})
	}
}

// TestRefuse: a refused reservation's kind, type, code and Retry-After,
// by the limit that refused it.
func TestRefuse(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	win := budget.Window{Limit: 1000, Used: 900, Remaining: 100, Reset: now.Add(30 * time.Second)}
	for _, c := range []struct {
		name            string
		d               budget.Decision
		kind            Kind
		typ, code, text string
		retry           time.Duration
	}{
		{"tokens per minute", budget.Decision{RefusedBy: budget.LimitTPM, Requested: 500, TPM: win}, OverBudget, "tokens", "rate_limit_exceeded", "Rate limit reached for tenant", 30 * time.Second},
		{"quota", budget.Decision{RefusedBy: budget.LimitQuota, Requested: 500, Quota: win}, OverBudget, "insufficient_quota", "insufficient_quota", "token quota", 30 * time.Second},
		{"never fits", budget.Decision{RefusedBy: budget.LimitTPM, Requested: 5000, TPM: win}, OverBudget, "tokens", "request_too_large_for_budget", "can never run", 0},
		{"spend per minute", budget.Decision{RefusedBy: budget.LimitSpendMinute, MoneyRequested: 500, Spend: [3]budget.Window{win}}, OverBudget, "spend", "rate_limit_exceeded", "this minute", 30 * time.Second},
		{"spend per day", budget.Decision{RefusedBy: budget.LimitSpendDay, MoneyRequested: 500, Spend: [3]budget.Window{{}, win}}, OverBudget, "insufficient_quota", "insufficient_quota", "today (UTC)", 30 * time.Second},
		{"spend never fits", budget.Decision{RefusedBy: budget.LimitSpendMonth, MoneyRequested: 5000, Spend: [3]budget.Window{{}, {}, win}}, OverBudget, "insufficient_quota", "request_too_large_for_budget", "USD", 0},
		{"a window reset already", budget.Decision{RefusedBy: budget.LimitTPM, Requested: 500, TPM: budget.Window{Limit: 1000, Reset: now}}, OverBudget, "tokens", "rate_limit_exceeded", "", time.Second},
		{"a repeated id", budget.Decision{}, Failed, "", "budget_error", "repeated request id", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := Refuse("tenant", c.d, now, "USD")
			if r.Kind != c.kind || r.Type != c.typ || r.Code != c.code || r.RetryAfter != c.retry || !strings.Contains(r.Message, c.text) {
				t.Fatalf("%+v", r)
			}
		})
	}
}
