package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/gateway/scripts/stub"
	"github.com/llmgw/gateway/shared/billing"
)

// claudePool is a pools: entry of kind anthropic named "claude" serving
// the model claude-test (claude-sonnet-4-5 at the backend) on url, and a
// tenants: row "anthro" for it and llama (a vllm pool: vLLM's Messages
// route).
func claudePool(url string) (extra, tenants string) {
	return fmt.Sprintf(`  - name: claude
    kind: anthropic
    models: {claude-test: claude-sonnet-4-5, gpt-4o-mini-claude: ""}
    forward_headers: [X-Stub-Fault, X-Stub-TTFT, X-Stub-Interval, X-Stub-Tokens]
    endpoints:
      - {url: %q, api_key_env: BACKEND_KEY}
`, url), "  - {id: anthro, models: [claude-test, llama, gpt-4o], requests: 1000, interval: 1h}\n"
}

// startClaude starts a gateway with the claude pool on its own stub
// (returned); o's extra and tenants are appended after it.
func startClaude(t *testing.T, o options) (*gw, *stub.Server) {
	t.Helper()
	so := stub.Options{TTFT: time.Millisecond, Interval: time.Millisecond, Tokens: 8, APIKey: backendKey, Name: "claude-stub"}
	st := stub.New(so)
	srv := httptest.NewServer(st)
	t.Cleanup(func() { st.Close(); srv.Close() })
	extra, tenants := claudePool(srv.URL)
	o.extra, o.tenants = extra+o.extra, tenants+o.tenants
	return startGateway(t, o), st
}

// anthropicError decodes and checks the Messages API's error shape.
func anthropicError(t *testing.T, resp *http.Response, status int, typ string) string {
	t.Helper()
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != status {
		t.Fatalf("status %d, want %d: %s", resp.StatusCode, status, b)
	}
	var e struct {
		Type  string `json:"type"`
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
		RequestID string `json:"request_id"`
	}
	if err := json.Unmarshal(b, &e); err != nil || e.Type != "error" || e.Error.Type != typ || e.Error.Message == "" {
		t.Fatalf("want Anthropic's error shape with type %s, got %s", typ, b)
	}
	if e.RequestID != resp.Header.Get("X-Request-Id") {
		t.Errorf("request_id %q, header %q", e.RequestID, resp.Header.Get("X-Request-Id"))
	}
	return e.Error.Message
}

// sseEvents reads a stream's events: their names and data, in order.
func sseEvents(t *testing.T, r io.Reader) (names []string, data []string) {
	t.Helper()
	raw, _ := io.ReadAll(r)
	defer func() {
		if len(names) == 0 {
			t.Fatalf("no events in %q", raw)
		}
	}()
	sc := bufio.NewScanner(strings.NewReader(string(raw)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	name := ""
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			name = line[len("event: "):]
		case strings.HasPrefix(line, "data: "):
			names, data = append(names, name), append(data, line[len("data: "):])
			name = ""
		}
	}
	return names, data
}

const messagesBody = `{"model":"claude-test","max_tokens":100,"messages":[{"role":"user","content":"Hello"}]}`

