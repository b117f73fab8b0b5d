package main

// Codex CLI (npm @openai/codex, its native binary in the optional platform
// package) run headless, `codex exec`, against the gateway as a Responses
// provider.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/gateway/internal/testing/testtool"
	"github.com/llmgw/gateway/scripts/stub"
)

// codexPlatform is the name of @openai/codex's optional package holding
// the native binary for this machine, as its bin/codex.js picks it.
func codexPlatform() string {
	osName := map[string]string{"linux": "linux", "darwin": "darwin", "windows": "win32"}[runtime.GOOS]
	arch := map[string]string{"amd64": "x64", "arm64": "arm64"}[runtime.GOARCH]
	if osName == "" || arch == "" {
		return ""
	}
	return "codex-" + osName + "-" + arch
}

// codexConfig is a CODEX_HOME config.toml: the gateway as the one model
// provider (Responses, the token from LLMGW_TOKEN), no approvals (exec is
// headless), no sandbox (the stub's command is `echo stub`; Linux
// sandboxing needs namespaces a container may not grant), and nothing
// that phones home: no update check, no analytics, no feedback, no OTel
// export, no history file, no web search, and no plugins (without
// [features] plugins = false, Codex 0.171 opens github.com,
// api.github.com and chatgpt.com whatever the rest says), and no
// app-server daemon (daemon_auto_start = false: the TUI otherwise starts
// one that outlives it, with the token in its environment).
// docs/clients.md shows this file; TestCodexCLI's recording proxy proves
// it.
const codexConfig = `%smodel_provider = "llmgw"
approval_policy = "never"
sandbox_mode = "danger-full-access"
check_for_update_on_startup = false
web_search = "disabled"

[model_providers.llmgw]
name = %q
base_url = %q
wire_api = "responses"
env_key = "LLMGW_TOKEN"
request_max_retries = 0
stream_max_retries = 0

[analytics]
enabled = false

[feedback]
enabled = false

[otel]
exporter = "none"

[history]
persistence = "none"

[features]
plugins = false
daemon_auto_start = false
%s%s`

