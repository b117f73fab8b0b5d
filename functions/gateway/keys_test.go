package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/gateway/internal/testing/redistest"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// keysSecret is the digests' secret of the tests' gateways.
const keysSecret = "0123456789abcdef0123456789abcdef-test"

// keysOn is the options of a gateway with gateway keys in a Redis store
// on rs, whose cache believes the store for bound.
func keysOn(rs *redistest.Server, bound string) options {
	return options{
		limiter: redisLimiter("closed"),
		env:     map[string]string{"REDIS_URL": rs.URL(), "KEY_SECRET": keysSecret},
		extra:   "api_keys: {secret_env: KEY_SECRET, cache_ttl: " + bound + "}\n",
	}
}

// keysCmd runs "gateway keys <args>" on g's config and environment and
// returns its standard output; the audit lines go to audit.
func keysCmd(t *testing.T, g *gw, audit io.Writer, args ...string) string {
	t.Helper()
	var out, errOut bytes.Buffer
	argv := append([]string{"gateway", "keys", args[0], "-config", g.cfgPath}, args[1:]...)
	if err := run(context.Background(), argv, func(k string) string { return g.env[k] }, &out, io.MultiWriter(&errOut, audit)); err != nil {
		t.Fatalf("gateway keys %s: %v\n%s", strings.Join(args, " "), err, errOut.String())
	}
	return out.String()
}

// newAPIKey makes a store key with the CLI and returns it.
func newAPIKey(t *testing.T, g *gw, audit io.Writer, args ...string) string {
	t.Helper()
	key, _, _ := strings.Cut(keysCmd(t, g, audit, append([]string{"create"}, args...)...), "\n")
	if !strings.HasPrefix(key, "llmgw-") {
		t.Fatalf("create printed %q", key)
	}
	return key
}

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

// TestKeyTwoReplicas: two replicas on one Redis: a key revoked on one is
// refused by both within the cache's bound; an expired key is a 401 that
// tells the client not to retry.
func TestKeyTwoReplicas(t *testing.T) {
	rs := redistest.Start(t)
	a := startGateway(t, keysOn(rs, "500ms"))
	bo := keysOn(rs, "500ms")
	bo.share = a
	b := startGateway(t, bo)
	key := newAPIKey(t, a, io.Discard, "-tenant", "contoso")
	for _, g := range []*gw{a, b} {
		resp := g.post("/v1/chat/completions", key, chatBody)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("before revocation: %d", resp.StatusCode)
		}
	}
	keysCmd(t, b, io.Discard, "revoke", "-id", key[6:14])
	revoked := time.Now()
	for _, g := range []*gw{a, b} {
		eventually(t, "the revocation reaches the replica", func() bool {
			resp := g.post("/v1/chat/completions", key, chatBody)
			resp.Body.Close()
			return resp.StatusCode == http.StatusUnauthorized
		})
	}
	if d := time.Since(revoked); d > 2*time.Second {
		t.Fatalf("revocation took %s, bound 500ms", d)
	}

	short := newAPIKey(t, a, io.Discard, "-tenant", "contoso", "-ttl", "1s")
	time.Sleep(1100 * time.Millisecond)
	resp := b.post("/v1/chat/completions", short, chatBody)
	openAIError(t, resp, http.StatusUnauthorized, "invalid_token")
	if resp.Header.Get("X-Should-Retry") != "false" {
		t.Fatalf("expired key: x-should-retry %q", resp.Header.Get("X-Should-Retry"))
	}
}

// TestKeyOtherTenant: a key of a tenant the gateway's table lacks (the
// same store and secret, another tenant's isolated endpoint) is refused,
// never served.
func TestKeyOtherTenant(t *testing.T) {
	rs := redistest.Start(t)
	claude, _ := startClaude(t, keysOn(rs, "5s"))
	plain := startGateway(t, keysOn(rs, "5s"))
	key := newAPIKey(t, claude, io.Discard, "-tenant", "anthro")
	resp := plain.post("/v1/chat/completions", key, chatBody)
	openAIError(t, resp, http.StatusForbidden, "tenant_not_allowed")
}
