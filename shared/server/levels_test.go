package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmgw/gateway/internal/testing/redistest"
	"github.com/llmgw/gateway/shared/auth"
	"github.com/llmgw/gateway/shared/budget"
	"github.com/llmgw/gateway/shared/price"
	"github.com/llmgw/gateway/shared/prompt"
	"github.com/llmgw/gateway/shared/request"
	"github.com/llmgw/gateway/shared/tenant"
)

// Levels below a tenant: a project and a user from the verified token,
// reserved with the tenant in one store operation.

// tokenIsScope takes "Bearer <project>/<user>" as a verified token of
// tenant t1 whose project and user claims are those: what the verifier
// makes of a signed token (shared/auth reads the claims).
type tokenIsScope struct{}

func (tokenIsScope) Verify(_ context.Context, authorization string) (auth.Principal, error) {
	t, ok := strings.CutPrefix(authorization, "Bearer ")
	if !ok || t == "" {
		return auth.Principal{}, errors.New("no token")
	}
	p, u, _ := strings.Cut(t, "/")
	return auth.Principal{Tenant: "t1", Subject: u, Project: p, User: u}, nil
}

// levelGateway is spendGateway with the scope verifier.
func levelGateway(t *testing.T, lim budget.Limits, st budget.Store, backend http.Handler) (*testGateway, *budgetSpy) {
	t.Helper()
	spy := newBudgetSpy(t, budget.Config{}, st, budget.TenantBudget{Tenant: "t1", Limits: lim})
	g := newTestGatewayWith(t, func(d *Deps) {
		d.Budgets, d.Prices, d.Auth = spy, tieredPrices(t), tokenIsScope{}
		d.Tenants = tenant.NewTable([]tenant.Row{{ID: "t1", Models: []string{"m"}}})
	}, backend)
	return g, spy
}

// levelPost posts body as project/user with extra headers.
func levelPost(t *testing.T, g *testGateway, scope, body string, hdr ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, g.srv.URL+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+scope)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

// levelSpent reads the month spend at the tenant, project and user of
// scope (a zero probe).
func levelSpent(t *testing.T, l *budget.Ledger, project, user string) (tenant, proj, usr int64) {
	t.Helper()
	d, err := l.Windows(context.Background(), "t1", budget.Scope{Project: project, User: user}, fmt.Sprintf("probe-%s-%s-%d", project, user, time.Now().UnixNano()))
	if err != nil {
		t.Fatal(err)
	}
	for _, lv := range d.Levels {
		switch {
		case strings.HasPrefix(lv.Name, "project:"):
			proj = lv.Spend[2].Used
		case strings.HasPrefix(lv.Name, "user:"):
			usr = lv.Spend[2].Used
		}
	}
	return d.Spend[2].Used, proj, usr
}

// proofWorst is the worst and least cost of the proofs' request.
func proofWorst() (body string, bound, worst, least int64) {
	body = chatBody("", 100)
	bound = prompt.Scanner{}.Bound([]byte(body), request.ChatCompletions.Prompt()).Tokens
	return body, bound, bound*2 + 100*10, bound*2 + 1*10
}

// levelProofLimits: project "search" may spend ten and a half worst
// cases a month, each user three; the tenant has no limit of its own.
func levelProofLimits() budget.Limits {
	_, _, worst, _ := proofWorst()
	return budget.Limits{Levels: &budget.LevelLimits{
		Projects:    map[string]budget.Limits{"search": {SpendPerMonth: spendLimit(worst)}},
		UserDefault: budget.Limits{SpendPerMonth: 3 * worst},
	}}
}

