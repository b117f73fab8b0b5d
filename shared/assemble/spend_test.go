package assemble

import (
	"strings"
	"testing"

	"github.com/llmgw/gateway/shared/price"
	"github.com/llmgw/gateway/shared/problem"
)

// TestSpendConfig: every problem with the prices section and the
// tenants' spend limits and tiers is reported at start, by field, at
// once; a good one loads with its amounts in micro-units.
func TestSpendConfig(t *testing.T) {
	const prices = `
prices:
  currency: USD
  version: "2026-12-01"
  models:
    - {model: m1, input: "2.50", output: "10", tiers: [{name: flex, multiplier: "0.5"}]}
aliases: {a1: m1}
`
	tenantWith := func(extra string) string {
		return strings.Replace(minimal, "requests: 10}", "requests: 10, "+extra+"}", 1)
	}
	for _, tc := range []struct {
		name, cfg string
		wants     []string
	}{
		{"bad amount", tenantWith(`spend_per_day: "5.0.0"`) + prices, []string{`tenants[0].spend_per_day: "5.0.0" is not a decimal amount`}},
		{"zero amount", tenantWith(`spend_per_month: "0"`) + prices, []string{"tenants[0].spend_per_month: must be above 0"}},
		{"too many decimals", tenantWith(`spend_per_minute: "0.0000001"`) + prices, []string{"tenants[0].spend_per_minute: \"0.0000001\" has more than 6 decimal places"}},
		{"no catalogue", tenantWith(`spend_per_day: "5"`), []string{"tenants[0].spend_per_day: a spend limit needs prices"}},
		{"no catalogue, a project's limit", strings.Replace(tenantWith(`projects: [{name: a, tokens_per_minute: 5}, {name: b, spend_per_month: "2"}]`), "audiences: [gw]", "audiences: [gw], project_claim: proj", 1),
			[]string{"tenants[0].projects[1].spend_per_month: a spend limit needs prices"}},
		{"model unpriced", strings.Replace(tenantWith(`spend_per_day: "5"`), "models: [m1]", "models: [m1, m2]", 1) +
			strings.Replace(prices, "{m1: served}", "{m1: served, m2: x}", 1),
			[]string{`tenants[0].models[1]: model "m2" has no price`}},
		{"tier unpriced", tenantWith(`spend_per_day: "5", service_tiers: [standard, priority]`) + prices,
			[]string{`tenants[0].service_tiers: tier priority is not priced for model "m1"`}},
		{"tier unknown", tenantWith(`service_tiers: [standard, turbo, default]`) + prices,
			[]string{`tenants[0].service_tiers[1]: must be one of standard, flex, priority, scale, not "turbo"`, `tenants[0].service_tiers[2]`}},
		{"catalogue field", minimal + "prices: {currency: dollars, version: v, models: [{model: m1, input: x}]}\n",
			[]string{"prices.currency: must be an ISO 4217 code", `prices.models[0].input: "x" is not a decimal`, "prices.models[0].output: required"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := strings.Replace(tc.cfg, "models: {m1: served}", "models: {m1: served, m2: x}", 1)
			_, err := Parse([]byte(cfg), env(nil))
			if err == nil {
				t.Fatal("Parse accepted it")
			}
			for _, w := range tc.wants {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
		})
	}
	c, err := Parse([]byte(tenantWith(`spend_per_day: "5.25", service_tiers: [flex, standard]`)+prices), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	tb, err := TenantBudgets(c.Tenants)
	if err != nil || len(tb) != 1 || tb[0].SpendPerDay != 5_250_000 {
		t.Fatalf("budgets %+v, %v", tb, err)
	}
	rows := Tenants(c.Tenants)
	if want := price.Tiers(0).With(price.TierStandard).With(price.TierFlex); rows[0].Tiers != want {
		t.Fatalf("tiers %s, want %s", rows[0].Tiers, want)
	}
	cat := Catalogue(c, problem.At{})
	if m, ok := cat.Model("a1"); !ok || m.Cost(price.TierFlex, price.Usage{Input: 1_000_000}) != 1_250_000 {
		t.Fatalf("alias a1 not priced as m1")
	}
}

// TestLevelConfig: the levels below a tenant (projects, project_default,
// user_default) are checked at start by the tenant's rules, every
// problem named by its field at once; a good one reaches the ledger's
// limits in micro-units.
func TestLevelConfig(t *testing.T) {
	const prices = `
prices:
  currency: USD
  version: "2026-12-01"
  models:
    - {model: m1, input: "2.50", output: "10"}
`
	tenantWith := func(extra string) string {
		return strings.Replace(minimal, "requests: 10}", "requests: 10, "+extra+"}", 1) + prices
	}
	withClaim := func(cfg string) string {
		return strings.Replace(cfg, "audiences: [gw]}", "audiences: [gw], project_claim: project}", 1)
	}
	bad := withClaim(tenantWith(`projects: [{name: search, spend_per_month: "x"}, {name: search, token_quota: 5}, {spend_per_day: "1"}, {name: idle}],` +
		` project_default: {tokens_per_minute: -1}, user_default: {quota_period: week, token_quota: 3}`))
	_, err := Parse([]byte(bad), env(nil))
	if err == nil {
		t.Fatal("Parse accepted it")
	}
	for _, w := range []string{
		`tenants[0].projects[0].spend_per_month: "x" is not a decimal`,
		`tenants[0].projects[1].name: duplicate project "search"`,
		`tenants[0].projects[1].quota_period: required with token_quota`,
		`tenants[0].projects[2].name: required`,
		`tenants[0].projects[3]: limits nothing`,
		`tenants[0].project_default.tokens_per_minute`,
		`tenants[0].user_default.quota_period: must be day or month, not "week"`,
	} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error lacks %q:\n%v", w, err)
		}
	}
	// Projects without the claim they are read from.
	if _, err := Parse([]byte(tenantWith(`projects: [{name: search, spend_per_month: "5"}]`)), env(nil)); err == nil ||
		!strings.Contains(err.Error(), "tenants[0].projects: project limits need auth.project_claim") {
		t.Fatalf("no project_claim: %v", err)
	}
	c, err := Parse([]byte(withClaim(tenantWith(`projects: [{name: search, spend_per_month: "50.00"}], user_default: {spend_per_day: "2", tokens_per_minute: 100}`))), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	tb, err := TenantBudgets(c.Tenants)
	if err != nil || len(tb) != 1 || tb[0].Levels == nil {
		t.Fatalf("budgets %+v, %v", tb, err)
	}
	ll := tb[0].Levels
	if ll.Projects["search"].SpendPerMonth != 50_000_000 || ll.UserDefault.SpendPerDay != 2_000_000 || ll.UserDefault.TokensPerMinute != 100 || ll.ProjectDefault.Enforced() {
		t.Fatalf("levels %+v", ll)
	}
	if got := Verifier(c); got.ProjectClaim != "project" {
		t.Fatalf("auth project claim %q", got.ProjectClaim)
	}
}