// TestMessagesEndToEnd drives POST /v1/messages and count_tokens through
// the gateway binary to an anthropic pool on the stub: the caller's JWT in
// x-api-key or Authorization, the backend's key in x-api-key only,
// anthropic-version and anthropic-beta forwarded by allow-list (and a
// default version), JSON and streamed answers relayed with their usage
// counted in the access log (cache reads included), tool_use blocks, and
// vLLM's Messages route for a vllm pool.
func TestMessagesEndToEnd(t *testing.T) {
	g, st := startClaude(t, options{})
	tok := g.token("anthro")

	t.Run("json with x-api-key", func(t *testing.T) {
		resp := g.post("/v1/messages", "", messagesBody, "X-Api-Key", tok, "Cookie", "c=1", "X-Custom", "x", "Anthropic-Beta", "prompt-caching-2024-07-31")
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, b)
		}
		var m struct {
			Type, Role, Model string
			Content           []struct{ Type, Text string }
			StopReason        string `json:"stop_reason"`
			Usage             struct {
				InputTokens  int `json:"input_tokens"`
				OutputTokens int `json:"output_tokens"`
			}
		}
		if err := json.Unmarshal(b, &m); err != nil || m.Type != "message" || len(m.Content) != 1 || m.Content[0].Type != "text" || m.Usage.OutputTokens != 8 {
			t.Fatalf("answer %s", b)
		}
		got := st.LastRequest()
		if got.Path != "/v1/messages" || got.Header.Get("X-Api-Key") != backendKey || got.Header.Get("Authorization") != "" {
			t.Errorf("backend got %s with x-api-key %q, authorization %q", got.Path, got.Header.Get("X-Api-Key"), got.Header.Get("Authorization"))
		}
		if v := got.Header.Get("Anthropic-Version"); v != "2023-06-01" {
			t.Errorf("anthropic-version %q, want the default", v)
		}
		if v := got.Header.Get("Anthropic-Beta"); v != "prompt-caching-2024-07-31" {
			t.Errorf("anthropic-beta %q", v)
		}
		for _, h := range []string{"Cookie", "X-Custom"} {
			if got.Header.Get(h) != "" {
				t.Errorf("%s reached the backend", h)
			}
		}
		var body struct{ Model string }
		if json.Unmarshal(got.Body, &body); body.Model != "claude-sonnet-4-5" {
			t.Errorf("backend model %q", body.Model)
		}
		l := g.accessLog(resp.Header.Get("X-Request-Id"))
		if l["prompt_tokens"].(float64) != float64(m.Usage.InputTokens) || l["completion_tokens"].(float64) != 8 || l["path"] != "/v1/messages" {
			t.Errorf("access log %v", l)
		}
	})

	t.Run("stream with bearer, cache counted", func(t *testing.T) {
		body := `{"model":"claude-test","max_tokens":100,"stream":true,"system":[{"type":"text","text":"Be brief.","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":"Hello"}]}`
		resp := g.post("/v1/messages", tok, body, "Anthropic-Version", "2023-06-01")
		defer resp.Body.Close()
		if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
			t.Fatalf("status %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		names, data := sseEvents(t, resp.Body)
		want := []string{"message_start", "content_block_start", "ping"}
		for range 8 {
			want = append(want, "content_block_delta")
		}
		want = append(want, "content_block_stop", "message_delta", "message_stop")
		if strings.Join(names, ",") != strings.Join(want, ",") {
			t.Fatalf("events %v", names)
		}
		var start struct {
			Message struct {
				Usage struct {
					Input int `json:"input_tokens"`
					Read  int `json:"cache_read_input_tokens"`
				}
			}
		}
		if json.Unmarshal([]byte(data[0]), &start) != nil || start.Message.Usage.Read == 0 {
			t.Fatalf("message_start %s", data[0])
		}
		l := g.accessLog(resp.Header.Get("X-Request-Id"))
		if l["prompt_tokens"].(float64) != float64(start.Message.Usage.Input+start.Message.Usage.Read) || l["completion_tokens"].(float64) != 8 || l["events"].(float64) != float64(len(want)) {
			t.Errorf("access log %v (usage %+v)", l, start.Message.Usage)
		}
	})

	t.Run("tool_use", func(t *testing.T) {
		body := `{"model":"claude-test","max_tokens":100,"stream":true,"tools":[{"name":"get_weather","input_schema":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}],"messages":[{"role":"user","content":"Weather in Paris?"}]}`
		resp := g.post("/v1/messages", tok, body)
		defer resp.Body.Close()
		names, data := sseEvents(t, resp.Body)
		if len(names) < 4 || !strings.Contains(data[1], `"tool_use"`) || names[len(names)-1] != "message_stop" || !strings.Contains(data[len(data)-2], `"tool_use"`) {
			t.Fatalf("events %v\n%s", names, strings.Join(data, "\n"))
		}
	})

	t.Run("count_tokens", func(t *testing.T) {
		resp := g.post("/v1/messages/count_tokens", "", `{"model":"claude-test","messages":[{"role":"user","content":"Hello"}]}`, "X-Api-Key", tok)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var c struct {
			InputTokens int `json:"input_tokens"`
		}
		if resp.StatusCode != 200 || json.Unmarshal(b, &c) != nil || c.InputTokens < 1 {
			t.Fatalf("%d %s", resp.StatusCode, b)
		}
		if st.LastRequest().Path != "/v1/messages/count_tokens" {
			t.Errorf("backend path %s", st.LastRequest().Path)
		}
	})

	t.Run("vllm's messages route", func(t *testing.T) {
		resp := g.post("/v1/messages", tok, `{"model":"llama","max_tokens":5,"messages":[{"role":"user","content":"Hi"}]}`)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || !strings.Contains(string(b), `"stop_reason":"max_tokens"`) {
			t.Fatalf("%d %s", resp.StatusCode, b)
		}
		got := g.Stubs[0].LastRequest()
		if got.Path != "/v1/messages" || got.Header.Get("Authorization") != "Bearer "+backendKey || !strings.Contains(string(got.Body), `"meta/Llama-3.1-8B"`) {
			t.Errorf("vllm got %s %q %s", got.Path, got.Header.Get("Authorization"), got.Body)
		}
	})
}

