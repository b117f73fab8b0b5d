package server

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmgw/gateway/shared/ratelimit"
)

// fixedLimiter answers every take with d and err; resetIn, when set, puts
// d.Reset that long after the take (not after the test table was built,
// which a busy machine may have done seconds earlier).
type fixedLimiter struct {
	d       ratelimit.Decision
	resetIn time.Duration
	err     error
}

func (f fixedLimiter) Take(context.Context, string) (ratelimit.Decision, error) {
	d := f.d
	if f.resetIn > 0 {
		d.Reset = time.Now().Add(f.resetIn)
	}
	return d, f.err
}

// TestLimiterDecisions: what a refusal and a store failure tell the caller.
func TestLimiterDecisions(t *testing.T) {
	reset := 7 * time.Second
	tests := []struct {
		name   string
		lim    fixedLimiter
		status int
		code   string
		retry  string
	}{
		{"refused: Retry-After from the bucket's reset", fixedLimiter{d: ratelimit.Decision{Limit: 5}, resetIn: reset}, 429, "rate_limit_exceeded", "7"},
		{"store down, closed: Retry-After from when it is tried again", fixedLimiter{resetIn: reset, err: ratelimit.ErrUnavailable}, 503, "rate_limiter_unavailable", "7"},
		{"store down, no reset: at least a second", fixedLimiter{err: ratelimit.ErrUnavailable}, 503, "rate_limiter_unavailable", "1"},
		{"other failure", fixedLimiter{err: io.ErrUnexpectedEOF}, 500, "rate_limiter_error", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			called := false
			g := newTestGatewayWith(t, func(d *Deps) { d.Limiter = tt.lim },
				http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { called = true; sseBackend(w, r) }))
			resp, b := g.post(t, streamBody)
			if resp.StatusCode != tt.status || errorCode(t, b) != tt.code || called {
				t.Fatalf("status %d %s (backend called: %v)", resp.StatusCode, b, called)
			}
			// Whole seconds, rounded up: a reset a hair under 7 s is "7".
			if got := resp.Header.Get("Retry-After"); got != tt.retry {
				t.Fatalf("Retry-After %q, want %q", got, tt.retry)
			}
		})
	}
	t.Run("store down, open: served", func(t *testing.T) {
		called := false
		lim := fixedLimiter{d: ratelimit.Decision{Allowed: true, Degraded: true, Limit: 5, Remaining: 4}, resetIn: reset}
		g := newTestGatewayWith(t, func(d *Deps) { d.Limiter = lim },
			http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { called = true; sseBackend(w, r) }))
		if resp, b := g.post(t, streamBody); resp.StatusCode != 200 || !called {
			t.Fatalf("status %d %s (backend called: %v)", resp.StatusCode, b, called)
		}
	})
}

// TestFailoverPolicy: which backend answers are retried elsewhere, and
// what an endpoint that asked for a pause gets.
func TestFailoverPolicy(t *testing.T) {
	t.Run("429 with Retry-After benches the endpoint", func(t *testing.T) {
		var limited, healthy atomic.Int32
		g := newTestGatewayWith(t, nil,
			http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				limited.Add(1)
				w.Header().Set("Retry-After", "60")
				w.WriteHeader(http.StatusTooManyRequests)
			}),
			http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { healthy.Add(1); sseBackend(w, r) }))
		for i := 0; i < 6; i++ {
			if resp, b := g.post(t, streamBody); resp.StatusCode != 200 {
				t.Fatalf("request %d: %d %s", i, resp.StatusCode, b)
			}
		}
		if limited.Load() > 1 || healthy.Load() != 6 {
			t.Fatalf("the benched endpoint was asked %d times, the healthy one %d", limited.Load(), healthy.Load())
		}
	})
	t.Run("every endpoint benched: 503 with the soonest recovery", func(t *testing.T) {
		g := newTestGatewayWith(t, nil, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Retry-After", "30")
			w.WriteHeader(http.StatusTooManyRequests)
		}))
		if resp, b := g.post(t, streamBody); resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "30" {
			t.Fatalf("first: %d %s %q", resp.StatusCode, b, resp.Header.Get("Retry-After"))
		}
		resp, b := g.post(t, streamBody)
		if resp.StatusCode != 503 || errorCode(t, b) != "upstream_unavailable" || resp.Header.Get("Retry-After") == "" {
			t.Fatalf("second: %d %s", resp.StatusCode, b)
		}
	})
	t.Run("400 is the caller's: relayed, not retried", func(t *testing.T) {
		var calls atomic.Int32
		h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			calls.Add(1)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			_, _ = io.WriteString(w, `{"error":{"message":"bad temperature","type":"invalid_request_error","param":"temperature","code":null}}`)
		})
		g := newTestGatewayWith(t, nil, h, h)
		resp, b := g.post(t, streamBody)
		if resp.StatusCode != 400 || !strings.Contains(string(b), "bad temperature") || calls.Load() != 1 {
			t.Fatalf("status %d calls %d %s", resp.StatusCode, calls.Load(), b)
		}
	})
	t.Run("non-streaming answer past response_timeout: 504, no second attempt", func(t *testing.T) {
		var calls atomic.Int32
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			calls.Add(1)
			_, _ = io.Copy(io.Discard, r.Body) // net/http notices a gone client only after the body
			<-r.Context().Done()
		})
		g := newTestGatewayWith(t, func(d *Deps) { d.Dispatch.ResponseTimeout = 100 * time.Millisecond }, h, h)
		resp, b := g.post(t, `{"model":"m","messages":[]}`)
		if resp.StatusCode != 504 || errorCode(t, b) != "upstream_timeout" || calls.Load() != 1 {
			t.Fatalf("status %d calls %d %s", resp.StatusCode, calls.Load(), b)
		}
	})
	t.Run("stream headers past header_timeout: the next endpoint", func(t *testing.T) {
		var calls atomic.Int32
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if calls.Add(1) == 1 {
				_, _ = io.Copy(io.Discard, r.Body)
				<-r.Context().Done()
				return
			}
			sseBackend(w, r)
		})
		g := newTestGatewayWith(t, func(d *Deps) { d.Dispatch.HeaderTimeout = 100 * time.Millisecond }, h, h)
		if resp, b := g.post(t, streamBody); resp.StatusCode != 200 || calls.Load() != 2 {
			t.Fatalf("status %d calls %d %s", resp.StatusCode, calls.Load(), b)
		}
	})
}
