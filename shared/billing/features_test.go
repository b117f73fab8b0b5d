package billing

import (
	"slices"
	"strings"
	"testing"

	"github.com/llmgw/gateway/shared/request"
	"github.com/llmgw/gateway/shared/sse"
)

func search(uses string) []byte {
	if uses == "" {
		return []byte(`{"model":"m","max_tokens":16,"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"web_search_20250305","name":"web_search"}]}`)
	}
	return []byte(`{"model":"m","max_tokens":16,"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"web_search_20250305","name":"web_search","max_uses":` + uses + `}]}`)
}

// TestFeatures: what a tenant may not use is refused with the param that
// asks for it; what it may is priced per use, in tokens from its grant
// and in money from the catalogue, bounded by max_uses or else the
// grant's default uses.
func TestFeatures(t *testing.T) {
	cat := prices(t)
	tab := tenants()
	for _, c := range []struct {
		name, tenant string
		raw          []byte
		budgeted     bool
		// the refusal's code and param ("" for none), or the priced uses.
		code, param  string
		total, money int64
	}{
		{"no feature asked", "plain", []byte(`{"model":"m","max_tokens":16,"messages":[]}`), true, "", "", 0, 0},
		{"a feature the tenant lacks", "plain", search("2"), true, "feature_not_enabled", "tools[0]", 0, 0},
		{"a tool type nobody knows", "searcher", []byte(`{"model":"m","max_tokens":16,"messages":[],"tools":[{"type":"tool_search_tool_regex_20251119","name":"s"}]}`), true, "unsupported_tool", "tools[0].type", 0, 0},
		{"unbounded uses under a budget", "searcher", search(""), true, "missing_required_parameter", "tools[0].max_uses", 0, 0},
		{"unbounded uses without a budget: the default uses", "searcher", search(""), false, "", "", 300, 30_000},
		{"bounded uses", "searcher", search("4"), true, "", "", 400, 40_000},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, err := Features(tab.Lookup(c.tenant), request.Messages, c.raw, func() bool { return c.budgeted }, cat)
			if c.code != "" {
				r := refusal(t, err)
				if r.Kind != Invalid || r.Code != c.code || r.Param != c.param {
					t.Fatalf("refused %+v, want %s at %s", r, c.code, c.param)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.total != c.total || p.money != c.money {
				t.Fatalf("priced %d tokens and %d micros, want %d and %d", p.total, p.money, c.total, c.money)
			}
		})
	}
}

// TestFeaturesCharge: a feature the backend counts is charged by its
// count (more than reserved when it ran more), else as reserved.
func TestFeaturesCharge(t *testing.T) {
	p, err := Features(tenants().Lookup("searcher"), request.Messages, search("4"), func() bool { return true }, prices(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name          string
		u             Usage
		tokens, money int64
	}{
		{"not counted: as reserved", Usage{}, 400, 40_000},
		{"counted fewer", Usage{ToolsReported: true, WebSearches: 2}, 200, 20_000},
		{"counted more", Usage{ToolsReported: true, WebSearches: 6}, 600, 60_000},
		{"counted none", Usage{ToolsReported: true}, 0, 0},
		{"call items: their count", Usage{Calls: calls(5)}, 500, 50_000},
		{"call items none: none", Usage{Calls: calls(0)}, 0, 0},
		{"more call items than the backend counted", Usage{ToolsReported: true, WebSearches: 2, Calls: calls(3)}, 300, 30_000},
		{"more counted than call items", Usage{ToolsReported: true, WebSearches: 3, Calls: calls(1)}, 300, 30_000},
		{"call items not read: the count", Usage{ToolsReported: true, WebSearches: 3, Calls: sse.ToolCalls{N: [sse.NumHostedTools]int64{sse.WebSearchCall: 9}}}, 300, 30_000},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got, gotMoney := p.charge(c.u), p.chargeMoney(c.u); got != c.tokens || gotMoney != c.money {
				t.Fatalf("charged %d tokens and %d micros, want %d and %d", got, gotMoney, c.tokens, c.money)
			}
		})
	}
}

// calls is an answer's output read with n web_search_call items.
func calls(n int64) sse.ToolCalls {
	return sse.ToolCalls{N: [sse.NumHostedTools]int64{sse.WebSearchCall: n}, Counted: true}
}

