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
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/gateway/scripts/stub"
	"github.com/llmgw/gateway/scripts/testtool"
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
// api.github.com and chatgpt.com whatever the rest says). docs/clients.md
// shows this file; TestCodexCLI's recording proxy proves it.
const codexConfig = `%smodel_provider = "llmgw"
approval_policy = "never"
sandbox_mode = "danger-full-access"
check_for_update_on_startup = false
web_search = "disabled"

[model_providers.llmgw]
name = "llm gateway"
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
`

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
	stdout, report := codexExec(t, g, "contoso", "llama", t.TempDir(), "Run the shell command `echo stub` and tell me what it printed.", "")

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

// codexExec runs `codex exec --json` as tenant with model (""
// for Codex's default) and the config's topLevel keys in work, through the recording proxy (it fails the test on any connection
// outside the gateway), and returns its JSONL and a report of what it
// printed and what the stub got. It skips, saying so, only when the
// platform package with the native binary is not installed (npm installs
// the one for the machine); every other failure fails.
func codexExec(t *testing.T, g *gw, tenant, model, work, prompt, topLevel string) (stdout []byte, report func() string) {
	t.Helper()
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
	home := t.TempDir()
	modelLine := topLevel // keys before the first table; no model: Codex asks for its default
	if model != "" {
		modelLine = fmt.Sprintf("model = %q\n", model) + topLevel
	}
	if err := os.WriteFile(filepath.Join(home, "config.toml"), fmt.Appendf(nil, codexConfig, modelLine, g.URL+"/v1"), 0o600); err != nil {
		t.Fatal(err)
	}
	var env []string
	for _, kv := range cleanEnv() {
		if k, _, _ := strings.Cut(kv, "="); !strings.HasPrefix(k, "CODEX_") && k != "HOME" {
			env = append(env, kv)
		}
	}
	eg := newEgress(t)
	env = append(withoutProxy(env), eg.env()...)
	env = append(env, "CODEX_HOME="+home, "HOME="+home, "LLMGW_TOKEN="+g.token(tenant), "NO_COLOR=1")

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
	err = cmd.Run()
	report = func() string {
		var b strings.Builder
		fmt.Fprintf(&b, "stdout:\n%s\nstderr:\n%s\nrequests the stub got:\n", out.String(), stderr.String())
		for _, r := range g.Stubs[0].Requests() {
			fmt.Fprintf(&b, "%s %s %.3000s\n", r.Method, r.Path, r.Body)
		}
		return b.String()
	}
	if err != nil {
		t.Fatalf("codex exec: %v\n%s", err, report())
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
// on disk (issue 37, finding 9: on the demo's names Codex never offered
// apply_patch, and the stub answered custom tools in prose).
func TestCodexApplyPatch(t *testing.T) {
	t.Parallel()
	g := startGateway(t, options{stubOpts: stub.Options{Tokens: 12}, extra: "aliases: {gpt-6.2-sol: llama}\n"})
	work := t.TempDir()
	stdout, report := codexExec(t, g, "contoso", "gpt-6.2-sol", work, "Use apply_patch to add the file "+stub.StubPatchFile+".", "")
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
