package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/llmgw/gateway/scripts/devissuer"
	"github.com/llmgw/gateway/scripts/stub"
)

// TestDemoAgents is the `make run` check of the coding agents: on
// scripts/dev/demo.yaml, with only their base URL and a token (the
// settings docs/clients.md gives, no model), Claude Code, Codex and the
// Agents SDK each finish a task; each asked for its own default model
// (claude-opus-5-5, gpt-6.2-sol, gpt-5.6-luna), which the demo serves by
// alias, and the access log names it. Before, every one got 404. As
// tailspin (a daily quota smaller than any agent prompt) Claude Code and
// Codex each report the 429 to their user, and nothing reaches a backend.
// Claude Code writes, reads and edits a file in one session (the stub once
// read Claude Code 2.1's trailing system messages as the user's
// words and started subagents instead).
func TestDemoAgents(t *testing.T) {
	t.Parallel()
	g := startGateway(t, options{demo: true, stubOpts: stub.Options{Tokens: 8}})
	models := func(path string) map[string]bool {
		seen := map[string]bool{}
		for _, l := range g.logs.Lines() {
			var m map[string]any
			if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == "request" && m["path"] == path && m["status"] == 200.0 {
				seen[m["model"].(string)] = true
			}
		}
		return seen
	}

	t.Run("Claude Code", func(t *testing.T) {
		res, _ := runClaude(t, claudeCode(t), g, "contoso", "Use the Bash tool to run `echo stub`, then say what it printed.", true, false, "")
		if res["subtype"] != "success" || res["is_error"] != false {
			t.Fatalf("result %v", res)
		}
		if seen := models("/v1/messages"); !seen["claude-opus-5-5"] {
			t.Errorf("Claude Code's default model not in the access log: %v", seen)
		}
		// The stub starts no subagents nobody asked for: a handful of
		// turns and its background calls (about 11), not the hundreds a
		// Task/Agent loop makes.
		n := 0
		for _, l := range g.logs.Lines() {
			var m map[string]any
			if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == "request" && m["path"] == "/v1/messages" {
				n++
			}
		}
		if n > 40 {
			t.Errorf("Claude Code made %d Messages requests for a one-tool task", n)
		}
	})
	t.Run("Codex", func(t *testing.T) {
		codexExec(t, g, codexRun{tenant: "contoso", work: t.TempDir(), prompt: "Say hello."})
		if seen := models("/v1/responses"); !seen["gpt-6.2-sol"] {
			t.Errorf("Codex's default model not in the access log: %v", seen)
		}
	})
	t.Run("Claude Code writes, reads and edits a file", func(t *testing.T) {
		// One session (--continue): Write creates the file, Read reads it
		// (Claude Code edits only a file it has read), Edit changes it.
		// The stub's calls: file_path "stub", content and old_string
		// "stub", new_string stub.StubEditText.
		home := t.TempDir()
		file := filepath.Join(home, "work", "stub")
		steps := []struct{ prompt, tool, want string }{
			{"Use the Write tool to create the file.", "Write", "stub"},
			{"Use the Read tool on it.", "Read", "stub"},
			{"Use the Edit tool to change it.", "Edit", stub.StubEditText},
		}
		for i, st := range steps {
			extra := []string{"--allowedTools", st.tool}
			if i > 0 {
				extra = append(extra, "--continue")
			}
			res, _ := runClaude(t, claudeCode(t), g, "contoso", st.prompt, true, false, home, extra...)
			b, err := os.ReadFile(file)
			if res["subtype"] != "success" || err != nil || string(b) != st.want {
				t.Fatalf("after %s: the file holds %q (%v), want %q; result %v", st.tool, b, err, st.want, res)
			}
		}
	})
	// tailspin's daily quota (2000 tokens) is smaller than either agent's
	// first prompt: each is refused with 429 insufficient_quota before any
	// backend sees it, and says so to its user.
	refusedAt := func(t *testing.T, path string) {
		t.Helper()
		lines := pathLog(g, "tailspin", path)
		if len(lines) == 0 {
			t.Fatalf("no access-log line for tailspin on %s", path)
		}
		for _, l := range lines {
			if l["status"] != 429.0 || l["outcome"] != "request_too_large_for_budget" || l["budget_charged"] != 0.0 || l["attempts"] != 0.0 {
				t.Errorf("access log %v", l)
			}
		}
	}
	t.Run("Claude Code, tailspin's quota", func(t *testing.T) {
		res, _ := runClaude(t, claudeCode(t), g, "tailspin", "Use the Bash tool to run `echo stub`.", false, false, "")
		if res["is_error"] != true || res["api_error_status"] != 429.0 || !strings.Contains(fmt.Sprint(res["result"]), "quota") {
			t.Fatalf("Claude Code reported %v", res)
		}
		t.Logf("Claude Code showed: %v", res["result"])
		refusedAt(t, "/v1/messages")
	})
	t.Run("Codex, tailspin's quota", func(t *testing.T) {
		stdout, report := codexExec(t, g, codexRun{tenant: "tailspin", model: "gpt-4o", work: t.TempDir(), prompt: "Say hello.", fails: true})
		// Codex shows its own words for insufficient_quota.
		if !strings.Contains(string(stdout), `"type":"turn.failed","error":{"message":"Quota exceeded.`) {
			t.Fatalf("Codex did not report the refusal\n%s", report())
		}
		refusedAt(t, "/v1/responses")
	})
	t.Run("Agents SDK", func(t *testing.T) {
		node, dir := nodeSDK(t)
		nodeTest(t, node, dir, append(cleanEnv(), "GATEWAY_URL="+g.URL+"/v1", "TOKEN="+g.token("contoso"), "OPENAI_AGENTS_DISABLE_TRACING=1"), "defaults.test.mjs")
		if seen := models("/v1/responses"); !seen["gpt-5.6-luna"] {
			t.Errorf("the Agents SDK's default model not in the access log: %v", seen)
		}
	})
}