// TestMessagesRefusals: what the gateway refuses on the Messages routes,
// each in Anthropic's error shape with Anthropic's status codes: a bad
// token, a model not allowed, a model whose pool cannot serve the
// Messages API (and a chat request for a Messages-only pool), a missing
// max_tokens, a cap field the operation lacks, duplicate or escaped
// spellings of what the gateway reads, a backend's 429 (with
// Retry-After), and streams the backend breaks (its own error event
// relayed once; the gateway's own after a drop).
func TestMessagesRefusals(t *testing.T) {
	g, _ := startClaude(t, options{})
	tok := g.token("anthro")
	cases := []struct {
		name, path, token, body string
		hdr                     []string
		status                  int
		typ                     string
	}{
		{"bad token", "/v1/messages", "not-a-jwt", messagesBody, nil, 401, "authentication_error"},
		{"model not allowed", "/v1/messages", tok, `{"model":"gpt-4o-mini","max_tokens":5,"messages":[]}`, nil, 404, "not_found_error"},
		{"pool without the Messages API", "/v1/messages", tok, `{"model":"gpt-4o","max_tokens":5,"messages":[]}`, nil, 400, "invalid_request_error"},
		{"count_tokens on vllm", "/v1/messages/count_tokens", tok, `{"model":"llama","messages":[]}`, nil, 400, "invalid_request_error"},
		{"max_tokens missing", "/v1/messages", tok, `{"model":"claude-test","messages":[]}`, nil, 400, "invalid_request_error"},
		{"max_tokens null", "/v1/messages", tok, `{"model":"claude-test","max_tokens":null,"messages":[]}`, nil, 400, "invalid_request_error"},
		{"a cap the op lacks", "/v1/messages", tok, `{"model":"claude-test","max_tokens":5,"max_completion_tokens":5,"messages":[]}`, nil, 400, "invalid_request_error"},
		{"escaped duplicate max_tokens", "/v1/messages", tok, `{"model":"claude-test","max_tokens":5,"max\u005ftokens":100000,"messages":[]}`, nil, 400, "invalid_request_error"},
		{"case variant model", "/v1/messages", tok, `{"model":"claude-test","Model":"gpt-4o","max_tokens":5,"messages":[]}`, nil, 400, "invalid_request_error"},
		{"duplicate budget_tokens", "/v1/messages", tok, `{"model":"claude-test","max_tokens":5000,"thinking":{"type":"enabled","budget_tokens":1024,"budget_tokens":99999},"messages":[]}`, nil, 400, "invalid_request_error"},
		{"count_tokens stream", "/v1/messages/count_tokens", tok, `{"model":"claude-test","stream":true,"messages":[]}`, nil, 400, "invalid_request_error"},
		{"wrong method", "/v1/messages", tok, "", nil, 405, "invalid_request_error"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var resp *http.Response
			if c.status == 405 {
				req, _ := http.NewRequest(http.MethodGet, g.URL+c.path, nil)
				req.Header.Set("Authorization", "Bearer "+c.token)
				var err error
				if resp, err = http.DefaultClient.Do(req); err != nil {
					t.Fatal(err)
				}
			} else {
				resp = g.post(c.path, c.token, c.body, c.hdr...)
			}
			ra := resp.Header.Get("Retry-After")
			msg := anthropicError(t, resp, c.status, c.typ)
			if c.status == 429 && ra == "" {
				t.Errorf("no Retry-After on a 429: %s", msg)
			}
		})
	}
	t.Run("chat for a Messages-only pool", func(t *testing.T) {
		resp := g.post("/v1/chat/completions", tok, `{"model":"claude-test","messages":[{"role":"user","content":"x"}]}`)
		openAIError(t, resp, 400, "unsupported_api")
	})
	t.Run("backend's error event relayed once", func(t *testing.T) {
		resp := g.post("/v1/messages", tok, `{"model":"claude-test","max_tokens":100,"stream":true,"messages":[{"role":"user","content":"x"}]}`, "X-Stub-Fault", "error_after=5")
		defer resp.Body.Close()
		names, data := sseEvents(t, resp.Body)
		if names[len(names)-1] != "error" || strings.Count(strings.Join(names, ","), "error") != 1 || !strings.Contains(data[len(data)-1], "overloaded_error") {
			t.Fatalf("events %v %v", names, data)
		}
	})
	t.Run("dropped stream ends with Anthropic's error event", func(t *testing.T) {
		defer t.Run("backend 429", func(t *testing.T) { // last: it benches the pool's one endpoint
			resp := g.post("/v1/messages", tok, messagesBody, "X-Stub-Fault", "status=429,retry_after=7")
			if anthropicError(t, resp, 429, "rate_limit_error"); resp.Header.Get("Retry-After") != "7" {
				t.Errorf("Retry-After %q", resp.Header.Get("Retry-After"))
			}
		})
		resp := g.post("/v1/messages", tok, `{"model":"claude-test","max_tokens":100,"stream":true,"messages":[{"role":"user","content":"x"}]}`, "X-Stub-Fault", "drop_after=5")
		defer resp.Body.Close()
		names, data := sseEvents(t, resp.Body)
		last := data[len(data)-1]
		var e struct {
			Type  string
			Error struct{ Type, Message string }
		}
		if names[len(names)-1] != "error" || json.Unmarshal([]byte(last), &e) != nil || e.Type != "error" || e.Error.Type != "api_error" {
			t.Fatalf("events %v, last %s", names, last)
		}
	})
}

