package assemble

import (
	"github.com/llmgw/gateway/shared/config"
	"github.com/llmgw/gateway/shared/price"
	"github.com/llmgw/gateway/shared/problem"
	"github.com/llmgw/gateway/shared/request"
)

// Spend limits (issue 35): the prices section is the catalogue, each
// tenant's spend_per_* its limits in micro-units and service_tiers its
// tiers. The rules between them: a tenant with a spend limit needs every
// model it may use priced, at every tier it may use.

// Catalogue is the price catalogue of c, its aliases priced as their
// targets; nil when c prices nothing. Problems go to at (the prices
// section); the wiring calls it on a checked config and passes a zero At.
func Catalogue(c *config.Config, at problem.At) *price.Catalogue {
	cat := price.New(priceSpec(c.Prices), request.FeatureNames(), at)
	for alias, target := range c.Aliases {
		cat.Alias(alias, target)
	}
	return cat
}

func priceSpec(p config.Prices) price.Spec {
	s := price.Spec{Currency: p.Currency, Version: p.Version}
	for _, m := range p.Models {
		ms := price.ModelSpec{Model: m.Model, RateSpec: rateSpec(m.Rates)}
		for _, t := range m.Tiers {
			ms.Tiers = append(ms.Tiers, price.TierSpec{Name: t.Name, Multiplier: t.Multiplier, RateSpec: rateSpec(t.Rates)})
		}
		if lc := m.LongContext; lc != nil {
			ms.LongContext = &price.LongSpec{AboveInputTokens: lc.AboveInputTokens, InputMultiplier: lc.InputMultiplier, OutputMultiplier: lc.OutputMultiplier}
		}
		s.Models = append(s.Models, ms)
	}
	for _, f := range p.Features {
		s.Features = append(s.Features, price.FeatureSpec{Name: f.Name, PerUse: f.PerUse})
	}
	return s
}

func rateSpec(r config.Rates) price.RateSpec {
	return price.RateSpec{Input: r.Input, CachedInput: r.CachedInput, CacheWrite: r.CacheWrite, CacheWrite1h: r.CacheWrite1h, Output: r.Output}
}

// ServiceTiers is a tenant's service_tiers as a set (empty: the standard
// tier alone); each name that is not a tier is reported under at.
func ServiceTiers(names []string, at problem.At) price.Tiers {
	var s price.Tiers
	for i, n := range names {
		t, ok := price.ParseTier([]byte(n))
		if !ok || n == "default" {
			at.Item("service_tiers", i).Add("", "must be one of standard, flex, priority, scale, not %q", n)
			continue
		}
		s = s.With(t)
	}
	return s
}

// spendLimits reads a tenant's spend_per_* amounts in micro-units,
// reporting a bad amount under at (the tenant).
func spendLimits(t config.Tenant, at problem.At) (minute, day, month int64) {
	read := func(field, s string) int64 {
		if s == "" {
			return 0
		}
		n, err := price.ParseMicros(s)
		switch {
		case err != nil:
			at.Add(field, "%v", err)
		case n == 0:
			at.Add(field, "must be above 0 (leave it out for no limit)")
		}
		return n
	}
	return read("spend_per_minute", t.SpendPerMinute), read("spend_per_day", t.SpendPerDay), read("spend_per_month", t.SpendPerMonth)
}

// checkSpend reports the rules between a tenant's spend limits, its
// models and tiers and the catalogue cat, under at (the tenant).
func checkSpend(at problem.At, t config.Tenant, cat *price.Catalogue) {
	tiers := ServiceTiers(t.ServiceTiers, at).OrStandard()
	if !t.Spends() {
		return
	}
	if cat.Empty() {
		at.Add("spend_per_month", "a spend limit needs prices: the prices section prices no model")
		return
	}
	for j, m := range t.Models {
		if _, ok := cat.Model(m); !ok {
			at.Item("models", j).Add("", "model %q has no price in prices.models: a tenant with a spend limit could not be billed for it", m)
			continue
		}
		cat.CheckTiers(at.In("service_tiers"), m, tiers)
	}
}
