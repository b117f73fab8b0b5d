package main

// Token budgets end to end: the gateway binary's wiring (config → ledger →
// store) against the stub backend and a real redis-server. The stub counts
// the tokens it actually processed and generated (stub.Stats), which is
// what a backend would bill; the properties are about those counts, not
// about the gateway's own books.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmgw/gateway/internal/testing/redistest"
	"github.com/llmgw/gateway/scripts/stub"
)

// budgetRow is a tenants: row for tenant "budgeted": a token quota of
// quota per month (and a per-minute limit too large to bind, so both
// windows are kept), and a cap on every request's output.
func budgetRow(quota, maxOutput int) string {
	return fmt.Sprintf("  - {id: budgeted, models: [llama, gpt-4o], requests: 100000, interval: 1h, tokens_per_minute: %d, token_quota: %d, quota_period: month, max_output_tokens: %d}\n",
		int64(1)<<40, quota, maxOutput)
}

// budgetBody is a streaming chat request whose user message is n bytes.
func budgetBody(n int) string {
	return `{"model":"llama","stream":true,"messages":[{"role":"user","content":"` + strings.Repeat("a", n) + `"}]}`
}

// streamOutcome is what one streamed request came to.
type streamOutcome struct {
	status int
	code   string // the error code: of the 4xx/5xx answer, or of the stream's final error event
	events int    // content events the client got
	header http.Header
}

// streamOnce sends body to g as tenant tok and reads the answer to its end
// (for a stream, that is after the gateway settled the request).
func streamOnce(ctx context.Context, g *gw, tok, body string) (streamOutcome, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, g.URL+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		return streamOutcome{}, err
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return streamOutcome{}, err
	}
	defer resp.Body.Close()
	out := streamOutcome{status: resp.StatusCode, header: resp.Header}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error struct{ Code string } `json:"error"`
		}
		b, _ := io.ReadAll(resp.Body)
		if err := json.Unmarshal(b, &e); err != nil {
			return out, fmt.Errorf("status %d, not OpenAI error JSON: %s", resp.StatusCode, b)
		}
		out.code = e.Error.Code
		return out, nil
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	last := ""
	for sc.Scan() {
		d, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		last = d
		if strings.Contains(d, `"content":"`) && !strings.Contains(d, `"content":""`) {
			out.events++ // a token: the role event's content is empty
		}
	}
	if err := sc.Err(); err != nil {
		return out, err
	}
	switch {
	case last == "[DONE]":
	case strings.HasPrefix(last, `{"error"`):
		var e struct {
			Error struct{ Code string } `json:"error"`
		}
		_ = json.Unmarshal([]byte(last), &e)
		out.code = e.Error.Code
	default:
		return out, fmt.Errorf("stream ended without [DONE] or an error event: %q", last)
	}
	return out, nil
}

// drained is what a drain did.
type drained struct {
	ok, cut, refused int
	clientEvents     int // content events the clients got, all requests
	first            http.Header
}

// drain spends tenant tok's budget: workers clients stream body through
// the gateways (round robin) until each is refused with nothing in flight
// anywhere, then one client alone until it is refused, so that no
// reservation held by a concurrent request hides budget left over. Every
// refusal must be insufficient_quota; every stream must end with [DONE]
// or, where cut is allowed, the budget_exceeded error event.
func drain(t *testing.T, gws []*gw, tok, body string, workers int, cutAllowed bool) drained {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var (
		mu       sync.Mutex
		d        drained
		errs     []error
		inflight atomic.Int64
	)
	note := func(o streamOutcome, err error) (refused bool) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err != nil:
			errs = append(errs, err)
		case o.status == http.StatusOK && o.code == "":
			d.ok++
		case o.status == http.StatusOK && o.code == "budget_exceeded" && cutAllowed:
			d.ok++
			d.cut++
		case o.status == http.StatusTooManyRequests && o.code == "insufficient_quota":
			d.refused++
			return true
		default:
			errs = append(errs, fmt.Errorf("status %d code %q", o.status, o.code))
		}
		d.clientEvents += o.events
		if d.first == nil {
			d.first = o.header
		}
		return false
	}
	var wg sync.WaitGroup
	for w := range workers {
		g := gws[w%len(gws)]
		wg.Go(func() {
			for ctx.Err() == nil {
				inflight.Add(1)
				o, err := streamOnce(ctx, g, tok, body)
				left := inflight.Add(-1)
				refused := note(o, err)
				switch {
				case err != nil:
					return
				case refused && left == 0:
					return
				case refused:
					time.Sleep(50 * time.Millisecond)
				}
			}
		})
	}
	wg.Wait()
	for ctx.Err() == nil {
		o, err := streamOnce(ctx, gws[0], tok, body)
		if note(o, err) || err != nil {
			break
		}
	}
	if ctx.Err() != nil {
		t.Fatal("the budget was not drained in time")
	}
	for _, err := range errs {
		t.Error(err)
	}
	return d
}