// TestMessagesBudget: a tenant with a token budget gets max_tokens as the
// cap (lowered to its max_output_tokens at the backend), is charged what
// message_start and message_delta report, and is refused (400,
// Anthropic's shape) when extended thinking's budget_tokens does not fit
// below the tenant's output cap.
func TestMessagesBudget(t *testing.T) {
	g, st := startClaude(t, options{tenants: "  - {id: budgeted, models: [claude-test], requests: 1000, interval: 1h, tokens_per_minute: 1000000, token_quota: 1000000, quota_period: month, max_output_tokens: 64}\n"})
	tok := g.token("budgeted")
	resp := g.post("/v1/messages", tok, `{"model":"claude-test","max_tokens":4096,"stream":true,"messages":[{"role":"user","content":"Hello"}]}`)
	names, _ := sseEvents(t, resp.Body)
	resp.Body.Close()
	if names[len(names)-1] != "message_stop" {
		t.Fatalf("events %v", names)
	}
	var sent struct {
		MaxTokens int `json:"max_tokens"`
	}
	if json.Unmarshal(st.LastRequest().Body, &sent); sent.MaxTokens != 64 {
		t.Errorf("backend max_tokens %d, want the budget's 64", sent.MaxTokens)
	}
	l := g.accessLog(resp.Header.Get("X-Request-Id"))
	if l["output_cap"].(float64) != 64 || l["budget_charged"].(float64) != l["prompt_tokens"].(float64)+l["completion_tokens"].(float64) || l["completion_tokens"].(float64) != 8 {
		t.Errorf("access log %v", l)
	}
	resp = g.post("/v1/messages", tok, `{"model":"claude-test","max_tokens":4096,"thinking":{"type":"enabled","budget_tokens":2048},"messages":[{"role":"user","content":"Hello"}]}`)
	anthropicError(t, resp, 400, "invalid_request_error")
}

