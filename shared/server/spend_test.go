package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmgw/gateway/internal/testing/redistest"
	"github.com/llmgw/gateway/shared/budget"
	"github.com/llmgw/gateway/shared/price"
	"github.com/llmgw/gateway/shared/problem"
	"github.com/llmgw/gateway/shared/prompt"
	"github.com/llmgw/gateway/shared/ratelimit"
	"github.com/llmgw/gateway/shared/request"
	"github.com/llmgw/gateway/shared/tenant"
)

// Spend limits and service tiers through the request path.

// catalogue builds a catalogue from spec, failing the test on a problem.
func catalogue(t testing.TB, spec price.Spec) *price.Catalogue {
	t.Helper()
	var p []string
	c := price.New(spec, []string{"web_search", "web_fetch"}, problem.Into(&p, "prices"))
	if len(p) > 0 {
		t.Fatal(p)
	}
	return c
}

// unitPrices prices model "m" at one micro-unit a token, every kind: the
// money of a request is its tokens' count.
func unitPrices(t testing.TB) *price.Catalogue {
	return catalogue(t, price.Spec{Currency: "USD", Version: "unit", Models: []price.ModelSpec{
		{Model: "m", RateSpec: price.RateSpec{Input: "1", Output: "1"}}}})
}

// tieredPrices prices "m" at 2 micro-units an input token, 1 a cached
// one, 10 an output token; flex at half, priority at twice.
func tieredPrices(t testing.TB) *price.Catalogue {
	return catalogue(t, price.Spec{Currency: "USD", Version: "2026-12-01", Models: []price.ModelSpec{
		{Model: "m", RateSpec: price.RateSpec{Input: "2", CachedInput: "1", Output: "10"},
			Tiers: []price.TierSpec{{Name: "flex", Multiplier: "0.5"}, {Name: "priority", Multiplier: "2"}}}}})
}

// lastMoney is the money of the spy's last settle.
func (b *budgetSpy) lastMoney() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.money) == 0 {
		return -1
	}
	return b.money[len(b.money)-1]
}

// tierBackend answers a chat request as JSON with the usage given and
// the service tier tier ("" none), and counts its calls.
type tierBackend struct {
	tier                   string
	prompt, cached, output int64
	calls                  atomic.Int64
}