// levelProof fires 200 requests of project search at once across 50
// users, spread over gs, every request costing its reservation: the
// project's spend never exceeds its limit and falls short of it by less
// than one least cost; each user's spend is its own and they add up to
// the project's.
func levelProof(t *testing.T, ledgers []*budget.Ledger, gs []*testGateway) {
	t.Helper()
	const n, users = 200, 50
	body, _, worst, least := proofWorst()
	var wg sync.WaitGroup
	var okN, refusedN atomic.Int64
	start := make(chan struct{})
	for i := range n {
		g := gs[i%len(gs)]
		wg.Go(func() {
			<-start
			resp, b := levelPost(t, g, fmt.Sprintf("search/u%d", i%users), body)
			switch resp.StatusCode {
			case 200:
				okN.Add(1)
			case 429:
				refusedN.Add(1)
				if !strings.Contains(b, `project \"search\" spent`) {
					t.Errorf("refusal does not name the project: %s", b)
				}
			default:
				t.Errorf("status %d: %s", resp.StatusCode, b)
			}
		})
	}
	close(start)
	wg.Wait()
	limit := spendLimit(worst)
	var sum, proj int64
	for u := range users {
		_, p, us := levelSpent(t, ledgers[0], "search", fmt.Sprintf("u%d", u))
		proj = p
		if us > 3*worst {
			t.Errorf("user u%d spent %d over its limit %d", u, us, 3*worst)
		}
		sum += us
	}
	t.Logf("project limit %d µUSD (%.1f worst cases of %d): spent %d (users' sum %d); %d served, %d refused",
		limit, float64(limit)/float64(worst), worst, proj, sum, okN.Load(), refusedN.Load())
	if okN.Load()+refusedN.Load() != n {
		t.Fatalf("%d served + %d refused of %d", okN.Load(), refusedN.Load(), n)
	}
	if proj > limit {
		t.Fatalf("project spent %d over its limit %d", proj, limit)
	}
	if proj < limit-least {
		t.Fatalf("project spent %d: more than one least cost (%d) under its limit %d", proj, least, limit)
	}
	if sum != proj {
		t.Fatalf("users spent %d in all, the project %d", sum, proj)
	}
}

// TestLevelConcurrencyMemory: the spend limits' concurrency proof at the
// user level, one replica, memory store.
func TestLevelConcurrencyMemory(t *testing.T) {
	_, bound, _, _ := proofWorst()
	g, spy := levelGateway(t, levelProofLimits(), nil, capBackend(bound))
	levelProof(t, []*budget.Ledger{spy.Ledger}, []*testGateway{g})
}

// TestLevelConcurrencyRedis: the same on two gateways, each with its own
// ledger and Redis clients, on one redis-server.
func TestLevelConcurrencyRedis(t *testing.T) {
	srv := redistest.Start(t)
	_, bound, _, _ := proofWorst()
	var gs []*testGateway
	var ls []*budget.Ledger
	for range 2 {
		st, _ := redisBudgetStore(t, srv.URL(), 5*time.Second)
		g, spy := levelGateway(t, levelProofLimits(), st, capBackend(bound))
		gs, ls = append(gs, g), append(ls, spy.Ledger)
	}
	levelProof(t, ls, gs)
}

// TestLevelScopeIsTheTokens: a caller cannot pick its project or user by
// a header or a body field: only the verified token's claims count. The
// project "search" has room for none of these requests; each is sent
// naming another project and user every way a client might.
// The project "search" fits no request at all.
func TestLevelScopeIsTheTokens(t *testing.T) {
	_, bound, worst, least := proofWorst()
	lim := budget.Limits{Levels: &budget.LevelLimits{
		Projects:       map[string]budget.Limits{"search": {SpendPerMonth: least - 1}},
		ProjectDefault: budget.Limits{SpendPerMonth: 100 * worst},
		UserDefault:    budget.Limits{SpendPerMonth: 100 * worst},
	}}
	g, spy := levelGateway(t, lim, nil, capBackend(bound))
	for _, tc := range []struct {
		name string
		body string
		hdr  []string
	}{
		{"plain", chatBody("", 100), nil},
		{"openai-project header", chatBody("", 100), []string{"OpenAI-Project", "free"}},
		{"gateway headers", chatBody("", 100), []string{"X-Llmgw-Project", "free", "X-Llmgw-User", "u9"}},
		{"body user and project", `{"model":"m","max_tokens":100,"user":"u9","project":"free","metadata":{"project":"free","user_id":"u9"},"messages":[{"role":"user","content":"hi"}]}`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, b := levelPost(t, g, "search/u1", tc.body, tc.hdr...)
			if resp.StatusCode != 429 || !strings.Contains(b, `Request too large for project \"search\"`) {
				t.Fatalf("status %d: %s", resp.StatusCode, b)
			}
		})
	}
	// Nothing reached the other project or user.
	if _, p, u := levelSpent(t, spy.Ledger, "free", "u9"); p != 0 || u != 0 {
		t.Fatalf("project free spent %d, user u9 %d", p, u)
	}
	// The token of another project passes.
	if resp, b := levelPost(t, g, "free/u9", chatBody("", 100)); resp.StatusCode != 200 {
		t.Fatalf("free/u9: %d %s", resp.StatusCode, b)
	}
}

