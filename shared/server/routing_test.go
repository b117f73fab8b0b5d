package server

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmgw/gateway/shared/budget"
	"github.com/llmgw/gateway/shared/route"
	"github.com/llmgw/gateway/shared/telemetry"
	"github.com/llmgw/gateway/shared/tenant"
	"github.com/llmgw/gateway/shared/upstream"
)

// tiered serves model "m" from one pool whose endpoints are handlers, in
// that order, each at its priority.
func tiered(t *testing.T, tune func(*Deps), priorities []int, handlers ...http.HandlerFunc) *testGateway {
	t.Helper()
	var urls []string
	for _, h := range handlers {
		b := httptest.NewServer(h)
		t.Cleanup(b.Close)
		urls = append(urls, b.URL)
	}
	return gatewayOnTiers(t, "openai", tune, priorities, route.Options{}, urls...)
}

// requestLines is the access log's request lines.
func requestLines(t *testing.T, g *testGateway) []map[string]any {
	var out []map[string]any
	for _, l := range g.log.lines(t) {
		if l["msg"] == "request" {
			out = append(out, l)
		}
	}
	return out
}

func counting(n *atomic.Int32, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) { n.Add(1); h(w, r) }
}

// TestPTUSpill: a PTU endpoint answering 429 with retry-after-ms 500
// sends the request to pay-as-you-go, is not tried again for 500 ms, and
// is once they passed; the access log says which priority served and why
// it spilled.
func TestPTUSpill(t *testing.T) {
	var ptu, payg atomic.Int32
	var limitedAt atomic.Int64
	g := tiered(t, nil, []int{0, 1},
		func(w http.ResponseWriter, r *http.Request) {
			if ptu.Add(1) == 1 {
				limitedAt.Store(time.Now().UnixNano())
				w.Header().Set("Retry-After-Ms", "500")
				w.WriteHeader(http.StatusTooManyRequests)
				return
			}
			sseBackend(w, r)
		},
		counting(&payg, sseBackend))
	if resp, b := g.post(t, streamBody); resp.StatusCode != 200 || ptu.Load() != 1 || payg.Load() != 1 {
		t.Fatalf("first: %d %s; ptu %d payg %d, want the PTU's 429 spilled to payg", resp.StatusCode, b, ptu.Load(), payg.Load())
	}
	limited := time.Unix(0, limitedAt.Load())
	sent := 0
	for time.Since(limited) < 250*time.Millisecond { // 250 ms of slack for a busy machine
		if resp, b := g.post(t, streamBody); resp.StatusCode != 200 {
			t.Fatalf("during the cooldown: %d %s", resp.StatusCode, b)
		}
		sent++
	}
	if ptu.Load() != 1 || int(payg.Load()) != 1+sent {
		t.Fatalf("within 500 ms of the 429 the PTU was asked %d more times (payg %d of %d)", ptu.Load()-1, payg.Load(), 1+sent)
	}
	time.Sleep(time.Until(limited.Add(600 * time.Millisecond)))
	if resp, b := g.post(t, streamBody); resp.StatusCode != 200 || ptu.Load() != 2 {
		t.Fatalf("after the cooldown: %d %s; ptu asked %d times, want the PTU again", resp.StatusCode, b, ptu.Load())
	}
	lines := requestLines(t, g)
	if l := lines[0]; l["priority"] != float64(1) || l["spill"] != "upstream_rate_limited" || l["attempts"] != float64(2) {
		t.Fatalf("first request's log: priority %v spill %v attempts %v", l["priority"], l["spill"], l["attempts"])
	}
	if l := lines[len(lines)-1]; l["priority"] != float64(0) || l["spill"] != "" {
		t.Fatalf("last request's log: priority %v spill %v", l["priority"], l["spill"])
	}
}

