package server

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/llmgw/gateway/shared/budget"
	"github.com/llmgw/gateway/shared/tenant"
)

// messagesBackend answers the Messages API with a fixed usage, counting
// calls and keeping the last Anthropic-Beta it was sent.
type messagesBackend struct {
	mu    sync.Mutex
	calls int
	beta  string
	// silent: the usage has no server_tool_use (else 2 web searches).
	silent bool
}

func (b *messagesBackend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	b.mu.Lock()
	b.calls++
	b.beta = r.Header.Get("Anthropic-Beta")
	tools := `,"server_tool_use":{"web_search_requests":2}`
	if b.silent {
		tools = ""
	}
	b.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, `{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn","usage":{"input_tokens":10,"output_tokens":5`+tools+`}}`)
}

func (b *messagesBackend) seen() (int, string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.calls, b.beta
}

// featuresGateway: an anthropic pool for model "m"; tenant t1 may use web
// search (100 tokens a use, 3 reserved by default) and the files-api
// beta, tenant t2 nothing; both have a token budget.
func featuresGateway(t *testing.T, b http.Handler, kind string) (*testGateway, *budgetSpy) {
	t.Helper()
	srv := httptest.NewServer(b)
	t.Cleanup(srv.Close)
	lim := budget.Limits{TokensPerMinute: 1_000_000}
	spy := newBudgetSpy(t, budget.Config{}, nil, budget.TenantBudget{Tenant: "t1", Limits: lim}, budget.TenantBudget{Tenant: "t2", Limits: lim})
	g := gatewayOnKind(t, kind, func(d *Deps) {
		d.Auth = tokenIsTenant{}
		d.Budgets = spy
		d.Tenants = tenant.NewTable([]tenant.Row{
			{ID: "t1", Models: []string{"m"}, Grants: map[string]tenant.Grant{"web_search": {CostPerUse: 100, DefaultUses: 3}}, Betas: []string{"files-api-2025-04-14"}},
			{ID: "t2", Models: []string{"m"}},
		})
	}, srv.URL)
	return g, spy
}

