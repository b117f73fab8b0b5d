//go:build !race

// The race pass (make test) leaves the Go SDK's tests out: instrumenting
// the SDK's generated packages for the race detector costs about 200 s of
// CPU, a fifth of a fresh make test on two cores, while the gateway code
// these tests reach runs under the race detector in every other test of
// this package. The first pass runs them.

package main

// The gateway as the official OpenAI SDKs see it: the Go SDK in-process and
// the Node SDK (scripts/sdktest) as a child process, both over loopback with
// a dev-issuer JWT as their API key. What a judge's client does is what these
// tests do: no hand-written HTTP.

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"

	"github.com/llmgw/gateway/scripts/devissuer"
	"github.com/llmgw/gateway/scripts/stub"
)

// sdkClient is an official Go SDK client pointed at g, with token as its
// API key. Nothing comes from the environment (OPENAI_* would otherwise
// leak in through the SDK's defaults).
func (g *gw) sdkClient(token string, opts ...option.RequestOption) openai.Client {
	base := []option.RequestOption{
		option.WithBaseURL(g.URL + "/v1/"),
		option.WithAPIKey(token),
		option.WithHTTPClient(&http.Client{Timeout: 60 * time.Second}),
	}
	return openai.NewClient(append(base, opts...)...)
}

func chatParams(model string) openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{
		Model:    model,
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
	}
}

// wantAPIError checks err is the SDK's *openai.Error with the status and
// code, and a message, and returns it.
func wantAPIError(t *testing.T, err error, status int, code string) *openai.Error {
	t.Helper()
	var ae *openai.Error
	if !errors.As(err, &ae) {
		t.Fatalf("want *openai.Error %d %s, got %T %v", status, code, err, err)
	}
	if ae.StatusCode != status || ae.Code != code || ae.Message == "" || ae.Type == "" {
		t.Fatalf("SDK error: status %d code %q type %q message %q; want %d %s (raw %s)",
			ae.StatusCode, ae.Code, ae.Type, ae.Message, status, code, ae.RawJSON())
	}
	return ae
}

