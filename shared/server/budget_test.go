package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmgw/gateway/shared/billing"
	"github.com/llmgw/gateway/shared/budget"
	"github.com/llmgw/gateway/shared/prompt"
	"github.com/llmgw/gateway/shared/request"
)

// budgetSpy is a real memory Ledger that records what the server asked of
// it: "limits", "reserve", "settle N", "keep".
type budgetSpy struct {
	*budget.Ledger
	mu    sync.Mutex
	calls []string
	last  budget.Decision
	money []int64 // the money of each settle, in micro-units
}

func newBudgetSpy(t *testing.T, cfg budget.Config, store budget.Store, tenants ...budget.TenantBudget) *budgetSpy {
	t.Helper()
	l, err := budget.New(cfg, tenants, store)
	if err != nil {
		t.Fatal(err)
	}
	return &budgetSpy{Ledger: l}
}

func (b *budgetSpy) note(s string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.calls = append(b.calls, s)
}

func (b *budgetSpy) log() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.calls...)
}

func (b *budgetSpy) Limits(tenant string) (budget.Limits, bool) {
	b.note("limits")
	return b.Ledger.Limits(tenant)
}

func (b *budgetSpy) Reserve(ctx context.Context, tenant, id string, ask budget.Ask) (budget.Decision, error) {
	b.note("reserve")
	d, err := b.Ledger.Reserve(ctx, tenant, id, ask)
	b.mu.Lock()
	b.last = d
	b.mu.Unlock()
	return d, err
}

func (b *budgetSpy) SettleCharge(ctx context.Context, tenant, id string, actual budget.Charge) (budget.Settlement, error) {
	// The settle's line and its money are recorded under one lock: a
	// test that has seen the line (settled) reads the money of the same
	// settle, never the one before it.
	b.mu.Lock()
	b.calls = append(b.calls, "settle "+strconv.FormatInt(actual.Tokens, 10))
	b.money = append(b.money, actual.Money)
	b.mu.Unlock()
	return b.Ledger.SettleCharge(ctx, tenant, id, actual)
}

func (b *budgetSpy) Keep(ctx context.Context, tenant, id string) (budget.Settlement, error) {
	b.note("keep")
	return b.Ledger.Keep(ctx, tenant, id)
}

// settled waits for the request's settle (or keep) and returns the calls.
func (b *budgetSpy) settled(t *testing.T) []string {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		calls := b.log()
		if last := calls[len(calls)-1]; strings.HasPrefix(last, "settle") || last == "keep" {
			return calls
		}
		if time.Now().After(deadline) {
			t.Fatalf("never settled: %v", calls)
		}
		time.Sleep(time.Millisecond)
	}
}

func (b *budgetSpy) decision() budget.Decision {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.last
}

// recordingBackend answers like sseBackend (or JSON for a non-stream
// request) and keeps the last body it received.
type recordingBackend struct {
	mu   sync.Mutex
	body []byte
	hits int
	h    http.HandlerFunc
}

func (rb *recordingBackend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	rb.mu.Lock()
	rb.body, rb.hits = b, rb.hits+1
	rb.mu.Unlock()
	if rb.h != nil {
		rb.h(w, r)
		return
	}
	sseBackend(w, r)
}

// calls is how many requests the backend has received.
func (rb *recordingBackend) calls() int {
	rb.mu.Lock()
	defer rb.mu.Unlock()
	return rb.hits
}

func (rb *recordingBackend) last(t *testing.T) map[string]any {
	t.Helper()
	rb.mu.Lock()
	defer rb.mu.Unlock()
	var m map[string]any
	if err := json.Unmarshal(rb.body, &m); err != nil {
		t.Fatalf("backend body %q: %v", rb.body, err)
	}
	return m
}

