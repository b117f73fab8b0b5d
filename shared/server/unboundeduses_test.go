package server

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/llmgw/gateway/shared/budget"
	"github.com/llmgw/gateway/shared/price"
	"github.com/llmgw/gateway/shared/tenant"
)

// TestSpendOnlyUnboundedSearch: a tenant with only a daily spend limit
// (1.00 USD) and web search priced in money alone (0.01 USD a use, no
// token cost_per_use) sends a web_search tool without max_uses: it is
// refused before any backend call. Before, it passed, was reserved at
// default_uses, and a backend that ran 300 searches was settled at its
// count: 3.00 USD against the 1.00 limit.
func TestSpendOnlyUnboundedSearch(t *testing.T) {
	b := &messagesBackend{}
	srv := httptest.NewServer(b)
	t.Cleanup(srv.Close)
	cat := linearPrices(t, "1", []price.FeatureSpec{{Name: "web_search", PerUse: "0.01"}})
	spy := newBudgetSpy(t, budget.Config{}, nil, budget.TenantBudget{Tenant: "t1", Limits: budget.Limits{SpendPerDay: 1_000_000}})
	g := gatewayOnKind(t, "anthropic", func(d *Deps) {
		d.Auth, d.Budgets, d.Prices = tokenIsTenant{}, spy, cat
		d.Tenants = tenant.NewTable([]tenant.Row{{ID: "t1", Models: []string{"m"}, Grants: map[string]tenant.Grant{"web_search": {DefaultUses: 2}}}})
	}, srv.URL)
	body := `{"model":"m","max_tokens":100,"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"web_search_20250305","name":"web_search"}]}`
	resp, out := messagesCall(t, g, "t1", body, "")
	if calls, _ := b.seen(); resp.StatusCode != 400 || calls != 0 || !strings.Contains(string(out), "max_uses") {
		t.Fatalf("status %d after %d backend calls: %s", resp.StatusCode, calls, out)
	}
	// Bounded, it passes and is reserved at its uses' price.
	bounded := strings.Replace(body, `"name":"web_search"`, `"name":"web_search","max_uses":3`, 1)
	if resp, out := messagesCall(t, g, "t1", bounded, ""); resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, out)
	}
}
