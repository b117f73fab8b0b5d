package prompt_test

import (
	"testing"

	"github.com/llmgw/gateway/shared/prompt"
)

// TestMessagesPromptBound: a Messages body's prompt is its system,
// messages and tools; a tool without a type is the caller's own (the
// bound holds), a server tool or mcp_servers is not in the body
// (Unbounded); an image's source data is one image, not text; a document
// is media whose content the body does not bound.
func TestMessagesPromptBound(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name      string
		body      string
		unbounded bool
		images    bool
	}{
		{"text", `{"model":"m","max_tokens":10,"system":"Be brief.","messages":[{"role":"user","content":"hello"}]}`, false, false},
		{"client tool", `{"model":"m","max_tokens":10,"tools":[{"name":"f","input_schema":{"type":"object","properties":{"x":{"type":"string"}}}}],"messages":[]}`, false, false},
		{"custom tool", `{"model":"m","max_tokens":10,"tools":[{"type":"custom","name":"f","input_schema":{}}],"messages":[]}`, false, false},
		{"server tool", `{"model":"m","max_tokens":10,"tools":[{"type":"web_search_20250305","name":"web_search"}],"messages":[]}`, true, false},
		{"mcp servers", `{"model":"m","max_tokens":10,"mcp_servers":[{"type":"url","url":"https://x"}],"messages":[]}`, true, false},
		{"document", `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":[{"type":"document","source":{"type":"base64","media_type":"application/pdf","data":"JVBERi0="}}]}]}`, true, false},
		{"image", `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":""}}]}]}`, false, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			body := tt.body
			if tt.images {
				body = `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"` + repeat("A", 40000) + `"}}]}]}`
			}
			a := prompt.Scanner{ImageTokens: 1000}.Bound([]byte(body), opMessages)
			if a.Unbounded != tt.unbounded {
				t.Fatalf("unbounded %v", a.Unbounded)
			}
			if a.Tokens < int64(len("hello")) {
				t.Fatalf("bound %d", a.Tokens)
			}
			if tt.images && (a.Tokens < 1000 || a.Tokens > 2000) {
				t.Fatalf("an image's base64 counted as text: bound %d", a.Tokens)
			}
		})
	}
}

func repeat(s string, n int) string {
	b := make([]byte, 0, len(s)*n)
	for range n {
		b = append(b, s...)
	}
	return string(b)
}
