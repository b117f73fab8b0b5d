package ratelimit

import (
	"net/url"
	"time"

	"github.com/llmgw/gateway/shared/problem"
)

// WithDefaults returns c with its zero values replaced by their defaults.
func (c Config) WithDefaults() Config {
	if c.Store == "" {
		c.Store = StoreMemory
	}
	if c.KeyPrefix == "" {
		c.KeyPrefix = DefaultKeyPrefix
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	if c.FailurePolicy == "" {
		c.FailurePolicy = PolicyOpen
	}
	return c // the breaker's zero bounds are store.NewBreaker's defaults
}

// problems returns every problem with cfg and limits: Check's, and a
// Redis store's missing URL (a secret the config check never sees).
func problems(cfg Config, limits []TenantLimit) []error {
	var p []string
	cfg.Check(problem.Into(&p, ""), limits, problem.Into(&p, "limits"))
	if cfg.WithDefaults().Store == StoreRedis && cfg.RedisURL == "" && cfg.Client == nil {
		p = append(p, "redis_url: required with store redis")
	}
	return problem.Errors(p)
}

// Check reports every problem with c (defaults applied) and with the
// tenants' limits, by the gateway config's field names: c's under at, the
// limits' under limitsAt (a list: limitsAt[i].requests). New refuses what
// it reports; the gateway's config check calls it with the limiter
// section and the tenant table.
func (c Config) Check(at problem.At, limits []TenantLimit, limitsAt problem.At) {
	c = c.WithDefaults()
	if c.Store != StoreMemory && c.Store != StoreRedis {
		at.Add("store", "must be %s or %s, not %q", StoreMemory, StoreRedis, c.Store)
	}
	if c.FailurePolicy != PolicyOpen && c.FailurePolicy != PolicyClosed {
		at.Add("failure_policy", "must be %s or %s, not %q", PolicyOpen, PolicyClosed, c.FailurePolicy)
	}
	problem.NotNegative(at, "timeout", c.Timeout)
	problem.NotNegative(at, "dial_timeout", c.DialTimeout)
	problem.NotNegative(at, "breaker_threshold", c.BreakerThreshold)
	problem.NotNegative(at, "breaker_cooldown", c.BreakerCooldown)
	seen := make(map[string]bool, len(limits))
	for i, tl := range limits {
		lat := limitsAt.Item("", i)
		if tl.Tenant == "" {
			lat.Add("id", "required")
		} else if seen[tl.Tenant] {
			lat.Add("id", "duplicate tenant %q", tl.Tenant)
		}
		seen[tl.Tenant] = true
		if tl.Requests == 0 {
			lat.Add("requests", "must be at least 1")
		}
		if n := tl.Counts; tl.Interval > 0 && n > 0 && float64(n)*float64(n) > float64(tl.Interval.Nanoseconds()) {
			// go-limiter refills interval/tokens per tick; beyond this
			// bound a tick no longer refills the whole bucket (the
			// default stays within it; the config checks requests).
			lat.Add("count_requests", "%d per %s is more than the token bucket can refill; use a shorter interval", n, tl.Interval)
		}
		if tl.Interval <= 0 {
			lat.Add("interval", "must be positive, got %s", tl.Interval)
		} else if c.Store == StoreRedis && tl.Interval%time.Microsecond != 0 {
			lat.Add("interval", "must be a whole number of microseconds with %s redis (Redis TIME resolution), not %s", at.Name("store"), tl.Interval)
		}
	}
}

// redactURL drops the userinfo (which may hold a password) from a Redis URL
// for logging. An unparsable URL is not echoed at all.
func redactURL(raw string) string {
	if raw == "" {
		return ""
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable)"
	}
	if u.User != nil {
		u.User = url.User("redacted")
	}
	return u.String()
}
