package main

import (
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmgw/gateway/internal/testing/redistest"
	"github.com/llmgw/gateway/shared/ratelimit"
	"github.com/llmgw/gateway/shared/store"
)

// storeOutcome is one request's status, error code and time to answer.
type storeOutcome struct {
	status  int
	code    string
	elapsed time.Duration
}

// storeRequest sends one budgeted streaming request and reads it to the end.
func storeRequest(g *gw, tok string) storeOutcome { return storeRequestBody(g, tok, budgetBody(10)) }

// controlRequest is storeRequest by a tenant the table does not have:
// refused (403 tenant_not_allowed) before the limiter or the budget is
// asked. (The request bucket is taken before any work a caller's body
// can cause, so a model nobody serves is no longer answered before the
// limiter.)
func controlRequest(g *gw) storeOutcome {
	return storeRequestBody(g, g.token("no-such-tenant"), budgetBody(10))
}

// storeRequestBody sends body with tok and hdr's name, value pairs.
func storeRequestBody(g *gw, tok, body string, hdr ...string) storeOutcome {
	start := time.Now()
	req, err := http.NewRequest(http.MethodPost, g.URL+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		return storeOutcome{code: err.Error()}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+tok)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return storeOutcome{code: err.Error(), elapsed: time.Since(start)}
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(resp.Body)
	o := storeOutcome{status: resp.StatusCode, elapsed: time.Since(start)}
	if resp.StatusCode != http.StatusOK {
		if i := strings.Index(string(answer), `"code":"`); i >= 0 {
			o.code, _, _ = strings.Cut(string(answer[i+len(`"code":"`):]), `"`)
		}
	}
	return o
}

// storeGateway is a gateway on the Redis at url whose limiter fails with
// policy and whose budgeted tenant has a quota (a quota always fails
// closed); store timeouts are timeout for both stores ("" = their
// defaults, store.DefaultTimeout).
func storeGateway(t *testing.T, url, policy, timeout string, share *gw) *gw {
	limiter := "limiter: {store: redis, redis_url_env: REDIS_URL, key_prefix: \"burst:\", failure_policy: " + policy
	extra := ""
	if timeout != "" {
		limiter += ", timeout: " + timeout
		extra = "budget: {timeout: " + timeout + "}\n"
	}
	return startGateway(t, options{
		limiter: limiter + "}\n",
		extra:   extra,
		env:     map[string]string{"REDIS_URL": url},
		tenants: budgetRow(1<<30, 64),
		share:   share,
	})
}

// TestRedisBurstOnFreshGateway: a gateway that has
// just started, on a healthy redis-server whose every new connection takes
// 30ms to establish (a loopback proxy holds it, as TLS and a login would),
// answers 100 concurrent first requests without refusing one: a take or
// reservation that waits for a connection is bounded by the dial budget,
// not the store's timeout, and is not a store failure.
//
// The test sets the store timeouts to 250ms (the default since a loaded
// burst chose it) and holds new connections 300ms, longer than the
// timeout, so that counting a dial against the timeout would still refuse
// every request that waits for one.
func TestRedisBurstOnFreshGateway(t *testing.T) {
	const n = 100
	rs := redistest.Start(t)
	px := redistest.NewProxy(t, rs.Addr(), 300*time.Millisecond)
	g := storeGateway(t, px.URL(), "closed", "250ms", nil)
	tok := g.token("budgeted")

	outcomes := make([]storeOutcome, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			outcomes[i] = storeRequest(g, tok)
		}()
	}
	close(start)
	wg.Wait()
	refused := map[string]int{}
	var slowest time.Duration
	for _, o := range outcomes {
		if o.status != http.StatusOK {
			refused[fmt.Sprintf("%d %s", o.status, o.code)]++
		}
		slowest = max(slowest, o.elapsed)
	}
	t.Logf("%d concurrent first requests: refused %v; slowest answer %s; the proxy accepted %d Redis connections",
		n, refused, slowest.Round(time.Millisecond), px.Accepted())
	if len(refused) > 0 {
		t.Fatalf("a fresh gateway on a healthy Redis refused first requests: %v", refused)
	}
}