// demoKeysSecret is what the dev runner sets DEMO_KEYS_SECRET to for
// scripts/dev/demo.yaml: demo-only.
const demoKeysSecret = "demo-only-gateway-keys-secret-not-for-production"

// TestDemoClaudeModels: the demo serves every model name Claude Code
// 2.1.332 asks for by default: its main model (claude-opus-5-5), the
// small fast one (claude-haiku-5-5), and the names it falls back to on
// a provider other than Anthropic (claude-sonnet-5, which auto mode's
// client-side check asks for, and claude-opus-5). claude-sonnet-5 was
// a 404 before.
func TestDemoClaudeModels(t *testing.T) {
	t.Parallel()
	g := startGateway(t, options{demo: true})
	for _, m := range []string{"claude-opus-5-5", "claude-sonnet-5-5", "claude-haiku-5-5", "claude-sonnet-5", "claude-opus-5"} {
		resp := g.post("/v1/messages", g.token("contoso"), `{"model":"`+m+`","max_tokens":64,"messages":[{"role":"user","content":"Hello!"}]}`,
			"anthropic-version", "2023-06-01")
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), `"type":"message"`) {
			t.Errorf("%s on the demo: %d %s", m, resp.StatusCode, b)
		}
	}
}

// TestDemoKey is the `make run` check of the demo key: on
// scripts/dev/demo.yaml, with DEMO_KEYS_SECRET set as the dev runner sets
// it, an operator token carrying the admin role makes contoso's key on
// the admin route (the runner's request), and the printed curl line's
// x-api-key with that key streams a Messages answer.
func TestDemoKey(t *testing.T) {
	t.Parallel()
	g := startGateway(t, options{demo: true})
	operator, err := g.Issuer.Mint(devissuer.Claims{Tenant: "ops", Subject: "dev-operator", Audience: []string{testAudience},
		Extra: map[string]any{"roles": []string{"Gateway.Admin"}}})
	if err != nil {
		t.Fatal(err)
	}
	resp := g.post("/admin/keys", operator, `{"tenant":"contoso","user":"dev-user","ttl":"12h"}`)
	var made struct{ Key string }
	if err := json.NewDecoder(resp.Body).Decode(&made); err != nil || resp.StatusCode != 200 || !strings.HasPrefix(made.Key, "llmgw-") {
		t.Fatalf("admin route: %d %v %+v", resp.StatusCode, err, made)
	}
	resp.Body.Close()
	resp = g.post("/v1/messages", "", `{"model":"claude-haiku-5-5","max_tokens":256,"stream":true,"messages":[{"role":"user","content":"Hello!"}]}`,
		"x-api-key", made.Key, "anthropic-version", "2023-06-01")
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), "message_stop") {
		t.Fatalf("the demo key: %d %s", resp.StatusCode, b)
	}
	// The same key may not manage keys.
	resp = g.post("/admin/keys", made.Key, `{"tenant":"contoso"}`)
	resp.Body.Close()
	if resp.StatusCode != 403 {
		t.Fatalf("a key on the admin route: %d", resp.StatusCode)
	}
}
