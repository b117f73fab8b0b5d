package main

import (
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/llmgw/gateway/scripts/stub"
	"github.com/llmgw/gateway/shared/prompt"
	"github.com/llmgw/gateway/shared/request"
)

// TestAgentFirstReservation measures what the real agents' first
// generation reserves through the gateway (docs/metering.md's table of
// reservations): Claude Code's first /v1/messages as a tenant
// with room (the prompt bound and the cap) and as one whose per-minute
// limit is below the bound (so the pool's count_tokens is asked), and
// Codex's first /v1/responses. It logs the body's size, its prompt bound
// and what was reserved and charged; with LLMGW_CAPTURE_DIR set it writes
// each first body there, so the same body can be measured on other code.
func TestAgentFirstReservation(t *testing.T) {
	t.Parallel()
	capture := func(t *testing.T, name string, body []byte) {
		if dir := os.Getenv("LLMGW_CAPTURE_DIR"); dir != "" {
			if err := os.WriteFile(filepath.Join(dir, name), body, 0o600); err != nil {
				t.Error(err)
			}
		}
	}
	first := func(t *testing.T, g *gw, tenant, path string) map[string]any {
		t.Helper()
		for _, l := range tenantLog(g, tenant) {
			if l["path"] == path {
				return l
			}
		}
		t.Fatalf("no %s in %s's access log:\n%s", path, tenant, g.logs.String())
		return nil
	}

	t.Run("claude code", func(t *testing.T) {
		t.Parallel()
		claude := claudeCode(t)
		st := stub.New(stub.Options{TTFT: time.Millisecond, Interval: time.Millisecond, Tokens: 8, APIKey: backendKey, Name: "claude-code-stub"})
		srv := httptest.NewServer(st)
		t.Cleanup(func() { st.Close(); srv.Close() })
		g := startGateway(t, options{tenants: claudeCodeTenants +
			"  - {id: tight, models: [claude-sonnet-4-5, claude-haiku-4-5], requests: 1000, interval: 1h, tokens_per_minute: 40000}\n",
			extra: fmt.Sprintf(`  - name: anthropic
    kind: anthropic
    models: {claude-sonnet-4-5: "", claude-haiku-4-5: ""}
    endpoints:
      - {url: %q, api_key_env: BACKEND_KEY}
`, srv.URL)})
		for _, tenant := range []string{"coder", "tight"} {
			before := len(st.Requests())
			// The tight tenant's second turn does not fit its minute: Claude Code
			// then exits with the refusal.
			runClaude(t, claude, g, tenant, "Say hi.", tenant == "coder", true, "")
			var body []byte
			for _, r := range st.Requests()[before:] {
				if r.Path == "/v1/messages" {
					body = r.Body
					break
				}
			}
			if body == nil {
				t.Fatalf("%s: no /v1/messages reached the backend", tenant)
			}
			capture(t, "claude-code-first.json", body)
			l := first(t, g, tenant, "/v1/messages")
			bound := prompt.Scanner{}.Bound(body, request.Messages.Prompt()).Tokens
			reserved, _ := l["budget_reserved"].(float64)
			t.Logf("Claude Code, tenant %s: first body %d bytes, prompt bound %d, reserved %v, charged %v, status %v",
				tenant, len(body), bound, reserved, l["budget_charged"], l["status"])
			// A bound above budget.count_above is counted by the pool
			// before it is reserved (before: the coder, with room,
			// reserved the bound, 96,902 for a bill of 20,324), and a
			// bound a limit refuses is counted too: either way the
			// reservation is the count and the cap.
			charged, _ := l["budget_charged"].(float64)
			if l["status"] != 200.0 || int64(reserved) >= bound || (tenant == "coder" && reserved > 2*charged) {
				t.Fatalf("%s: first request reserved %v for a bound of %d and a bill of %v: %v", tenant, reserved, bound, charged, l)
			}
		}
	})

	t.Run("codex", func(t *testing.T) {
		t.Parallel()
		g := startGateway(t, options{stubOpts: stub.Options{Tokens: 12},
			tenants: "  - {id: metered, models: [llama], requests: 1000, interval: 1h, token_quota: 100000000, quota_period: month}\n"})
		codexExec(t, g, codexRun{tenant: "metered", model: "llama", work: t.TempDir(), prompt: "Say hi."})
		var body []byte
		for _, r := range g.Stubs[0].Requests() {
			if r.Path == "/v1/responses" {
				body = r.Body
				break
			}
		}
		if body == nil {
			t.Fatal("no /v1/responses reached the backend")
		}
		capture(t, "codex-first.json", body)
		l := first(t, g, "metered", "/v1/responses")
		bound := prompt.Scanner{}.Bound(body, request.Responses.Prompt()).Tokens
		reserved, _ := l["budget_reserved"].(float64)
		t.Logf("Codex: first body %d bytes, prompt bound %d, reserved %v, charged %v, status %v",
			len(body), bound, reserved, l["budget_charged"], l["status"])
		if l["status"] != 200.0 || int64(reserved) < bound {
			t.Fatalf("first request reserved %v for a bound of %d: %v", reserved, bound, l)
		}
	})
}
