package upstream

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/llmgw/gateway/shared/request"
)

// callerHeaders is what a hostile caller might send to steer a backend.
var callerHeaders = http.Header{
	"Authorization":       {"Bearer caller-jwt"},
	"Api-Key":             {"caller-key"},
	"Cookie":              {"session=1"},
	"Openai-Organization": {"org-caller"},
	"Openai-Project":      {"proj-caller"},
	"X-Forwarded-For":     {"10.9.9.9"},
	"X-Forwarded-Host":    {"evil.example"},
	"Forwarded":           {"for=10.9.9.9"},
	"X-Real-Ip":           {"10.9.9.9"},
	"Content-Encoding":    {"gzip"},
	"Content-Type":        {"text/plain"},
	"Expect":              {"100-continue"},
	"X-Ms-Foo":            {"bar"},
	"X-Request-Id":        {"caller-id"},
	"Accept-Encoding":     {"gzip"},
	"Connection":          {"keep-alive, X-Hop"},
	"X-Hop":               {"1"},
	"User-Agent":          {"caller-agent"},
	"Accept":              {"text/event-stream"},
	"X-Tenant-Hint":       {"t"},
}

func TestRequestHeadersAllowList(t *testing.T) {
	tests := []struct {
		name string
		spec TargetSpec
		want http.Header // exactly the backend request's headers
	}{
		{name: "openai with organization and project",
			spec: TargetSpec{Kind: "openai", URL: "https://api.example", Organization: "org-cfg", Project: "proj-cfg",
				Cred: HeaderKey{Header: "Authorization", Value: "sk-gw"}},
			want: http.Header{
				"Content-Type": {"application/json"}, "Accept": {"text/event-stream"}, "Authorization": {"Bearer sk-gw"},
				"Openai-Organization": {"org-cfg"}, "Openai-Project": {"proj-cfg"},
			}},
		{name: "openai without them sends neither",
			spec: TargetSpec{Kind: "openai", URL: "https://api.example", Cred: HeaderKey{Header: "Authorization", Value: "sk-gw"}},
			want: http.Header{"Content-Type": {"application/json"}, "Accept": {"text/event-stream"}, "Authorization": {"Bearer sk-gw"}}},
		{name: "azure api-key",
			spec: TargetSpec{Kind: "azure-openai", URL: "https://x.openai.azure.com", APIVersion: "2024-10-21", Cred: HeaderKey{Header: "Api-Key", Value: "az-gw"}},
			want: http.Header{"Content-Type": {"application/json"}, "Accept": {"text/event-stream"}, "Api-Key": {"az-gw"}}},
		{name: "vllm without credential",
			spec: TargetSpec{Kind: "vllm", URL: "http://10.0.0.1:8000"},
			want: http.Header{"Content-Type": {"application/json"}, "Accept": {"text/event-stream"}}},
		{name: "operator forwards one more",
			spec: TargetSpec{Kind: "vllm", URL: "http://10.0.0.1:8000", Forward: []string{"x-tenant-hint", "Accept"}},
			want: http.Header{"Content-Type": {"application/json"}, "Accept": {"text/event-stream"}, "X-Tenant-Hint": {"t"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tg, err := NewTarget(tt.spec)
			if err != nil {
				t.Fatal(err)
			}
			in := callerHeaders.Clone()
			req, err := tg.NewRequest(context.Background(), request.ChatCompletions, "gpt-4o", []byte(`{}`), in)
			if err != nil {
				t.Fatal(err)
			}
			if !headersEqual(req.Header, tt.want) {
				t.Fatalf("backend headers\n got %v\nwant %v", req.Header, tt.want)
			}
			// The next request of the same target is built afresh.
			req2, _ := tg.NewRequest(context.Background(), request.ChatCompletions, "gpt-4o", []byte(`{}`), http.Header{})
			if req2.Header.Get("Accept") != "" || req2.Header.Get("X-Tenant-Hint") != "" {
				t.Fatalf("a previous caller's headers leaked: %v", req2.Header)
			}
			if !headersEqual(in, callerHeaders) {
				t.Fatalf("the caller's header map was changed: %v", in)
			}
		})
	}
}

func TestTargetSpecForwardErrors(t *testing.T) {
	tests := []struct {
		name string
		spec TargetSpec
		want string
	}{
		{"forward a credential", TargetSpec{Kind: "vllm", URL: "http://x", Forward: []string{"authorization"}}, "never forwarded"},
		{"forward the organization", TargetSpec{Kind: "openai", URL: "https://x", Forward: []string{"OpenAI-Organization"}}, "never forwarded"},
		{"forward x-forwarded-for", TargetSpec{Kind: "vllm", URL: "http://x", Forward: []string{"X-Forwarded-For"}}, "never forwarded"},
		{"forward content-encoding", TargetSpec{Kind: "vllm", URL: "http://x", Forward: []string{"Content-Encoding"}}, "never forwarded"},
		{"forward a bad name", TargetSpec{Kind: "vllm", URL: "http://x", Forward: []string{"X Bad"}}, "not a header name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewTarget(tt.spec)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func headersEqual(a, b http.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}
