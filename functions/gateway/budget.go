package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/llmgw/gateway/shared/budget"
	"github.com/llmgw/gateway/shared/budget/redisbudget"
	"github.com/llmgw/gateway/shared/config"
	"github.com/llmgw/gateway/shared/ratelimit"
	"github.com/llmgw/gateway/shared/server"
)

// budgets builds the tenants' token budgets, or nil when no tenant has
// one (then no request does any budget work). Their store is the
// limiter's: with Redis, keys under key_prefix + "budget:" so every replica
// draws on one budget, reservations on a client of their own (answers
// bounded by budget.timeout, new connections by limiter.dial_timeout) and
// settles on the shared-state client; else this process's memory. Either
// way the ledger puts the limiter's kind of breaker in front of Redis.
func budgets(ctx context.Context, cfg *config.Config, lc ratelimit.Config, g *gateway, log *slog.Logger) (server.Budgets, error) {
	var tenants []budget.TenantBudget
	for _, t := range cfg.Tenants {
		if !t.HasBudget() {
			continue
		}
		lim := budget.Limits{TokensPerMinute: t.TokensPerMinute, TokenQuota: t.TokenQuota, MaxOutputTokens: t.MaxOutputTokens}
		if t.QuotaPeriod != "" {
			p, err := budget.ParsePeriod(t.QuotaPeriod)
			if err != nil {
				return nil, err
			}
			lim.QuotaPeriod = p
		}
		tenants = append(tenants, budget.TenantBudget{Tenant: t.ID, Limits: lim})
	}
	if len(tenants) == 0 {
		return nil, nil
	}
	b := cfg.Budget
	var store budget.Store // nil: memory
	if g.state != nil {
		var err error
		if g.reserve, err = redisClient(lc, b.Timeout.D()); err != nil {
			return nil, err
		}
		rs, err := redisbudget.New(g.state, redisbudget.Config{KeyPrefix: cfg.Limiter.KeyPrefix + "budget:", ReserveClient: g.reserve})
		if err != nil {
			return nil, err
		}
		store = rs
		// Load the scripts and establish the reservation client's pool in
		// the background, so the first reservations are one EVALSHA each.
		go func() {
			if err := rs.Warm(ctx); err != nil {
				log.Warn("budget store not reachable yet", "err", err)
			}
		}()
	}
	l, err := budget.New(budget.Config{
		Mode:                b.Mode,
		Lease:               b.Lease.D(),
		DefaultOutputTokens: b.DefaultOutputTokens,
		Timeout:             b.Timeout.D(),
		DialTimeout:         lc.DialTimeout,
		FailurePolicy:       b.FailurePolicy,
		Log:                 log,
	}, tenants, store)
	if err != nil {
		return nil, fmt.Errorf("budget: %w", err)
	}
	return l, nil
}
