package main

import (
	"io"
	"strings"
	"testing"
)

// TestCountTokensOwnBucket: count_tokens draws from the tenant's count
// bucket (count_requests, default ten per request), not the request
// bucket. Claude Code's /context sends about 35 at once; before, each
// took a request, so a tenant's third count here
// was refused and its next message too. The count bucket is bounded:
// past it counts get 429 rate_limit_exceeded naming the counts, and
// messages still pass.
func TestCountTokensOwnBucket(t *testing.T) {
	t.Parallel()
	g, _ := startClaude(t, options{tenants: "  - {id: viewer, models: [claude-test], requests: 2, interval: 1h, count_requests: 6}\n"})
	tok := g.token("viewer")
	count := func() int {
		resp := g.post("/v1/messages/count_tokens", "", `{"model":"claude-test","messages":[{"role":"user","content":"Hello"}]}`, "X-Api-Key", tok)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	for i := range 6 {
		if s := count(); s != 200 {
			t.Fatalf("count %d: status %d, want 200 (6 counts in the bucket)", i+1, s)
		}
	}
	resp := g.post("/v1/messages/count_tokens", "", `{"model":"claude-test","messages":[{"role":"user","content":"Hello"}]}`, "X-Api-Key", tok)
	if msg := anthropicError(t, resp, 429, "rate_limit_error"); !strings.Contains(msg, "prompt counts") {
		t.Errorf("the refusal %q does not name the counts", msg)
	}
	for i := range 2 {
		resp := g.post("/v1/messages", "", `{"model":"claude-test","max_tokens":8,"messages":[{"role":"user","content":"Hi"}]}`, "X-Api-Key", tok)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("message %d after the counts: %d %s", i+1, resp.StatusCode, b)
		}
	}
}