// TestCodexCLI runs `codex exec --json` with a prompt; the stub's answer
// to Codex's first request is a call of its shell tool with the command
// "echo stub"; Codex runs it, sends the output back, and gets the text
// answer. It asserts on Codex's JSONL events (the command and its output,
// the agent's message, the turn's usage) and on the access log (two
// Responses calls, tokens counted). It skips, saying so, only when the
// platform package with the native binary is not installed (npm installs
// the one for the machine); every other failure fails.
func TestCodexCLI(t *testing.T) {
	t.Parallel()
	g := startGateway(t, options{stubOpts: stub.Options{Tokens: 12}})
	stdout, report := codexExec(t, g, codexRun{tenant: "contoso", model: "llama", work: t.TempDir(), prompt: "Run the shell command `echo stub` and tell me what it printed."})

	// Codex's JSONL: the command it ran, the agent's message, the usage.
	var ran, said, usage bool
	sc := bufio.NewScanner(bytes.NewReader(stdout))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var ev struct {
			Type string `json:"type"`
			Item struct {
				Type             string `json:"type"`
				Command          string `json:"command"`
				AggregatedOutput string `json:"aggregated_output"`
				ExitCode         *int   `json:"exit_code"`
				Text             string `json:"text"`
			} `json:"item"`
			Usage struct {
				InputTokens  int `json:"input_tokens"`
				OutputTokens int `json:"output_tokens"`
			} `json:"usage"`
		}
		if json.Unmarshal(sc.Bytes(), &ev) != nil {
			continue
		}
		switch {
		case ev.Type == "item.completed" && ev.Item.Type == "command_execution":
			ran = strings.Contains(ev.Item.Command, "echo stub") && strings.TrimSpace(ev.Item.AggregatedOutput) == "stub" &&
				ev.Item.ExitCode != nil && *ev.Item.ExitCode == 0
		case ev.Type == "item.completed" && ev.Item.Type == "agent_message":
			said = strings.TrimSpace(ev.Item.Text) == strings.TrimSpace(strings.Repeat(" tok", 12))
		case ev.Type == "turn.completed":
			usage = ev.Usage.InputTokens > 0 && ev.Usage.OutputTokens > 0
		}
	}
	if !ran || !said || !usage {
		t.Fatalf("Codex reported: ran the command %v, said the answer %v, usage %v\n%s", ran, said, usage, report())
	}

	// The gateway's access log: two Responses calls (the call, then the
	// answer), 200, streamed, tokens counted.
	var lines []map[string]any
	var paths []string
	for _, l := range g.logs.Lines() {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) != nil || m["msg"] != "request" {
			continue
		}
		paths = append(paths, fmt.Sprint(m["method"], " ", m["path"], " ", m["status"]))
		if m["path"] == "/v1/responses" {
			lines = append(lines, m)
		}
	}
	if len(lines) != 2 {
		t.Fatalf("%d Responses calls in the access log, want 2\n%s", len(lines), g.logs.String())
	}
	for _, m := range lines {
		p, _ := m["prompt_tokens"].(float64)
		c, _ := m["completion_tokens"].(float64)
		if m["status"] != 200.0 || m["stream"] != true || m["model"] != "llama" || p <= 0 || c <= 0 {
			t.Fatalf("access log line %v", m)
		}
	}
	// What Codex offered and what the stub called (the first function
	// tool Codex lists, its shell).
	var first struct {
		Tools []struct {
			Type string `json:"type"`
			Name string `json:"name"`
		} `json:"tools"`
	}
	if reqs := g.Stubs[0].Requests(); len(reqs) > 0 {
		_ = json.Unmarshal(reqs[0].Body, &first)
	}
	t.Logf("requests to the gateway: %q\nCodex's tools: %+v", paths, first.Tools)
}

// codexRun is one `codex exec`: as tenant, with model ("" for Codex's
// default), the config's topLevel keys (before its first table), more
// [features] and the provider's name ("" for the docs' "llm gateway"), in
// work.
type codexRun struct {
	tenant, model, work, prompt, topLevel, provider string
	// features are more [features] lines, tables more tables.
	features, tables string
	// fails: Codex must exit non-zero (a refusal), not 0.
	fails bool
	// authCommand: the provider takes its token from
	// [model_providers.llmgw.auth] (this script, run by sh), not from
	// env_key.
	authCommand string
}

