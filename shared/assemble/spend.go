package assemble

import (
	"fmt"

	"github.com/llmgw/gateway/shared/budget"
	"github.com/llmgw/gateway/shared/config"
	"github.com/llmgw/gateway/shared/price"
	"github.com/llmgw/gateway/shared/problem"
	"github.com/llmgw/gateway/shared/request"
)

// Spend limits: the prices section is the catalogue, each
// tenant's spend_per_* its limits in micro-units and service_tiers its
// tiers. The rules between them: a tenant with a spend limit needs every
// model it may use priced, at every tier it may use.

// Catalogue is the price catalogue of c, its aliases priced as their
// targets; nil when c prices nothing. Problems go to at (the prices
// section); the wiring calls it on a checked config and passes a zero At.
func Catalogue(c *config.Config, at problem.At) *price.Catalogue {
	cat := price.New(c.Prices, request.FeatureNames(), at)
	for alias, target := range c.Aliases {
		cat.Alias(alias, target)
	}
	return cat
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
	return spendAmounts(t.SpendPerMinute, t.SpendPerDay, t.SpendPerMonth, at)
}

// levelLimits is a tenant's limits below it (nil without), every
// problem reported under at (the tenant): each level's limits by the
// tenant's rules, project names present and unique.
func levelLimits(t config.Tenant, at problem.At) *budget.LevelLimits {
	if !t.HasLevels() {
		return nil
	}
	ll := &budget.LevelLimits{Projects: make(map[string]budget.Limits, len(t.Projects))}
	for i, p := range t.Projects {
		pat := at.Item("projects", i)
		switch {
		case p.Name == "":
			pat.Add("name", "required")
		default:
			if _, dup := ll.Projects[p.Name]; dup {
				pat.Add("name", "duplicate project %q", p.Name)
			}
		}
		ll.Projects[p.Name] = levelOf(p.LevelLimits, pat)
	}
	if t.ProjectDefault != nil {
		ll.ProjectDefault = levelOf(*t.ProjectDefault, at.In("project_default"))
	}
	if t.UserDefault != nil {
		ll.UserDefault = levelOf(*t.UserDefault, at.In("user_default"))
	}
	return ll
}

// levelOf is one level's limits, its problems reported under at.
func levelOf(l config.LevelLimits, at problem.At) budget.Limits {
	lim := budget.Limits{TokensPerMinute: l.TokensPerMinute, TokenQuota: l.TokenQuota}
	lim.SpendPerMinute, lim.SpendPerDay, lim.SpendPerMonth = spendAmounts(l.SpendPerMinute, l.SpendPerDay, l.SpendPerMonth, at)
	if l.QuotaPeriod != "" {
		p, err := budget.ParsePeriod(l.QuotaPeriod)
		if err != nil {
			at.Add("quota_period", "must be day or month, not %q", l.QuotaPeriod)
		}
		lim.QuotaPeriod = p
	}
	lim.Check(at)
	if !lim.Enforced() {
		at.Add("", "limits nothing: set tokens_per_minute, token_quota or a spend_per_* (or leave the level out)")
	}
	return lim
}

// spendAmounts reads spend_per_* amounts in micro-units, reporting a bad
// amount under at.
func spendAmounts(minuteS, dayS, monthS string, at problem.At) (minute, day, month int64) {
	read := func(field, s string) int64 {
		if s == "" {
			return 0
		}
		n, err := price.ParseMicros(s)
		switch {
		case err != nil:
			at.Add(field, "%v", err)
			return 0 // reported once: no limit for the rules that follow
		case n == 0:
			at.Add(field, "must be above 0 (leave it out for no limit)")
		}
		return n
	}
	return read("spend_per_minute", minuteS), read("spend_per_day", dayS), read("spend_per_month", monthS)
}

// checkSpend reports the rules between a tenant's spend limits, its
// models and tiers and the catalogue cat, under at (the tenant). An
// amount that does not parse (or is 0) is reported by spendAmounts and
// is no limit here: one problem on its field.
func checkSpend(at problem.At, t config.Tenant, cat *price.Catalogue) {
	tiers := ServiceTiers(t.ServiceTiers, at).OrStandard()
	field := spendField(t)
	if field == "" {
		return
	}
	if cat.Empty() {
		at.Add(field, "a spend limit needs prices: the prices section prices no model")
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

// spendField is the field, under the tenant, of the first spend limit t
// sets that reads as an amount above 0 (the tenant's own, then its
// levels'), "" for none.
func spendField(t config.Tenant) string {
	first := func(path string, l config.LevelLimits) string {
		minute, day, month := spendAmounts(l.SpendPerMinute, l.SpendPerDay, l.SpendPerMonth, problem.At{})
		switch {
		case minute > 0:
			return path + "spend_per_minute"
		case day > 0:
			return path + "spend_per_day"
		case month > 0:
			return path + "spend_per_month"
		}
		return ""
	}
	if f := first("", config.LevelLimits{SpendPerMinute: t.SpendPerMinute, SpendPerDay: t.SpendPerDay, SpendPerMonth: t.SpendPerMonth}); f != "" {
		return f
	}
	for i, p := range t.Projects {
		if f := first(fmt.Sprintf("projects[%d].", i), p.LevelLimits); f != "" {
			return f
		}
	}
	if d := t.ProjectDefault; d != nil {
		if f := first("project_default.", *d); f != "" {
			return f
		}
	}
	if d := t.UserDefault; d != nil {
		return first("user_default.", *d)
	}
	return ""
}
