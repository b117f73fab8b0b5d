//go:build !race

// The key test that drives the official Go SDK is left out of the race
// pass, as the other SDK tests are (sdk_test.go says why).

package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/llmgw/gateway/internal/testing/redistest"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// TestKeyOpenAISDK: a key made with the CLI works as a plain API key
// with the official OpenAI Go SDK and through x-api-key on the Messages
// route; it narrows its tenant's models; its requests are the tenant's,
// counted in the tenant's bucket with its JWTs'; its secret is in no log
// line or audit line.
func TestKeyOpenAISDK(t *testing.T) {
	rs := redistest.Start(t)
	o := keysOn(rs, "5s")
	o.requests = 4
	g, _ := startClaude(t, o)
	var audit bytes.Buffer
	key := newAPIKey(t, g, &audit, "-tenant", "contoso", "-models", "gpt-4o-mini,llama")
	anthroKey := newAPIKey(t, g, &audit, "-tenant", "anthro")

	c := g.sdkClient(key)
	ctx := context.Background()
	if _, err := c.Chat.Completions.New(ctx, chatParams("gpt-4o-mini")); err != nil {
		t.Fatalf("chat with a key: %v", err)
	}
	_, err := c.Chat.Completions.New(ctx, chatParams("gpt-4o"))
	wantAPIError(t, err, http.StatusNotFound, "model_not_found") // the tenant's, not the key's
	page, err := c.Models.List(ctx)
	if err != nil || len(page.Data) != 2 {
		t.Fatalf("models with a key: %+v, %v", page, err)
	}

	resp := g.post("/v1/messages", "", messagesBody, "X-Api-Key", anthroKey)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("messages with x-api-key: %d %s", resp.StatusCode, b)
	}

	// The tenant's bucket (4 requests) is spent by its JWTs and its keys
	// alike: after one request by JWT, the key is refused within it.
	resp = g.post("/v1/chat/completions", g.token("contoso"), chatBody)
	resp.Body.Close()
	served := 2
	for ; ; served++ {
		_, err = c.Chat.Completions.New(ctx, chatParams("gpt-4o-mini"), option.WithMaxRetries(0))
		if err != nil {
			break
		}
	}
	var ae *openai.Error
	if !errors.As(err, &ae) || ae.StatusCode != http.StatusTooManyRequests || served > 4 {
		t.Fatalf("past the tenant's bucket after %d served: %v", served, err)
	}

	logs := g.logs.String() + audit.String()
	for _, k := range []string{key, anthroKey} {
		secret := k[len("llmgw-")+9:]
		if strings.Contains(logs, secret) {
			t.Fatalf("a key's secret is in the logs")
		}
	}
	if !strings.Contains(logs, `"subject":"key:`+key[6:14]+`"`) {
		t.Fatalf("the access log does not name the key by its public id")
	}
	if !strings.Contains(audit.String(), `"msg":"api key created"`) {
		t.Fatalf("no audit line: %s", audit.String())
	}
}