func TestMulTokens(t *testing.T) {
	for _, c := range []struct{ a, b, want int64 }{
		{3, 100, 300}, {0, 100, 0}, {3, 0, 0}, {-1, 100, 0}, {1 << 52, 1 << 20, 1 << 53},
	} {
		if got := mulTokens(c.a, c.b); got != c.want {
			t.Errorf("mulTokens(%d, %d) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}

// TestBetas: the default list passes, a beta a tenant lists passes for it
// alone, the rest is dropped; nothing is returned when nothing is
// dropped (the header stays as sent).
func TestBetas(t *testing.T) {
	tab := tenants()
	for _, c := range []struct {
		name, tenant  string
		values        []string
		kept, dropped []string
	}{
		{"defaults only", "plain", []string{"interleaved-thinking-2025-05-14"}, nil, nil},
		{"one dropped", "plain", []string{"interleaved-thinking-2025-05-14, files-api-2025-04-14,context-1m-2025-08-07"},
			[]string{"interleaved-thinking-2025-05-14"}, []string{"files-api-2025-04-14", "context-1m-2025-08-07"}},
		{"every one dropped", "plain", []string{"mcp-client-2025-04-04"}, nil, []string{"mcp-client-2025-04-04"}},
		{"the tenant's own", "searcher", []string{"interleaved-thinking-2025-05-14", "files-api-2025-04-14"}, nil, nil},
		{"none sent", "plain", nil, nil, nil},
		// What Claude Code 2.1.332 sends on every request (claude -p on
		// claude-sonnet-4-5, and auto mode's dangerous-tool-use): each a
		// default, so none is dropped. Before, the five new ones were.
		{"Claude Code's", "plain", []string{claudeCodeBetas}, nil, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			kept, dropped, err := Betas(tab.Lookup(c.tenant), c.values, []byte(`{"model":"m"}`))
			if err != nil || !slices.Equal(kept, c.kept) || !slices.Equal(dropped, c.dropped) {
				t.Fatalf("kept %q dropped %q (%v), want %q and %q", kept, dropped, err, c.kept, c.dropped)
			}
		})
	}
}

// claudeCodeBetas is the anthropic-beta header Claude Code 2.1.332 sends
// (the betas it sent through the gateway, plus auto mode's).
const claudeCodeBetas = "claude-code-20250219,interleaved-thinking-2025-05-14,context-management-2025-06-27,thinking-token-count-2026-05-13," +
	"advanced-tool-use-2025-11-20,thinking-display-updates-2026-08-18,effort-2025-11-24,dangerous-tool-use-2026-09-03"

// TestBetaFields: the header and the body agree. Claude Code's body
// fields pass with their (default) betas; a body field whose beta is
// dropped for the tenant is refused naming the field and the beta, never
// forwarded without it; a field of that name below the top level is the
// body's own.
func TestBetaFields(t *testing.T) {
	tab := tenants()
	for _, c := range []struct {
		name, tenant, betas, body string
		param                     string // "" served
	}{
		{"Claude Code's betas and fields", "plain", claudeCodeBetas,
			`{"model":"m","context_management":{"edits":[{"type":"clear_thinking_20251015","keep":"all"}]},"output_config":{"effort":"high"},"safeguards":{},"tools":[{"name":"x","defer_loading":true}]}`, ""},
		{"fast mode, beta off", "plain", "claude-code-20250219,fast-mode-2026-02-01", `{"model":"m","speed":"fast"}`, "speed"},
		{"fast mode, beta off, escaped key", "plain", "fast-mode-2026-02-01", `{"model":"m","sp\u0065ed":"fast"}`, "speed"},
		{"MCP servers, beta off", "plain", "mcp-client-2025-04-04", `{"model":"m","mcp_servers":[{"url":"https://x"}]}`, "mcp_servers"},
		{"fast mode, beta off, no field", "plain", "fast-mode-2026-02-01", `{"model":"m"}`, ""},
		{"a nested field of that name", "plain", "fast-mode-2026-02-01", `{"model":"m","metadata":{"speed":"fast"}}`, ""},
		{"the field's other beta allowed", "mcp", "mcp-client-2025-04-04,mcp-servers-2025-12-04", `{"model":"m","mcp_servers":[{"url":"https://x"}]}`, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := Betas(tab.Lookup(c.tenant), []string{c.betas}, []byte(c.body))
			if c.param == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			r := refusal(t, err)
			if r.Kind != Invalid || r.Code != "beta_not_enabled" || r.Param != c.param || !strings.Contains(r.Message, "anthropic_beta") {
				t.Fatalf("refusal %+v", r)
			}
		})
	}
}
