package stub

import (
	"bytes"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestRoutes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, method, path, body string
		status                   int
		check                    func(t *testing.T, body []byte)
	}{
		{"openai chat", "POST", "/v1/chat/completions", `{"model":"gpt-4o"}`, 200, chatCompletion("gpt-4o")},
		{"azure deployment chat", "POST", "/openai/deployments/my-dep/chat/completions?api-version=2024-10-21", `{"messages":[]}`, 200, chatCompletion("my-dep")},
		{"azure v1 chat", "POST", "/openai/v1/chat/completions", `{"model":"gpt-4o"}`, 200, chatCompletion("gpt-4o")},
		{"completions", "POST", "/v1/completions", `{"model":"m","prompt":"x"}`, 200, contains(`"object":"text_completion"`, `"text":" tok tok tok tok tok"`)},
		{"embeddings one", "POST", "/v1/embeddings", `{"model":"e","input":"hello"}`, 200, contains(`"index":0`, `"model":"e"`)},
		{"embeddings list", "POST", "/v1/embeddings", `{"model":"e","input":["a","b","c"],"dimensions":3}`, 200, contains(`"index":2,"embedding":[`, `"prompt_tokens":3`)},
		{"embeddings tokens", "POST", "/v1/embeddings", `{"model":"e","input":[1,2,3]}`, 200, contains(`"index":0`)},
		{"azure embeddings", "POST", "/openai/deployments/emb/embeddings?api-version=1", `{"input":"x"}`, 200, contains(`"model":"emb"`)},
		{"models", "GET", "/v1/models", "", 200, contains(`"id":"stub-model"`, `"object":"list"`)},
		{"azure v1 models", "GET", "/openai/v1/models", "", 200, contains(`"id":"stub-model"`)},
		{"health", "GET", "/health", "", 200, nil},
		{"azure without api-version", "POST", "/openai/deployments/d/chat/completions", `{}`, 400, apiErrorCode("missing_api_version")},
		{"unknown path", "POST", "/v2/chat/completions", `{}`, 404, apiErrorCode("unknown_url")},
		{"unknown azure op", "POST", "/openai/deployments/d/images?api-version=1", `{}`, 404, apiErrorCode("unknown_url")},
		{"empty deployment", "POST", "/openai/deployments//chat/completions?api-version=1", `{}`, 404, apiErrorCode("unknown_url")},
		{"wrong method", "GET", "/v1/chat/completions", "", 405, apiErrorCode("method_not_supported")},
		{"bad json", "POST", "/v1/chat/completions", `{"model":`, 400, apiErrorCode("")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, ts := start(t, fast)
			resp, body := doResp(t, ts, tc.method, tc.path, tc.body)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, body)
			}
			if tc.check != nil {
				tc.check(t, body)
			}
		})
	}
}

func chatCompletion(model string) func(*testing.T, []byte) {
	return func(t *testing.T, b []byte) {
		var c completion
		var msg struct {
			Choices []struct {
				Message message `json:"message"`
			} `json:"choices"`
		}
		decodeStrict(t, string(b), &c)
		decodeStrict(t, string(b), &msg)
		if c.Object != "chat.completion" || c.Model != model || !strings.HasPrefix(c.ID, "chatcmpl-") || c.Created == 0 {
			t.Fatalf("completion header: %s", b)
		}
		m := msg.Choices[0].Message
		if len(c.Choices) != 1 || c.Choices[0].FinishReason != "stop" || m.Role != "assistant" || m.Content == nil || *m.Content != strings.Repeat(" tok", 5) || m.ToolCalls != nil {
			t.Fatalf("choices: %s", b)
		}
		if c.Usage.CompletionTokens != 5 || c.Usage.PromptTokens < 1 || c.Usage.TotalTokens != c.Usage.PromptTokens+5 {
			t.Fatalf("usage: %s", b)
		}
	}
}

func contains(subs ...string) func(*testing.T, []byte) {
	return func(t *testing.T, b []byte) {
		for _, s := range subs {
			if !bytes.Contains(b, []byte(s)) {
				t.Fatalf("body lacks %s: %s", s, b)
			}
		}
	}
}

func apiErrorCode(code string) func(*testing.T, []byte) {
	return func(t *testing.T, b []byte) {
		e := errorBody(t, b)
		got := ""
		if e.Code != nil {
			got = *e.Code
		}
		if got != code {
			t.Fatalf("error code %q, want %q: %s", got, code, b)
		}
	}
}

