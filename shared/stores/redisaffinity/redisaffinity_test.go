package redisaffinity_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/gateway/internal/testing/redistest"
	"github.com/llmgw/gateway/shared/affinity"
	"github.com/llmgw/gateway/shared/affinity/affinitytest"
	"github.com/llmgw/gateway/shared/store"
	"github.com/llmgw/gateway/shared/stores/redisaffinity"
	"github.com/llmgw/gateway/shared/stores/redisclient"
)

// TestBreaker: records round-trip through a real redis-server; with the
// network to it blackholed, calls fail within their timeout until the
// breaker opens, then at once (the limiter's kind of breaker guards the
// response records too); after the cooldown a probe finds Redis back.
func TestBreaker(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	px := redistest.NewProxy(t, rs.Addr(), 0)
	c, err := redisclient.NewClient(redisclient.ClientOptions{URL: px.URL(), Timeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	s := redisaffinity.New(c, "t:", nil)
	ctx := context.Background()
	o := affinity.Owner{Tenant: "a", Model: "m", Pool: "p", Endpoint: "http://e", Tokens: 7}
	if err := s.Put(ctx, "resp_1", o, time.Minute); err != nil {
		t.Fatal(err)
	}
	if got, ok, err := s.Get(ctx, "resp_1"); err != nil || !ok || got != o {
		t.Fatalf("get: %+v %v %v", got, ok, err)
	}
	if _, ok, err := s.Get(ctx, "resp_none"); err != nil || ok {
		t.Fatalf("unknown id: %v %v (a miss is an answer, not a failure)", ok, err)
	}

	px.Blackhole(true)
	var skipped int
	for i := range 20 {
		start := time.Now()
		_, _, err := s.Get(ctx, "resp_1")
		if err == nil {
			t.Fatalf("get %d with Redis blackholed: no error", i)
		}
		if errors.Is(err, store.ErrBreakerOpen) {
			skipped++
		} else if took := time.Since(start); took > 5*time.Second {
			t.Errorf("get %d took %s", i, took)
		}
	}
	if state, opens := s.Breaker(); state != store.BreakerOpen || opens != 1 || skipped < 20-store.DefaultBreakerThreshold {
		t.Fatalf("breaker %s, opened %d times, %d of 20 calls skipped; want open, once, at least %d", state, opens, skipped, 20-store.DefaultBreakerThreshold)
	}

	px.Blackhole(false)
	deadline := time.Now().Add(3 * store.DefaultBreakerCooldown)
	for {
		if _, ok, err := s.Get(ctx, "resp_1"); err == nil && ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the breaker never closed after Redis came back")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestConformance runs the affinity stores' one semantics on a real
// redis-server: compare and set (a plain SET would let tenant B overwrite
// tenant A's record, so B could read and delete A's response and A would
// get 404), a trim that removes only the tenant's own ids, and exactly
// one winner when tenants race for an id. Each subtest has its own prefix.
// It runs on a single node and on a three-primary cluster (a cluster
// client: every command and script touches one key, so none spans slots).
func TestConformance(t *testing.T) {
	t.Parallel()
	for _, k := range redistest.Kinds(t) {
		t.Run(k.Name, func(t *testing.T) {
			t.Parallel()
			c, err := redisclient.New(redisclient.ClientOptions{URL: k.URL, Cluster: k.Cluster, Timeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close() })
			affinitytest.Run(t, func(t *testing.T, perTenant int) affinity.Store {
				s := redisaffinity.New(c, strings.ReplaceAll(t.Name(), "/", ":")+":", nil)
				s.PerTenant = perTenant
				return s
			})
		})
	}
}
