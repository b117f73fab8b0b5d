package main

// Spend limits end to end: the binary's wiring of the price
// catalogue, a tenant's spend limit and its service tiers, against the
// stub backend, with real JWTs.

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/llmgw/gateway/scripts/devissuer"
	"github.com/llmgw/gateway/shared/price"
)

// TestSpendEndToEnd: a spend-limited tenant's request carries the spend
// headers, its access-log line the cost and price version, and
// GET /v1/llmgw/spend with its own token shows what it spent; a tier it
// may not use is refused 400; the spend view without a token is 401.
func TestSpendEndToEnd(t *testing.T) {
	t.Parallel()
	g := startGateway(t, options{
		tenants: `  - {id: spender, models: [llama], requests: 1000, interval: 1h, spend_per_day: "2.00"}` + "\n",
		extra:   `prices: {currency: USD, version: "2026-12-01", models: [{model: llama, input: "1", output: "3"}]}` + "\n",
	})
	tok := g.token("spender")
	resp := g.post("/v1/chat/completions", tok, `{"model":"llama","max_tokens":50,"messages":[{"role":"user","content":"hello there"}]}`)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	in, out := usageOf(t, b)
	if resp.Header.Get("X-Ratelimit-Limit-Spend") != "2.00" || resp.Header.Get("X-Ratelimit-Spend-Currency") != "USD" {
		t.Fatalf("spend headers %v", resp.Header)
	}
	line := g.accessLog(resp.Header.Get("X-Request-Id"))
	cost := in*1 + out*3 // micro-units: 1 and 3 per token
	if line["cost"] != price.Format(cost) || line["price_version"] != "2026-12-01" {
		t.Fatalf("access log cost %v (want %d micro-units), price_version %v", line["cost"], cost, line["price_version"])
	}

	resp = g.post("/v1/chat/completions", tok, `{"model":"llama","service_tier":"priority","messages":[{"role":"user","content":"hi"}]}`)
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || !strings.Contains(string(b), `"param":"service_tier"`) {
		t.Fatalf("priority: status %d: %s", resp.StatusCode, b)
	}

	for _, c := range []struct {
		token string
		want  int
	}{{"", 401}, {tok, 200}} {
		req, _ := http.NewRequest(http.MethodGet, g.URL+"/v1/llmgw/spend", nil)
		if c.token != "" {
			req.Header.Set("Authorization", "Bearer "+c.token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Fatalf("spend view: status %d, want %d: %s", resp.StatusCode, c.want, b)
		}
		if c.want != 200 {
			continue
		}
		var v struct {
			Tenant string
			Levels []struct {
				Spend []struct{ Period, Limit, Used string }
			}
		}
		if err := json.Unmarshal(b, &v); err != nil || v.Tenant != "spender" || len(v.Levels) != 1 || len(v.Levels[0].Spend) != 1 ||
			v.Levels[0].Spend[0].Period != "day" || v.Levels[0].Spend[0].Limit != "2.00" || v.Levels[0].Spend[0].Used != line["cost"] {
			t.Fatalf("spend view %s (cost logged %v)", b, line["cost"])
		}
	}
}

// TestLevelsEndToEnd: the project and user levels come from the signed
// token's claims (auth.project_claim, auth.user_claim): a project whose
// limit fits no request refuses its callers naming the project, whatever
// project the request's headers or body name; another project's token
// passes; a project claim that is not a string is a 401.
func TestLevelsEndToEnd(t *testing.T) {
	t.Parallel()
	g := startGateway(t, options{
		authExtra: "  project_claim: project\n",
		tenants: `  - {id: spender, models: [llama], requests: 1000, interval: 1h, projects: [{name: search, spend_per_month: "0.000001"}],` +
			` project_default: {spend_per_month: "5.00"}, user_default: {spend_per_day: "1.00"}}` + "\n",
		extra: `prices: {currency: USD, version: "2026-12-01", models: [{model: llama, input: "1", output: "3"}]}` + "\n",
	})
	mint := func(project any) string {
		tok, err := g.Issuer.Mint(devissuer.Claims{Tenant: "spender", Subject: "user-1", Audience: []string{testAudience}, Extra: map[string]any{"project": project}})
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	body := `{"model":"llama","max_tokens":50,"user":"other","metadata":{"project":"free"},"messages":[{"role":"user","content":"hello there"}]}`
	resp := g.post("/v1/chat/completions", mint("search"), body, "OpenAI-Project", "free")
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 429 || !strings.Contains(string(b), `project \"search\"`) || !strings.Contains(string(b), "request_too_large_for_budget") {
		t.Fatalf("search: status %d: %s", resp.StatusCode, b)
	}
	resp = g.post("/v1/chat/completions", mint("free"), body)
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("X-Ratelimit-Limit-Spend") != "1.00" {
		t.Fatalf("free: status %d, limit-spend %q (want the user's 1.00): %s", resp.StatusCode, resp.Header.Get("X-Ratelimit-Limit-Spend"), b)
	}
	resp = g.post("/v1/chat/completions", mint([]string{"free", "search"}), body)
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Fatalf("a list as the project claim: status %d, want 401", resp.StatusCode)
	}
}
