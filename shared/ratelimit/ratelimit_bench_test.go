package ratelimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/llmgw/gateway/scripts/redistest"
	"github.com/llmgw/gateway/shared/ratelimit"
)

// BenchmarkTake is the limiter's cost per request: the memory store, and the
// Redis store on loopback with the timeout, breaker and policy around it.
func BenchmarkTake(b *testing.B) {
	limits := []ratelimit.TenantLimit{
		{Tenant: "other", Tokens: 10, Interval: time.Minute},
		{Tenant: "t", Tokens: 1 << 40, Interval: time.Hour},
	}
	srv := redistest.Start(b)
	ctx := context.Background()
	for _, bc := range []struct {
		name string
		cfg  ratelimit.Config
	}{
		{"memory", ratelimit.Config{}},
		{"redis", ratelimit.Config{Store: "redis", RedisURL: srv.URL(), Timeout: time.Second}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			l := newLimiter(b, bc.cfg, limits, nil)
			if err := l.Warm(ctx); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if d, err := l.Take(ctx, "t"); err != nil || d.Degraded || !d.Allowed {
					b.Fatalf("%+v, %v", d, err)
				}
			}
		})
	}
}
