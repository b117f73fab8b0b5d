package main

// Agents through the gateway, with their real releases: the agent SDKs in
// scripts/sdktest/agents.test.mjs (node --test), and Codex CLI's `codex
// exec` (codex_test.go).

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/llmgw/gateway/internal/testing/testtool"
	"github.com/llmgw/gateway/scripts/stub"
)

// TestSDKNodeAgents runs scripts/sdktest/agents.test.mjs against a live
// gateway: @openai/agents (Responses, one tool, streamed too, and an
// outputType), the Vercel AI SDK's openai('…') (generateText, streamText,
// a tool call, Output.object; and openai.chat('…') on Chat Completions: a
// streamed tool call, Output.object) and LangChain's ChatOpenAI with
// useResponsesApi (invoke, stream, a tool call and its result,
// withStructuredOutput), and the openai package resuming a background
// response as a stream. Then every Responses call they made is in the
// access log, answered 200 with its tokens counted. It fails, never
// skips, when node or a package is missing.
func TestSDKNodeAgents(t *testing.T) {
	t.Parallel()
	node, dir := nodeSDK(t)
	for _, pkg := range []string{"@openai/agents", "@langchain/openai", "@ai-sdk/openai", "ai", "zod"} {
		if _, err := os.Stat(filepath.Join(dir, "node_modules", pkg, "package.json")); err != nil {
			testtool.Missing(t, "scripts/sdktest/node_modules/%s missing: run `npm ci --prefix scripts/sdktest`: %v", pkg, err)
		}
	}
	// Two endpoints: a follow-up must find its response wherever it is.
	g := startGateway(t, options{stubs: 2, stubOpts: stub.Options{Tokens: 12}})
	env := append(cleanEnv(), "GATEWAY_URL="+g.URL+"/v1", "TOKEN="+g.token("contoso"), "EXPECT_TOKENS=12",
		"OPENAI_AGENTS_DISABLE_TRACING=1")
	nodeTest(t, node, dir, env, "agents.test.mjs")

	// The runs above made at least this many Responses calls: agents 2+2+1,
	// AI SDK 2+2+2+1+1, LangChain 2+2+1 (a tool call and its answer each
	// two), the background one 1. Every one is counted but the background
	// create, answered queued (no usage yet); its resumed streams are GETs.
	const minCalls = 19
	calls, counted, chats := 0, 0, 0
	var resumed []string
	for _, l := range g.logs.Lines() {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) != nil || m["msg"] != "request" {
			continue
		}
		if path, _ := m["path"].(string); strings.HasPrefix(path, "/v1/responses/") {
			resumed = append(resumed, fmt.Sprint(m["method"], " ", path, " ", m["status"], " stream=", m["stream"], " events=", m["events"], " tokens=", m["prompt_tokens"], "+", m["completion_tokens"]))
			continue
		}
		if m["path"] == "/v1/chat/completions" {
			chats++
			p, _ := m["prompt_tokens"].(float64)
			c, _ := m["completion_tokens"].(float64)
			if m["status"] != 200.0 || p <= 0 || c <= 0 {
				t.Errorf("chat: %s", l)
			}
			continue
		}
		if m["path"] != "/v1/responses" {
			continue
		}
		calls++
		if m["status"] != 200.0 || m["tenant"] != "contoso" {
			t.Errorf("access log: %s", l)
			continue
		}
		p, _ := m["prompt_tokens"].(float64)
		c, _ := m["completion_tokens"].(float64)
		if p > 0 && c > 0 {
			counted++
		}
	}
	t.Logf("%d Responses calls in the access log, %d with tokens counted; %d chat calls; resumed: %q", calls, counted, chats, resumed)
	if calls < minCalls || counted != calls-1 || len(resumed) != 2 || chats < 3 {
		t.Fatalf("%d Responses calls in the access log (want %d or more), %d with tokens counted (want all but the queued one), %d resumed streams (want 2), %d chat calls (want 3 or more)",
			calls, minCalls, counted, len(resumed), chats)
	}
}