// TestMessagesBudgetBill: through the binary, a Messages stream whose
// backend drops the connection after 449 text deltas, before
// message_delta carries the output (message_start's usage says 1), is
// charged message_start's input, the 449 deltas relayed and at most the
// allowance for what was in flight (billing.StoppedAllowance): not
// message_start's output of 1 (once 29 tokens for 449 generated), nor
// the whole reservation (1,047, until the backend's death was charged
// as a stream that never reported); the whole stream is charged its
// message_delta's bill.
func TestMessagesBudgetBill(t *testing.T) {
	g, _ := startClaude(t, options{tenants: "  - {id: metered, models: [claude-test], requests: 1000, interval: 1h, tokens_per_minute: 1000000, token_quota: 1000000, quota_period: month}\n"})
	tok := g.token("metered")
	body := `{"model":"claude-test","max_tokens":1000,"stream":true,"messages":[{"role":"user","content":"Hello"}]}`
	for _, tt := range []struct {
		name, fault string
		whole       bool
	}{
		{"dropped before message_delta", "drop_after=452", false}, // message_start, content_block_start, ping, 449 deltas
		{"whole", "", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			hdr := []string{"X-Stub-Tokens", "449"}
			if tt.fault != "" {
				hdr = append(hdr, "X-Stub-Fault", tt.fault)
			}
			resp := g.post("/v1/messages", tok, body, hdr...)
			names, _ := sseEvents(t, resp.Body)
			resp.Body.Close()
			deltas := 0
			for _, n := range names {
				if n == "content_block_delta" {
					deltas++
				}
			}
			if deltas != 449 {
				t.Fatalf("%d deltas relayed, want 449: %v", deltas, names[len(names)-3:])
			}
			l := g.accessLog(resp.Header.Get("X-Request-Id"))
			charged, reserved := l["budget_charged"].(float64), l["budget_reserved"].(float64)
			if tt.whole {
				if charged != l["prompt_tokens"].(float64)+449 || l["completion_tokens"].(float64) != 449 || l["budget_settle"] != "charged" {
					t.Fatalf("whole stream: access log %v", l)
				}
				return
			}
			least := l["prompt_tokens"].(float64) + 449
			if charged < least || charged > least+billing.StoppedAllowance || reserved < 1000 {
				t.Fatalf("charged %v for 449 deltas, reserved %v: want message_start's input and the deltas, %v, and at most the allowance more (message_start said %v prompt, %v output)",
					charged, reserved, least, l["prompt_tokens"], l["completion_tokens"])
			}
		})
	}
}

// TestSDKNodeAnthropic runs scripts/sdktest/anthropic.test.mjs (node
// --test with the official @anthropic-ai/sdk npm package) against a live
// gateway with an anthropic pool: messages create (apiKey and authToken),
// stream, tools (tool_use, then tool_result), count_tokens, and the
// error classes for 401, 404, 400, 429 and a broken stream, and a spent
// daily quota raised at once with the SDK's default retries. It fails,
// never skips, when node or the package is missing.
func TestSDKNodeAnthropic(t *testing.T) {
	t.Parallel()
	node, dir := nodeSDK(t)
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@anthropic-ai", "sdk", "package.json")); err != nil {
		t.Fatalf("scripts/sdktest/node_modules/@anthropic-ai/sdk missing: run `npm ci --prefix scripts/sdktest`: %v", err)
	}
	g, _ := startClaude(t, options{tenants: "  - {id: daily, models: [claude-test], requests: 1000, interval: 1h, token_quota: 100, quota_period: day}\n"})
	nodeTest(t, node, dir, append(cleanAnthropicEnv(), "ANTHROPIC_GATEWAY="+g.URL, "TOKEN="+g.token("anthro"), "QUOTA_TOKEN="+g.token("daily"), "EXPECT_TOKENS=8"), "anthropic.test.mjs")
}

// cleanAnthropicEnv is cleanEnv without ANTHROPIC_* (the SDK would read them).
func cleanAnthropicEnv() []string {
	var env []string
	for _, kv := range cleanEnv() {
		if !strings.HasPrefix(kv, "ANTHROPIC_") {
			env = append(env, kv)
		}
	}
	return env
}

// claudeCodeBody is a Messages request the size of Claude Code's first
// one: a long system prompt and a set of tools, about 22,000 tokens of
// text by count_tokens (the stub counts 4 bytes a token, as Anthropic
// roughly does), and Claude Code's max_tokens of 32,000. Its prompt bound
// (a token a byte of every string) is about 4 times the count.
func claudeCodeBody() string {
	sentence := "You are an interactive CLI tool that helps users with software engineering tasks. "
	system := strings.Repeat(sentence, 560) // ~46 KB
	var tools []string
	for i := range 24 {
		desc := strings.Repeat("Reads a file from the local filesystem and returns its contents with line numbers. ", 20)
		tools = append(tools, fmt.Sprintf(`{"name":"Tool%d","description":%q,"input_schema":{"type":"object","properties":{"file_path":{"type":"string","description":"The absolute path to the file to read"},"offset":{"type":"number","description":"The line number to start reading from"}},"required":["file_path"]}}`, i, desc))
	}
	return `{"model":"claude-test","max_tokens":32000,"system":[{"type":"text","text":` + fmt.Sprintf("%q", system) +
		`,"cache_control":{"type":"ephemeral"}}],"tools":[` + strings.Join(tools, ",") +
		`],"messages":[{"role":"user","content":"Summarise the repository layout."}]}`
}