// TestRedisBlackholePolicyWithinBreakerBound: when
// the network to Redis drops everything, the limiter's and the budget's
// failure policies apply within the breaker's bound: the first takes or
// reservations cost at most their bound, then the breaker answers at once
// (one probe per cooldown), so a blackholed Redis does not cost every
// request its timeout. One gateway fails closed at the limiter (503
// rate_limiter_unavailable); the other fails open there and closed at the
// budget (503 budget_unavailable), which exercises the budget's breaker.
func TestRedisBlackholePolicyWithinBreakerBound(t *testing.T) {
	const (
		n       = 40
		timeout = store.DefaultTimeout // the stores' default timeout
		// bound is what one request may cost while its stores' breakers
		// are still closed: the dial budget plus a timeout, for the
		// limiter and the budget each, and a busy machine's slack.
		bound = 2*(ratelimit.DefaultDialTimeout+timeout) + 2*time.Second
	)
	rs := redistest.Start(t)
	px := redistest.NewProxy(t, rs.Addr(), 30*time.Millisecond)
	closed := storeGateway(t, px.URL(), "closed", "", nil)
	open := storeGateway(t, px.URL(), "open", "", closed)
	tok := closed.token("budgeted")
	// With Redis reachable each gateway serves. On a busy machine an
	// answer can outlast the stores' default timeout, which is not
	// what this test is about: a few tries, then it must have served.
	for _, g := range []*gw{closed, open} {
		var o storeOutcome
		for range 20 {
			if o = storeRequest(g, tok); o.status == http.StatusOK {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if o.status != http.StatusOK {
			t.Fatalf("with Redis reachable: %d %s", o.status, o.code)
		}
	}
	px.Blackhole(true)

	for _, c := range []struct {
		name string
		g    *gw
		code string
	}{
		{"limiter closed", closed, "rate_limiter_unavailable"},
		{"limiter open, quota closed", open, "budget_unavailable"},
	} {
		var took, control []time.Duration
		for i := range n {
			// The control is the same request by a tenant the table does
			// not have: answered (403) before any store is asked, it is
			// what an answer costs on this machine at this moment.
			if o := controlRequest(c.g); o.status != http.StatusForbidden {
				t.Fatalf("%s: control request %d: %d %q, want 403", c.name, i, o.status, o.code)
			} else {
				control = append(control, o.elapsed)
			}
			o := storeRequest(c.g, tok)
			if o.status != http.StatusServiceUnavailable || o.code != c.code {
				t.Fatalf("%s: request %d with Redis blackholed: %d %q, want 503 %s", c.name, i, o.status, o.code, c.code)
			}
			took = append(took, o.elapsed)
		}
		// A request that waited for the store is one a store timeout
		// slower than the controls' median, and the bound grows with the
		// machine's load as the controls do.
		sort.Slice(control, func(i, j int) bool { return control[i] < control[j] })
		median := control[n/2]
		sorted := append([]time.Duration(nil), took...)
		sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
		var slow int // answers that waited a store timeout or more beyond the controls' median
		var total time.Duration
		for i, d := range took {
			total += d
			if d > bound+4*median {
				t.Errorf("%s: request %d took %s, more than the breaker's bound %s (+4 × the controls' median %s)", c.name, i, d, bound, median)
			}
			if d >= median+timeout {
				slow++
			}
		}
		t.Logf("%s: %d of %d requests took a store timeout (%s) more than the controls' median %s; slowest %s; all %d took %s together",
			c.name, slow, n, timeout, median.Round(time.Millisecond), sorted[n-1].Round(time.Millisecond), n, total.Round(time.Millisecond))
		// The breaker opens after 5 failures; then at most one probe per
		// 2s cooldown waits for the store. 40 requests that each answer at
		// once take far less than a cooldown, so 5 + a few probes at most.
		if slow > 10 {
			t.Errorf("%s: %d of %d requests waited for a blackholed store: the breaker does not spare them", c.name, slow, n)
		}
	}
}
