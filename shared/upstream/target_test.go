package upstream

import (
	"context"
	"io"
	"maps"
	"net/http"
	"slices"
	"testing"

	"github.com/llmgw/gateway/shared/request"
)

func TestTargetRequest(t *testing.T) {
	in := http.Header{
		"Authorization":   {"Bearer caller-jwt"},
		"Cookie":          {"session=1"},
		"Api-Key":         {"caller-key"},
		"Connection":      {"keep-alive, X-Hop"},
		"X-Hop":           {"1"},
		"Te":              {"trailers"},
		"Accept-Encoding": {"gzip"},
		"X-Custom":        {"kept"},
		"Openai-Beta":     {"assistants=v2"},
	}
	tests := []struct {
		name     string
		spec     TargetSpec
		op       request.Operation
		wantURL  string
		wantAuth [2]string // header, value
		model    string    // body model
	}{
		{name: "openai chat", spec: TargetSpec{Kind: "openai", URL: "https://api.example/", Cred: HeaderKey{Header: "Authorization", Value: "sk-1"}},
			op: request.ChatCompletions, wantURL: "https://api.example/v1/chat/completions", wantAuth: [2]string{"Authorization", "Bearer sk-1"}, model: "gpt-4o"},
		{name: "vllm mapped", spec: TargetSpec{Kind: "vllm", URL: "http://10.0.0.1:8000", Models: map[string]string{"gpt-4o": "meta/Llama"}},
			op: request.Completions, wantURL: "http://10.0.0.1:8000/v1/completions", model: "meta/Llama"},
		{name: "azure deployments", spec: TargetSpec{Kind: "azure-openai", URL: "https://x.openai.azure.com", APIVersion: "2024-10-21", Models: map[string]string{"gpt-4o": "gpt-4o-prod"}, Cred: HeaderKey{Header: "Api-Key", Value: "az-1"}},
			op: request.ChatCompletions, wantURL: "https://x.openai.azure.com/openai/deployments/gpt-4o-prod/chat/completions?api-version=2024-10-21", wantAuth: [2]string{"Api-Key", "az-1"}, model: ""},
		{name: "azure v1", spec: TargetSpec{Kind: "azure-openai", URL: "https://x.openai.azure.com", AzureAPI: "v1", Models: map[string]string{"gpt-4o": "dep"}},
			op: request.Embeddings, wantURL: "https://x.openai.azure.com/openai/v1/embeddings", model: "dep"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tg, err := NewTarget(tt.spec)
			if err != nil {
				t.Fatal(err)
			}
			if got := tg.BodyModel("gpt-4o"); got != tt.model {
				t.Fatalf("BodyModel = %q, want %q", got, tt.model)
			}
			req, err := tg.NewRequest(context.Background(), tt.op, "gpt-4o", []byte(`{}`), in)
			if err != nil {
				t.Fatal(err)
			}
			if req.URL.String() != tt.wantURL {
				t.Fatalf("url %s, want %s", req.URL, tt.wantURL)
			}
			for _, h := range []string{"Cookie", "Connection", "X-Hop", "Te", "Accept-Encoding"} {
				if v := req.Header.Get(h); v != "" {
					t.Errorf("%s forwarded: %q", h, v)
				}
			}
			if tt.wantAuth[0] == "" {
				if req.Header.Get("Authorization") != "" || req.Header.Get("Api-Key") != "" {
					t.Errorf("caller credentials forwarded: %v", req.Header)
				}
			} else if got := req.Header.Get(tt.wantAuth[0]); got != tt.wantAuth[1] {
				t.Errorf("%s = %q, want %q", tt.wantAuth[0], got, tt.wantAuth[1])
			}
			if req.Header.Get("X-Custom") != "" || req.Header.Get("Openai-Beta") != "" {
				t.Errorf("caller headers off the allow-list forwarded: %v", req.Header)
			}
			body, _ := io.ReadAll(req.Body)
			if string(body) != `{}` || req.ContentLength != 2 {
				t.Errorf("body %q len %d", body, req.ContentLength)
			}
		})
	}
}

// TestCopyResponseHeaders: only the allow-list passes; before the
// allow-list every header but hop-by-hop and six x-ratelimit-* names did.
func TestCopyResponseHeaders(t *testing.T) {
	src := http.Header{
		"Content-Type":               {"application/json"},
		"Openai-Processing-Ms":       {"12"},
		"X-Ratelimit-Limit-Requests": {"10000"},
		"Set-Cookie":                 {"a=b"},
		"Transfer-Encoding":          {"chunked"},
		"Openai-Organization":        {"org-gateway"},
		"Openai-Project":             {"proj-gateway"},
		"Apim-Request-Id":            {"apim-1"},
		"X-Ms-Region":                {"East US"},
		"Server":                     {"internal/1.0"},
		"Location":                   {"https://internal.example/x?sig=secret"},
		"Retry-After":                {"30"},
		"X-Request-Id":               {"backend-id"},
		"Content-Length":             {"10"},
		"X-Anything":                 {"1"},
	}
	dst := http.Header{"X-Request-Id": {"gateway-id"}}
	CopyResponseHeaders(dst, src)
	want := http.Header{"X-Request-Id": {"gateway-id"}, "Content-Type": {"application/json"}, "Openai-Processing-Ms": {"12"}}
	if !maps.EqualFunc(dst, want, slices.Equal) {
		t.Fatalf("relayed %v, want exactly %v", dst, want)
	}
}

// TestCapField: the output-cap field a budget adds is the one each wire
// format reads.
func TestCapField(t *testing.T) {
	tests := []struct {
		spec TargetSpec
		op   request.Operation
		want request.CapField
	}{
		{TargetSpec{Kind: "openai"}, request.ChatCompletions, request.MaxCompletionTokens},
		{TargetSpec{Kind: "openai"}, request.Completions, request.MaxTokens},
		{TargetSpec{Kind: "openai"}, request.Responses, request.MaxOutputTokens},
		{TargetSpec{Kind: "vllm"}, request.ChatCompletions, request.MaxTokens},
		{TargetSpec{Kind: "vllm"}, request.Responses, request.MaxOutputTokens},
		{TargetSpec{Kind: "azure-openai", APIVersion: "2024-10-21"}, request.ChatCompletions, request.MaxCompletionTokens},
		{TargetSpec{Kind: "azure-openai", APIVersion: "2024-09-01-preview"}, request.ChatCompletions, request.MaxCompletionTokens},
		{TargetSpec{Kind: "azure-openai", APIVersion: "2024-08-01-preview"}, request.ChatCompletions, request.MaxTokens},
		{TargetSpec{Kind: "azure-openai", APIVersion: "2024-06-01"}, request.Completions, request.MaxTokens},
		{TargetSpec{Kind: "azure-openai", AzureAPI: "v1"}, request.ChatCompletions, request.MaxCompletionTokens},
	}
	for _, tt := range tests {
		tt.spec.URL = "https://backend.example"
		tg, err := NewTarget(tt.spec)
		if err != nil {
			t.Fatal(err)
		}
		if got := tg.CapField(tt.op); got != tt.want {
			t.Errorf("%s %s op %d: %s, want %s", tt.spec.Kind, tt.spec.APIVersion+tt.spec.AzureAPI, tt.op, got, tt.want)
		}
	}
}
