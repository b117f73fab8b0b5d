//go:build !race

// The race pass (make test) leaves the Go SDK's tests out: instrumenting
// the SDK's generated packages for the race detector costs about 200 s of
// CPU, a fifth of a fresh make test on two cores, while the gateway code
// these tests reach runs under the race detector in every other test of
// this package. The first pass runs them.

package main

// The clients the ecosystem ships, unchanged, through the gateway: the Go
// SDK's Azure option package against the Azure routes, its Responses
// client, and streams that carry keepalive comments.

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/azure"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/llmgw/gateway/scripts/stub"
)

// staticToken is an azcore.TokenCredential handing out one JWT: what
// azidentity would return for the gateway's app registration.
type staticToken string

func (s staticToken) GetToken(context.Context, policy.TokenRequestOptions) (azcore.AccessToken, error) {
	return azcore.AccessToken{Token: string(s), ExpiresOn: time.Now().Add(time.Hour)}, nil
}

// TestSDKGoAzure: an application written for Azure OpenAI changes only its
// endpoint and credential.
func TestSDKGoAzure(t *testing.T) {
	g := startGateway(t, options{stubOpts: stub.Options{Tokens: 12}})
	tok := g.token("contoso")
	want := strings.Repeat(" tok", 12)
	ctx := context.Background()
	azureClient := func(apiVersion string, cred option.RequestOption) openai.Client {
		return openai.NewClient(azure.WithEndpoint(g.URL, apiVersion), azure.WithUnsafeAllowHTTP(), cred, option.WithMaxRetries(0))
	}
	for name, cred := range map[string]option.RequestOption{
		"api-key":          azure.WithAPIKey(tok),
		"token credential": azure.WithTokenCredential(staticToken(tok)),
	} {
		c := azureClient("2024-10-21", cred)
		t.Run(name+"/chat", func(t *testing.T) {
			res, err := c.Chat.Completions.New(ctx, chatParams("llama"))
			if err != nil || res.Choices[0].Message.Content != want {
				t.Fatalf("res %v err %v", res, err)
			}
		})
		t.Run(name+"/stream", func(t *testing.T) {
			s := c.Chat.Completions.NewStreaming(ctx, chatParams("llama"))
			var text strings.Builder
			for s.Next() {
				if ch := s.Current(); len(ch.Choices) > 0 {
					text.WriteString(ch.Choices[0].Delta.Content)
				}
			}
			if err := s.Err(); err != nil || text.String() != want {
				t.Fatalf("text %q err %v", text.String(), err)
			}
		})
		t.Run(name+"/embeddings", func(t *testing.T) {
			res, err := c.Embeddings.New(ctx, openai.EmbeddingNewParams{
				Model: "llama", Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("hello")},
			})
			if err != nil || len(res.Data) != 1 || len(res.Data[0].Embedding) == 0 {
				t.Fatalf("res %v err %v", res, err)
			}
		})
		t.Run(name+"/deployment not allowed", func(t *testing.T) {
			_, err := c.Chat.Completions.New(ctx, chatParams("o4-mini"))
			wantAPIError(t, err, 404, "model_not_found")
		})
	}
	t.Run("the Azure routes were used", func(t *testing.T) {
		if !strings.Contains(g.logs.String(), `"path":"/openai/deployments/llama/chat/completions"`) ||
			!strings.Contains(g.logs.String(), `"path":"/openai/deployments/llama/embeddings"`) {
			t.Fatalf("no request on the deployment routes:\n%s", g.logs.String())
		}
	})
	t.Run("bad api-version", func(t *testing.T) {
		c := azureClient("latest", azure.WithAPIKey(tok))
		_, err := c.Chat.Completions.New(ctx, chatParams("llama"))
		wantAPIError(t, err, 400, "invalid_api_version")
	})
	t.Run("wrong key", func(t *testing.T) {
		c := azureClient("2024-10-21", azure.WithAPIKey("not-a-jwt"))
		_, err := c.Chat.Completions.New(ctx, chatParams("llama"))
		wantAPIError(t, err, 401, "invalid_token")
	})
}

// TestSDKGoKeepalive: keepalive comments before a slow first token are
// invisible to the SDK: no empty chunk, no error, the whole text.
func TestSDKGoKeepalive(t *testing.T) {
	g := startGateway(t, options{stubOpts: stub.Options{Tokens: 6},
		upstreamCfg: "upstream: {max_attempts: 3, header_timeout: 5s, keepalive_interval: 40ms}\n"})
	tok := g.token("contoso")
	// A first token 25 intervals late: comments must come first even on a
	// busy machine.
	slow := []string{stub.TTFTHeader, "1s"}

	// The raw stream proves comments were sent.
	resp := g.post("/v1/chat/completions", tok, streamBody, slow...)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(raw), ": keepalive\n\n") || !strings.HasSuffix(string(raw), "data: [DONE]\n\n") {
		t.Fatalf("no keepalive before a 1 s first token: %q", raw)
	}

	c := g.sdkClient(tok, option.WithMaxRetries(0), option.WithHeader(slow[0], slow[1]))
	s := c.Chat.Completions.NewStreaming(context.Background(), chatParams("llama"))
	var text strings.Builder
	chunks := 0
	for s.Next() {
		ch := s.Current()
		if ch.ID == "" {
			t.Fatalf("empty chunk %q", ch.RawJSON())
		}
		chunks++
		if len(ch.Choices) > 0 {
			text.WriteString(ch.Choices[0].Delta.Content)
		}
	}
	if err := s.Err(); err != nil || text.String() != strings.Repeat(" tok", 6) {
		t.Fatalf("after %d chunks: text %q err %v", chunks, text.String(), err)
	}
}

// TestSDKGoResponses: openai-go's Responses client, JSON and streaming,
// and a follow-up by previous_response_id.
func TestSDKGoResponses(t *testing.T) {
	g := startGateway(t, options{stubs: 2, stubOpts: stub.Options{Tokens: 5}})
	c := g.sdkClient(g.token("contoso"), option.WithMaxRetries(0))
	ctx := context.Background()
	want := strings.Repeat(" tok", 5)
	params := responses.ResponseNewParams{Model: "llama", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}}

	res, err := c.Responses.New(ctx, params)
	if err != nil || res.OutputText() != want || res.Usage.OutputTokens != 5 {
		t.Fatalf("res %v err %v", res, err)
	}
	for i := 0; i < 4; i++ { // two endpoints: each follow-up must find the one that has it
		params.PreviousResponseID = openai.String(res.ID)
		next, err := c.Responses.New(ctx, params)
		if err != nil {
			t.Fatalf("follow-up %d: %v", i, err)
		}
		res = next
	}
	got, err := c.Responses.Get(ctx, res.ID, responses.ResponseGetParams{})
	if err != nil || got.ID != res.ID {
		t.Fatalf("get: %v %v", got, err)
	}

	s := c.Responses.NewStreaming(ctx, responses.ResponseNewParams{Model: "llama", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}})
	var text strings.Builder
	var last string
	for s.Next() {
		ev := s.Current()
		last = ev.Type
		if ev.Type == "response.output_text.delta" {
			text.WriteString(ev.Delta)
		}
	}
	if err := s.Err(); err != nil || text.String() != want || last != "response.completed" {
		t.Fatalf("stream text %q last %q err %v", text.String(), last, err)
	}
}