func messagesCall(t *testing.T, g *testGateway, tenantID, body, beta string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest("POST", g.srv.URL+"/v1/messages", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+tenantID)
	req.Header.Set("Anthropic-Version", "2023-06-01")
	if beta != "" {
		req.Header.Set("Anthropic-Beta", beta)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp, out
}

// TestFeaturesOffByDefault: each server-side feature a tenant's config does
// not list is refused, 400 in the API's error shape with the param that
// asks for it and the setting that enables it, and no backend call.
// (Before: every one of these was forwarded; one web search request with
// max_uses 1000 reserved 65,908 tokens and was charged 182.)
func TestFeaturesOffByDefault(t *testing.T) {
	t.Parallel()
	b := &messagesBackend{}
	g, _ := featuresGateway(t, b, "anthropic")
	for _, c := range []struct{ name, body, param string }{
		{"web_search", `{"model":"m","max_tokens":16,"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"web_search_20250305","name":"web_search","max_uses":1000}]}`, "tools[0]"},
		{"code_execution", `{"model":"m","max_tokens":16,"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"code_execution_20250825","name":"code_execution"}]}`, "tools[0]"},
		{"mcp_servers", `{"model":"m","max_tokens":16,"messages":[{"role":"user","content":"hi"}],"mcp_servers":[{"type":"url","url":"https://evil.example/mcp","name":"x"}]}`, "mcp_servers"},
		{"container", `{"model":"m","max_tokens":16,"messages":[{"role":"user","content":"hi"}],"container":"container_of_another"}`, "container"},
		{"file_id", `{"model":"m","max_tokens":16,"messages":[{"role":"user","content":[{"type":"document","source":{"type":"file","file_id":"file_of_another"}}]}]}`, "messages.file_id"},
	} {
		t.Run(c.name, func(t *testing.T) {
			resp, body := messagesCall(t, g, "t2", c.body, "")
			s := string(body)
			if resp.StatusCode != 400 || !strings.Contains(s, `"type":"invalid_request_error"`) || !strings.Contains(s, c.param) || !strings.Contains(s, "tenants[].features") {
				t.Fatalf("%d %s", resp.StatusCode, body)
			}
		})
	}
	resp, body := messagesCall(t, g, "t2", `{"model":"m","max_tokens":16,"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"tool_search_tool_regex_20251119","name":"s"}]}`, "")
	if resp.StatusCode != 400 || !strings.Contains(string(body), "tools[0].type") {
		t.Fatalf("unknown tool type: %d %s", resp.StatusCode, body)
	}
	if n, _ := b.seen(); n != 0 {
		t.Fatalf("the backend was called %d times", n)
	}
}

// TestFeaturesPerTenant: web search is on for t1 and off for t2. t1's
// request is forwarded, its uses reserved at 100 tokens each (max_uses 4)
// and charged with its tokens by the backend's count
// (usage.server_tool_use: 2 searches), or as reserved when the backend
// counts none; t2's is refused without a backend call. t1 has a token
// budget, so a priced search without max_uses (which the backend could
// repeat past any reservation) is refused naming tools[0].max_uses.
func TestFeaturesPerTenant(t *testing.T) {
	t.Parallel()
	b := &messagesBackend{}
	g, spy := featuresGateway(t, b, "anthropic")
	const search = `{"model":"m","max_tokens":16,"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"web_search_20250305","name":"web_search"%s}]}`
	if resp, body := messagesCall(t, g, "t2", strings.Replace(search, "%s", "", 1), ""); resp.StatusCode != 400 {
		t.Fatalf("t2: %d %s", resp.StatusCode, body)
	}
	if n, _ := b.seen(); n != 0 {
		t.Fatalf("t2's request reached the backend")
	}
	resp, body := messagesCall(t, g, "t1", strings.Replace(search, "%s", "", 1), "")
	if resp.StatusCode != 400 || !strings.Contains(string(body), "'tools[0].max_uses' is required") {
		t.Fatalf("t1 without max_uses: %d %s, want 400 naming tools[0].max_uses", resp.StatusCode, body)
	}
	if n, _ := b.seen(); n != 0 {
		t.Fatalf("t1's unbounded search reached the backend")
	}
	for _, c := range []struct {
		maxUses       string
		uses, charged int64
		silent        bool
	}{{`,"max_uses":4`, 4, 2, false}, {`,"max_uses":3`, 3, 2, false}, {`,"max_uses":4`, 4, 4, true}} {
		b.mu.Lock()
		b.silent = c.silent
		b.mu.Unlock()
		resp, body := messagesCall(t, g, "t1", strings.Replace(search, "%s", c.maxUses, 1), "")
		if resp.StatusCode != 200 {
			t.Fatalf("t1 %s: %d %s", c.maxUses, resp.StatusCode, body)
		}
		calls := spy.settled(t)
		want := "settle " + strconv.FormatInt(15+100*c.charged, 10) // 10 input + 5 output + the uses charged
		if calls[len(calls)-1] != want {
			t.Fatalf("t1 %s: %v, want the last %q", c.maxUses, calls, want)
		}
		if d := spy.decision(); d.Granted < 100*c.uses+16 {
			t.Fatalf("t1 %s: reserved %d, want at least %d for the uses and the cap", c.maxUses, d.Granted, 100*c.uses+16)
		}
	}
}

// TestAnthropicBetaAllowList: a beta on the default list passes; one that
// switches on account state (files-api) reaches the backend only for a
// tenant whose anthropic_beta lists it, and is dropped and logged for
// the others. (Before: every value was forwarded.) Claude Code's betas
// reach the backend whole, with the body fields they gate; a body field
// whose beta is dropped is refused, never forwarded without its beta.
func TestAnthropicBetaAllowList(t *testing.T) {
	t.Parallel()
	b := &messagesBackend{}
	g, _ := featuresGateway(t, b, "anthropic")
	const body = `{"model":"m","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`
	for _, c := range []struct{ tenant, sent, want string }{
		{"t2", "interleaved-thinking-2025-05-14, files-api-2025-04-14,context-1m-2025-08-07", "interleaved-thinking-2025-05-14"},
		{"t2", "mcp-client-2025-04-04", ""},
		{"t1", "interleaved-thinking-2025-05-14,files-api-2025-04-14", "interleaved-thinking-2025-05-14,files-api-2025-04-14"},
		// Claude Code 2.1.332's: before, five of them were dropped.
		{"t2", ccBetas, ccBetas},
	} {
		if resp, out := messagesCall(t, g, c.tenant, body, c.sent); resp.StatusCode != 200 {
			t.Fatalf("%s %q: %d %s", c.tenant, c.sent, resp.StatusCode, out)
		}
		if _, got := b.seen(); got != c.want {
			t.Errorf("%s sent %q: the backend got %q, want %q", c.tenant, c.sent, got, c.want)
		}
	}
	if !strings.Contains(fmt.Sprint(g.log.lines(t)), "anthropic-beta values dropped") {
		t.Fatal("no log line names the dropped betas")
	}
	const ccBody = `{"model":"m","max_tokens":16,"messages":[{"role":"user","content":"hi"}],"context_management":{"edits":[{"type":"clear_thinking_20251015","keep":"all"}]},"output_config":{"effort":"low"},"safeguards":{}}`
	if resp, out := messagesCall(t, g, "t2", ccBody, ccBetas); resp.StatusCode != 200 {
		t.Fatalf("Claude Code's body: %d %s", resp.StatusCode, out)
	}
	before, _ := b.seen()
	resp, out := messagesCall(t, g, "t2", `{"model":"m","max_tokens":16,"speed":"fast","messages":[{"role":"user","content":"hi"}]}`, "fast-mode-2026-02-01")
	if after, _ := b.seen(); resp.StatusCode != 400 || !strings.Contains(string(out), "fast-mode-2026-02-01") || after != before {
		t.Fatalf("a gated field without its beta: %d %s (backend called %d times)", resp.StatusCode, out, after-before)
	}
}

// ccBetas is the anthropic-beta header Claude Code 2.1.332 sends (claude
// -p on claude-sonnet-4-5, and auto mode's dangerous-tool-use).
const ccBetas = "claude-code-20250219,interleaved-thinking-2025-05-14,context-management-2025-06-27,thinking-token-count-2026-05-13," +
	"advanced-tool-use-2025-11-20,thinking-display-updates-2026-08-18,effort-2025-11-24,dangerous-tool-use-2026-09-03"

// TestResponsesFeaturesOff: the Responses API's server tools and file ids
// are refused for a tenant without them, 400 with OpenAI's error JSON and
// the param, before any backend call.
func TestResponsesFeaturesOff(t *testing.T) {
	t.Parallel()
	b := &responsesBackend{}
	g := ownershipGateway(t, b, nil)
	for _, c := range []struct{ body, code, param string }{
		{`{"model":"m","input":"hi","tools":[{"type":"file_search","vector_store_ids":["vs_of_another"]}]}`, "feature_not_enabled", "tools[0]"},
		{`{"model":"m","input":"hi","tools":[{"type":"code_interpreter","container":{"type":"auto"}}]}`, "feature_not_enabled", "tools[0]"},
		{`{"model":"m","input":"hi","tools":[{"type":"mcp","server_label":"x","server_url":"https://evil.example","authorization":"t"}]}`, "feature_not_enabled", "tools[0]"},
		{`{"model":"m","input":"hi","tools":[{"type":"web_search"}]}`, "feature_not_enabled", "tools[0]"},
		{`{"model":"m","input":"hi","tools":[{"type":"image_generation"}]}`, "feature_not_enabled", "tools[0]"},
		{`{"model":"m","input":"hi","tools":[{"type":"computer_use_preview","display_width":1,"display_height":1,"environment":"linux"}]}`, "feature_not_enabled", "tools[0]"},
		{`{"model":"m","input":[{"role":"user","content":[{"type":"input_file","file_id":"file-of-another"}]}]}`, "feature_not_enabled", "input.file_id"},
		{`{"model":"m","input":"hi","tools":[{"type":"some_new_server_tool"}]}`, "unsupported_tool", "tools[0].type"},
	} {
		resp, body := g.call(t, "POST", "/v1/responses", "t2", c.body)
		if resp.StatusCode != 400 || errorCode(t, body) != c.code || !strings.Contains(string(body), `"param":"`+c.param+`"`) {
			t.Errorf("%s: %d %s", c.body, resp.StatusCode, body)
		}
	}
	if n := b.count(); n != 0 {
		t.Fatalf("the backend was called %d times", n)
	}
	if resp, body := g.call(t, "POST", "/v1/responses", "t2", `{"model":"m","input":"hi","tools":[{"type":"function","name":"f","parameters":{"type":"object","properties":{}}}]}`); resp.StatusCode != 200 {
		t.Fatalf("a function tool: %d %s", resp.StatusCode, body)
	}
}
