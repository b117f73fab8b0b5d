package budget

import (
	"time"

	"github.com/llmgw/gateway/shared/problem"
	"github.com/llmgw/gateway/shared/prompt"
)

// WithDefaults returns c with its zero values replaced by their defaults.
func (c Config) WithDefaults() Config {
	if c.Mode == "" {
		c.Mode = ModeStrict
	}
	if c.FailurePolicy == "" {
		c.FailurePolicy = PolicyOpen
	}
	for _, d := range c.durations() {
		if *d.d == 0 {
			*d.d = d.def
		}
	}
	if c.DefaultOutputTokens == 0 {
		c.DefaultOutputTokens = DefaultOutputTokens
	}
	if c.CountAbove == 0 {
		c.CountAbove = DefaultCountAbove
	}
	if c.MinOutputTokens == 0 {
		c.MinOutputTokens = 1
	}
	if c.MaxPending <= 0 {
		c.MaxPending = DefaultMaxPending
	}
	return c
}

// durations lists c's durations by their config field names, with their
// defaults.
func (c *Config) durations() []struct {
	field string
	d     *time.Duration
	def   time.Duration
} {
	return []struct {
		field string
		d     *time.Duration
		def   time.Duration
	}{
		{"lease", &c.Lease, DefaultLease},
		{"timeout", &c.Timeout, DefaultTimeout},
		{"dial_timeout", &c.DialTimeout, DefaultDialTimeout},
		{"settle_timeout", &c.SettleTimeout, DefaultSettleTimeout},
	}
}

// Check reports every problem with c (defaults applied) under at, by the
// gateway config's field names. New refuses what it reports; the gateway's
// config check calls it with the budget section's path.
func (c Config) Check(at problem.At) {
	c = c.WithDefaults()
	if c.Mode != ModeStrict && c.Mode != ModeEstimate {
		at.Add("mode", "must be %s or %s, not %q", ModeStrict, ModeEstimate, c.Mode)
	}
	if c.FailurePolicy != PolicyOpen && c.FailurePolicy != PolicyClosed {
		at.Add("failure_policy", "must be %s or %s, not %q", PolicyOpen, PolicyClosed, c.FailurePolicy)
	}
	for _, d := range c.durations() {
		problem.NotNegative(at, d.field, *d.d)
	}
	if c.Lease > 0 && c.Lease%time.Microsecond != 0 {
		at.Add("lease", "must be a whole number of microseconds (Redis TIME resolution), not %s", c.Lease)
	}
	checkTokens(at, "default_output_tokens", c.DefaultOutputTokens)
	checkTokens(at, "min_output_tokens", c.MinOutputTokens)
	problem.NotNegative(at, "count_above", c.CountAbove)
	// The breaker takes its own defaults for zero values.
	problem.NotNegative(at, "breaker_threshold", c.BreakerThreshold)
	problem.NotNegative(at, "breaker_cooldown", c.BreakerCooldown)
}

// check is every problem with c and the tenants' budgets, as New's error.
func (c Config) check(tenants []TenantBudget) error {
	var p []string
	c.Check(problem.Into(&p, ""))
	seen := make(map[string]bool, len(tenants))
	for i, tb := range tenants {
		at := problem.Into(&p, "tenants").Item("", i)
		if tb.Tenant == "" {
			at.Add("id", "required")
		} else if seen[tb.Tenant] {
			at.Add("id", "duplicate tenant %q", tb.Tenant)
		}
		seen[tb.Tenant] = true
		tb.Limits.Check(at)
	}
	return problem.Err("budget", p)
}

// Settings is the config file's budget section: the ledger's settings
// (Config) and the prompt bound's charges per part (prompt.Scanner:
// image_tokens, media_tokens), each defaulted by the part that takes it
// (New, prompt.Scanner.Bound). The tenants' limits are their rows'
// (tenants[].tokens_per_minute, token_quota, max_output_tokens); their
// store is the shared one, memory or Redis.
type Settings struct {
	Config         `yaml:",inline"`
	prompt.Scanner `yaml:",inline"`
}

// Check reports every problem with s under at (the budget section): the
// ledger's (Config.Check) and the per-part charges', each of which must
// fit a store's count.
func (s Settings) Check(at problem.At) {
	s.Config.Check(at)
	checkTokens(at, "image_tokens", s.ImageTokens)
	checkTokens(at, "media_tokens", s.MediaTokens)
}

// Check reports every problem with one tenant's limits under at (the
// tenant's row, whose fields are tokens_per_minute, token_quota,
// quota_period and max_output_tokens).
func (l Limits) Check(at problem.At) {
	checkTokens(at, "tokens_per_minute", l.TokensPerMinute)
	checkTokens(at, "token_quota", l.TokenQuota)
	checkTokens(at, "max_output_tokens", l.MaxOutputTokens)
	checkTokens(at, "spend_per_minute", l.SpendPerMinute)
	checkTokens(at, "spend_per_day", l.SpendPerDay)
	checkTokens(at, "spend_per_month", l.SpendPerMonth)
	switch {
	case l.TokenQuota > 0 && l.QuotaPeriod == PeriodNone:
		at.Add("quota_period", "required with token_quota: day or month")
	case l.TokenQuota == 0 && l.QuotaPeriod != PeriodNone:
		at.Add("quota_period", "only used with token_quota")
	}
}

// checkTokens reports a token count below zero or above MaxTokens.
func checkTokens(at problem.At, field string, n int64) {
	problem.NotNegative(at, field, n)
	if n > MaxTokens {
		at.Add(field, "must be at most %d (the largest count the budget store holds exactly)", int64(MaxTokens))
	}
}