// TestFailoverWithinPriority: a 5xx (or a connect failure) tries the
// other endpoint of its priority before pay-as-you-go; a 429 goes to
// pay-as-you-go before the sibling.
func TestFailoverWithinPriority(t *testing.T) {
	tests := []struct {
		name                 string
		fail                 http.HandlerFunc
		siblingCalls, spills int32
	}{
		{"5xx: the sibling", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusBadGateway) }, 1, 0},
		{"connect reset: the sibling", func(w http.ResponseWriter, _ *http.Request) {
			c, _, _ := http.NewResponseController(w).Hijack()
			_ = c.Close()
		}, 1, 0},
		{"429: pay-as-you-go", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTooManyRequests) }, 0, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for round := 0; round < 4; round++ { // either PTU may be drawn first
				var first, ptuCalls, payg atomic.Int32
				ptu := func(w http.ResponseWriter, r *http.Request) {
					ptuCalls.Add(1)
					if first.CompareAndSwap(0, 1) {
						tt.fail(w, r)
						return
					}
					sseBackend(w, r)
				}
				g := tiered(t, nil, []int{0, 0, 1}, ptu, ptu, counting(&payg, sseBackend))
				resp, b := g.post(t, streamBody)
				if resp.StatusCode != 200 {
					t.Fatalf("status %d %s", resp.StatusCode, b)
				}
				if ptuCalls.Load()-1 != tt.siblingCalls || payg.Load() != tt.spills {
					t.Fatalf("sibling asked %d times, payg %d; want %d and %d", ptuCalls.Load()-1, payg.Load(), tt.siblingCalls, tt.spills)
				}
			}
		})
	}
	t.Run("429 in a pool of one priority: the sibling", func(t *testing.T) {
		var first, calls atomic.Int32
		h := func(w http.ResponseWriter, r *http.Request) {
			calls.Add(1)
			if first.CompareAndSwap(0, 1) {
				w.WriteHeader(http.StatusTooManyRequests)
				return
			}
			sseBackend(w, r)
		}
		g := tiered(t, nil, nil, h, h)
		if resp, b := g.post(t, streamBody); resp.StatusCode != 200 || calls.Load() != 2 {
			t.Fatalf("status %d calls %d %s", resp.StatusCode, calls.Load(), b)
		}
	})
}

// TestHostileTenantCannotCool: a request too large for what the PTU has
// left gets a 429 that says capacity remains (x-ratelimit-remaining-*)
// and asks for 60 s: that request moves to pay-as-you-go, and everyone
// else's next request still goes to the PTU. (The bound on what any one
// answer can ask, max_cooldown, is route's TestCooldownBounded.)
func TestHostileTenantCannotCool(t *testing.T) {
	var ptu, payg atomic.Int32
	g := tiered(t, nil, []int{0, 1},
		func(w http.ResponseWriter, r *http.Request) {
			ptu.Add(1)
			b, _ := io.ReadAll(r.Body)
			switch {
			case strings.Contains(string(b), "HUGE"):
				w.Header().Set("Retry-After", "60")
				w.Header().Set("X-Ratelimit-Remaining-Requests", "99")
				w.Header().Set("X-Ratelimit-Remaining-Tokens", "30000")
				w.WriteHeader(http.StatusTooManyRequests)
			default:
				sseBackend(w, r)
			}
		},
		counting(&payg, sseBackend))
	huge := `{"model":"m","stream":true,"messages":[{"role":"user","content":"HUGE"}]}`
	for i := 0; i < 5; i++ {
		if resp, b := g.post(t, huge); resp.StatusCode != 200 {
			t.Fatalf("hostile request %d: %d %s", i, resp.StatusCode, b)
		}
	}
	if ptu.Load() != 5 || payg.Load() != 5 {
		t.Fatalf("hostile requests: ptu %d payg %d, want each to try the PTU and spill", ptu.Load(), payg.Load())
	}
	if resp, b := g.post(t, streamBody); resp.StatusCode != 200 || ptu.Load() != 6 || payg.Load() != 5 {
		t.Fatalf("a neighbour's request: %d %s; ptu %d payg %d, want the PTU (nothing cooled)", resp.StatusCode, b, ptu.Load(), payg.Load())
	}
}