func (tb *tierBackend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	tb.calls.Add(1)
	tier := ""
	if tb.tier != "" {
		tier = fmt.Sprintf(`"service_tier":%q,`, tb.tier)
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"id":"c","object":"chat.completion",%s"choices":[{"message":{"role":"assistant","content":"hello"}}],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"prompt_tokens_details":{"cached_tokens":%d}}}`,
		tier, tb.prompt, tb.output, tb.cached)
}

// spendGateway serves "m" from backend for tenant t1 with limits lim and
// service tiers tiers, priced by cat.
func spendGateway(t *testing.T, lim budget.Limits, tiers price.Tiers, cat *price.Catalogue, st budget.Store, backend http.Handler) (*testGateway, *budgetSpy) {
	t.Helper()
	// A remote store's answers are bounded generously: 200 requests at
	// once under the race detector on a busy machine are not an outage.
	spy := newBudgetSpy(t, budget.Config{Timeout: 5 * time.Second, SettleTimeout: 5 * time.Second}, st, budget.TenantBudget{Tenant: "t1", Limits: lim})
	g := newTestGatewayWith(t, func(d *Deps) {
		d.Budgets, d.Prices = spy, cat
		d.Tenants = tenant.NewTable([]tenant.Row{{ID: "t1", Models: []string{"m"}, Tiers: tiers}})
	}, backend)
	return g, spy
}

func chatBody(tier string, maxTokens int) string {
	t := ""
	if tier != "" {
		t = fmt.Sprintf(`"service_tier":%q,`, tier)
	}
	return fmt.Sprintf(`{"model":"m",%s"max_tokens":%d,"messages":[{"role":"user","content":"hi"}]}`, t, maxTokens)
}

// TestSpendTierPermission: a tenant may ask only its tiers (default:
// standard); another is refused 400 with param service_tier before any
// backend is called, with or without a spend limit.
func TestSpendTierPermission(t *testing.T) {
	std := price.Tiers(0)
	flex := std.OrStandard().With(price.TierFlex)
	for _, tc := range []struct {
		name  string
		tiers price.Tiers
		ask   string
		ok    bool
	}{
		{"none asked", std, "", true},
		{"auto", std, "auto", true},
		{"default is standard", std, "default", true},
		{"standard_only", std, "standard_only", true},
		{"priority not allowed", std, "priority", false},
		{"flex not allowed", std, "flex", false},
		{"flex allowed", flex, "flex", true},
		{"priority beside flex", flex, "priority", false},
		{"unknown tier", flex, "turbo", false},
		{"escaped spelling", std, `\u0070riority`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tb := &tierBackend{prompt: 5, output: 1}
			g, _ := spendGateway(t, budget.Limits{}, tc.tiers, nil, nil, tb)
			body := strings.Replace(chatBody("", 10), `"model":"m",`, `"model":"m","service_tier":"`+tc.ask+`",`, 1)
			if tc.ask == "" {
				body = chatBody("", 10)
			}
			resp, b := g.post(t, body)
			if tc.ok {
				if resp.StatusCode != 200 {
					t.Fatalf("status %d: %s", resp.StatusCode, b)
				}
				return
			}
			var e struct{ Error struct{ Code, Param string } }
			_ = json.Unmarshal(b, &e)
			if resp.StatusCode != 400 || e.Error.Code != "service_tier_not_allowed" || e.Error.Param != "service_tier" || tb.calls.Load() != 0 {
				t.Fatalf("status %d, %d backend calls: %s", resp.StatusCode, tb.calls.Load(), b)
			}
		})
	}
}

// TestSpendSettlesAtTheTierServed: the money reserved is the worst case
// at the dearest tier the request may be served at; the charge is the
// usage at the tier the answer names; a cheaper tier than asked, or one
// the tenant may not use, is billed at the dearer of the two.
func TestSpendSettlesAtTheTierServed(t *testing.T) {
	std := price.Tiers(0).OrStandard()
	all := std.With(price.TierFlex).With(price.TierPriority)
	// The usage: 100 prompt tokens, 40 of them cached, 20 output:
	// standard 60×2 + 40×1 + 20×10 = 360; flex 180; priority 720.
	for _, tc := range []struct {
		name       string
		tiers      price.Tiers
		ask, serve string
		reserved   int64 // worst case: bound×2 + 50×10, times the tier
		charged    int64
		logged     bool
	}{
		{"standard, no tier reported", std, "", "", 1, 360, false},
		{"standard reported as default", std, "", "default", 1, 360, false},
		{"auto: the answer's tier is the bill", all, "auto", "flex", 2, 180, false},
		{"auto reserved at the dearest tier", all, "", "priority", 2, 720, false},
		{"flex asked and served: reserved at the dearest tier", all, "flex", "flex", 2, 180, false},
		{"priority asked, standard reported: billed priority", all, "priority", "default", 2, 720, true},
		{"not permitted: billed the dearer", std, "", "priority", 1, 720, true},
		{"unknown tier reported: the dearest priced", std, "", "turbo", 1, 720, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tb := &tierBackend{tier: tc.serve, prompt: 100, cached: 40, output: 20}
			g, spy := spendGateway(t, budget.Limits{SpendPerMonth: 1_000_000}, tc.tiers, tieredPrices(t), nil, tb)
			body := chatBody(tc.ask, 50)
			resp, b := g.post(t, body)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, b)
			}
			spy.settled(t)
			bound := prompt.Scanner{}.Bound([]byte(body), request.ChatCompletions.Prompt()).Tokens
			worst := (bound*2 + 50*10) // standard
			switch tc.reserved {
			case 0:
				worst /= 2
			case 2:
				worst *= 2
			}
			if d := spy.decision(); d.MoneyGranted != worst {
				t.Errorf("reserved %d, want %d", d.MoneyGranted, worst)
			}
			if got := spy.lastMoney(); got != tc.charged {
				t.Errorf("charged %d, want %d", got, tc.charged)
			}
			if got := resp.Header.Get("X-Ratelimit-Limit-Spend"); got != "1.00" {
				t.Errorf("x-ratelimit-limit-spend %q", got)
			}
			if got := resp.Header.Get("X-Ratelimit-Spend-Currency"); got != "USD" {
				t.Errorf("x-ratelimit-spend-currency %q", got)
			}
			line := accessLine(t, g)
			if line["cost"] != price.Format(tc.charged) || line["price_version"] != "2026-12-01" {
				t.Errorf("access log cost %v, price_version %v", line["cost"], line["price_version"])
			}
			if logged := strings.Contains(g.log.text(), "billed at the dearer of the two"); logged != tc.logged {
				t.Errorf("tier warning logged %v, want %v", logged, tc.logged)
			}
		})
	}
}

// TestSpendRefusals: a spend limit without room refuses 429 naming the
// limit, what was spent and the limit; a monthly one says
// x-should-retry: false, without Retry-After; a request whose least cost
// is above the whole limit is told it can never run, the same way.
// Nothing reaches the backend.
func TestSpendRefusals(t *testing.T) {
	tb := &tierBackend{prompt: 10, output: 1}
	g, spy := spendGateway(t, budget.Limits{SpendPerMonth: 5000, SpendPerMinute: 100_000}, 0, tieredPrices(t), nil, tb)
	// Spend 4,990 of it outside the gateway's view (a settled overrun).
	ctx := context.Background()
	if _, err := spy.Ledger.Reserve(ctx, "t1", "pre", budget.Ask{PromptBound: 1, ClientCap: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := spy.Ledger.SettleCharge(ctx, "t1", "pre", budget.Charge{Tokens: 1, Money: 4990}); err != nil {
		t.Fatal(err)
	}
	resp, b := g.post(t, chatBody("", 100))
	var e struct {
		Error struct{ Code, Type, Message string }
	}
	_ = json.Unmarshal(b, &e)
	if resp.StatusCode != 429 || e.Error.Code != "insufficient_quota" || resp.Header.Get("Retry-After") != "" || resp.Header.Get("X-Should-Retry") != "false" ||
		!strings.Contains(e.Error.Message, `tenant "t1" spent 0.00499 of 0.005 USD this month (UTC)`) {
		t.Fatalf("status %d, Retry-After %q: %s", resp.StatusCode, resp.Header.Get("Retry-After"), b)
	}
	if got := resp.Header.Get("X-Ratelimit-Remaining-Spend"); got != "0.00001" {
		t.Fatalf("remaining spend %q", got)
	}
	// A prompt whose bound alone costs more than the whole limit.
	big := fmt.Sprintf(`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":%q}]}`, strings.Repeat("word ", 3000))
	resp, b = g.post(t, big)
	_ = json.Unmarshal(b, &e)
	if resp.StatusCode != 429 || e.Error.Code != "request_too_large_for_budget" || resp.Header.Get("Retry-After") != "" || resp.Header.Get("X-Should-Retry") != "false" {
		t.Fatalf("too large: status %d, Retry-After %q: %s", resp.StatusCode, resp.Header.Get("Retry-After"), b)
	}
	if tb.calls.Load() != 0 {
		t.Fatalf("%d requests reached the backend", tb.calls.Load())
	}
}

