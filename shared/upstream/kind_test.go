package upstream

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/llmgw/gateway/shared/request"
)

// compatible is a test-only OpenAI-compatible kind, whole in this file as
// a new kind is: OpenAI's paths and shapes, with an api key in Api-Key,
// max_tokens as chat's cap, and no Responses API.
type compatible struct{ openAI }

func (compatible) keyHeader() string { return "Api-Key" }

func (compatible) capField(op request.Operation) request.CapField { return maxTokensFirst(op) }

func (c compatible) supports(op request.Operation) bool {
	return c.openAI.supports(op) && !op.Creates()
}

func (compatible) root(string) string { return "" }

func init() {
	kinds = append(kinds, registration{name: "test-compatible", build: func(TargetSpec) kind { return compatible{} }})
}

// TestRegisteredKind: a kind registered in one file is built by NewTarget
// from its config name and builds every request the way it says.
func TestRegisteredKind(t *testing.T) {
	t.Parallel()
	if !slices.Contains(Kinds(), "test-compatible") {
		t.Fatalf("Kinds() = %v", Kinds())
	}
	tg, err := NewTarget(TargetSpec{Kind: "test-compatible", URL: "https://compat.example/", APIKey: "k",
		Models: map[string]string{"pub": "served"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range request.Operations() {
		want := !op.Anthropic() && op != request.Responses
		if tg.Supports(op) != want {
			t.Errorf("Supports(%s) = %v", op, !want)
		}
	}
	req, err := tg.NewRequest(context.Background(), request.ChatCompletions, "pub", []byte(`{}`), http.Header{"Authorization": {"Bearer caller"}})
	if err != nil {
		t.Fatal(err)
	}
	if req.URL.String() != "https://compat.example/v1/chat/completions" || req.Header.Get("Api-Key") != "k" || req.Header.Get("Authorization") != "" {
		t.Errorf("url %s, headers %v", req.URL, req.Header)
	}
	if tg.BodyModel("pub") != "served" || tg.CapField(request.ChatCompletions) != request.MaxTokens || tg.CapField(request.Responses) != request.MaxOutputTokens {
		t.Errorf("body model %q, chat cap %s", tg.BodyModel("pub"), tg.CapField(request.ChatCompletions))
	}
	if tg.Provider() != "test-compatible" || tg.SupportsResponses() {
		t.Errorf("provider %q, Responses %v", tg.Provider(), tg.SupportsResponses())
	}
	if _, err := tg.NewStoredRequest(context.Background(), http.MethodGet, "/responses/r", "", http.Header{}); !errors.Is(err, ErrNoResponsesAPI) {
		t.Errorf("stored request: %v", err)
	}
}

// TestKinds: the built-in kinds in the order config names them, each
// with its gen_ai.provider.name; an unknown kind is refused.
func TestKinds(t *testing.T) {
	t.Parallel()
	if got := Kinds()[:4]; !slices.Equal(got, []string{"openai", "azure-openai", "vllm", "anthropic"}) {
		t.Errorf("Kinds() = %v", got)
	}
	for _, tt := range []struct{ spec TargetSpec }{
		{TargetSpec{Kind: "openai"}}, {TargetSpec{Kind: "vllm"}}, {TargetSpec{Kind: "anthropic"}},
		{TargetSpec{Kind: "azure-openai", AzureAPI: "v1"}}, {TargetSpec{Kind: "azure-openai", APIVersion: "2024-10-21"}},
	} {
		tt.spec.URL = "https://backend.example"
		tg, err := NewTarget(tt.spec)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{"openai": "openai", "vllm": "vllm", "anthropic": "anthropic", "azure-openai": "azure.ai.openai"}[tt.spec.Kind]
		if tg.Provider() != want {
			t.Errorf("%s: provider %q, want %q", tt.spec.Kind, tg.Provider(), want)
		}
	}
	if _, err := NewTarget(TargetSpec{Kind: "bedrock", URL: "https://backend.example"}); err == nil {
		t.Error("an unknown kind was built")
	}
}

// TestResponsesRootAgrees: a kind that supports the Responses API has an
// API root for its stored routes, under the endpoint's base; supports
// alone decides whether it serves them (SupportsResponses).
func TestResponsesRootAgrees(t *testing.T) {
	for _, r := range kinds {
		for _, spec := range []TargetSpec{{Kind: r.name, APIVersion: "2024-10-21"}, {Kind: r.name, AzureAPI: "v1"}} {
			k := r.build(spec)
			root := k.root("https://h.example")
			if k.supports(request.Responses) != strings.HasPrefix(root, "https://h.example/") {
				t.Errorf("%s %+v: supports the Responses API %v, stored routes' root %q", r.name, spec, k.supports(request.Responses), root)
			}
		}
	}
}

// TestRunningUsage: only vLLM is asked for its usage on every chunk
// (continuous_usage_stats): OpenAI's and Azure's APIs document no such
// member, and Anthropic's input counts come in message_start unasked.
func TestRunningUsage(t *testing.T) {
	t.Parallel()
	for _, k := range Kinds() {
		spec := TargetSpec{Kind: k, URL: "https://backend.example", APIKey: "k", APIVersion: "2024-10-21"}
		tg, err := NewTarget(spec)
		if err != nil {
			t.Fatalf("%s: %v", k, err)
		}
		if got := tg.RunningUsage(); got != (k == "vllm") {
			t.Errorf("%s: RunningUsage %v", k, got)
		}
	}
}