// codexSetup is scripts/agents, CODEX_HOME and the environment Codex
// runs with as r says: a fresh CODEX_HOME (its HOME too) holding codexConfig for the
// gateway, the tenant's token in LLMGW_TOKEN, the caller's environment
// without CODEX_ variables and proxies. It skips, saying so, only when
// the platform package with the native binary is not installed (npm
// installs the one for the machine), and fails or skips by
// testtool.Missing when Codex is not installed.
func codexSetup(t *testing.T, g *gw, r codexRun) (dir, home string, env []string) {
	t.Helper()
	tenant, model, topLevel := r.tenant, r.model, r.topLevel
	provider := r.provider
	if provider == "" {
		provider = "llm gateway"
	}
	dir, err := filepath.Abs(filepath.Join("..", "..", "scripts", "agents"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@openai", "codex", "bin", "codex.js")); err != nil {
		testtool.Missing(t, "scripts/agents/node_modules/@openai/codex missing: run `make agents`: %v", err)
	}
	platform := codexPlatform()
	if platform == "" {
		t.Skipf("Codex CLI ships no native binary for %s/%s: not run", runtime.GOOS, runtime.GOARCH)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@openai", platform, "package.json")); err != nil {
		t.Skipf("Codex CLI's native binary (@openai/%s, an optional npm package) is not installed: not run (%v)", platform, err)
	}
	home = t.TempDir()
	modelLine := topLevel // keys before the first table; no model: Codex asks for its default
	if model != "" {
		modelLine = fmt.Sprintf("model = %q\n", model) + topLevel
	}
	config := fmt.Appendf(nil, codexConfig, modelLine, provider, g.URL+"/v1", r.features, r.tables)
	if r.authCommand != "" {
		config = bytes.Replace(config, []byte("env_key = \"LLMGW_TOKEN\"\n"), nil, 1)
		config = fmt.Appendf(config, "\n[model_providers.llmgw.auth]\ncommand = \"sh\"\nargs = [\"-c\", %q]\n", r.authCommand)
	}
	if err := os.WriteFile(filepath.Join(home, "config.toml"), config, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, kv := range cleanEnv() {
		if k, _, _ := strings.Cut(kv, "="); !strings.HasPrefix(k, "CODEX_") && k != "HOME" {
			env = append(env, kv)
		}
	}
	env = append(withoutProxy(env), "CODEX_HOME="+home, "HOME="+home, "LLMGW_TOKEN="+g.token(tenant), "NO_COLOR=1")
	return dir, home, env
}

// codexExec runs `codex exec --json` as r says, through the recording
// proxy (it fails the test on any connection outside the gateway), and
// returns its JSONL and a report of what it printed and what the stub
// got. It skips, saying so, only when the platform package with the
// native binary is not installed (npm installs the one for the machine);
// every other failure fails, and so does an exit status other than the
// one r.fails asks for.
func codexExec(t *testing.T, g *gw, r codexRun) (stdout []byte, report func() string) {
	t.Helper()
	dir, _, env := codexSetup(t, g, r)
	eg := newEgress(t)
	env = append(env, eg.env()...)
	work, prompt := r.work, r.prompt
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// scripts/agents/bin/codex, as docs/clients.md starts Codex.
	cmd := exec.CommandContext(ctx, filepath.Join(dir, "bin", "codex"),
		"exec", "--json", "--skip-git-repo-check", "--strict-config", "-C", work, prompt)
	cmd.Dir = work
	cmd.Env = env
	cmd.Stdin = nil
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	err := cmd.Run()
	report = func() string {
		var b strings.Builder
		fmt.Fprintf(&b, "stdout:\n%s\nstderr:\n%s\nrequests the stub got:\n", out.String(), stderr.String())
		for _, r := range g.Stubs[0].Requests() {
			fmt.Fprintf(&b, "%s %s %.3000s\n", r.Method, r.Path, r.Body)
		}
		return b.String()
	}
	if ctx.Err() != nil || (err != nil) != r.fails {
		t.Fatalf("codex exec: %v (want it to fail: %v)\n%s", err, r.fails, report())
	}
	eg.check(t, "codex exec")
	return out.Bytes(), report
}

// TestCodexApplyPatch: Codex edits a file. On its default model
// (gpt-6.2-sol, an alias here) Codex 0.171 runs in code mode: its tools
// come in an additional_tools input item, and apply_patch is called from
// its freeform (custom) exec tool. The stub calls exec with JavaScript
// that applies a patch adding stub.StubPatchFile; Codex applies it in its
// working directory, reports the file_change and sends the call's output
// back, and the turn ends with the stub's text. The test checks the file
// on disk (on the demo's names Codex once never offered apply_patch, and
// the stub answered custom tools in prose).
func TestCodexApplyPatch(t *testing.T) {
	t.Parallel()
	g := startGateway(t, options{stubOpts: stub.Options{Tokens: 12}, extra: "aliases: {gpt-6.2-sol: llama}\n"})
	work := t.TempDir()
	stdout, report := codexExec(t, g, codexRun{tenant: "contoso", model: "gpt-6.2-sol", work: work, prompt: "Use apply_patch to add the file " + stub.StubPatchFile + "."})
	b, err := os.ReadFile(filepath.Join(work, stub.StubPatchFile))
	if err != nil || strings.TrimSpace(string(b)) != stub.StubPatchText {
		t.Fatalf("%s after codex exec: %q, %v\n%s", stub.StubPatchFile, b, err, report())
	}
	// Codex reported the change, and the stub got the call's output back.
	if !strings.Contains(string(stdout), `"type":"file_change"`) || !strings.Contains(string(stdout), `"kind":"add"`) {
		t.Fatalf("Codex reported no file_change\n%s", report())
	}
	reqs := g.Stubs[0].Requests()
	if len(reqs) < 2 || !strings.Contains(string(reqs[len(reqs)-1].Body), `"custom_tool_call_output"`) {
		t.Fatalf("%d requests; the last does not carry the custom tool call's output\n%s", len(reqs), report())
	}
}

// TestCodexCompacts: a Codex session is compacted through the gateway,
// on make run's config. Codex 0.171 compacts
// remotely only for a provider it takes for OpenAI's or Azure's (named
// "OpenAI" or "Azure", or an Azure host in base_url); any other custom
// provider compacts locally with a summary turn. So the provider here is
// named "Azure", as Azure OpenAI users name theirs, and
// model_auto_compact_token_limit is below Codex's first prompt: after the
// stub's tool call Codex sends the whole conversation ending with a
// compaction_trigger item (remote compaction "v2", a streamed POST
// /v1/responses: 0.171 no longer calls /responses/compact), the stub
// answers one compaction item, and Codex continues the turn on the
// compacted window (the compaction item in place of the tool call). The
// test checks each request the stub got, the compaction billed like a
// response in the access log, and that a compaction item named by id
// alone is refused (what compaction returns is carried, never looked
// up). The SDK subtest drives POST /v1/responses/compact and
// /v1/responses/input_tokens with the openai npm SDK (compact.test.mjs)
// and checks their access-log lines: compaction billed, counting not.
func TestCodexCompacts(t *testing.T) {
	t.Parallel()
	g := startGateway(t, options{demo: true, stubOpts: stub.Options{Tokens: 12}})
	t.Run("Codex", func(t *testing.T) {
		stdout, report := codexExec(t, g, codexRun{tenant: "contoso", model: "gpt-4o", work: t.TempDir(), provider: "Azure",
			topLevel: "model_auto_compact_token_limit = 2000\n",
			prompt:   "Run the shell command `echo stub` and tell me what it printed."})
		// The stub's requests: the turn (answered with the tool call),
		// the compaction (the conversation with the call's output, then
		// the trigger), the turn continued on the compacted window.
		type item struct {
			Type             string `json:"type"`
			EncryptedContent string `json:"encrypted_content"`
		}
		var inputs [][]item
		for _, r := range g.Stubs[0].Requests() {
			var body struct {
				Input []item `json:"input"`
			}
			if r.Path != "/openai/v1/responses" || json.Unmarshal(r.Body, &body) != nil {
				t.Fatalf("the stub got %s %s\n%s", r.Method, r.Path, report())
			}
			inputs = append(inputs, body.Input)
		}
		types := func(in []item) string {
			var s []string
			for _, it := range in {
				if it.Type != "message" {
					s = append(s, it.Type)
				}
			}
			return strings.Join(s, ",")
		}
		if len(inputs) != 3 || types(inputs[0]) != "" || types(inputs[1]) != "function_call,function_call_output,compaction_trigger" ||
			types(inputs[2]) != "compaction" {
			var got []string
			for _, in := range inputs {
				got = append(got, "["+types(in)+"]")
			}
			t.Fatalf("the stub got inputs with items %v; want [], [function_call,function_call_output,compaction_trigger], [compaction]\n%s", got, report())
		}
		if c := inputs[2][len(inputs[2])-1]; c.EncryptedContent != "stub-compaction" {
			t.Fatalf("the continued turn carries %+v, not the stub's compaction", c)
		}
		if !strings.Contains(string(stdout), `"type":"agent_message"`) || !strings.Contains(string(stdout), `"type":"turn.completed"`) {
			t.Fatalf("Codex did not finish the turn\n%s", report())
		}
		// The access log: three Responses calls, each 200, ok and
		// charged; the compaction's output is the stub's 8 tokens.
		lines := pathLog(g, "contoso", "/v1/responses")
		if len(lines) != 3 {
			t.Fatalf("%d Responses lines in the access log, want 3\n%s", len(lines), g.logs.String())
		}
		for _, l := range lines {
			p, _ := l["prompt_tokens"].(float64)
			c, _ := l["completion_tokens"].(float64)
			if l["status"] != 200.0 || l["outcome"] != "ok" || l["model"] != "gpt-4o" || p <= 0 || c <= 0 || l["budget_charged"] != p+c {
				t.Errorf("access log %v", l)
			}
		}
		if c := lines[1]["completion_tokens"]; c != 8.0 {
			t.Errorf("the compaction's line has %v completion tokens, want the stub's 8: %v", c, lines[1])
		}
	})
	t.Run("local", func(t *testing.T) {
		// Any other provider name: Codex compacts with a summary turn
		// (its "CONTEXT CHECKPOINT COMPACTION" prompt), then continues
		// the turn on a window ending with the summary. The stub answers
		// both in text, as a model does; it once called the shell tool
		// again on the continued window, and Codex compacted and called
		// again for ever (443 requests in 61 s on the demo, 976 in 60 s
		// on the stub alone).
		before := len(g.Stubs[0].Requests())
		start := time.Now()
		stdout, report := codexExec(t, g, codexRun{tenant: "contoso", model: "gpt-4o", work: t.TempDir(),
			topLevel: "model_auto_compact_token_limit = 2000\n",
			prompt:   "Run the shell command `echo stub` and tell me what it printed."})
		reqs := g.Stubs[0].Requests()[before:]
		var summaries, resumed int
		for _, r := range reqs {
			switch {
			case lastTurnHas(r.Body, "CONTEXT CHECKPOINT COMPACTION"):
				summaries++
			case lastTurnHas(r.Body, "produced a summary"):
				resumed++
			}
		}
		t.Logf("local compaction: %d requests (%d summaries, %d continued from one) in %v", len(reqs), summaries, resumed, time.Since(start).Round(time.Millisecond))
		if len(reqs) > 5 || summaries != 1 || resumed != 1 || !strings.Contains(string(stdout), `"type":"turn.completed"`) {
			t.Fatalf("%d requests, %d summaries, %d continued; want 3 (the call, the summary, the answer)\n%s", len(reqs), summaries, resumed, report())
		}
	})
	t.Run("a compaction item by id alone", func(t *testing.T) {
		before := len(g.Stubs[0].Requests())
		resp := g.post("/v1/responses", g.token("contoso"), `{"model":"gpt-4o","input":[{"role":"user","content":"go on"},{"type":"compaction","id":"cmp_someone_elses"}]}`)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 400 || !strings.Contains(string(b), "stored_state_not_supported") || !strings.Contains(string(b), "input[1]") {
			t.Fatalf("%d %s", resp.StatusCode, b)
		}
		if n := len(g.Stubs[0].Requests()); n != before {
			t.Fatalf("a refused request reached the stub (%d requests, %d before)", n, before)
		}
	})
	t.Run("openai SDK", func(t *testing.T) {
		// contoso has token budgets: compaction is charged its usage,
		// input counting nothing.
		node, dir := nodeSDK(t)
		nodeTest(t, node, dir, append(cleanEnv(), "GATEWAY_URL="+g.URL+"/v1", "TOKEN="+g.token("contoso"), "MODEL=gpt-4o"), "compact.test.mjs")
		seen := map[string]bool{}
		for _, l := range tenantLog(g, "contoso") {
			p, _ := l["prompt_tokens"].(float64)
			c, _ := l["completion_tokens"].(float64)
			ok := l["status"] == 200.0 && l["outcome"] == "ok"
			switch l["path"] {
			case "/v1/responses/compact":
				ok = ok && p > 0 && c == 8 && l["budget_charged"] == p+c
			case "/v1/responses/input_tokens":
				ok = ok && p == 0 && c == 0 && l["budget_charged"] == 0.0
			default:
				continue
			}
			if !ok {
				t.Errorf("access log %v", l)
			}
			seen[l["path"].(string)] = true
		}
		if !seen["/v1/responses/compact"] || !seen["/v1/responses/input_tokens"] {
			t.Errorf("access-log paths %v", seen)
		}
	})
}

// pathLog is the access-log lines of tenant's requests to path.
func pathLog(g *gw, tenant, path string) []map[string]any {
	var out []map[string]any
	for _, l := range tenantLog(g, tenant) {
		if l["path"] == path {
			out = append(out, l)
		}
	}
	return out
}

// TestCodexAuthCommand: Codex with its token from an auth command
// ([model_providers.<id>.auth], what docs/clients.md shows for sessions
// longer than a token) runs a turn; it then also fetches GET /v1/models
// for its model discovery, which it decodes: no "failed to decode models
// response" on its stderr.
func TestCodexAuthCommand(t *testing.T) {
	t.Parallel()
	g := startGateway(t, options{stubOpts: stub.Options{Tokens: 12}})
	_, report := codexExec(t, g, codexRun{tenant: "contoso", model: "llama", work: t.TempDir(),
		prompt: "Run the shell command `echo stub` and tell me what it printed.", authCommand: `printf '%s\n' "$LLMGW_TOKEN"`})
	out := report()
	if strings.Contains(out, "failed to decode models response") {
		t.Fatalf("Codex could not decode GET /v1/models:\n%s", out)
	}
	var models, responses int
	for _, l := range g.logs.Lines() {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) != nil || m["msg"] != "request" {
			continue
		}
		switch {
		case m["path"] == "/v1/models" && m["status"] == 200.0:
			models++
		case m["path"] == "/v1/responses" && m["status"] == 200.0:
			responses++
		}
	}
	if responses != 2 {
		t.Fatalf("%d Responses calls, want 2\n%s\n%s", responses, out, g.logs.String())
	}
	t.Logf("GET /v1/models: %d", models)
}

// TestCodexTokenRefresh: a session longer than its token, as
// docs/clients.md sets Codex up: its token from an auth command (the dev
// issuer's mint, 3-second tokens; the gateway's leeway 1ms). The stub
// takes 4 seconds to answer, so the first request's token has expired
// when Codex sends the second: the gateway refuses it 401 (x-should-retry:
// false), Codex reruns its command and sends it again, and the turn
// succeeds.
func TestCodexTokenRefresh(t *testing.T) {
	t.Parallel()
	g := startGateway(t, options{stubOpts: stub.Options{Tokens: 12, TTFT: 4 * time.Second}, authExtra: "  leeway: 1ms\n"})
	mint := fmt.Sprintf("curl -fsS --noproxy '*' '%s/mint?tenant=contoso&sub=me&aud=%s&ttl=3s'", g.Issuer.IssuerURL(), testAudience)
	codexExec(t, g, codexRun{tenant: "contoso", model: "llama", work: t.TempDir(),
		prompt: "Run the shell command `echo stub` and tell me what it printed.", authCommand: mint})
	ok, unauthorized := statusCounts(g, "/v1/responses")
	if ok != 2 {
		t.Fatalf("%d Responses answered (%d refused 401), want 2\n%s", ok, unauthorized, g.logs.String())
	}
	t.Logf("answered %d, refused 401 %d", ok, unauthorized)
}
