package server

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmgw/gateway/shared/budget"
)

// TestBudgetCount: a Messages request whose prompt bound (about 1,050)
// is above the tenant's 500 tokens a minute is served when the pool's
// count_tokens says its input fits, and refused as before when the count
// fails, is too slow, or cannot be true (a lying backend gains nothing).
func TestBudgetCount(t *testing.T) {
	text := strings.Repeat("a", 1000)
	body := `{"model":"m","max_tokens":50,"messages":[{"role":"user","content":"` + text + `"}]}`
	for _, tt := range []struct {
		name   string
		count  func(w http.ResponseWriter, r *http.Request)
		served bool
	}{
		{"exact count fits", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(`{"input_tokens":250}`)) }, true},
		{"count fails", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(500) }, false},
		{"count too slow", func(http.ResponseWriter, *http.Request) { time.Sleep(500 * time.Millisecond) }, false},
		{"count of zero", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(`{"input_tokens":0}`)) }, false},
		{"count absent", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(`{"usage":{"input_tokens":1}}`)) }, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			spy := newBudgetSpy(t, budget.Config{}, nil, budget.TenantBudget{Tenant: "t1", Limits: budget.Limits{TokensPerMinute: 500}})
			var counts, messages atomic.Int64
			backend := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if strings.HasSuffix(r.URL.Path, "/count_tokens") {
					counts.Add(1)
					tt.count(w, r)
					return
				}
				messages.Add(1)
				w.Header().Set("Content-Type", "application/json")
				_, _ = w.Write([]byte(`{"id":"msg_1","type":"message","role":"assistant","content":[{"type":"text","text":"hi"}],"usage":{"input_tokens":250,"output_tokens":1}}`))
			})
			g := gatewayOnKind(t, "anthropic", func(d *Deps) { d.Budgets = spy; d.CountTimeout = 100 * time.Millisecond }, startBackend(t, backend))
			resp, got := postPath(t, g, "/v1/messages", body)
			if counts.Load() != 1 {
				t.Fatalf("%d count calls, want 1", counts.Load())
			}
			if !tt.served {
				var e struct {
					Error struct{ Message string } `json:"error"`
				}
				if err := json.Unmarshal(got, &e); err != nil || resp.StatusCode != 429 || !strings.Contains(e.Error.Message, "never run") || messages.Load() != 0 {
					t.Fatalf("status %d, %d forwarded: %s", resp.StatusCode, messages.Load(), got)
				}
				return
			}
			if resp.StatusCode != 200 || messages.Load() != 1 {
				t.Fatalf("status %d: %s", resp.StatusCode, got)
			}
			if c := lastSettle(t, spy); c != 251 {
				t.Fatalf("charged %d, want the usage of 251", c)
			}
			if rl := resp.Header.Get("X-Ratelimit-Remaining-Tokens"); rl != "200" {
				t.Fatalf("%q tokens left after reserving, want 500 - (250 + the cap of 50)", rl)
			}
		})
	}
}

