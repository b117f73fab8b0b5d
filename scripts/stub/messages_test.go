package stub

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestMessages: the stub answers the Messages API as Anthropic does: x-api-key
// (or a bearer) required, a message with its usage, Anthropic's error shape
// for a missing max_tokens or a bad key, count_tokens, and a Foundry path.
func TestMessages(t *testing.T) {
	t.Parallel()
	s := New(Options{TTFT: -1, Interval: -1, Tokens: 4, APIKey: "k"})
	srv := httptest.NewServer(s)
	t.Cleanup(func() { s.Close(); srv.Close() })
	post := func(path, key, body string) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader(body))
		req.Header.Set("x-api-key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("%s: %s", path, b)
		}
		return resp.StatusCode, m
	}
	msgs := `"messages":[{"role":"user","content":"hi"}]`
	for _, tt := range []struct {
		name, path, key, body string
		status                int
		check                 func(map[string]any) bool
	}{
		{"message", "/v1/messages", "k", `{"model":"c","max_tokens":10,` + msgs + `}`, 200, func(m map[string]any) bool {
			return m["type"] == "message" && m["stop_reason"] == "end_turn" && m["usage"].(map[string]any)["output_tokens"] == 4.0
		}},
		{"foundry path", "/anthropic/v1/messages", "k", `{"model":"c","max_tokens":2,` + msgs + `}`, 200, func(m map[string]any) bool {
			return m["stop_reason"] == "max_tokens"
		}},
		{"tool_use", "/v1/messages", "k", `{"model":"c","max_tokens":10,"tools":[{"name":"f","input_schema":{"properties":{"n":{"type":"integer"}},"required":["n"]}}],` + msgs + `}`, 200, func(m map[string]any) bool {
			c := m["content"].([]any)[0].(map[string]any)
			return m["stop_reason"] == "tool_use" && c["name"] == "f" && c["input"].(map[string]any)["n"] == 1.0
		}},
		{"count_tokens", "/v1/messages/count_tokens", "k", `{"model":"c",` + msgs + `}`, 200, func(m map[string]any) bool { return m["input_tokens"].(float64) > 0 }},
		{"max_tokens missing", "/v1/messages", "k", `{"model":"c",` + msgs + `}`, 400, func(m map[string]any) bool {
			return m["type"] == "error" && m["error"].(map[string]any)["type"] == "invalid_request_error"
		}},
		{"bad key", "/v1/messages", "x", `{}`, 401, func(m map[string]any) bool { return m["error"].(map[string]any)["type"] == "authentication_error" }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			status, m := post(tt.path, tt.key, tt.body)
			if status != tt.status || !tt.check(m) {
				t.Fatalf("%d %v", status, m)
			}
		})
	}
	if got := s.LastRequest().Auth; got != AuthXAPIKey {
		t.Errorf("Auth %q", got)
	}
}
