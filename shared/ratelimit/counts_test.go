package ratelimit_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/gateway/shared/ratelimit"
)

// TestCountBucket: prompt counts (TakeCount) draw from a bucket of their
// own, DefaultCountsPerRequest times the requests unless the limit names
// its size, and never from the request bucket (issue 37, finding 10:
// Claude Code's /context sends about 35 count_tokens at once).
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
