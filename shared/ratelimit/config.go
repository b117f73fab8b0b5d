package ratelimit

import (
	"time"

	"github.com/llmgw/gateway/shared/problem"
	"github.com/llmgw/gateway/shared/store"
)

// WithDefaults returns c with its zero values replaced by their defaults.
func (c Config) WithDefaults() Config {
	if c.Store == "" {
		c.Store = StoreMemory
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

// problems returns every problem with cfg and limits: Check's, the
// shared store's settings (store.CheckShared: the gateway's config check
// runs that once, for the store section) and a Redis store without its
// shared store, whose URL is a secret the config check never sees.
func problems(cfg Config, limits []TenantLimit) []error {
	var p []string
	at := problem.Into(&p, "")
	cfg.Check(at, limits, problem.Into(&p, "limits"))
	d := cfg.WithDefaults()
	store.CheckShared(at, "store", d.Store, d.DialTimeout)
	if d.Store == StoreRedis && cfg.Shared == nil {
		p = append(p, "redis_url: required with store redis")
	}
	return problem.Errors(p)
}

// Check reports every problem with the limiter's own settings in c
// (defaults applied) and with the tenants' limits, by the gateway config's
// field names: c's under at, the limits' under limitsAt (a list:
// limitsAt[i].requests). The settings c takes from the shared store
// (Store, DialTimeout) are the store section's,
// checked there (stores.Config.Check). New refuses what it reports and
// those too; the gateway's config check calls it with the limiter
// section and the tenant table.
func (c Config) Check(at problem.At, limits []TenantLimit, limitsAt problem.At) {
	c = c.WithDefaults()
	if c.FailurePolicy != PolicyOpen && c.FailurePolicy != PolicyClosed {
		at.Add("failure_policy", "must be %s or %s, not %q", PolicyOpen, PolicyClosed, c.FailurePolicy)
	}
	problem.NotNegative(at, "timeout", c.Timeout)
	problem.NotNegative(at, "breaker_threshold", c.BreakerThreshold)
	problem.NotNegative(at, "breaker_cooldown", c.BreakerCooldown)
	seen := make(map[string]bool, len(limits))
	for i, tl := range limits {
		tl = tl.WithDefaults()
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
		if n := tl.Counts; n > 0 && !refills(n, tl.Interval) {
			lat.Add("count_requests", "%d per %s is more than the token bucket can refill; use a shorter interval", n, tl.Interval)
		}
		if tl.Interval < 0 {
			problem.NotNegative(lat, "interval", tl.Interval)
		} else if c.Store == StoreRedis && tl.Interval%time.Microsecond != 0 {
			lat.Add("interval", "must be a whole number of microseconds with a Redis store (Redis TIME resolution), not %s", tl.Interval)
		}
	}
}

// CheckRefill reports, under limitsAt, each limit (defaults applied)
// whose requests a tick cannot refill whole: a table as an operator
// writes it should refill as written. The gateway's config check runs it
// beside Check; New does not, so that a program may size a bucket past
// it on purpose, as no limit (the tests' 1<<40 an hour).
func CheckRefill(limits []TenantLimit, limitsAt problem.At) {
	for i, tl := range limits {
		if tl = tl.WithDefaults(); tl.Requests > 0 && !refills(tl.Requests, tl.Interval) {
			limitsAt.Item("", i).Add("requests", "%d per %s is more than the token bucket can refill; use a shorter interval", tl.Requests, tl.Interval)
		}
	}
}

// refills reports whether a bucket of n tokens per interval refills
// whole: go-limiter refills interval/n per tick, so beyond sqrt(interval
// in ns) tokens a tick no longer refills the whole bucket (the count
// bucket's default stays within it). A negative interval is reported
// apart.
func refills(n uint64, interval time.Duration) bool {
	return interval < 0 || float64(n)*float64(n) <= float64(interval.Nanoseconds())
}
