package redislimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/llmgw/gateway/internal/testing/redistest"
	"github.com/llmgw/gateway/shared/stores/redislimit"
	"github.com/sethvargo/go-limiter"
)

// BenchmarkTake compares one Take on loopback Redis (one EVALSHA round trip)
// with go-limiter's memorystore.
func BenchmarkTake(b *testing.B) {
	srv := redistest.Start(b)
	ctx := context.Background()
	const tokens, interval = 1 << 40, time.Hour
	for _, bc := range []struct {
		name  string
		store func(b *testing.B) limiter.Store
	}{
		{"memorystore", func(b *testing.B) limiter.Store { return newMemory(b, tokens, interval) }},
		{"redislimit", func(b *testing.B) limiter.Store {
			s := newStore(b, newClient(b, srv), redislimit.Config{Tokens: tokens, Interval: interval, KeyPrefix: "bench:"})
			if err := s.Warm(ctx); err != nil {
				b.Fatal(err)
			}
			return s
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			s := bc.store(b)
			b.ReportAllocs()
			for b.Loop() {
				if _, _, _, _, err := s.Take(ctx, "tenant"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
