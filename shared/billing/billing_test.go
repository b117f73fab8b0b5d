package billing

import (
	"errors"
	"testing"

	"github.com/llmgw/gateway/shared/price"
	"github.com/llmgw/gateway/shared/problem"
	"github.com/llmgw/gateway/shared/request"
	"github.com/llmgw/gateway/shared/tenant"
)

// Fixtures the tests share: no server, no store.

// prices prices model "m" at 1 micro-unit an input token and 10 an
// output token (the standard tier), flex at half and priority at twice
// that, and a web search at 10,000 micro-units a use.
func prices(t testing.TB) *price.Catalogue {
	t.Helper()
	var p []string
	c := price.New(price.Spec{Currency: "USD", Version: "v1",
		Models: []price.ModelSpec{{Model: "m", RateSpec: price.RateSpec{Input: "1", Output: "10"},
			Tiers: []price.TierSpec{{Name: "flex", Multiplier: "0.5"}, {Name: "priority", Multiplier: "2"}}}},
		Features: []price.FeatureSpec{{Name: "web_search", PerUse: "0.01"}}},
		[]string{"web_search", "web_fetch"}, problem.Into(&p, "prices"))
	if len(p) > 0 {
		t.Fatal(p)
	}
	return c
}

// tenants: "searcher" may use web search (100 tokens a use, 3 by
// default) and the files-api beta, at the standard and priority tiers;
// "plain" nothing but the standard tier.
func tenants() *tenant.Table {
	return tenant.NewTable([]tenant.Row{
		{ID: "searcher", Models: []string{"m"}, Grants: map[string]tenant.Grant{"web_search": {CostPerUse: 100, DefaultUses: 3}},
			Betas: []string{"files-api-2025-04-14"}, Tiers: price.Tiers(0).With(price.TierStandard).With(price.TierPriority)},
		{ID: "plain", Models: []string{"m"}},
		{ID: "mcp", Models: []string{"m"}, Betas: []string{"mcp-client-2025-04-04"}},
	})
}

// body parses raw as op's body.
func body(t testing.TB, op request.Operation, raw string) *request.Body {
	t.Helper()
	b, err := request.ParseBody([]byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	b.Stream = op.AsksStream(&b)
	return &b
}

// refusal is err as a Refusal, or fails the test.
func refusal(t testing.TB, err error) *Refusal {
	t.Helper()
	var r *Refusal
	if !errors.As(err, &r) {
		t.Fatalf("%v (%T) is no Refusal", err, err)
	}
	return r
}