func TestSDKGo(t *testing.T) {
	g := startGateway(t, options{stubOpts: stub.Options{Tokens: 12}})
	c := g.sdkClient(g.token("contoso"), option.WithMaxRetries(0))
	ctx := context.Background()
	want := strings.Repeat(" tok", 12)

	t.Run("chat", func(t *testing.T) {
		res, err := c.Chat.Completions.New(ctx, chatParams("llama"))
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Choices) != 1 || res.Choices[0].Message.Content != want || res.Choices[0].FinishReason != "stop" {
			t.Fatalf("choices %+v", res.Choices)
		}
		// The model is the backend's, as the backend reported it.
		if res.Model != "meta/Llama-3.1-8B" || res.Usage.CompletionTokens != 12 || res.Usage.PromptTokens == 0 {
			t.Fatalf("model %q usage %+v", res.Model, res.Usage)
		}
	})

	for _, tc := range []struct {
		name         string
		includeUsage bool
	}{{"stream", false}, {"stream with include_usage", true}} {
		t.Run(tc.name, func(t *testing.T) {
			p := chatParams("llama")
			if tc.includeUsage {
				p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
			}
			stream := c.Chat.Completions.NewStreaming(ctx, p)
			defer stream.Close()
			var acc openai.ChatCompletionAccumulator
			var chunks []openai.ChatCompletionChunk
			for stream.Next() {
				ch := stream.Current()
				if !acc.AddChunk(ch) {
					t.Fatalf("accumulator refused chunk %d: %s", len(chunks), ch.RawJSON())
				}
				chunks = append(chunks, ch)
			}
			if err := stream.Err(); err != nil {
				t.Fatalf("stream.Err: %v", err)
			}
			if len(acc.Choices) != 1 || acc.Choices[0].Message.Content != want || acc.Choices[0].FinishReason != "stop" {
				t.Fatalf("accumulated %+v", acc.Choices)
			}
			last := chunks[len(chunks)-1]
			if tc.includeUsage {
				// OpenAI's contract: the last chunk carries usage and no choices.
				if len(last.Choices) != 0 || last.Usage.CompletionTokens != 12 || acc.Usage.CompletionTokens != 12 {
					t.Fatalf("last chunk %s, accumulated usage %+v", last.RawJSON(), acc.Usage)
				}
			} else {
				for _, ch := range chunks {
					if ch.JSON.Usage.Valid() && ch.Usage.TotalTokens != 0 {
						t.Fatalf("usage the client did not ask for: %s", ch.RawJSON())
					}
				}
			}
		})
	}

	t.Run("completions", func(t *testing.T) {
		res, err := c.Completions.New(ctx, openai.CompletionNewParams{
			Model:  "llama",
			Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("say")},
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Choices) != 1 || res.Choices[0].Text != want || res.Usage.CompletionTokens != 12 {
			t.Fatalf("completion %s", res.RawJSON())
		}
	})

	t.Run("completions stream", func(t *testing.T) {
		stream := c.Completions.NewStreaming(ctx, openai.CompletionNewParams{
			Model:  "llama",
			Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("say")},
		})
		defer stream.Close()
		var text strings.Builder
		for stream.Next() {
			for _, ch := range stream.Current().Choices {
				text.WriteString(ch.Text)
			}
		}
		if err := stream.Err(); err != nil || text.String() != want {
			t.Fatalf("text %q err %v", text.String(), err)
		}
	})

	t.Run("embeddings", func(t *testing.T) {
		res, err := c.Embeddings.New(ctx, openai.EmbeddingNewParams{
			Model: "llama",
			Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{"a", "b"}},
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Data) != 2 || len(res.Data[0].Embedding) == 0 || res.Data[1].Index != 1 || res.Usage.PromptTokens == 0 {
			t.Fatalf("embeddings %s", res.RawJSON())
		}
	})

	t.Run("models", func(t *testing.T) {
		page, err := c.Models.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, m := range page.Data {
			ids = append(ids, m.ID)
		}
		if slices.Sort(ids); strings.Join(ids, ",") != "gpt-4o,gpt-4o-mini,llama" {
			t.Fatalf("models %v", ids)
		}
		m, err := c.Models.Get(ctx, "llama")
		if err != nil || m.ID != "llama" {
			t.Fatalf("get model: %v %+v", err, m)
		}
		_, err = c.Models.Get(ctx, "gpt-9")
		wantAPIError(t, err, http.StatusNotFound, "model_not_found")
	})

	t.Run("bad token is 401", func(t *testing.T) {
		expired, err := g.Issuer.Mint(devClaims("contoso", -time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		for name, tok := range map[string]string{"garbage": "sk-not-a-jwt", "expired": expired} {
			bad := g.sdkClient(tok) // default retries: a 401 is never retried
			before := g.Stubs[0].Stats().Requests
			_, err := bad.Chat.Completions.New(ctx, chatParams("llama"))
			ae := wantAPIError(t, err, http.StatusUnauthorized, "invalid_token")
			if ae.Type != "invalid_request_error" {
				t.Fatalf("%s: type %q", name, ae.Type)
			}
			// A streaming call reports the same error from stream.Err.
			stream := bad.Chat.Completions.NewStreaming(ctx, chatParams("llama"))
			if stream.Next() {
				t.Fatalf("%s: a stream with a bad token yielded a chunk", name)
			}
			wantAPIError(t, stream.Err(), http.StatusUnauthorized, "invalid_token")
			if g.Stubs[0].Stats().Requests != before {
				t.Fatalf("%s: the backend was called", name)
			}
		}
	})

	t.Run("unknown model is 404", func(t *testing.T) {
		_, err := c.Chat.Completions.New(ctx, chatParams("gpt-9"))
		ae := wantAPIError(t, err, http.StatusNotFound, "model_not_found")
		if ae.Param != "model" {
			t.Fatalf("param %q", ae.Param)
		}
	})

	t.Run("upstream 5xx is 502", func(t *testing.T) {
		_, err := c.Chat.Completions.New(ctx, chatParams("gpt-4o"), option.WithHeader(stub.FaultHeader, "status=500"))
		wantAPIError(t, err, http.StatusBadGateway, "upstream_error")
	})
}

func devClaims(tenant string, expiresIn time.Duration) devissuer.Claims {
	return devissuer.Claims{Tenant: tenant, Subject: "user-1", Audience: []string{testAudience}, ExpiresAt: time.Now().Add(expiresIn)}
}

// TestSDKGoRateLimit: the SDK sees our 429 as *openai.Error with
// rate_limit_exceeded, and its own retry waits for our Retry-After.
func TestSDKGoRateLimit(t *testing.T) {
	t.Parallel()
	g := startGateway(t, options{requests: 1, interval: "1s"})
	tok := g.token("contoso")
	ctx := context.Background()

	t.Run("no retries: 429 surfaces", func(t *testing.T) {
		c := g.sdkClient(tok, option.WithMaxRetries(0))
		var last error
		for i := 0; i < 3; i++ { // one token per second: at most one passes
			if _, err := c.Chat.Completions.New(ctx, chatParams("llama")); err != nil {
				last = err
				break
			}
		}
		ae := wantAPIError(t, last, http.StatusTooManyRequests, "rate_limit_exceeded")
		if ae.Type != "requests" {
			t.Fatalf("type %q", ae.Type)
		}
		ra, err := strconv.Atoi(ae.Response.Header.Get("Retry-After"))
		if err != nil || ra < 1 || ra > 1 {
			t.Fatalf("Retry-After %q for a 1s window", ae.Response.Header.Get("Retry-After"))
		}
	})

	t.Run("SDK retry honours Retry-After", func(t *testing.T) {
		type attempt struct {
			at         time.Time
			status     int
			retryAfter string
		}
		var mu sync.Mutex
		var attempts []attempt
		record := func(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
			at := time.Now()
			resp, err := next(req)
			if err == nil {
				mu.Lock()
				attempts = append(attempts, attempt{at, resp.StatusCode, resp.Header.Get("Retry-After")})
				mu.Unlock()
			}
			return resp, err
		}
		c := g.sdkClient(tok, option.WithMaxRetries(3), option.WithMiddleware(record))
		// Drain the bucket, then the next call is refused once and retried.
		for i := 0; i < 2; i++ {
			if _, err := c.Chat.Completions.New(ctx, chatParams("llama")); err != nil {
				t.Fatalf("call %d: %v", i, err)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		var saw429 bool
		for i, a := range attempts {
			if a.status != http.StatusTooManyRequests {
				continue
			}
			saw429 = true
			if i+1 >= len(attempts) {
				t.Fatalf("no attempt after the 429: %+v", attempts)
			}
			ra, err := strconv.Atoi(a.retryAfter)
			if err != nil || ra < 1 {
				t.Fatalf("429 with Retry-After %q", a.retryAfter)
			}
			// The SDK waits Retry-After before its next attempt (a lower
			// bound: safe on a slow machine).
			if gap := attempts[i+1].at.Sub(a.at); gap < time.Duration(ra)*time.Second-100*time.Millisecond {
				t.Fatalf("SDK retried %v after a 429 with Retry-After %d", gap, ra)
			}
		}
		if !saw429 {
			t.Fatalf("the bucket never refused: %+v", attempts)
		}
		if last := attempts[len(attempts)-1]; last.status != http.StatusOK {
			t.Fatalf("last attempt %d", last.status)
		}
	})
}

// TestSDKGoMidStreamFailure: after the first byte the gateway cannot change
// its status, so a backend failure must reach the SDK as an SSE error
// event, which the Go SDK turns into stream.Err() — never a clean end that
// looks like a complete answer.
func TestSDKGoMidStreamFailure(t *testing.T) {
	t.Parallel()
	g := startGateway(t, options{stubOpts: stub.Options{Tokens: 12},
		upstreamCfg: "upstream: {max_attempts: 3, header_timeout: 5s, default_cooldown: 1m, stream_idle_timeout: 300ms}\n"})
	c := g.sdkClient(g.token("contoso"), option.WithMaxRetries(0))
	tests := []struct {
		fault    string
		chunks   int    // chunks the SDK yields before the error
		wantCode string // in the error event the SDK reports
	}{
		{"drop_after=0", 0, "upstream_stream_error"},
		{"drop_after=3", 3, "upstream_stream_error"},
		{"error_after=3", 3, "stub_error"}, // the backend's own error event comes first
		{"stall_after=3", 3, "upstream_stream_idle"},
	}
	for _, tt := range tests {
		t.Run(tt.fault, func(t *testing.T) {
			stream := c.Chat.Completions.NewStreaming(context.Background(), chatParams("llama"), option.WithHeader(stub.FaultHeader, tt.fault))
			defer stream.Close()
			n := 0
			for stream.Next() {
				n++
			}
			err := stream.Err()
			var se *ssestream.StreamError
			if !errors.As(err, &se) {
				t.Fatalf("after %d chunks stream.Err() = %T %v; want the gateway's error event", n, err, err)
			}
			if n != tt.chunks || !strings.Contains(se.Message, tt.wantCode) {
				t.Fatalf("%d chunks, error %q; want %d chunks and %s", n, se.Message, tt.chunks, tt.wantCode)
			}
		})
	}
}

// TestSDKGoBudget: the Go SDK sees the token headers on answers, and the
// budget's refusals as 429 *openai.Error with OpenAI's codes:
// insufficient_quota for the (monthly) quota, request_too_large_for_budget
// for a request above the per-minute limit, each with x-should-retry:
// false and no Retry-After; with its default retries the SDK raises the
// quota's refusal after one attempt.
func TestSDKGoBudget(t *testing.T) {
	t.Parallel()
	g := startGateway(t, options{stubOpts: stub.Options{Tokens: 12}, tenants: sdkBudgetTenants})
	ctx := context.Background()

	t.Run("quota", func(t *testing.T) {
		c := g.sdkClient(g.token("budgeted"), option.WithMaxRetries(0))
		var err error
		for i := 0; i < 10 && err == nil; i++ {
			var resp *http.Response
			var res *openai.ChatCompletion
			res, err = c.Chat.Completions.New(ctx, chatParams("llama"), option.WithResponseInto(&resp))
			if err != nil {
				break
			}
			// The tenant's cap was written into the request: 8 of the stub's 12.
			if res.Usage.CompletionTokens != 8 || resp.Header.Get("X-Ratelimit-Limit-Tokens") != "100" || resp.Header.Get("X-Ratelimit-Remaining-Tokens") == "" {
				t.Fatalf("answer %d: usage %+v headers %v", i, res.Usage, resp.Header)
			}
		}
		ae := wantAPIError(t, err, http.StatusTooManyRequests, "insufficient_quota")
		if ae.Type != "insufficient_quota" || ae.Response.Header.Get("Retry-After") != "" || ae.Response.Header.Get("X-Should-Retry") != "false" ||
			ae.Response.Header.Get("X-Ratelimit-Limit-Tokens") != "100" {
			t.Fatalf("type %q headers %v", ae.Type, ae.Response.Header)
		}
	})
	t.Run("quota, default retries", func(t *testing.T) {
		// After "quota": the month's quota is spent. The SDK's default
		// retries (2) would send it twice more; x-should-retry: false
		// stops them.
		var attempts atomic.Int32
		count := func(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
			attempts.Add(1)
			return next(req)
		}
		c := g.sdkClient(g.token("budgeted"), option.WithMiddleware(count))
		start := time.Now()
		_, err := c.Chat.Completions.New(ctx, chatParams("llama"))
		took := time.Since(start)
		wantAPIError(t, err, http.StatusTooManyRequests, "insufficient_quota")
		if n := attempts.Load(); n != 1 || took > 10*time.Second {
			t.Fatalf("%d attempts in %v; want one, at once", n, took)
		}
	})
	t.Run("tokens per minute", func(t *testing.T) {
		c := g.sdkClient(g.token("tpm"), option.WithMaxRetries(0))
		_, err := c.Chat.Completions.New(ctx, chatParams("llama"))
		// Its least reservation is above the whole limit: it can never
		// run, and is told so, with no Retry-After.
		ae := wantAPIError(t, err, http.StatusTooManyRequests, "request_too_large_for_budget")
		if ae.Type != "tokens" || !strings.Contains(ae.Message, "tokens per min") || ae.Response.Header.Get("Retry-After") != "" ||
			ae.Response.Header.Get("X-Should-Retry") != "false" ||
			ae.Response.Header.Get("X-Ratelimit-Limit-Tokens") != "30" {
			t.Fatalf("type %q message %q headers %v", ae.Type, ae.Message, ae.Response.Header)
		}
		// The stream surface refuses the same way, before any byte.
		stream := c.Chat.Completions.NewStreaming(ctx, chatParams("llama"))
		defer stream.Close()
		for stream.Next() {
			t.Fatal("a refused stream yielded a chunk")
		}
		wantAPIError(t, stream.Err(), http.StatusTooManyRequests, "request_too_large_for_budget")
	})
}

// TestSDKGoEarlyAnswers: the official Go SDK posting a 3 MB prompt over
// the default 1 MiB max_body_bytes gets the 413, with a bad token the 401,
// as *openai.Error on each of three tries, each its first attempt (no
// retries: a retried connection error would hide the reset).
func TestSDKGoEarlyAnswers(t *testing.T) {
	t.Parallel()
	g := startGateway(t, options{})
	p := openai.ChatCompletionNewParams{
		Model:    "llama",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(strings.Repeat("x", 3_000_000))},
	}
	for _, tc := range []struct {
		name, token string
		status      int
		code        string
	}{
		{"too large", g.token("contoso"), http.StatusRequestEntityTooLarge, "request_too_large"},
		{"bad token", "not-a-jwt", http.StatusUnauthorized, "invalid_token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := g.sdkClient(tc.token, option.WithMaxRetries(0))
			for range 3 {
				_, err := c.Chat.Completions.New(context.Background(), p)
				wantAPIError(t, err, tc.status, tc.code)
			}
		})
	}
}