// capBackend reports as usage the prompt bound the test computes and the
// output cap the gateway wrote: every request costs its reservation, the
// worst case a concurrency test can meet.
func capBackend(bound int64) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			MaxCompletionTokens int64 `json:"max_completion_tokens"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"c","object":"chat.completion","choices":[{"message":{"content":"x"}}],"usage":{"prompt_tokens":%d,"completion_tokens":%d}}`,
			bound, req.MaxCompletionTokens)
	}
}

// concurrentSpend fires n requests at once, spread over the gateways, and
// returns how many were served and refused.
func concurrentSpend(t *testing.T, n int, body string, gs ...*testGateway) (ok, refused int64) {
	t.Helper()
	var wg sync.WaitGroup
	var okN, refusedN atomic.Int64
	start := make(chan struct{})
	for i := range n {
		g := gs[i%len(gs)]
		wg.Go(func() {
			<-start
			resp, err := http.Post(g.srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
			if err != nil {
				t.Error(err)
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			switch resp.StatusCode {
			case 200:
				okN.Add(1)
			case 429:
				refusedN.Add(1)
			default:
				t.Errorf("status %d: %s", resp.StatusCode, b)
			}
		})
	}
	close(start)
	wg.Wait()
	return okN.Load(), refusedN.Load()
}

// spent reads the tenant's month spend from the ledger (a zero probe).
func spent(t *testing.T, l *budget.Ledger, probe string) int64 {
	t.Helper()
	ctx := context.Background()
	d, err := l.Reserve(ctx, "t1", probe, budget.Ask{NoOutput: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.SettleCharge(ctx, "t1", probe, budget.Charge{}); err != nil {
		t.Fatal(err)
	}
	return d.Spend[2].Used - d.MoneyGranted
}

// text is everything logged so far.
func (l *lockedBuffer) text() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// accessLine waits for the access-log line of the (only) request.
func accessLine(t *testing.T, g *testGateway) map[string]any {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		for _, l := range g.log.lines(t) {
			if l["msg"] == "request" {
				return l
			}
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatal("no access-log line")
	return nil
}

// spendProof runs n concurrent requests of one tenant against a monthly
// spend limit that fits about ten worst cases, on the gateways gs (each
// its own ledger on stores that may be shared), every request costing
// its whole reservation: spent never exceeds the limit, and falls short
// of it by less than one request's least cost (not uselessly
// conservative). pre is spent before the burst.
func spendProof(t *testing.T, n int, pre int64, ledgers []*budget.Ledger, gs []*testGateway) {
	t.Helper()
	body := chatBody("", 100)
	bound := prompt.Scanner{}.Bound([]byte(body), request.ChatCompletions.Prompt()).Tokens
	worst := bound*2 + 100*10
	least := bound*2 + 1*10
	ctx := context.Background()
	if pre > 0 {
		if _, err := ledgers[0].Reserve(ctx, "t1", "pre", budget.Ask{NoOutput: true}); err != nil {
			t.Fatal(err)
		}
		if _, err := ledgers[0].SettleCharge(ctx, "t1", "pre", budget.Charge{Money: pre}); err != nil {
			t.Fatal(err)
		}
	}
	ok, refused := concurrentSpend(t, n, body, gs...)
	got := spent(t, ledgers[0], "probe-after")
	limit := spendLimit(worst)
	t.Logf("limit %d µUSD (%.1f worst cases of %d), spent before %d, after %d; %d served, %d refused (n %d)",
		limit, float64(limit)/float64(worst), worst, pre, got, ok, refused, n)
	if ok+refused != int64(n) {
		t.Fatalf("%d served + %d refused of %d", ok, refused, n)
	}
	if got > limit {
		t.Fatalf("spent %d over the limit %d", got, limit)
	}
	if got < limit-least {
		t.Fatalf("spent %d: more than one least cost (%d) under the limit %d", got, least, limit)
	}
}

// spendLimit is the monthly limit of the proofs: ten and a half worst
// cases.
func spendLimit(worst int64) int64 { return worst*10 + worst/2 }

func proofLimits(t *testing.T) budget.Limits {
	body := chatBody("", 100)
	bound := prompt.Scanner{}.Bound([]byte(body), request.ChatCompletions.Prompt()).Tokens
	return budget.Limits{SpendPerMonth: spendLimit(bound*2 + 100*10)}
}

// TestSpendConcurrencyMemory: 200 concurrent requests on one replica
// with the memory store.
func TestSpendConcurrencyMemory(t *testing.T) {
	body := chatBody("", 100)
	bound := prompt.Scanner{}.Bound([]byte(body), request.ChatCompletions.Prompt()).Tokens
	g, spy := spendGateway(t, proofLimits(t), 0, tieredPrices(t), nil, capBackend(bound))
	spendProof(t, 200, 0, []*budget.Ledger{spy.Ledger}, []*testGateway{g})
}

// TestSpendConcurrencyRedis: two gateways, each with its own ledger and
// Redis clients, on one redis-server: 200 concurrent requests, half on
// each.
func TestSpendConcurrencyRedis(t *testing.T) {
	srv := redistest.Start(t)
	body := chatBody("", 100)
	bound := prompt.Scanner{}.Bound([]byte(body), request.ChatCompletions.Prompt()).Tokens
	var gs []*testGateway
	var ls []*budget.Ledger
	for range 2 {
		st, _ := redisBudgetStore(t, srv.URL(), 5*time.Second)
		g, spy := spendGateway(t, proofLimits(t), 0, tieredPrices(t), st, capBackend(bound))
		gs, ls = append(gs, g), append(ls, spy.Ledger)
	}
	spendProof(t, 200, 0, ls, gs)
}

// TestSpendLiteLLM34732: LiteLLM's "concurrent requests can bypass
// max_budget_per_session" (BerriAI/litellm#34732): a session with room
// for one and a half requests left sends 50 at once. Held: at most the
// one that fits and one the rest affords are served, the limit holds.
func TestSpendLiteLLM34732(t *testing.T) {
	body := chatBody("", 100)
	bound := prompt.Scanner{}.Bound([]byte(body), request.ChatCompletions.Prompt()).Tokens
	worst := bound*2 + 100*10
	g, spy := spendGateway(t, proofLimits(t), 0, tieredPrices(t), nil, capBackend(bound))
	spendProof(t, 50, spendLimit(worst)-worst-worst/2, []*budget.Ledger{spy.Ledger}, []*testGateway{g})
}

// TestSpendView: GET /v1/llmgw/spend answers the caller's own tenant's
// windows from the ledger, money as decimal amounts; a tenant without
// limits gets no levels.
func TestSpendView(t *testing.T) {
	tb := &tierBackend{prompt: 100, cached: 40, output: 20} // 360 µUSD at standard
	lim := budget.Limits{SpendPerMonth: 1_000_000, SpendPerDay: 500_000, TokensPerMinute: 10_000}
	g, _ := spendGateway(t, lim, 0, tieredPrices(t), nil, tb)
	if resp, b := g.post(t, chatBody("", 50)); resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	var v struct {
		Object, Tenant, Currency string
		PriceVersion             string `json:"price_version"`
		Levels                   []struct {
			Level, Name   string
			Spend, Tokens []struct {
				Period, Limit, Used, Remaining string
				Resets                         string `json:"resets_at"`
			}
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, err := http.Get(g.srv.URL + "/v1/llmgw/spend")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || json.Unmarshal(b, &v) != nil || len(v.Levels) != 1 {
			t.Fatalf("status %d: %s", resp.StatusCode, b)
		}
		if len(v.Levels[0].Spend) == 2 && v.Levels[0].Spend[1].Used == "0.00036" || time.Now().After(deadline) {
			break // the settle may land after the answer
		}
		time.Sleep(5 * time.Millisecond)
	}
	l := v.Levels[0]
	if v.Object != "llmgw.spend" || v.Tenant != "t1" || v.Currency != "USD" || v.PriceVersion != "2026-12-01" || l.Level != "tenant" || l.Name != "t1" {
		t.Fatalf("report %+v", v)
	}
	if len(l.Spend) != 2 || l.Spend[0].Period != "day" || l.Spend[0].Limit != "0.50" || l.Spend[0].Used != "0.00036" ||
		l.Spend[1].Period != "month" || l.Spend[1].Remaining != "0.99964" || l.Spend[1].Resets == "" {
		t.Fatalf("spend %+v", l.Spend)
	}
	if len(l.Tokens) != 1 || l.Tokens[0].Period != "minute" || l.Tokens[0].Limit != "10000" || l.Tokens[0].Used != "120" {
		t.Fatalf("tokens %+v", l.Tokens)
	}
	// A tenant without limits: no levels, and nothing reserved.
	g2, spy2 := spendGateway(t, budget.Limits{}, 0, nil, nil, tb)
	resp, err := http.Get(g2.srv.URL + "/v1/llmgw/spend")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"levels":[]`) || strings.Contains(strings.Join(spy2.log(), ","), "reserve") {
		t.Fatalf("status %d: %s (calls %v)", resp.StatusCode, b, spy2.log())
	}
}

// countOnce is a limiter whose request bucket never empties and whose
// count bucket holds one: the spend view takes from the count bucket.
type countOnce struct{ counts atomic.Int64 }

func (*countOnce) Take(context.Context, string) (ratelimit.Decision, error) {
	return ratelimit.Decision{Allowed: true, Limit: 10, Remaining: 9, Reset: time.Now().Add(time.Minute)}, nil
}

func (c *countOnce) TakeCount(context.Context, string) (ratelimit.Decision, error) {
	return ratelimit.Decision{Allowed: c.counts.Add(1) == 1, Limit: 1, Reset: time.Now().Add(time.Minute)}, nil
}

// TestSpendViewTakesACount: a tenant polling its spend view spends its
// prompt-count bucket, not the store: the second poll is refused 429
// with Retry-After and reads nothing.
func TestSpendViewTakesACount(t *testing.T) {
	spy := newBudgetSpy(t, budget.Config{}, nil, budget.TenantBudget{Tenant: "t1", Limits: budget.Limits{SpendPerDay: 1000}})
	g := newTestGatewayWith(t, func(d *Deps) { d.Budgets, d.Prices, d.Limiter = spy, tieredPrices(t), &countOnce{} }, &tierBackend{})
	for i, want := range []int{200, 429} {
		resp, err := http.Get(g.srv.URL + "/v1/llmgw/spend")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want || (want == 429 && resp.Header.Get("Retry-After") == "") {
			t.Fatalf("poll %d: status %d, want %d: %s", i, resp.StatusCode, want, b)
		}
	}
	if n := strings.Count(strings.Join(spy.log(), ","), "windows"); n != 1 {
		t.Fatalf("the store was read %d times for two polls, the second refused: want 1 (%v)", n, spy.log())
	}
}

func (b *budgetSpy) Windows(ctx context.Context, tenant string, scope budget.Scope, id string) (budget.Decision, error) {
	b.note("windows")
	return b.Ledger.Windows(ctx, tenant, scope, id)
}