func TestAuth(t *testing.T) {
	t.Parallel()
	const key = "sk-stub-secret"
	const azure = "/openai/deployments/d/chat/completions?api-version=1"
	tests := []struct {
		name, path string
		headers    []string
		status     int
		auth       string
	}{
		{"none", "/v1/chat/completions", nil, 401, AuthNone},
		{"bearer", "/v1/chat/completions", []string{"Authorization: Bearer " + key}, 200, AuthBearer},
		{"bearer lower-case scheme", "/v1/chat/completions", []string{"Authorization: bearer " + key}, 200, AuthBearer},
		{"bearer wrong", "/v1/chat/completions", []string{"Authorization: Bearer sk-other"}, 401, AuthBearer},
		{"basic", "/v1/chat/completions", []string{"Authorization: Basic " + key}, 401, AuthBearer},
		{"api-key on openai path", "/v1/chat/completions", []string{"api-key: " + key}, 401, AuthAPIKey},
		{"api-key on azure", azure, []string{"api-key: " + key}, 200, AuthAPIKey},
		{"api-key on azure v1", "/openai/v1/chat/completions", []string{"api-key: " + key}, 200, AuthAPIKey},
		{"api-key wrong on azure", azure, []string{"api-key: nope"}, 401, AuthAPIKey},
		{"bearer on azure", azure, []string{"Authorization: Bearer " + key}, 200, AuthBearer},
		{"wrong bearer, right api-key on azure", azure, []string{"Authorization: Bearer x", "api-key: " + key}, 200, AuthBearer},
		{"models needs auth", "/v1/models", nil, 401, AuthNone},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st, ts := start(t, Options{TTFT: -1, Interval: -1, Tokens: 1, APIKey: key})
			method := http.MethodPost
			if strings.HasSuffix(tc.path, "models") {
				method = http.MethodGet
			}
			resp, body := doResp(t, ts, method, tc.path, `{"model":"m"}`, tc.headers...)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, body)
			}
			if tc.status == 401 {
				apiErrorCode("invalid_api_key")(t, body)
			}
			if got := st.LastRequest().Auth; got != tc.auth {
				t.Fatalf("recorded Auth %q, want %q", got, tc.auth)
			}
		})
	}
}

func TestLastRequest(t *testing.T) {
	t.Parallel()
	st, ts := start(t, fast)
	if got := st.LastRequest(); got.Method != "" || got.Header != nil {
		t.Fatalf("before any request: %+v", got)
	}
	const body = `{"model":"m","messages":[{"role":"user","content":"hello"}]}`
	resp := mustPost(t, ts, "/openai/deployments/dep/chat/completions?api-version=2024-10-21&x=1", body, "api-key: k", "X-Trace: abc")
	readAll(t, resp)
	got := st.LastRequest()
	if got.Method != "POST" || got.Path != "/openai/deployments/dep/chat/completions" || got.RawQuery != "api-version=2024-10-21&x=1" ||
		string(got.Body) != body || got.Deployment != "dep" || got.Auth != AuthAPIKey || got.Header.Get("X-Trace") != "abc" {
		t.Fatalf("recorded %+v", got)
	}
	got.Header.Set("X-Trace", "changed")
	if st.LastRequest().Header.Get("X-Trace") != "abc" {
		t.Fatal("LastRequest shares its header map with the caller")
	}
}

func TestNonStreaming(t *testing.T) {
	t.Parallel()
	t.Run("prompt tokens estimated", func(t *testing.T) {
		t.Parallel()
		_, ts := start(t, fast)
		body := `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", 400) + `"}]}`
		var c completion
		decodeStrict(t, string(readAll(t, mustPost(t, ts, "/v1/chat/completions", body))), &c)
		if c.Usage != (usage{len(body) / 4, 5, len(body)/4 + 5}) {
			t.Fatalf("usage %+v", c.Usage)
		}
	})
	t.Run("prompt tokens fixed, max_tokens", func(t *testing.T) {
		t.Parallel()
		opts := fast
		opts.PromptTokens = 11
		_, ts := start(t, opts)
		var c completion
		decodeStrict(t, string(readAll(t, mustPost(t, ts, "/v1/chat/completions", `{"model":"m","max_tokens":2}`))), &c)
		if c.Usage != (usage{11, 2, 13}) || c.Choices[0].FinishReason != "length" {
			t.Fatalf("got %+v", c)
		}
	})
	t.Run("ignores TTFT, honours NonStreamDelay", func(t *testing.T) {
		t.Parallel()
		const delay = 60 * time.Millisecond
		_, ts := start(t, Options{TTFT: time.Hour, Tokens: 1, NonStreamDelay: delay})
		sent := time.Now()
		resp := mustPost(t, ts, "/v1/chat/completions", `{"model":"m"}`)
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		if since := time.Since(sent); since < delay {
			t.Fatalf("answered after %v, before NonStreamDelay %v", since, delay)
		}
	})
}

func TestNameHeader(t *testing.T) {
	t.Parallel()
	opts := fast
	opts.Name = "east-1"
	_, ts := start(t, opts)
	for _, path := range []string{"/v1/chat/completions", "/nowhere"} {
		if got := mustPost(t, ts, path, `{"model":"m"}`).Header.Get(NameHeader); got != "east-1" {
			t.Fatalf("%s: %s %q", path, NameHeader, got)
		}
	}
}

func TestBodyTooLarge(t *testing.T) {
	t.Parallel()
	_, ts := start(t, fast)
	resp := mustPost(t, ts, "/v1/chat/completions", strings.Repeat("x", maxBody+1))
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("status %d, want 413", resp.StatusCode)
	}
	errorBody(t, readAll(t, resp))
}