// TestOneTenantCannotTiltPriority: tenant t1's request meets a failure at
// the PTU that may be its own (a 500 without a pause, a header timeout, a
// stall before the first event): it moves to pay-as-you-go, and tenant
// t2's next request still goes to the PTU. Only a run of such failures
// across requests (route.DefaultFailAfter) ejects the PTU.
func TestOneTenantCannotTiltPriority(t *testing.T) {
	tests := []struct {
		name string
		fail http.HandlerFunc
	}{
		{"500", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusInternalServerError) }},
		{"header timeout", func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
			case <-time.After(2 * time.Second):
			}
		}},
		{"stall before the first event", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
			case <-time.After(2 * time.Second):
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var ptu, payg atomic.Int32
			g := tiered(t, func(d *Deps) {
				d.Auth = tokenIsTenant{}
				d.Tenants = tenant.NewTable([]tenant.Row{{ID: "t1", Models: []string{"m"}}, {ID: "t2", Models: []string{"m"}}})
				d.Dispatch.HeaderTimeout = 200 * time.Millisecond
				ftt := 200 * time.Millisecond
				d.DefaultStreams.FirstTokenTimeout = &ftt
			}, []int{0, 1},
				func(w http.ResponseWriter, r *http.Request) {
					ptu.Add(1)
					if b, _ := io.ReadAll(r.Body); strings.Contains(string(b), "POISON") {
						tt.fail(w, r)
						return
					}
					sseBackend(w, r)
				},
				counting(&payg, sseBackend))
			poison := `{"model":"m","stream":true,"messages":[{"role":"user","content":"POISON"}]}`
			if resp, b := g.call(t, "POST", "/v1/chat/completions", "t1", poison); resp.StatusCode != 200 || ptu.Load() != 1 || payg.Load() != 1 {
				t.Fatalf("t1: %d %s; ptu %d payg %d, want the PTU's failure moved on to payg", resp.StatusCode, b, ptu.Load(), payg.Load())
			}
			if resp, b := g.call(t, "POST", "/v1/chat/completions", "t2", streamBody); resp.StatusCode != 200 || ptu.Load() != 2 || payg.Load() != 1 {
				t.Fatalf("t2: %d %s; ptu %d payg %d, want the PTU: one request's failure benches nobody", resp.StatusCode, b, ptu.Load(), payg.Load())
			}
		})
	}
}

// cutter is a backend that sends events data events and then ends the
// stream without its terminal event.
func cutter(events int) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := 0; i < events; i++ {
			_, _ = io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n")
			w.(http.Flusher).Flush()
		}
	}
}

// TestMidStreamEjection: an endpoint that cuts every stream after three
// events is ejected after three such streams in a row, so it stops
// getting first attempts (before, it kept about half of them: health
// came back at each first event and a relay error cooled nothing).
func TestMidStreamEjection(t *testing.T) {
	var cut, good atomic.Int32
	g := tiered(t, nil, nil, counting(&cut, cutter(3)), counting(&good, sseBackend))
	const n = 24
	for i := 0; i < n; i++ {
		resp, b := g.post(t, streamBody)
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, b)
		}
	}
	if cut.Load() > 3 || cut.Load()+good.Load() != n {
		t.Fatalf("the cutting endpoint served %d of %d streams; want at most 3 before its ejection", cut.Load(), n)
	}
}

// TestStartedStreamNotMoved: once a stream's first event reached the
// client, a backend that cuts it ends the client's stream with one error
// event; the request is never sent to another endpoint.
func TestStartedStreamNotMoved(t *testing.T) {
	var other atomic.Int32
	g := tiered(t, nil, []int{0, 1}, cutter(2), counting(&other, sseBackend))
	resp, b := g.post(t, streamBody)
	if resp.StatusCode != 200 || strings.Count(string(b), `"content":"x"`) != 2 || !strings.Contains(string(b), `"code":"upstream_stream_error"`) {
		t.Fatalf("status %d body %s: want the two events, then an error event", resp.StatusCode, b)
	}
	if other.Load() != 0 {
		t.Fatalf("a started stream was sent to another endpoint (%d times)", other.Load())
	}
}

