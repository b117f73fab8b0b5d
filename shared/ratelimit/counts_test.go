package ratelimit_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/gateway/shared/problem"
	"github.com/llmgw/gateway/shared/ratelimit"
)

// TestCountBucket: prompt counts (TakeCount) draw from a bucket of their
// own, DefaultCountsPerRequest times the requests unless the limit names
// its size, and never from the request bucket (Claude Code's /context
// sends about 35 count_tokens at once).
func TestCountBucket(t *testing.T) {
	t.Parallel()
	l := newLimiter(t, ratelimit.Config{}, []ratelimit.TenantLimit{
		{Tenant: "a", Requests: 2, Interval: time.Hour},
		{Tenant: "b", Requests: 2, Interval: time.Hour, Counts: 3},
	}, nil)
	ctx := context.Background()
	for _, tc := range []struct {
		tenant string
		counts uint64
	}{{"a", 2 * ratelimit.DefaultCountsPerRequest}, {"b", 3}} {
		for i := range tc.counts {
			d, err := l.TakeCount(ctx, tc.tenant)
			if err != nil || !d.Allowed || d.Limit != tc.counts || d.Remaining != tc.counts-1-i {
				t.Fatalf("%s: count %d: %+v %v", tc.tenant, i+1, d, err)
			}
		}
		if d, err := l.TakeCount(ctx, tc.tenant); err != nil || d.Allowed {
			t.Fatalf("%s: count %d past the bucket allowed: %+v %v", tc.tenant, tc.counts+1, d, err)
		}
		// The request bucket is untouched.
		if d, err := l.Take(ctx, tc.tenant); err != nil || !d.Allowed || d.Remaining != 1 || d.Limit != 2 {
			t.Fatalf("%s: a request after the counts: %+v %v", tc.tenant, d, err)
		}
	}
	if _, err := l.TakeCount(ctx, "nobody"); err == nil {
		t.Fatal("an unknown tenant's count was taken")
	}
}

// TestCountBucketRefill: a count bucket too large for its interval is
// named by its field, as the request bucket is.
func TestCountBucketRefill(t *testing.T) {
	_, err := ratelimit.New(ratelimit.Config{}, []ratelimit.TenantLimit{{Tenant: "a", Requests: 10, Interval: time.Millisecond, Counts: 1 << 20}}, nil)
	if err == nil || !strings.Contains(err.Error(), "count_requests") {
		t.Fatalf("err %v", err)
	}
}

// TestDefaultInterval: a limit that names no interval is a bucket of
// DefaultInterval, applied by New (the gateway's config leaves it zero):
// once the bucket is spent the next refill is about a minute away, not
// refused at start as an interval of 0 was.
func TestDefaultInterval(t *testing.T) {
	t.Parallel()
	if got := (ratelimit.TenantLimit{}).WithDefaults().Interval; got != time.Minute || ratelimit.DefaultInterval != time.Minute {
		t.Fatalf("default interval %s", got)
	}
	l := newLimiter(t, ratelimit.Config{}, []ratelimit.TenantLimit{{Tenant: "a", Requests: 1}}, nil)
	ctx := context.Background()
	start := time.Now()
	if d, err := l.Take(ctx, "a"); err != nil || !d.Allowed {
		t.Fatalf("first take: %+v %v", d, err)
	}
	d, err := l.Take(ctx, "a")
	if err != nil || d.Allowed {
		t.Fatalf("second take of a bucket of 1: %+v %v", d, err)
	}
	if wait := d.Reset.Sub(start); wait < 30*time.Second || wait > time.Minute+time.Second {
		t.Fatalf("refill in %s, want about a minute", wait)
	}
}

// TestCheckRefill: a bucket a tick cannot refill whole is reported by
// field, its default interval applied; New still takes it (a program's
// "no limit").
func TestCheckRefill(t *testing.T) {
	limits := []ratelimit.TenantLimit{
		{Tenant: "a", Requests: 1000, Interval: time.Millisecond},
		{Tenant: "b", Requests: 1001, Interval: time.Millisecond},
		{Tenant: "c", Requests: 300000},
		{Tenant: "d"},
	}
	var p []string
	ratelimit.CheckRefill(limits, problem.Into(&p, "tenants"))
	want := []string{
		"tenants[1].requests: 1001 per 1ms is more than the token bucket can refill; use a shorter interval",
		"tenants[2].requests: 300000 per 1m0s is more than the token bucket can refill; use a shorter interval",
	}
	if !slices.Equal(p, want) {
		t.Fatalf("problems %q, want %q", p, want)
	}
	l, err := ratelimit.New(ratelimit.Config{}, limits[1:3], nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = l.Close()
}
