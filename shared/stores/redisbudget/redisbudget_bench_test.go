package redisbudget_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/llmgw/gateway/internal/testing/redistest"
	"github.com/llmgw/gateway/shared/budget"
)

// BenchmarkReserveSettle is one request's budget cost on loopback Redis:
// two EVALSHA round trips (Reserve, Settle). "ping" is one PING round trip
// on the same client, the floor to compare with.
func BenchmarkReserveSettle(b *testing.B) {
	srv := redistest.Start(b)
	client := newClient(b, srv, 5*time.Second)
	s := newStore(b, client, nil)
	ctx := context.Background()
	b.Run("ping", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := client.Ping(ctx).Err(); err != nil {
				b.Fatal(err)
			}
		}
	})
	if err := s.Warm(ctx); err != nil {
		b.Fatal(err)
	}
	tokens := budget.Request{
		Limits: budget.Limits{TokensPerMinute: 1 << 50, TokenQuota: 1 << 50, QuotaPeriod: budget.PeriodMonth},
		Min:    100, Want: 4196, Lease: 15 * time.Minute,
	}
	spend := tokens
	spend.Limits.SpendPerMinute, spend.Limits.SpendPerDay, spend.Limits.SpendPerMonth = 1<<50, 1<<50, 1<<50
	spend.MoneyMin, spend.MoneyWant = 1000, 42000
	// tokens is a reservation with token limits only; tokens+spend adds
	// the three spend limits, in the same two scripts (spend limits cost
	// no extra round trip).
	for _, c := range []struct {
		name   string
		req    budget.Request
		charge budget.Charge
	}{
		{"reserve+settle/tokens", tokens, budget.Charge{Tokens: 300, Money: budget.KeepReserved}},
		{"reserve+settle/tokens+spend", spend, budget.Charge{Tokens: 300, Money: 3000}},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				id := strconv.Itoa(i)
				i++
				if d, err := s.Reserve(ctx, "t", id, c.req); err != nil || !d.Allowed {
					b.Fatalf("%+v, %v", d, err)
				}
				if _, err := s.Settle(ctx, "t", id, c.charge); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