// TestAffinityAcrossReplicas: two gateways with no shared state send a
// conversation's turns to one endpoint of four; each turn's body differs
// after the first message.
func TestAffinityAcrossReplicas(t *testing.T) {
	hits := make([]atomic.Int32, 4)
	var urls []string
	for i := range hits {
		b := httptest.NewServer(counting(&hits[i], sseBackend))
		t.Cleanup(b.Close)
		urls = append(urls, b.URL)
	}
	replicas := []*testGateway{gatewayOn(t, nil, urls...), gatewayOn(t, nil, urls...)}
	system := strings.Repeat("you are agent 7 with a long system prompt; ", 128) // past route.MinCachedBytes
	turn := `{"model":"m","stream":true,"messages":[{"role":"system","content":"` + system + `"},{"role":"user","content":"turn`
	for i := 0; i < 12; i++ {
		body := turn + strings.Repeat(" and more", i) + `"}]}`
		if resp, b := replicas[i%2].post(t, body); resp.StatusCode != 200 {
			t.Fatalf("turn %d: %d %s", i, resp.StatusCode, b)
		}
	}
	served := 0
	for i := range hits {
		if hits[i].Load() > 0 {
			served++
		}
	}
	if served != 1 {
		t.Fatalf("12 turns of one conversation landed on %d endpoints, want 1", served)
	}
}

// spans records what the server reports of its backend attempts.
type spans struct {
	mu       sync.Mutex
	attempts []telemetry.Attempt
	results  []telemetry.Result
}

func (s *spans) Begin(ctx context.Context, _, _ string, _ http.Header) context.Context { return ctx }
func (s *spans) Attempt(ctx context.Context, _ *http.Request, a *telemetry.Attempt) context.Context {
	s.mu.Lock()
	s.attempts = append(s.attempts, *a)
	s.mu.Unlock()
	return ctx
}
func (s *spans) AttemptEnd(_ context.Context, _ *telemetry.Attempt, r telemetry.Result) {
	s.mu.Lock()
	s.results = append(s.results, r)
	s.mu.Unlock()
}
func (s *spans) Stream(context.Context, string, int64)   {}
func (s *spans) End(context.Context, *telemetry.Request) {}

// TestSpillTelemetry: telemetry says which priority each attempt went to
// and that the PTU's 429 spilled to the next priority.
func TestSpillTelemetry(t *testing.T) {
	tel := &spans{}
	g := tiered(t, func(d *Deps) { d.Telemetry = tel }, []int{0, 1},
		func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTooManyRequests) },
		sseBackend)
	if resp, b := g.post(t, streamBody); resp.StatusCode != 200 {
		t.Fatalf("status %d %s", resp.StatusCode, b)
	}
	tel.mu.Lock()
	defer tel.mu.Unlock()
	if len(tel.attempts) != 2 || tel.attempts[0].Priority != 0 || tel.attempts[1].Priority != 1 {
		t.Fatalf("attempts %+v: want priority 0 then 1", tel.attempts)
	}
	if len(tel.results) == 0 || !tel.results[0].Failover || !tel.results[0].Spill {
		t.Fatalf("results %+v: the 429 must be a failover that spilled", tel.results)
	}
}

