package main

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
)

// TestSDKGoAnthropicRefusals: anthropic-sdk-go, with its default retries
// (2), on the Messages API through the gateway: a turn is answered; a
// spent monthly quota is raised after one attempt, at once
// (x-should-retry: false, no Retry-After: the month ends in days), as a
// 429 *anthropic.Error; and a request no budget can ever hold
// (request_too_large_for_budget) the same. Before, the quota's
// Retry-After made the SDK wait and retry.
func TestSDKGoAnthropicRefusals(t *testing.T) {
	t.Parallel()
	g, _ := startClaude(t, options{tenants: "  - {id: spentco, models: [claude-test], requests: 1000, interval: 1h, token_quota: 60, quota_period: month}\n" +
		"  - {id: tinyco, models: [claude-test], requests: 1000, interval: 1h, tokens_per_minute: 20}\n"})
	var attempts atomic.Int32
	count := func(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
		attempts.Add(1)
		return next(req)
	}
	client := func(tenant string) anthropic.Client {
		return anthropic.NewClient(option.WithBaseURL(g.URL), option.WithAPIKey(g.token(tenant)), option.WithMiddleware(count))
	}
	params := anthropic.MessageNewParams{Model: "claude-test", MaxTokens: 8,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))}}
	// A prompt of about 100 tokens: above tinyco's whole minute.
	long := anthropic.MessageNewParams{Model: "claude-test", MaxTokens: 8,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(strings.Repeat("word ", 100)))}}
	ctx := context.Background()

	first := client("anthro")
	msg, err := first.Messages.New(ctx, params)
	if err != nil || len(msg.Content) == 0 {
		t.Fatalf("a turn: %v %+v", err, msg)
	}
	for _, c := range []struct {
		name, tenant string
		spend        bool // spend the quota first
		params       anthropic.MessageNewParams
	}{
		{"spent monthly quota", "spentco", true, params},
		{"never fits the budget", "tinyco", false, long},
	} {
		t.Run(c.name, func(t *testing.T) {
			cl := client(c.tenant)
			var err error
			for i := 0; i < 20 && c.spend && err == nil; i++ {
				_, err = cl.Messages.New(ctx, params)
			}
			attempts.Store(0)
			start := time.Now()
			_, err = cl.Messages.New(ctx, c.params)
			took := time.Since(start)
			var ae *anthropic.Error
			if !errors.As(err, &ae) || ae.StatusCode != http.StatusTooManyRequests {
				t.Fatalf("want a 429 *anthropic.Error, got %v", err)
			}
			if ae.Response.Header.Get("X-Should-Retry") != "false" || ae.Response.Header.Get("Retry-After") != "" {
				t.Fatalf("headers %v", ae.Response.Header)
			}
			if n := attempts.Load(); n != 1 || took > 10*time.Second {
				t.Fatalf("%d attempts in %v; want one, at once", n, took)
			}
		})
	}
}