// billed is what the stubs processed and generated: what a backend bills.
func billed(stubs []*stub.Server) (prompt, completion int64) {
	for _, s := range stubs {
		st := s.Stats()
		prompt += st.PromptTokens
		completion += st.CompletionTokens
	}
	return prompt, completion
}

// checkBudget asserts the two properties: the stubs never billed more than
// the budget, and they billed at least 90% of it.
func checkBudget(t *testing.T, stubs []*stub.Server, quota int64, d drained) {
	t.Helper()
	// Streams that were cut may still be ending in the stub.
	eventually(t, "the stubs' streams to end", func() bool {
		for _, s := range stubs {
			if s.Stats().ActiveStreams != 0 {
				return false
			}
		}
		return true
	})
	prompt, completion := billed(stubs)
	used := prompt + completion
	t.Logf("budget %d: billed %d (prompt %d + completion %d) = %.1f%%, overshoot %d; %d streams (%d cut), %d refusals; clients got %d content events",
		quota, used, prompt, completion, 100*float64(used)/float64(quota), max(0, used-quota), d.ok, d.cut, d.refused, d.clientEvents)
	if used > quota {
		t.Errorf("the backends billed %d tokens, over the budget of %d", used, quota)
	}
	checkUsed(t, used, quota, d)
}

// checkUsed asserts the lower bound and that the budget refused at all.
func checkUsed(t *testing.T, used, quota int64, d drained) {
	t.Helper()
	if used*10 < quota*9 {
		t.Errorf("the backends billed %d tokens, under 90%% of the budget of %d", used, quota)
	}
	if d.refused == 0 {
		t.Error("the budget never refused a request")
	}
}

// TestBudgetMemory: one gateway, memory store, 40 concurrent streams
// drain a quota: never over, at least 90% used.
func TestBudgetMemory(t *testing.T) {
	t.Parallel()
	const quota = 20000
	g := startGateway(t, options{stubOpts: stub.Options{Tokens: 64}, tenants: budgetRow(quota, 64)})
	d := drain(t, []*gw{g}, g.token("budgeted"), budgetBody(300), 40, false)
	checkBudget(t, g.Stubs, quota, d)
	if h := d.first; h.Get("X-Ratelimit-Limit-Tokens") != strconv.Itoa(quota) || h.Get("X-Ratelimit-Remaining-Tokens") == "" || h.Get("X-Ratelimit-Reset-Tokens") == "" {
		t.Errorf("token headers %v", h)
	}
}

// redisReplicas starts a redis-server and two gateways on it (two
// replicas, sharing the stubs) with o and the limiter policy, and returns
// them with o as the second was started (for a third replica). The
// reservation timeout is 2s, not the default: 40 first requests dialling 40
// connections on a loaded 2-core test machine can take longer, and a
// quota fails closed (that path has its own tests).
func redisReplicas(t *testing.T, o options, policy string) (a, b *gw, _ options) {
	t.Helper()
	rs := redistest.Start(t)
	o.limiter, o.env = redisLimiter(policy), map[string]string{"REDIS_URL": rs.URL()}
	o.extra += "budget: {timeout: 2s}\n"
	a = startGateway(t, o)
	o.share = a
	return a, startGateway(t, o), o
}

// TestBudgetRedisReplicas: two gateways on one redis-server share the
// quota: 40 concurrent streams through both never overshoot it.
func TestBudgetRedisReplicas(t *testing.T) {
	t.Parallel()
	const quota = 20000
	a, b, _ := redisReplicas(t, options{stubOpts: stub.Options{Tokens: 64}, tenants: budgetRow(quota, 64)}, "open")
	d := drain(t, []*gw{a, b}, a.token("budgeted"), budgetBody(300), 40, false)
	checkBudget(t, a.Stubs, quota, d)
}

// TestBudgetRedisRestart: the replicas that spent part of the quota stop
// (scale to zero); a new one started on the same Redis goes on from what
// they left, never over.
func TestBudgetRedisRestart(t *testing.T) {
	t.Parallel()
	const quota = 20000
	a, b, o := redisReplicas(t, options{stubOpts: stub.Options{Tokens: 64}, tenants: budgetRow(quota, 64)}, "open")
	tok, body := a.token("budgeted"), budgetBody(300)

	// 40 concurrent streams, one each, through both replicas.
	var wg sync.WaitGroup
	var first atomic.Int64
	for i := range 40 {
		g := []*gw{a, b}[i%2]
		wg.Go(func() {
			res, err := streamOnce(context.Background(), g, tok, body)
			if err != nil || res.status != 200 {
				t.Errorf("phase 1: %+v, %v", res, err)
			}
			first.Add(1)
		})
	}
	wg.Wait()
	_, before := billed(a.Stubs)
	for _, g := range []*gw{a, b} {
		g.Stop()
		<-g.Exited
	}

	c := startGateway(t, o)
	d := drain(t, []*gw{c}, tok, body, 40, false)
	d.ok += int(first.Load())
	if before == 0 {
		t.Fatal("phase 1 spent nothing")
	}
	checkBudget(t, a.Stubs, quota, d)
}

