package server

import (
	"context"
	"encoding/json"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/llmgw/gateway/shared/affinity"
	"github.com/llmgw/gateway/shared/ratelimit"
	"github.com/llmgw/gateway/shared/tenant"
)

// countingAffinity is a memory store that counts its reads.
type countingAffinity struct {
	*affinity.Memory
	gets atomic.Int64
}

func (c *countingAffinity) Get(ctx context.Context, id string) (affinity.Owner, bool, error) {
	c.gets.Add(1)
	return c.Memory.Get(ctx, id)
}

// emptyBucket refuses every take, counting them.
type emptyBucket struct{ takes atomic.Int64 }

func (e *emptyBucket) Take(context.Context, string) (ratelimit.Decision, error) {
	e.takes.Add(1)
	return ratelimit.Decision{Limit: 1}, nil
}

// TestLimitBeforeCallerWork: with the tenant's request bucket empty, a
// stored-response lookup, a previous_response_id and a body the gateway
// refuses for its content are answered 429 without a store read: the
// bucket is taken before any work the caller's id or body can cause.
// Before, GET /v1/responses/{id} and previous_response_id read the
// affinity store first (300 lookups: 300 store reads, no token), and a
// refused body never reached the bucket. The control: with tokens in the
// bucket the lookup is still served.
func TestLimitBeforeCallerWork(t *testing.T) {
	const n = 30
	tests := []struct {
		name, method, path, body string
	}{
		{"stored lookup", http.MethodGet, "/v1/responses/resp_x", ""},
		{"stored delete", http.MethodDelete, "/v1/responses/resp_x", ""},
		{"previous_response_id", http.MethodPost, "/v1/responses", `{"model":"m","input":"hi","previous_response_id":"resp_x"}`},
		{"refused content", http.MethodPost, "/v1/responses", `{"model":"m","input":"hi","conversation":"conv_1"}`},
		{"unknown model", http.MethodPost, "/v1/chat/completions", `{"model":"nope","messages":[]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			aff := &countingAffinity{Memory: affinity.NewMemory(0, nil)}
			lim := &emptyBucket{}
			g := newTestGatewayWith(t, func(d *Deps) {
				d.Auth = tokenIsTenant{}
				d.Tenants = tenant.NewTable([]tenant.Row{{ID: "t1", Models: []string{"m"}}})
				d.Affinity = aff
				d.Limiter = lim
			})
			for range n {
				resp, b := g.call(t, tt.method, tt.path, "t1", tt.body)
				if resp.StatusCode != http.StatusTooManyRequests {
					t.Fatalf("status %d, want 429: %s", resp.StatusCode, b)
				}
			}
			if got := aff.gets.Load(); got != 0 {
				t.Errorf("%d store reads for %d refused requests, want none", got, n)
			}
			if got := lim.takes.Load(); got != n {
				t.Errorf("%d takes for %d requests, want one each", got, n)
			}
		})
	}
	t.Run("control: tokens in the bucket", func(t *testing.T) {
		g, _ := responsesGateway(t, 1)
		resp, b := g.call(t, http.MethodPost, "/v1/responses", "t1", `{"model":"m","input":"hello"}`)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("create: %d %s", resp.StatusCode, b)
		}
		var r struct{ ID string }
		if err := json.Unmarshal(b, &r); err != nil || r.ID == "" {
			t.Fatalf("create: %v %s", err, b)
		}
		if resp, b := g.call(t, http.MethodGet, "/v1/responses/"+r.ID, "t1", ""); resp.StatusCode != http.StatusOK {
			t.Fatalf("lookup: %d %s", resp.StatusCode, b)
		}
	})
}
