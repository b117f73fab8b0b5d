package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/llmgw/gateway/shared/assemble"
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
	tenants, err := assemble.TenantBudgets(cfg.Tenants)
	if err != nil || len(tenants) == 0 {
		return nil, err
	}
	bc := assemble.Budget(cfg.Budget).WithDefaults()
	bc.DialTimeout, bc.Log = lc.DialTimeout, log
	var store budget.Store // nil: memory
	if g.state != nil {
		if g.reserve, err = redisClient(lc, bc.Timeout); err != nil {
			return nil, err
		}
		rs, err := redisbudget.New(g.state, redisbudget.Config{KeyPrefix: lc.KeyPrefix + "budget:", ReserveClient: g.reserve})
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
	l, err := budget.New(bc, tenants, store)
	if err != nil {
		return nil, fmt.Errorf("budget: %w", err)
	}
	return l, nil
}
