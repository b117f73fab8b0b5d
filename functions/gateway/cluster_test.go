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

// TestRedisClusterReplicas: two gateways share a three-primary Redis
// Cluster (store.redis_cluster) for a tenant with a request limit, a
// token quota and a spend limit, on a pool of a PTU that answers 429 and
// a pay-as-you-go endpoint. The PTU's cooldown learnt by the first
// reaches the second (a pool's cooldown keys share one hash tag: no
// CROSSSLOT), every request is budgeted (no 503 budget_unavailable: the
// cluster client follows the slots, no MOVED), and the two admit the
// tenant's requests between them exactly once.
func TestRedisClusterReplicas(t *testing.T) {
	t.Parallel()
	rc := redistest.StartCluster(t)
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
	const requests = 6
	o := options{
		limiter: "limiter: {timeout: 2s, failure_policy: closed}\n" +
			"store: {backend: redis, redis_url_env: REDIS_URL, redis_cluster: true, key_prefix: \"e2e:\"}\n" +
			"budget: {timeout: 2s}\n",
		env:     map[string]string{"REDIS_URL": rc.URL()},
		tenants: fmt.Sprintf("  - {id: clusco, models: [ptu-m], requests: %d, interval: 1h, tokens_per_minute: 100000, token_quota: 1000000, quota_period: month, spend_per_day: \"2.00\"}\n", requests),
		extra: fmt.Sprintf(`  - name: tiers
    kind: vllm
    models: {ptu-m: ""}
    endpoints:
      - {url: %q, api_key_env: BACKEND_KEY}
      - {url: %q, api_key_env: BACKEND_KEY, priority: 1}
prices: {currency: USD, version: "2026-12-01", models: [{model: ptu-m, input: "1", output: "3"}]}
`, full.URL, paygSrv.URL),
	}
	a := startGateway(t, o)
	o.share = a
	b := startGateway(t, o)
	tok := a.token("clusco")
	body := `{"model":"ptu-m","max_tokens":20,"messages":[{"role":"user","content":"hi"}]}`
	statuses := map[int]int{}
	for i := range 2 * requests {
		g := []*gw{a, b}[i%2]
		resp := g.post("/v1/chat/completions", tok, body)
		msg, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		statuses[resp.StatusCode]++
		if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, msg)
		}
		if i == 0 && (ptu.Load() != 1 || len(payg.Requests()) != 1) {
			t.Fatalf("replica a: ptu asked %d, payg %d; want the 429 spilled", ptu.Load(), len(payg.Requests()))
		}
	}
	if ptu.Load() != 1 {
		t.Errorf("the PTU was asked %d times: replica b must see its cooldown in the cluster", ptu.Load())
	}
	if statuses[http.StatusOK] != requests || statuses[http.StatusTooManyRequests] != requests {
		t.Errorf("two replicas answered %v; want %d×200 and %d×429 from the one shared limit", statuses, requests, requests)
	}
}