// TestBudgetCountResponses: the Responses row's counter is OpenAI's
// input_tokens. A prompt bound of about 1,050 on a 500-token budget is
// refused as never fitting unless the pool counts it: counted at 250 it
// is served, the count sent without max_output_tokens or stream, and
// the tenant's bucket not asked for it.
func TestBudgetCountResponses(t *testing.T) {
	text := strings.Repeat("a", 1000)
	body := `{"model":"m","max_output_tokens":50,"input":"` + text + `"}`
	spy := newBudgetSpy(t, budget.Config{}, nil, budget.TenantBudget{Tenant: "t1", Limits: budget.Limits{TokensPerMinute: 500}})
	var counts, responses atomic.Int64
	var countBody atomic.Value
	backend := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/responses/input_tokens") {
			counts.Add(1)
			b, _ := io.ReadAll(r.Body)
			countBody.Store(string(b))
			_, _ = w.Write([]byte(`{"object":"response.input_tokens","input_tokens":250}`))
			return
		}
		responses.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"resp_1","object":"response","status":"completed","output":[],"usage":{"input_tokens":250,"output_tokens":1,"total_tokens":251}}`))
	})
	g := gatewayOnKind(t, "openai", func(d *Deps) { d.Budgets = spy; d.CountTimeout = time.Second }, startBackend(t, backend))
	resp, got := postPath(t, g, "/v1/responses", body)
	if counts.Load() != 1 || resp.StatusCode != 200 || responses.Load() != 1 {
		t.Fatalf("%d count calls, status %d, %d forwarded: %s", counts.Load(), resp.StatusCode, responses.Load(), got)
	}
	cb, _ := countBody.Load().(string)
	if strings.Contains(cb, "max_output_tokens") || !strings.Contains(cb, text) {
		t.Fatalf("count body %q: want the input without max_output_tokens", cb)
	}
	if rl := resp.Header.Get("X-Ratelimit-Remaining-Tokens"); rl != "200" {
		t.Fatalf("%q tokens left after reserving, want 500 - (250 + the cap of 50)", rl)
	}
}

// TestBudgetCountDuplicates: a count decides the reservation, so a body
// that sends a counted member twice (or in another case, or escaped),
// which could be counted as one copy and generated from the other, is
// not counted: the refusal stands and the backend is asked nothing.
func TestBudgetCountDuplicates(t *testing.T) {
	text := strings.Repeat("a", 1000)
	for name, body := range map[string]string{
		"messages twice": `{"model":"m","max_tokens":50,"messages":[{"role":"user","content":"` + text + `"}],"messages":[{"role":"user","content":"hi"}]}`,
		"escaped key":    `{"model":"m","max_tokens":50,"messages":[{"role":"user","content":"` + text + `"}],"m\u0065ssages":[{"role":"user","content":"hi"}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			spy := newBudgetSpy(t, budget.Config{}, nil, budget.TenantBudget{Tenant: "t1", Limits: budget.Limits{TokensPerMinute: 500}})
			var calls atomic.Int64
			backend := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				calls.Add(1)
				_, _ = w.Write([]byte(`{"input_tokens":2}`))
			})
			g := gatewayOnKind(t, "anthropic", func(d *Deps) { d.Budgets = spy }, startBackend(t, backend))
			resp, got := postPath(t, g, "/v1/messages", body)
			if resp.StatusCode == 200 || calls.Load() != 0 {
				t.Fatalf("status %d, %d backend calls: %s", resp.StatusCode, calls.Load(), got)
			}
		})
	}
}

// TestBudgetCountFirst: a prompt bound above budget.count_above (a
// coding agent's first request bounds at about four times its prompt)
// is counted by the pool before it is reserved, so the reservation is
// the count and the cap, not the bound; below it no count is asked while
// the bound fits.
func TestBudgetCountFirst(t *testing.T) {
	big := `{"model":"m","max_tokens":50,"messages":[{"role":"user","content":"` + strings.Repeat("a", 40_000) + `"}]}`
	small := `{"model":"m","max_tokens":50,"messages":[{"role":"user","content":"hi"}]}`
	for _, tt := range []struct {
		name       string
		countAbove int64
		body       string
		counts     int64
		remaining  string
	}{
		{"a bound above count_above is counted first", 0, big, 1, "999999700"},
		{"a bound below it is reserved as it is", 0, small, 0, ""},
		{"a count_above above the bound counts only a refused bound", 1 << 40, big, 0, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			spy := newBudgetSpy(t, budget.Config{CountAbove: tt.countAbove}, nil, budget.TenantBudget{Tenant: "t1", Limits: budget.Limits{TokenQuota: 1_000_000_000, QuotaPeriod: budget.PeriodDay}})
			var counts atomic.Int64
			backend := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if strings.HasSuffix(r.URL.Path, "/count_tokens") {
					counts.Add(1)
					_, _ = w.Write([]byte(`{"input_tokens":250}`))
					return
				}
				w.Header().Set("Content-Type", "application/json")
				_, _ = w.Write([]byte(`{"id":"msg_1","type":"message","role":"assistant","content":[{"type":"text","text":"hi"}],"usage":{"input_tokens":250,"output_tokens":1}}`))
			})
			g := gatewayOnKind(t, "anthropic", func(d *Deps) { d.Budgets = spy }, startBackend(t, backend))
			resp, got := postPath(t, g, "/v1/messages", tt.body)
			if resp.StatusCode != 200 || counts.Load() != tt.counts {
				t.Fatalf("status %d, %d count calls (want %d): %s", resp.StatusCode, counts.Load(), tt.counts, got)
			}
			if rl := resp.Header.Get("X-Ratelimit-Remaining-Tokens"); tt.remaining != "" && rl != tt.remaining {
				t.Fatalf("%q tokens left after reserving, want the quota less the count of 250 and the cap of 50", rl)
			}
		})
	}
}
