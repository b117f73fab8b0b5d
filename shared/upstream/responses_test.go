package upstream

import (
	"context"
	"net/http"
	"testing"

	"github.com/llmgw/gateway/shared/request"
)

// TestResponsesURLs: each kind's Responses routes, and the deployment as
// the body's model on Azure's v1 surface.
func TestResponsesURLs(t *testing.T) {
	tests := []struct {
		spec           TargetSpec
		create, stored string
		bodyModel      string
		supported      bool
	}{
		{TargetSpec{Kind: "openai", URL: "https://api.example/"}, "https://api.example/v1/responses", "https://api.example/v1/responses/resp_1/input_items?limit=2", "gpt-4o", true},
		{TargetSpec{Kind: "vllm", URL: "http://vllm:8000", Models: map[string]string{"gpt-4o": "served/x"}}, "http://vllm:8000/v1/responses", "http://vllm:8000/v1/responses/resp_1/input_items?limit=2", "served/x", true},
		{TargetSpec{Kind: "azure-openai", URL: "https://aoai.example", AzureAPI: "v1", Models: map[string]string{"gpt-4o": "prod-dep"}}, "https://aoai.example/openai/v1/responses", "https://aoai.example/openai/v1/responses/resp_1/input_items?limit=2", "prod-dep", true},
		{TargetSpec{Kind: "azure-openai", URL: "https://aoai.example", AzureAPI: "deployments", APIVersion: "2024-10-21"}, "", "", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.spec.Kind+"/"+tt.spec.AzureAPI, func(t *testing.T) {
			tg, err := NewTarget(tt.spec)
			if err != nil {
				t.Fatal(err)
			}
			if tg.SupportsResponses() != tt.supported {
				t.Fatalf("SupportsResponses = %v", !tt.supported)
			}
			req, err := tg.NewStoredRequest(context.Background(), http.MethodGet, "/responses/resp_1/input_items", "limit=2", http.Header{})
			if !tt.supported {
				if err == nil {
					t.Fatal("a deployments-surface target built a Responses request")
				}
				return
			}
			if err != nil || req.URL.String() != tt.stored {
				t.Fatalf("stored: %v %v", req.URL, err)
			}
			req, err = tg.NewRequest(context.Background(), request.Responses, "gpt-4o", []byte(`{}`), http.Header{})
			if err != nil || req.URL.String() != tt.create {
				t.Fatalf("create: %v %v", req.URL, err)
			}
			if got := tg.BodyModel("gpt-4o"); got != tt.bodyModel {
				t.Fatalf("body model %q, want %q", got, tt.bodyModel)
			}
		})
	}
}