// TestBudgetNone: a tenant without a budget costs one Limits lookup: no
// reservation, no settle, no headers, the body forwarded as sent; and
// without Budgets, nothing at all.
func TestBudgetNone(t *testing.T) {
	spy := newBudgetSpy(t, budget.Config{}, nil, budget.TenantBudget{Tenant: "other", Limits: budget.Limits{TokensPerMinute: 10}})
	for name, b := range map[string]Budgets{"other tenants' budgets": spy, "no budgets": nil} {
		t.Run(name, func(t *testing.T) {
			rb := &recordingBackend{}
			g := newTestGatewayWith(t, func(d *Deps) { d.Budgets = b }, rb)
			resp, body := g.post(t, streamBody)
			if resp.StatusCode != 200 || !strings.Contains(string(body), "hello") {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			if h := resp.Header.Get("X-Ratelimit-Limit-Tokens"); h != "" {
				t.Fatalf("token headers without a budget: %q", h)
			}
			if _, ok := rb.last(t)["max_completion_tokens"]; ok {
				t.Fatal("output cap written without a budget")
			}
		})
	}
	if got := strings.Join(spy.log(), ","); got != "limits" {
		t.Fatalf("budget calls %q, want one lookup", got)
	}
}

// TestBudgetStrict: a tenant's request is reserved before it is forwarded
// (prompt bound + output cap), the cap is written into the body, the
// headers say what is left, and the counted usage settles it.
func TestBudgetStrict(t *testing.T) {
	spy := newBudgetSpy(t, budget.Config{}, nil, budget.TenantBudget{Tenant: "t1", Limits: budget.Limits{TokensPerMinute: 1000}})
	rb := &recordingBackend{}
	g := newTestGatewayWith(t, func(d *Deps) { d.Budgets = spy }, rb)
	resp, body := g.post(t, streamBody)
	if resp.StatusCode != 200 || string(body) != "data: {\"choices\":[{\"delta\":{\"content\":\"hello\"}}]}\n\ndata: [DONE]\n\n" {
		t.Fatalf("status %d: %q", resp.StatusCode, body)
	}
	bound := prompt.Scanner{}.Bound([]byte(streamBody), request.ChatCompletions.Prompt()).Tokens
	d := spy.decision()
	if d.Granted != 1000 || d.OutputCap != 1000-bound {
		t.Fatalf("decision %+v, bound %d", d, bound)
	}
	if got := rb.last(t)["max_completion_tokens"]; got != float64(1000-bound) {
		t.Fatalf("forwarded cap %v, want %d", got, 1000-bound)
	}
	if resp.Header.Get("X-Ratelimit-Limit-Tokens") != "1000" || resp.Header.Get("X-Ratelimit-Remaining-Tokens") != "0" ||
		resp.Header.Get("X-Ratelimit-Reset-Tokens") == "" || resp.Header.Get("X-Ratelimit-Limit-Requests") != "10" {
		t.Fatalf("headers %v", resp.Header)
	}
	if got := strings.Join(spy.settled(t), ","); got != "limits,reserve,settle 4" {
		t.Fatalf("budget calls %q", got)
	}
	l := g.lastLog(t)
	if l["budget_reserved"] != float64(1000) || l["budget_charged"] != float64(4) || l["output_cap"] != float64(1000-bound) {
		t.Fatalf("log %v", l)
	}

	// The refund came back: the next request is granted the whole minute
	// less the 4 tokens used; a client cap below the grant is kept as sent.
	resp, _ = g.post(t, `{"model":"m","stream":true,"max_tokens":7,"messages":[{"role":"user","content":"hi"}]}`)
	if resp.StatusCode != 200 || resp.Header.Get("X-Ratelimit-Remaining-Tokens") != strconv.FormatInt(1000-4-(bound+7), 10) {
		t.Fatalf("status %d remaining %q", resp.StatusCode, resp.Header.Get("X-Ratelimit-Remaining-Tokens"))
	}
	// The client's own cap is also written where the backend reads it.
	if m := rb.last(t); m["max_tokens"] != float64(7) || m["max_completion_tokens"] != float64(7) {
		t.Fatalf("client cap not written where the backend reads it: %v", m)
	}
}

// TestBudgetRefusals: a request the budget cannot hold is refused before
// any backend is called, with the token headers: one that would fit
// later gets 429, rate_limit_exceeded (type tokens) with Retry-After
// and x-should-retry: true for the minute, insufficient_quota for the
// (monthly) quota with x-should-retry: false and no Retry-After (a
// client would wait for weeks); one whose least reservation is above the
// whole limit can never run and gets request_too_large_for_budget (same
// type) with x-should-retry: false and no Retry-After (it was once told
// to retry when the window reset).
func TestBudgetRefusals(t *testing.T) {
	tpm := func(n int64) budget.Limits {
		return budget.Limits{TokensPerMinute: n, TokenQuota: 1 << 40, QuotaPeriod: budget.PeriodDay}
	}
	quota := func(n int64) budget.Limits {
		return budget.Limits{TokensPerMinute: 1 << 40, TokenQuota: n, QuotaPeriod: budget.PeriodMonth}
	}
	for _, tt := range []struct {
		name, code, typ string
		limits          budget.Limits
		hog             int64 // reserved first by another request
		limit, left     string
		retry           bool   // a Retry-After
		should          string // x-should-retry
	}{
		{"tokens per minute, later", "rate_limit_exceeded", "tokens", tpm(100), 80, "100", "20", true, "true"},
		{"quota, later", "insufficient_quota", "insufficient_quota", quota(100), 80, "100", "20", false, "false"},
		{"tokens per minute, never", "request_too_large_for_budget", "tokens", tpm(20), 0, "20", "20", false, "false"},
		{"quota, never", "request_too_large_for_budget", "insufficient_quota", quota(20), 0, "20", "20", false, "false"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := newBudgetSpy(t, budget.Config{}, nil, budget.TenantBudget{Tenant: "t1", Limits: tt.limits})
			if tt.hog > 0 {
				if d, err := b.Ledger.Reserve(context.Background(), "t1", "hog", budget.Ask{PromptBound: tt.hog, ClientCap: 1}); err != nil || d.Granted != tt.hog+1 {
					t.Fatalf("hog: %+v %v", d, err)
				}
				if _, err := b.Ledger.Settle(context.Background(), "t1", "hog", tt.hog); err != nil {
					t.Fatal(err)
				}
			}
			rb := &recordingBackend{}
			g := newTestGatewayWith(t, func(d *Deps) { d.Budgets = b }, rb)
			resp, body := g.post(t, streamBody) // its least reservation is 45
			var e errorBody
			if err := json.Unmarshal(body, &e); err != nil || resp.StatusCode != 429 || *e.Error.Code != tt.code || e.Error.Type != tt.typ {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			if ra, err := strconv.Atoi(resp.Header.Get("Retry-After")); tt.retry != (err == nil && ra >= 1) {
				t.Fatalf("Retry-After %q; want one: %v", resp.Header.Get("Retry-After"), tt.retry)
			}
			if got := resp.Header.Get("X-Should-Retry"); got != tt.should {
				t.Fatalf("X-Should-Retry %q, want %q", got, tt.should)
			}
			if tt.code == "request_too_large_for_budget" && (!strings.Contains(e.Error.Message, "never run") || !strings.Contains(e.Error.Message, "needs at least 45") || !strings.Contains(e.Error.Message, "limit is 20")) {
				t.Fatalf("message %q does not say what it needs and what the limit is", e.Error.Message)
			}
			if resp.Header.Get("X-Ratelimit-Limit-Tokens") != tt.limit || resp.Header.Get("X-Ratelimit-Remaining-Tokens") != tt.left {
				t.Fatalf("headers %v", resp.Header)
			}
			if rb.calls() != 0 {
				t.Fatal("the backend was called")
			}
			if l := g.lastLog(t); l["outcome"] != tt.code || l["budget_reserved"] != float64(0) {
				t.Fatalf("log %v", l)
			}
		})
	}
}

// TestBudgetSettlement: each way a request can end settles its
// reservation once, with what the backends may have spent.
func TestBudgetSettlement(t *testing.T) {
	ignoring := func(w http.ResponseWriter, r *http.Request) { // streams 50 tokens whatever the cap
		w.Header().Set("Content-Type", "text/event-stream")
		for range 50 {
			if _, err := io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n"); err != nil {
				return
			}
			w.(http.Flusher).Flush()
		}
		_, _ = io.WriteString(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":50,\"total_tokens\":53}}\n\ndata: [DONE]\n\n")
	}
	status := func(code int) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(code)
			_, _ = io.WriteString(w, `{"error":{"message":"no","type":"invalid_request_error","param":null,"code":null}}`)
		}
	}
	tests := []struct {
		name    string
		body    string
		h       http.HandlerFunc
		status  int
		settle  string
		code    string // in the stream's error event
		clientN int    // content events the client gets (-1: do not check)
	}{
		{name: "json usage", body: `{"model":"m","messages":[]}`, h: func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}}`)
		}, status: 200, settle: "settle 15", clientN: -1},
		{name: "backend 400 relayed spends nothing", body: `{"model":"m","messages":[]}`, h: status(400), status: 400, settle: "settle 0", clientN: -1},
		{name: "every backend 500 spends nothing", body: streamBody, h: status(500), status: 502, settle: "settle 0", clientN: -1},
		{name: "stream without usage keeps the reservation", body: streamBody, h: func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n")
		}, status: 200, settle: "reservation", clientN: 1},
		{name: "backend ignoring the cap is cut", body: streamBody, h: ignoring, status: 200, code: "budget_exceeded", clientN: 5 + 2 + 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spy := newBudgetSpy(t, budget.Config{}, nil,
				budget.TenantBudget{Tenant: "t1", Limits: budget.Limits{TokensPerMinute: 100000, MaxOutputTokens: 5}})
			g := newTestGatewayWith(t, func(d *Deps) { d.Budgets = spy }, &recordingBackend{h: tt.h})
			resp, body := g.post(t, tt.body)
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			// The client has its answer before the settle (a JSON answer
			// is complete at its Content-Length): wait for it.
			calls := spy.settled(t)
			last := calls[len(calls)-1]
			if tt.code != "" {
				data := strings.Split(strings.TrimSpace(string(body)), "\n\n")
				if !strings.Contains(data[len(data)-1], `"code":"`+tt.code+`"`) || strings.Contains(string(body), "[DONE]") {
					t.Fatalf("stream does not end with one %s event: %q", tt.code, body)
				}
				d := spy.decision()
				// Cut at the cap's allowance, charged at least the reservation.
				if want := "settle " + strconv.FormatInt(max(d.Granted, d.Requested-1+int64(tt.clientN)), 10); last != want {
					t.Fatalf("settled %q, want %q (decision %+v)", last, want, d)
				}
			} else if tt.settle == "reservation" {
				if want := "settle " + strconv.FormatInt(spy.decision().Granted, 10); last != want {
					t.Fatalf("budget calls %v, want the last %q", calls, want)
				}
			} else if last != tt.settle {
				t.Fatalf("budget calls %v, want the last %q", calls, tt.settle)
			}
			if tt.clientN >= 0 {
				if n := strings.Count(string(body), `"content"`); n != tt.clientN {
					t.Fatalf("client got %d content events, want %d: %q", n, tt.clientN, body)
				}
			}
			if n := strings.Count(strings.Join(calls, ","), "settle") + strings.Count(strings.Join(calls, ","), "keep"); n != 1 {
				t.Fatalf("settled %d times: %v", n, calls)
			}
		})
	}
}

// failingStore is a budget store that is down.
type failingStore struct{}

func (failingStore) Reserve(context.Context, string, string, budget.Request) (budget.Decision, error) {
	return budget.Decision{}, errors.New("connection refused")
}

func (failingStore) Settle(context.Context, string, string, budget.Charge) (budget.Settlement, error) {
	return budget.Settlement{}, errors.New("connection refused")
}

// TestBudgetStoreDown: with the store down, fail-open serves (the tenant's
// output cap still written, nothing to settle, no token headers),
// fail-closed answers 503, and a quota fails closed whatever the policy.
func TestBudgetStoreDown(t *testing.T) {
	for _, tt := range []struct {
		policy string
		limits budget.Limits
		status int
	}{
		{budget.PolicyOpen, budget.Limits{TokensPerMinute: 1000, MaxOutputTokens: 9}, 200},
		{budget.PolicyClosed, budget.Limits{TokensPerMinute: 1000, MaxOutputTokens: 9}, 503},
		{budget.PolicyOpen, budget.Limits{TokenQuota: 1000, QuotaPeriod: budget.PeriodDay, MaxOutputTokens: 9}, 503},
	} {
		t.Run(fmt.Sprintf("%s quota=%v", tt.policy, tt.limits.TokenQuota > 0), func(t *testing.T) {
			spy := newBudgetSpy(t, budget.Config{FailurePolicy: tt.policy}, failingStore{}, budget.TenantBudget{Tenant: "t1", Limits: tt.limits})
			rb := &recordingBackend{}
			g := newTestGatewayWith(t, func(d *Deps) { d.Budgets = spy }, rb)
			resp, body := g.post(t, streamBody)
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			if tt.status == 503 {
				if errorCode(t, body) != "budget_unavailable" || resp.Header.Get("Retry-After") == "" {
					t.Fatalf("%s %v", body, resp.Header)
				}
				return
			}
			if rb.last(t)["max_completion_tokens"] != float64(9) || resp.Header.Get("X-Ratelimit-Limit-Tokens") != "" {
				t.Fatalf("fail-open: body %v headers %v", rb.last(t), resp.Header)
			}
			if got := strings.Join(spy.log(), ","); got != "limits,reserve" {
				t.Fatalf("budget calls %q: a degraded request has nothing to settle", got)
			}
		})
	}
}

// TestBudgetClientGone: a client that hangs up mid-stream is still
// settled, once; without reported usage, at its prompt bound, the one
// event relayed and the allowance for what was in flight
// (billing.StoppedAllowance).
func TestBudgetClientGone(t *testing.T) {
	spy := newBudgetSpy(t, budget.Config{}, nil, budget.TenantBudget{Tenant: "t1", Limits: budget.Limits{TokensPerMinute: 100000}})
	started := make(chan struct{})
	g := newTestGatewayWith(t, func(d *Deps) { d.Budgets = spy }, &recordingBackend{h: func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n")
		w.(http.Flusher).Flush()
		close(started)
		<-r.Context().Done()
	}})
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, g.srv.URL+"/v1/chat/completions", strings.NewReader(streamBody))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	<-started
	cancel()
	resp.Body.Close()
	want := prompt.Scanner{}.Bound([]byte(streamBody), request.ChatCompletions.Prompt()).Tokens + 1 + billing.StoppedAllowance
	if calls := spy.settled(t); calls[len(calls)-1] != "settle "+strconv.FormatInt(want, 10) {
		t.Fatalf("budget calls %v, want %d settled (reserved %d)", calls, want, spy.decision().Granted)
	}
}

// TestBudgetEstimate: estimate mode reserves nothing and writes only the
// tenant's own cap; the usage is charged afterwards, and a tenant at its
// limit is refused.
func TestBudgetEstimate(t *testing.T) {
	spy := newBudgetSpy(t, budget.Config{Mode: budget.ModeEstimate}, nil,
		budget.TenantBudget{Tenant: "t1", Limits: budget.Limits{TokensPerMinute: 6}})
	rb := &recordingBackend{}
	g := newTestGatewayWith(t, func(d *Deps) { d.Budgets = spy }, rb)
	resp, _ := g.post(t, streamBody) // its prompt bound alone is over 6: no matter here
	if resp.StatusCode != 200 || resp.Header.Get("X-Ratelimit-Remaining-Tokens") != "6" {
		t.Fatalf("status %d headers %v", resp.StatusCode, resp.Header)
	}
	if m := rb.last(t); m["max_completion_tokens"] != nil || m["max_tokens"] != nil {
		t.Fatalf("estimate mode wrote a cap: %v", m)
	}
	if calls := spy.settled(t); calls[len(calls)-1] != "settle 4" {
		t.Fatalf("budget calls %v", calls)
	}
	resp, _ = g.post(t, streamBody) // 4 used, 2 left: admitted, overshoots
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	spy.settled(t)
	resp, body := g.post(t, streamBody) // 8 used: refused
	if resp.StatusCode != 429 || errorCode(t, body) != "rate_limit_exceeded" {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
}
