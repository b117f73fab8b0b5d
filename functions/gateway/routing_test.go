package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/llmgw/gateway/internal/testing/redistest"
	"github.com/llmgw/gateway/scripts/stub"
)

// TestRedisSharedCooldownAcrossReplicas: two gateways on one
// redis-server, a pool of a PTU endpoint (priority 0) and pay-as-you-go
// (priority 1). The PTU answers 429 with retry-after-ms to the first
// gateway's request, which spills to pay-as-you-go; the second gateway,
// and a third started afterwards from zero, send their requests straight
// to pay-as-you-go: none pays a 429 to learn that the PTU is full.
func TestRedisSharedCooldownAcrossReplicas(t *testing.T) {
	rs := redistest.Start(t)
	var ptu atomic.Int32
	full := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		ptu.Add(1)
		w.Header().Set("Retry-After-Ms", "30000")
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	t.Cleanup(full.Close)
	payg := stub.New(stub.Options{APIKey: backendKey, Models: []string{"ptu-m"}})
	paygSrv := httptest.NewServer(payg)
	t.Cleanup(func() { payg.Close(); paygSrv.Close() })
	o := options{
		limiter: redisLimiter("open"),
		env:     map[string]string{"REDIS_URL": rs.URL()},
		tenants: "  - {id: ptuco, models: [ptu-m], requests: 100, interval: 1h}\n",
		extra: fmt.Sprintf(`  - name: tiers
    kind: vllm
    models: {ptu-m: ""}
    endpoints:
      - {url: %q, api_key_env: BACKEND_KEY}
      - {url: %q, api_key_env: BACKEND_KEY, priority: 1}
`, full.URL, paygSrv.URL),
	}
	a := startGateway(t, o)
	o.share = a
	b := startGateway(t, o)
	tok := a.token("ptuco")
	body := `{"model":"ptu-m","messages":[{"role":"user","content":"hi"}]}`
	ask := func(g *gw, who string) {
		t.Helper()
		resp := g.post("/v1/chat/completions", tok, body)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", who, resp.StatusCode, b)
		}
	}
	ask(a, "replica a")
	if ptu.Load() != 1 || len(payg.Requests()) != 1 {
		t.Fatalf("replica a: ptu asked %d, payg %d; want the 429 spilled", ptu.Load(), len(payg.Requests()))
	}
	ask(b, "replica b")
	c := startGateway(t, o)
	ask(c, "replica c (new)")
	if ptu.Load() != 1 || len(payg.Requests()) != 3 {
		t.Fatalf("ptu asked %d times, payg %d: the other replicas must see the PTU's cooldown in Redis", ptu.Load(), len(payg.Requests()))
	}
}
