package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/llmgw/gateway/internal/testing/redistest"
)

// TestOwnershipEndToEnd: docs/ownership.md's rules, through the binary's
// run on two replicas sharing a redis-server, with a vLLM backend that answers every
// tenant with one response id (a lying or echoing backend):
//   - tenant A creates resp_shared through replica 1; tenant B's create
//     through replica 2 gets the same id back, marked unrecorded, and B
//     can neither read nor delete it on either replica, while A still
//     reads it (before: Redis's plain SET handed it to B, A got 404);
//   - request_id, which vLLM stores a response under, is refused 400
//     before any backend call;
//   - web search, enabled in the config for A only, is forwarded for A
//     and refused 400 for B with no backend call.
func TestOwnershipEndToEnd(t *testing.T) {
	var calls atomic.Int64
	liar := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"resp_shared","object":"response","status":"completed","output":[],"usage":{"input_tokens":3,"output_tokens":1,"total_tokens":4}}`)
	}))
	t.Cleanup(liar.Close)
	rs := redistest.Start(t)
	o := options{
		limiter: redisLimiter("closed"),
		env:     map[string]string{"REDIS_URL": rs.URL()},
		tenants: "  - {id: tenant-a, models: [lie], requests: 1000, features: [{name: web_search, cost_per_use: 100}]}\n" +
			"  - {id: tenant-b, models: [lie], requests: 1000}\n",
		extra: fmt.Sprintf("  - name: liar\n    kind: vllm\n    models: {lie: \"\"}\n    endpoints:\n      - {url: %q}\n", liar.URL),
	}
	r1 := startGateway(t, o)
	o.share = r1
	r2 := startGateway(t, o)
	a, b := r1.token("tenant-a"), r1.token("tenant-b")
	call := func(g *gw, method, path, tok, body string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(method, g.URL+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return resp, string(out)
	}

	if resp, out := call(r1, "POST", "/v1/responses", a, `{"model":"lie","input":"hi"}`); resp.StatusCode != 200 || resp.Header.Get("X-Llmgw-Response-Unrecorded") != "" {
		t.Fatalf("A's create: %d %s", resp.StatusCode, out)
	}
	if resp, out := call(r2, "POST", "/v1/responses", b, `{"model":"lie","input":"hi"}`); resp.StatusCode != 200 || resp.Header.Get("X-Llmgw-Response-Unrecorded") != "resp_shared" {
		t.Fatalf("B's create answered with A's id: %d %s, unrecorded %q", resp.StatusCode, out, resp.Header.Get("X-Llmgw-Response-Unrecorded"))
	}
	before := calls.Load()
	for _, g := range []*gw{r1, r2} {
		for _, m := range []string{"GET", "DELETE"} {
			if resp, out := call(g, m, "/v1/responses/resp_shared", b, ""); resp.StatusCode != 404 {
				t.Fatalf("B's %s of A's response: %d %s", m, resp.StatusCode, out)
			}
		}
	}
	if calls.Load() != before {
		t.Fatalf("B's reads reached the backend")
	}
	for _, g := range []*gw{r1, r2} {
		if resp, out := call(g, "GET", "/v1/responses/resp_shared", a, ""); resp.StatusCode != 200 {
			t.Fatalf("A lost its response: %d %s", resp.StatusCode, out)
		}
	}

	before = calls.Load()
	if resp, out := call(r1, "POST", "/v1/responses", b, `{"model":"lie","input":"hi","request_id":"resp_shared"}`); resp.StatusCode != 400 || !strings.Contains(out, `"param":"request_id"`) {
		t.Fatalf("request_id: %d %s", resp.StatusCode, out)
	}
	const search = `{"model":"lie","input":"news?","tools":[{"type":"web_search"}]}`
	if resp, out := call(r2, "POST", "/v1/responses", b, search); resp.StatusCode != 400 || !strings.Contains(out, "feature_not_enabled") || !strings.Contains(out, `"param":"tools[0]"`) {
		t.Fatalf("B's web search: %d %s", resp.StatusCode, out)
	}
	if calls.Load() != before {
		t.Fatalf("a refused request reached the backend")
	}
	if resp, out := call(r2, "POST", "/v1/responses", a, search); resp.StatusCode != 200 || calls.Load() != before+1 {
		t.Fatalf("A's web search: %d %s", resp.StatusCode, out)
	}
}
