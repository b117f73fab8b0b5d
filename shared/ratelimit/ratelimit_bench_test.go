package ratelimit_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/llmgw/gateway/internal/testing/redistest"
	"github.com/llmgw/gateway/shared/ratelimit"
	"github.com/llmgw/gateway/shared/stores"
)

// BenchmarkTake is the limiter's cost per request: the memory store, and the
// Redis store on loopback with the timeout, breaker and policy around it.
func BenchmarkTake(b *testing.B) {
	limits := []ratelimit.TenantLimit{
		{Tenant: "other", Requests: 10, Interval: time.Minute},
		{Tenant: "t", Requests: 1 << 40, Interval: time.Hour},
	}
	srv := redistest.Start(b)
	ctx := context.Background()
	for _, bc := range []struct {
		name string
		cfg  ratelimit.Config
	}{
		{"memory", ratelimit.Config{}},
		{"redis", onRedis(b, ratelimit.Config{Timeout: time.Second}, stores.Config{URL: srv.URL()})},
	} {
		b.Run(bc.name, func(b *testing.B) {
			l := newLimiter(b, bc.cfg, limits, nil)
			if err := l.Warm(ctx); err != nil {
				b.Fatal(err)
			}
			// Per-take latency: what the limiter adds to a request.
			lat := make([]time.Duration, 0, 1<<16)
			b.ReportAllocs()
			for b.Loop() {
				start := time.Now()
				if d, err := l.Take(ctx, "t"); err != nil || d.Degraded || !d.Allowed {
					b.Fatalf("%+v, %v", d, err)
				}
				if len(lat) < cap(lat) {
					lat = append(lat, time.Since(start))
				}
			}
			slices.Sort(lat)
			if n := len(lat); n > 0 {
				b.ReportMetric(float64(lat[n/2].Nanoseconds()), "p50-ns")
				b.ReportMetric(float64(lat[n*99/100].Nanoseconds()), "p99-ns")
			}
		})
	}
}