// TestLevelRefusals: a refusal names the level and its window; a daily
// one and one that can never fit say x-should-retry: false, with no
// Retry-After; an answer's remaining-spend headers are the tightest
// level's; the spend view lists the caller's levels.
func TestLevelRefusals(t *testing.T) {
	_, bound, worst, least := proofWorst()
	userLimit := worst + least/2
	lim := budget.Limits{SpendPerMonth: 1000 * worst, Levels: &budget.LevelLimits{
		Projects:    map[string]budget.Limits{"tiny": {SpendPerMonth: least / 2}},
		UserDefault: budget.Limits{SpendPerDay: userLimit},
	}}
	g, _ := levelGateway(t, lim, nil, capBackend(bound))
	body := chatBody("", 100)

	// The user's day has room for one: the headers name what it has left.
	resp, b := levelPost(t, g, "search/u1", body)
	if resp.StatusCode != 200 {
		t.Fatalf("first: %d %s", resp.StatusCode, b)
	}
	if got, want := resp.Header.Get("X-Ratelimit-Limit-Spend"), price.Format(userLimit); got != want {
		t.Fatalf("limit-spend %q, want the user's %s", got, want)
	}
	if got, want := resp.Header.Get("X-Ratelimit-Remaining-Spend"), price.Format(userLimit-worst); got != want {
		t.Fatalf("remaining-spend %q, want the user's %s", got, want)
	}
	// Less than the least cost left for u1 today: refused by the user,
	// until 00:00 UTC, too far off for a client to wait.
	resp, b = levelPost(t, g, "search/u1", chatBody("", 100))
	if resp.StatusCode != 429 || !strings.Contains(b, `user \"u1\" spent`) || !strings.Contains(b, "today (UTC)") {
		t.Fatalf("second: %d %s", resp.StatusCode, b)
	}
	if ra, sr := resp.Header.Get("Retry-After"), resp.Header.Get("X-Should-Retry"); ra != "" || sr != "false" {
		t.Fatalf("a user's daily refusal: Retry-After %q, X-Should-Retry %q", ra, sr)
	}
	// A project whose whole limit is below the least cost: never fits,
	// no Retry-After.
	resp, b = levelPost(t, g, "tiny/u2", body)
	if resp.StatusCode != 429 || !strings.Contains(b, "request_too_large_for_budget") || !strings.Contains(b, `project \"tiny\"`) {
		t.Fatalf("tiny: %d %s", resp.StatusCode, b)
	}
	if ra, sr := resp.Header.Get("Retry-After"), resp.Header.Get("X-Should-Retry"); ra != "" || sr != "false" {
		t.Fatalf("a request that can never fit: Retry-After %q, X-Should-Retry %q", ra, sr)
	}

	// The spend view: the tenant's level, then the caller's project and
	// user.
	req, _ := http.NewRequest(http.MethodGet, g.srv.URL+"/v1/llmgw/spend", nil)
	req.Header.Set("Authorization", "Bearer search/u1")
	vr, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer vr.Body.Close()
	var v spendReport
	if err := json.NewDecoder(vr.Body).Decode(&v); err != nil {
		t.Fatal(err)
	}
	var levels []string
	for _, l := range v.Levels {
		levels = append(levels, l.Level+":"+l.Name)
	}
	if got := strings.Join(levels, ","); got != "tenant:t1,user:u1" {
		t.Fatalf("spend view levels %s, want tenant:t1,user:u1 (search has no limit of its own)", got)
	}
	if u := v.Levels[1]; len(u.Spend) != 1 || u.Spend[0].Period != "day" {
		t.Fatalf("user level %+v", u)
	}
}

// TestLevelsAbsentBehaveAsBefore: a tenant without levels reserves only
// at its own account, whatever the token's project and user.
func TestLevelsAbsentBehaveAsBefore(t *testing.T) {
	_, bound, worst, _ := proofWorst()
	g, spy := levelGateway(t, budget.Limits{SpendPerMonth: 10 * worst}, nil, capBackend(bound))
	if resp, b := levelPost(t, g, "search/u1", chatBody("", 100)); resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	d, err := spy.Ledger.Windows(context.Background(), "t1", budget.Scope{Project: "search", User: "u1"}, "probe")
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Levels) != 0 || d.Spend[2].Used == 0 {
		t.Fatalf("levels %+v, tenant spent %d", d.Levels, d.Spend[2].Used)
	}
}
