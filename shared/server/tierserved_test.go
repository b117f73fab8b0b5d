package server

import (
	"testing"

	"github.com/llmgw/gateway/shared/budget"
	"github.com/llmgw/gateway/shared/price"
	"github.com/llmgw/gateway/shared/tenant"
)

// TestSpendFlexServedAtPriority: a request that asks flex and is served
// at priority is billed at priority; its reservation now covers that
// bill. Before, it was reserved at flex and billed 3.9 times its
// reservation, so a strict limit passed by the ratio of the tiers.
func TestSpendFlexServedAtPriority(t *testing.T) {
	all := price.Tiers(0).OrStandard().With(price.TierFlex).With(price.TierPriority)
	tb := &tierBackend{tier: "priority", prompt: 100, cached: 40, output: 20}
	g, spy := spendGateway(t, budget.Limits{SpendPerMonth: 1_000_000}, all, tieredPrices(t), nil, tb)
	resp, b := g.post(t, chatBody("flex", 50))
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	spy.settled(t)
	reserved, charged := spy.decision().MoneyGranted, spy.lastMoney()
	t.Logf("reserved %d, charged %d micro-units", reserved, charged)
	if charged != 720 || charged > reserved {
		t.Fatalf("charged %d (want the priority bill 720) against a reservation of %d", charged, reserved)
	}
}

// TestStandardTierWritten: a spend-limited tenant allowed only the
// standard tier that leaves the tier to the backend (none, null, "auto")
// is reserved at the standard tier; OpenAI then served the project's
// default tier and Anthropic "auto", either of which may be priority,
// billed beyond the reservation. Each attempt now names the standard
// tier in the kind's spelling. A tier the client named is kept; a tenant
// allowed another tier, or without a spend limit, gets nothing written.
func TestStandardTierWritten(t *testing.T) {
	std := price.Tiers(0)
	withPriority := std.OrStandard().With(price.TierPriority)
	spend := budget.Limits{SpendPerDay: 1_000_000}
	for _, c := range []struct {
		name, kind, path, tier string
		tiers                  price.Tiers
		lim                    budget.Limits
		want                   any // the service_tier the backend reads (nil: absent)
	}{
		{"openai chat, none", "openai", "/v1/chat/completions", "", std, spend, "default"},
		{"openai chat, auto", "openai", "/v1/chat/completions", `"auto"`, std, spend, "default"},
		{"openai chat, null", "openai", "/v1/chat/completions", `null`, std, spend, "default"},
		{"openai chat, default kept", "openai", "/v1/chat/completions", `"default"`, std, spend, "default"},
		{"openai responses, none", "openai", "/v1/responses", "", std, spend, "default"},
		{"anthropic, none", "anthropic", "/v1/messages", "", std, spend, "standard_only"},
		{"anthropic, auto", "anthropic", "/v1/messages", `"auto"`, std, spend, "standard_only"},
		{"vllm: no tier to name", "vllm", "/v1/chat/completions", "", std, spend, nil},
		{"a tenant allowed priority", "openai", "/v1/chat/completions", "", withPriority, spend, nil},
		{"a tenant without a spend limit", "openai", "/v1/chat/completions", "", std, budget.Limits{TokensPerMinute: 100_000}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			rb := &recordingBackend{}
			spy := newBudgetSpy(t, budget.Config{}, nil, budget.TenantBudget{Tenant: "t1", Limits: c.lim})
			g := gatewayOnKind(t, c.kind, func(d *Deps) {
				d.Budgets, d.Prices = spy, tieredPrices(t)
				d.Tenants = tenant.NewTable([]tenant.Row{{ID: "t1", Models: []string{"m"}, Tiers: c.tiers}})
			}, startBackend(t, rb))
			tier := ""
			if c.tier != "" {
				tier = `"service_tier":` + c.tier + `,`
			}
			body := `{"model":"m","stream":true,` + tier + `"max_tokens":50,"messages":[{"role":"user","content":"hi"}]}`
			if c.path == "/v1/responses" {
				body = `{"model":"m","stream":true,` + tier + `"max_output_tokens":50,"input":"hi"}`
			}
			resp, out := postPath(t, g, c.path, body)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, out)
			}
			if got := rb.last(t)["service_tier"]; got != c.want {
				t.Fatalf("the backend read service_tier %v, want %v: %s", got, c.want, rb.body)
			}
		})
	}
}
