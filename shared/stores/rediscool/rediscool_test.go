package rediscool_test

import (
	"context"
	"testing"
	"time"

	"github.com/llmgw/gateway/internal/testing/redistest"
	"github.com/llmgw/gateway/shared/route"
	"github.com/llmgw/gateway/shared/stores/redisclient"
	"github.com/llmgw/gateway/shared/stores/rediscool"
)

// replica is one gateway's router on the shared redis-server.
func replica(t *testing.T, url string) (*route.Router, *route.Pool) {
	t.Helper()
	return replicaOn(t, redistest.Kind{URL: url})
}

// replicaOn is replica on k: a cluster client for a cluster.
func replicaOn(t *testing.T, k redistest.Kind) (*route.Router, *route.Pool) {
	t.Helper()
	return replicaTimeout(t, k, time.Second)
}

// replicaTimeout is replicaOn with a client that waits timeout for an
// answer.
func replicaTimeout(t *testing.T, k redistest.Kind, timeout time.Duration) (*route.Router, *route.Pool) {
	t.Helper()
	c, err := redisclient.New(redisclient.ClientOptions{URL: k.URL, Cluster: k.Cluster, Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	r := route.New([]route.PoolSpec{{Name: "p", Models: []string{"m"}, Endpoints: []route.EndpointSpec{
		{Name: "https://ptu"}, {Name: "https://payg", Priority: 1},
	}}}, route.Options{Shared: rediscool.New(c, "t:", nil)})
	return r, r.Pool("m")
}

func first(r *route.Router, p *route.Pool) string {
	r.Sync(context.Background(), p)
	o, _ := r.Order(p, nil, 2, 0)
	if len(o) == 0 {
		return ""
	}
	return o[0].Name
}

// TestSharedCooldown: two gateways on one redis-server, and on one
// three-primary cluster (the pool's endpoint keys share its hash tag: one
// read of the pool's keys, one slot, no CROSSSLOT). A cooldown the
// PTU asked of one is seen by the other on its next request (it never
// pays a 429 to learn it), a shorter one published later by the second
// does not shorten it on either, and both send to the PTU again once it
// ends.
func TestSharedCooldown(t *testing.T) {
	t.Parallel()
	for _, k := range redistest.Kinds(t) {
		t.Run(k.Name, func(t *testing.T) {
			t.Parallel()
			testSharedCooldown(t, k)
		})
	}
}

func testSharedCooldown(t *testing.T, k redistest.Kind) {
	ra, pa := replicaOn(t, k)
	rb, pb := replicaOn(t, k)
	ctx := context.Background()
	if first(ra, pa) != "https://ptu" || first(rb, pb) != "https://ptu" {
		t.Fatal("the PTU must go first on both before any cooldown")
	}
	const pause = 1500 * time.Millisecond
	start := time.Now()
	ra.Cooldown(ctx, pa.Endpoints[0], pause, true)
	if got := first(rb, pb); got != "https://payg" {
		t.Fatalf("replica b sends to %s; the PTU's cooldown from replica a must reach it", got)
	}
	rb.Cooldown(ctx, pb.Endpoints[0], 10*time.Millisecond, true)
	time.Sleep(50 * time.Millisecond)
	// A third replica, started from zero, learns it from the store too.
	rc, pc := replicaOn(t, k)
	for name, r := range map[string]struct {
		r *route.Router
		p *route.Pool
	}{"a": {ra, pa}, "b": {rb, pb}, "c (new)": {rc, pc}} {
		if got := first(r.r, r.p); got != "https://payg" && time.Since(start) < pause {
			t.Fatalf("replica %s sends to %s: a shorter second cooldown shortened the first", name, got)
		}
	}
	time.Sleep(time.Until(start.Add(pause + 200*time.Millisecond)))
	if first(ra, pa) != "https://ptu" || first(rb, pb) != "https://ptu" || first(rc, pc) != "https://ptu" {
		t.Fatal("once the cooldown ended every replica must send to the PTU again")
	}
}

// TestSharedCooldownStoreDown: with the store gone, a replica keeps its
// own view and routes without error or delay beyond the client timeout.
func TestSharedCooldownStoreDown(t *testing.T) {
	rs := redistest.Start(t)
	r, p := replica(t, rs.URL())
	r.Cooldown(context.Background(), p.Endpoints[0], time.Minute, true)
	rs.Stop()
	if got := first(r, p); got != "https://payg" {
		t.Fatalf("store down: sends to %s, want its own cooldown kept", got)
	}
}

// TestSharedCooldownPublishedWhenStoreReturns: a cooldown one replica
// learned while it could not reach the store (a partition) reaches a
// replica started later, once the first finds the store again on its
// next request.
func TestSharedCooldownPublishedWhenStoreReturns(t *testing.T) {
	rs := redistest.Start(t)
	px := redistest.NewProxy(t, rs.Addr(), 0)
	ra, pa := replicaTimeout(t, redistest.Kind{URL: px.URL()}, 200*time.Millisecond)
	px.Blackhole(true)
	ra.Cooldown(context.Background(), pa.Endpoints[0], time.Minute, true)
	px.Blackhole(false)
	rb, pb := replica(t, rs.URL())
	if got := first(rb, pb); got != "https://ptu" {
		t.Fatalf("replica b sends to %s before the cooldown could be published", got)
	}
	if got := first(ra, pa); got != "https://payg" {
		t.Fatalf("replica a sends to %s, want its own cooldown kept", got)
	}
	if got := first(rb, pb); got != "https://payg" {
		t.Fatalf("replica b sends to %s: the cooldown learned while the store was away must be published when it returns", got)
	}
}
