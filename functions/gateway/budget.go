package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/redis/go-redis/v9"

	"github.com/llmgw/gateway/shared/budget"
	"github.com/llmgw/gateway/shared/budget/redisbudget"
	"github.com/llmgw/gateway/shared/config"
	"github.com/llmgw/gateway/shared/server"
)

// budgets builds the tenants' token budgets, or nil when no tenant has
// one (then no request does any budget work). Their store is the
// limiter's: with Redis, the shared-state client and keys under
// key_prefix + "budget:", so every replica draws on one budget; else this
// process's memory.
func budgets(ctx context.Context, cfg *config.Config, state *redis.Client, log *slog.Logger) (server.Budgets, error) {
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
	var store budget.Store // nil: memory
	if state != nil {
		rs, err := redisbudget.New(state, redisbudget.Config{KeyPrefix: cfg.Limiter.KeyPrefix + "budget:"})
		if err != nil {
			return nil, err
		}
		store = rs
		// Load the scripts (and dial) in the background, so the first
		// reservation is one EVALSHA inside its timeout.
		go func() {
			if err := rs.Warm(ctx); err != nil {
				log.Warn("budget store not reachable yet", "err", err)
			}
		}()
	}
	b := cfg.Budget
	l, err := budget.New(budget.Config{
		Mode:                b.Mode,
		Lease:               b.Lease.D(),
		DefaultOutputTokens: b.DefaultOutputTokens,
		Timeout:             b.Timeout.D(),
		FailurePolicy:       b.FailurePolicy,
	}, tenants, store)
	if err != nil {
		return nil, fmt.Errorf("budget: %w", err)
	}
	return l, nil
}