// TestMessagesBudgetCount: a prompt bound the tenant cannot afford is not
// refused before the pool's count_tokens is asked. Before,
// Claude Code's first request (bound about 88,000) could never run on a
// 60,000-token budget; now it reserves its count and its cap. A tenant
// whose limit is below the exact count is told it can never fit; one
// that has spent too much this minute is told when to retry.
func TestMessagesBudgetCount(t *testing.T) {
	g, st := startClaude(t, options{tenants: "  - {id: cc, models: [claude-test], requests: 1000, interval: 1h, tokens_per_minute: 60000, token_quota: 1000000, quota_period: month}\n" +
		"  - {id: small, models: [claude-test], requests: 1000, interval: 1h, tokens_per_minute: 10000, token_quota: 1000000, quota_period: month}\n"})
	body := claudeCodeBody()
	count := g.post("/v1/messages/count_tokens", g.token("cc"), `{"model":"claude-test",`+body[strings.Index(body, `"system"`):])
	var c struct {
		InputTokens int64 `json:"input_tokens"`
	}
	if err := json.NewDecoder(count.Body).Decode(&c); err != nil || count.StatusCode != 200 {
		t.Fatalf("count_tokens: %d %v", count.StatusCode, err)
	}
	count.Body.Close()
	if c.InputTokens < 20000 || c.InputTokens > 24000 {
		t.Fatalf("count_tokens says %d for Claude Code's first request, want about 22,000", c.InputTokens)
	}
	if int64(len(body)) < 3*c.InputTokens {
		t.Fatalf("body of %d bytes: the bound would not exceed the budget", len(body))
	}

	// Two fit the minute: each reserves the count and the cap, and is
	// charged its usage (the count and 8 output tokens).
	tok := g.token("cc")
	for i := range 2 {
		resp := g.post("/v1/messages", tok, body)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, b)
		}
		l := g.accessLog(resp.Header.Get("X-Request-Id"))
		reserved := int64(l["budget_reserved"].(float64))
		t.Logf("request %d: body %d bytes, count %d, reserved %d, charged %v", i, len(body), c.InputTokens, reserved, l["budget_charged"])
		if reserved < c.InputTokens || reserved > c.InputTokens+32000 {
			t.Fatalf("request %d reserved %d, want the count %d plus at most the cap", i, reserved, c.InputTokens)
		}
		// Neither the gateway's count calls nor the test's own count_tokens
		// (which draws from the tenant's count bucket) take a
		// request: only the Messages requests do.
		if rl := resp.Header.Get("X-Ratelimit-Remaining-Requests"); rl != strconv.Itoa(999-i) {
			t.Fatalf("request %d: %q requests left: the count call took one of the tenant's", i, rl)
		}
	}
	var counted int
	for _, r := range st.Requests() {
		if r.Path == "/v1/messages/count_tokens" {
			counted++
			if strings.Contains(string(r.Body), "max_tokens") {
				t.Fatalf("count_tokens sent max_tokens, which Anthropic refuses: %.200s", r.Body)
			}
		}
	}
	if counted < 3 { // the test's own and the gateway's two
		t.Fatalf("%d count_tokens calls, want the gateway's own", counted)
	}

	// The third would fit once the minute resets: Retry-After.
	resp := g.post("/v1/messages", tok, body)
	msg := anthropicError(t, resp, 429, "rate_limit_error")
	if resp.Header.Get("Retry-After") == "" || strings.Contains(msg, "can never run") {
		t.Fatalf("fits later: Retry-After %q, %q", resp.Header.Get("Retry-After"), msg)
	}

	// Below the count: never fits, no Retry-After.
	resp = g.post("/v1/messages", g.token("small"), body)
	msg = anthropicError(t, resp, 429, "rate_limit_error")
	if resp.Header.Get("Retry-After") != "" || !strings.Contains(msg, "can never run") || !strings.Contains(msg, "at least "+strconv.FormatInt(c.InputTokens+1, 10)) { // the count and one output token, not the bound
		t.Fatalf("never fits: Retry-After %q, %q", resp.Header.Get("Retry-After"), msg)
	}
}
