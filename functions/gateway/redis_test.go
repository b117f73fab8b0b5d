package main

import (
	"net/http"
	"sync"
	"testing"

	"github.com/llmgw/gateway/internal/testing/redistest"
)

// redisLimiter is the limiter block for a gateway on a real redis-server.
func redisLimiter(policy string) string {
	return "limiter: {store: redis, redis_url_env: REDIS_URL, key_prefix: \"e2e:\", timeout: 200ms, failure_policy: " + policy + "}\n"
}

// TestRedisSharedRequestLimitAcrossReplicas: two gateways (two replicas,
// each with its own request limiter and Redis connection) on one
// redis-server admit N of one tenant's requests between them, not 2N; and a
// replica started after the others scaled to zero still sees the spent
// requests. (Token budgets across replicas: TestBudgetRedisReplicas.)
func TestRedisSharedRequestLimitAcrossReplicas(t *testing.T) {
	const n = 6
	rs := redistest.Start(t)
	env := map[string]string{"REDIS_URL": rs.URL()}
	a := startGateway(t, options{requests: n, limiter: redisLimiter("closed"), env: env})
	b := startGateway(t, options{requests: n, limiter: redisLimiter("closed"), env: env, share: a})
	tok := a.token("contoso")

	var mu sync.Mutex
	statuses := map[int]int{}
	var wg sync.WaitGroup
	for i := 0; i < 3*n; i++ {
		g := a
		if i%2 == 1 {
			g = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp := g.post("/v1/chat/completions", tok, chatBody)
			resp.Body.Close()
			mu.Lock()
			statuses[resp.StatusCode]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	if statuses[200] != n || statuses[429] != 2*n {
		t.Fatalf("two replicas admitted %v, want exactly %d×200 and %d×429", statuses, n, 2*n)
	}

	// A fresh replica (after scale-to-zero) starts from the shared state.
	c := startGateway(t, options{requests: n, limiter: redisLimiter("closed"), env: env, share: a})
	resp := c.post("/v1/chat/completions", tok, chatBody)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("new replica admitted a request past the shared budget: %d", resp.StatusCode)
	}
}

// TestRedisDownPolicy: with Redis stopped, fail-closed answers 503 with
// Retry-After and does not hang; after a restart the gateway recovers
// without being restarted. The fail-open permutation is a unit's:
// shared/ratelimit TestRedisOutage/open (a real Redis stopped: allowed,
// degraded) and shared/server TestLimiterDecisions (a degraded allowance
// is served).
func TestRedisDownPolicy(t *testing.T) {
	rs := redistest.Start(t)
	env := map[string]string{"REDIS_URL": rs.URL()}
	closed := startGateway(t, options{limiter: redisLimiter("closed"), env: env})
	tok := closed.token("contoso")

	resp := closed.post("/v1/chat/completions", tok, chatBody)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("with Redis up: %d", resp.StatusCode)
	}
	rs.Stop()
	resp = closed.post("/v1/chat/completions", tok, chatBody)
	if resp.Header.Get("Retry-After") == "" {
		t.Error("503 without Retry-After")
	}
	openAIError(t, resp, http.StatusServiceUnavailable, "rate_limiter_unavailable")

	rs.Restart()
	eventually(t, "the closed gateway to recover after Redis restarts", func() bool {
		resp := closed.post("/v1/chat/completions", tok, chatBody)
		resp.Body.Close()
		return resp.StatusCode == 200
	})
}
