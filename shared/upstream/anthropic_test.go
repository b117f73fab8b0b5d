package upstream

import (
	"context"
	"net/http"
	"testing"

	"github.com/llmgw/gateway/shared/request"
)

// TestMessagesTargets: each kind's Messages URL and credential header, and
// which operations each kind serves (no translation between APIs).
func TestMessagesTargets(t *testing.T) {
	t.Parallel()
	ops := []request.Operation{request.ChatCompletions, request.Completions, request.Embeddings, request.Responses, request.Messages, request.CountTokens}
	for _, tt := range []struct {
		spec     TargetSpec
		url      string // of a Messages request
		key      string // the header the api key goes in
		supports []bool // by ops
	}{
		{TargetSpec{Kind: "anthropic", URL: "https://api.anthropic.example/"}, "https://api.anthropic.example/v1/messages", "X-Api-Key", []bool{false, false, false, false, true, true}},
		{TargetSpec{Kind: "anthropic", URL: "https://res.services.ai.example/anthropic"}, "https://res.services.ai.example/anthropic/v1/messages", "X-Api-Key", []bool{false, false, false, false, true, true}},
		{TargetSpec{Kind: "vllm", URL: "http://vllm:8000"}, "http://vllm:8000/v1/messages", "Authorization", []bool{true, true, true, true, true, false}},
		{TargetSpec{Kind: "openai", URL: "https://api.openai.example"}, "", "Authorization", []bool{true, true, true, true, false, false}},
		{TargetSpec{Kind: "azure-openai", URL: "https://a.openai.example", AzureAPI: "v1"}, "", "Api-Key", []bool{true, true, true, true, false, false}},
		{TargetSpec{Kind: "azure-openai", URL: "https://a.openai.example", APIVersion: "2024-10-21"}, "", "Api-Key", []bool{true, true, true, false, false, false}},
	} {
		t.Run(tt.spec.Kind+" "+tt.spec.URL, func(t *testing.T) {
			tt.spec.APIKey, tt.spec.Models = "k", map[string]string{"pub": "backend"}
			tg, err := NewTarget(tt.spec)
			if err != nil {
				t.Fatal(err)
			}
			for i, op := range ops {
				if tg.Supports(op) != tt.supports[i] {
					t.Errorf("Supports(%d) = %v", op, !tt.supports[i])
				}
			}
			if tt.url == "" {
				return
			}
			req, err := tg.NewRequest(context.Background(), request.Messages, "pub", []byte(`{}`), http.Header{})
			if err != nil {
				t.Fatal(err)
			}
			if req.URL.String() != tt.url || req.Header.Get(tt.key) == "" {
				t.Errorf("url %s, headers %v", req.URL, req.Header)
			}
			if tg.CapField(request.Messages) != request.MaxTokens || tg.BodyModel("pub") != "backend" {
				t.Errorf("cap field %v, body model %q", tg.CapField(request.Messages), tg.BodyModel("pub"))
			}
		})
	}
}

// TestMessagesHeaders: a Messages request carries the caller's
// anthropic-version and anthropic-beta (an anthropic endpoint a default
// version when none), the endpoint's own key, and nothing else of the
// caller's: not its x-api-key or Authorization (the caller's JWT), not
// another vendor's header. Other operations never carry the anthropic
// headers, and no config may forward X-Api-Key.
func TestMessagesHeaders(t *testing.T) {
	t.Parallel()
	in := http.Header{"X-Api-Key": {"caller-jwt"}, "Authorization": {"Bearer caller-jwt"}, "Anthropic-Beta": {"prompt-caching-2024-07-31"},
		"Anthropic-Dangerous-Direct-Browser-Access": {"true"}, "X-Stainless-Os": {"Linux"}, "Cookie": {"c=1"}}
	tg, _ := NewTarget(TargetSpec{Kind: "anthropic", URL: "https://api.anthropic.example", APIKey: "backend-key"})
	req, _ := tg.NewRequest(context.Background(), request.Messages, "m", []byte(`{}`), in)
	want := http.Header{"Content-Type": {"application/json"}, "X-Api-Key": {"backend-key"}, "Anthropic-Version": {DefaultAnthropicVersion},
		"Anthropic-Beta": {"prompt-caching-2024-07-31"}}
	if len(req.Header) != len(want) {
		t.Errorf("headers %v, want %v", req.Header, want)
	}
	for k, v := range want {
		if got := req.Header[k]; len(got) != 1 || got[0] != v[0] {
			t.Errorf("%s = %v, want %v", k, got, v)
		}
	}
	in["Anthropic-Version"] = []string{"2099-01-01"}
	req, _ = tg.NewRequest(context.Background(), request.CountTokens, "m", []byte(`{}`), in)
	if req.Header.Get("Anthropic-Version") != "2099-01-01" {
		t.Errorf("the caller's version was not forwarded: %v", req.Header)
	}
	v, _ := NewTarget(TargetSpec{Kind: "vllm", URL: "http://vllm", APIKey: "k"})
	req, _ = v.NewRequest(context.Background(), request.ChatCompletions, "m", []byte(`{}`), in)
	if req.Header.Get("Anthropic-Version") != "" || req.Header.Get("Anthropic-Beta") != "" || req.Header.Get("X-Api-Key") != "" {
		t.Errorf("a chat request carried Anthropic's headers: %v", req.Header)
	}
	if err := CheckForward("x-api-key"); err == nil {
		t.Error("forward_headers may name X-Api-Key")
	}
}