// TestSpillKeepsBudget: a request that spills from the PTU to
// pay-as-you-go reserves its budget once, before the first attempt, and
// settles once, from the usage of the one answer relayed.
func TestSpillKeepsBudget(t *testing.T) {
	spy := newBudgetSpy(t, budget.Config{}, nil,
		budget.TenantBudget{Tenant: "t1", Limits: budget.Limits{TokensPerMinute: 100000, MaxOutputTokens: 50}})
	g := tiered(t, func(d *Deps) { d.Budgets = spy }, []int{0, 1},
		func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Retry-After-Ms", "500")
			w.WriteHeader(http.StatusTooManyRequests)
		},
		sseBackend)
	if resp, b := g.post(t, streamBody); resp.StatusCode != 200 {
		t.Fatalf("status %d %s", resp.StatusCode, b)
	}
	reserves, settles := 0, []string{}
	for _, c := range spy.settled(t) {
		switch {
		case c == "reserve":
			reserves++
		case strings.HasPrefix(c, "settle") || c == "keep":
			settles = append(settles, c)
		}
	}
	// sseBackend's usage: 3 prompt + 1 completion tokens.
	if reserves != 1 || len(settles) != 1 || settles[0] != "settle 4" {
		t.Fatalf("reserved %d times, settled %v; want one reserve and one settle 4", reserves, settles)
	}
}

// TestInflatedCapsCannotTiltPriority: a PTU with a capacity of 10,000
// tokens a minute (default tenant share: half). Tenant t1 asks for
// 4,000-token caps: its first request goes to the PTU, the next would
// take it past its half of the minute, so it spills to pay-as-you-go
// without an attempt at the PTU (access log spill "tenant_share"),
// while tenant t2's requests still go to the PTU. Before, every one of
// t1's requests went to the PTU until the backend's own 429 cooled it
// for everyone.
func TestInflatedCapsCannotTiltPriority(t *testing.T) {
	var ptu, payg atomic.Int32
	g := tiered(t, func(d *Deps) {
		d.Auth = tokenIsTenant{}
		d.Tenants = tenant.NewTable([]tenant.Row{{ID: "t1", Models: []string{"m"}}, {ID: "t2", Models: []string{"m"}}})
		old := d.Router.Pool("m").Endpoints
		// One minute throughout: the shares start over at a minute's turn.
		minute := time.Date(2030, 1, 1, 0, 0, 30, 0, time.UTC)
		r := route.New([]route.PoolSpec{{Name: "p", Models: []string{"m"}, Endpoints: []route.EndpointSpec{
			{Name: old[0].Name, Weight: 1, Priority: 0, Capacity: 10_000}, {Name: old[1].Name, Weight: 1, Priority: 1},
		}}}, route.Options{Now: func() time.Time { return minute }})
		targets := map[*route.Endpoint]*upstream.Target{}
		for i, e := range r.Pool("m").Endpoints {
			targets[e] = d.Targets[old[i]]
		}
		d.Router, d.Targets = r, targets
	}, []int{0, 1}, counting(&ptu, sseBackend), counting(&payg, sseBackend))
	inflated := `{"model":"m","stream":true,"max_tokens":4000,"messages":[{"role":"user","content":"hi"}]}`
	small := `{"model":"m","stream":true,"max_tokens":100,"messages":[{"role":"user","content":"hi"}]}`
	for i, c := range []struct {
		tenant, body string
		ptu, payg    int32
	}{
		{"t1", inflated, 1, 0},
		{"t1", inflated, 1, 1}, // past its half: spills
		{"t1", inflated, 1, 2},
		{"t2", small, 2, 2}, // the neighbour keeps the PTU
		{"t2", inflated, 3, 2},
		{"t1", small, 4, 2}, // what is left of t1's half still holds a small one
	} {
		resp, b := g.call(t, "POST", "/v1/chat/completions", c.tenant, c.body)
		if resp.StatusCode != 200 || ptu.Load() != c.ptu || payg.Load() != c.payg {
			t.Fatalf("request %d (%s): %d %s; ptu %d payg %d, want %d and %d", i, c.tenant, resp.StatusCode, b, ptu.Load(), payg.Load(), c.ptu, c.payg)
		}
	}
	lines := requestLines(t, g)
	if s := lines[1]["spill"]; s != "tenant_share" || lines[1]["priority"] != 1.0 {
		t.Fatalf("the spilled request's log: spill %v, priority %v", s, lines[1]["priority"])
	}
}
