package main

import (
	"fmt"
	"log/slog"

	"github.com/llmgw/gateway/shared/assemble"
	"github.com/llmgw/gateway/shared/budget"
	"github.com/llmgw/gateway/shared/config"
	"github.com/llmgw/gateway/shared/server"
)

// budgets builds the tenants' token budgets, or nil when no tenant has
// one (then no request does any budget work). Their store is the one
// stores.Open handed them: with Redis, keys under key_prefix + "budget:"
// so every replica draws on one budget, reservations on a client of their
// own (answers bounded by budget.timeout, new connections by
// store.dial_timeout) and settles on the shared-state client; else this
// process's memory. Either way the ledger puts the limiter's kind of
// breaker in front of Redis.
func budgets(cfg *config.Config, store budget.Store, log *slog.Logger) (server.Budgets, error) {
	bc, tenants, err := assemble.Budgets(cfg)
	if err != nil || len(tenants) == 0 {
		return nil, err
	}
	bc.Log = log
	l, err := budget.New(bc, tenants, store)
	if err != nil {
		return nil, fmt.Errorf("budget: %w", err)
	}
	return l, nil
}