// TestBudgetIgnoredCap: a backend that ignores max_tokens is cut at its
// reservation with one budget_exceeded event, and across two replicas the
// gateway never relays more than the budget.
//
// What such a backend generates between the event that passes the cap and
// the moment the cancel reaches it is invisible to the gateway (the prompt
// bound's slack absorbs it on an idle machine: about 1-3 tokens a stream
// measured, more when the machine is busy); checkIgnoredCap measures it in
// the same run and bounds it by the cap rather than by a constant. The test
// runs alone (not in parallel with the package's other tests) so that the
// stub does not run far ahead of a starved gateway.
func TestBudgetIgnoredCap(t *testing.T) {
	const quota, outputCap = 60000, 400
	a, b, _ := redisReplicas(t, options{stubOpts: stub.Options{Tokens: 1000, IgnoreMaxTokens: true, Interval: 2 * time.Millisecond},
		tenants: budgetRow(quota, outputCap)}, "open")
	d := drain(t, []*gw{a, b}, a.token("budgeted"), budgetBody(40), 40, true)
	if d.cut == 0 || d.cut != d.ok {
		t.Errorf("%d of %d streams cut: every stream of a backend ignoring the cap must be", d.cut, d.ok)
	}
	checkIgnoredCap(t, a.Stubs, quota, outputCap, d)
}

// checkIgnoredCap is checkBudget for a backend that ignores the cap. What
// it generates between the event that passes the cap and the moment the
// cancel reaches it (the tail: generated, never relayed) depends on how
// busy the machine is, so the bound is on what the gateway relayed, which
// it decides alone: the prompts and the content events the clients got
// stay within the budget. The tail is measured in the same run and must be
// less than one output cap per cut stream (a backend never cancelled runs
// on to its 1000 tokens, 600 past the cap).
func checkIgnoredCap(t *testing.T, stubs []*stub.Server, quota, outputCap int64, d drained) {
	t.Helper()
	eventually(t, "the stubs' streams to end", func() bool {
		for _, s := range stubs {
			if s.Stats().ActiveStreams != 0 {
				return false
			}
		}
		return true
	})
	prompt, completion := billed(stubs)
	relayed, tail := prompt+int64(d.clientEvents), completion-int64(d.clientEvents)
	t.Logf("budget %d: relayed %d (prompt %d + %d content events), billed %d; tail %d tokens over %d cut streams (%.1f a stream)",
		quota, relayed, prompt, d.clientEvents, prompt+completion, tail, d.cut, float64(tail)/float64(max(d.cut, 1)))
	if relayed > quota {
		t.Errorf("the gateway relayed %d tokens (prompt %d + %d content events), over the budget of %d", relayed, prompt, d.clientEvents, quota)
	}
	if tail < 0 || tail >= outputCap*int64(max(d.cut, 1)) {
		t.Errorf("the backends generated %d tokens the clients never got, over %d cut streams: the cancel did not stop them within a cap of %d each", tail, d.cut, outputCap)
	}
	checkUsed(t, prompt+completion, quota, d)
}

// TestBudgetRedisDown: with the store down, a quota fails closed (503
// budget_unavailable, Retry-After) under the open policy, and recovers when
// Redis is back. The other permutations are units': shared/server
// TestBudgetStoreDown (a per-minute budget fails open: served, output
// capped, no token headers; the closed policy: 503), TestBudgetNone (a
// tenant without a budget is untouched) and shared/stores/redisbudget
// TestFailurePolicy (a real Redis stopped or paused, each policy).
func TestBudgetRedisDown(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	g := startGateway(t, options{limiter: redisLimiter("open"), env: map[string]string{"REDIS_URL": rs.URL()},
		tenants: budgetRow(1<<30, 64)})
	body := budgetBody(10)
	status := func(tenant string) (int, http.Header) {
		t.Helper()
		resp := g.post("/v1/chat/completions", g.token(tenant), body)
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, resp.Header
	}
	if s, _ := status("budgeted"); s != 200 {
		t.Fatalf("with Redis up: %d", s)
	}
	rs.Stop()
	resp := g.post("/v1/chat/completions", g.token("budgeted"), body)
	if resp.Header.Get("Retry-After") == "" {
		t.Error("503 without Retry-After")
	}
	openAIError(t, resp, http.StatusServiceUnavailable, "budget_unavailable")
	rs.Restart()
	eventually(t, "the quota to be served again after Redis restarts", func() bool {
		s, h := status("budgeted")
		return s == 200 && h.Get("X-Ratelimit-Limit-Tokens") == strconv.Itoa(1<<30)
	})
}
