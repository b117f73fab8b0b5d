package upstream

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"testing"

	"github.com/llmgw/gateway/shared/request"
)

// TestNewRequestAsNewRequestWithContext: a POST built from the endpoint's
// template (parsePosts) is, for every kind and operation it serves, the
// request http.NewRequestWithContext makes of the same URL and body:
// method, URL, Host, protocol, context, length, body and GetBody's
// replay; and two requests share no header map.
func TestNewRequestAsNewRequestWithContext(t *testing.T) {
	specs := []TargetSpec{
		{Kind: "openai", URL: "https://api.example/", APIKey: "sk-1", Organization: "org-1"},
		{Kind: "vllm", URL: "http://10.0.0.1:8000", Models: map[string]string{"llama": "meta/Llama"}},
		{Kind: "azure-openai", URL: "https://x.openai.azure.com", AzureAPI: "v1", APIKey: "az-1"},
		{Kind: "azure-openai", URL: "https://x.openai.azure.com:443/", APIVersion: "2024-10-21", APIKey: "az-1", Models: map[string]string{"llama": "dep 1"}},
		{Kind: "anthropic", URL: "https://api.anthropic.example", APIKey: "ak-1"},
		{Kind: "openai", URL: "http://user:pw@127.0.0.1:9100/base"},
	}
	type ctxKey struct{}
	ctx := context.WithValue(context.Background(), ctxKey{}, 1)
	for _, spec := range specs {
		tg, err := NewTarget(spec)
		if err != nil {
			t.Fatal(err)
		}
		for _, op := range request.Operations() {
			if !tg.Supports(op) {
				continue
			}
			for _, body := range [][]byte{[]byte(`{"model":"llama"}`), {}} {
				name := spec.Kind + " " + spec.URL + " " + op.API()
				got, err := tg.NewRequest(ctx, op, "llama", body, http.Header{"Accept": {"text/event-stream"}})
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				want, err := http.NewRequestWithContext(ctx, http.MethodPost, tg.kind.url(tg.base, op, tg.BackendModel("llama")), bytes.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				if got.Method != want.Method || got.URL.String() != want.URL.String() || got.Host != want.Host ||
					got.Proto != want.Proto || got.ProtoMajor != want.ProtoMajor || got.ProtoMinor != want.ProtoMinor ||
					got.ContentLength != want.ContentLength || got.Context() != ctx || (got.URL.User == nil) != (want.URL.User == nil) {
					t.Fatalf("%s: got %s %s host %q %s len %d, want %s %s host %q %s len %d", name,
						got.Method, got.URL, got.Host, got.Proto, got.ContentLength, want.Method, want.URL, want.Host, want.Proto, want.ContentLength)
				}
				if (got.Body == http.NoBody) != (want.Body == http.NoBody) || (got.GetBody == nil) != (want.GetBody == nil) {
					t.Fatalf("%s: body %T / GetBody %v, want %T / %v", name, got.Body, got.GetBody != nil, want.Body, want.GetBody != nil)
				}
				for i := 0; i < 2; i++ { // the body, then GetBody's replay of it
					rc := got.Body
					if i == 1 {
						if rc, err = got.GetBody(); err != nil {
							t.Fatal(err)
						}
					}
					if b, _ := io.ReadAll(rc); !bytes.Equal(b, body) {
						t.Fatalf("%s: read %d: %q, want %q", name, i, b, body)
					}
				}
				again, err := tg.NewRequest(ctx, op, "llama", body, nil)
				if err != nil {
					t.Fatal(err)
				}
				again.Header.Set("X-Only-Here", "1")
				if got.Header.Get("X-Only-Here") != "" || got.Header.Get("Accept") != "text/event-stream" || again.Header.Get("Accept") != "" {
					t.Fatalf("%s: two requests share headers: %v / %v", name, got.Header, again.Header)
				}
			}
		}
	}
}
