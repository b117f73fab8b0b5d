package ratelimit

import (
	"errors"
	"fmt"
	"net/url"
)

// normalize fills in defaults and returns every problem with cfg.
func normalize(cfg Config) (Config, []error) {
	var errs []error
	switch cfg.Store {
	case "":
		cfg.Store = StoreMemory
	case StoreMemory, StoreRedis:
	default:
		errs = append(errs, fmt.Errorf("store %q: want %q or %q", cfg.Store, StoreMemory, StoreRedis))
	}
	if cfg.Store == StoreRedis && cfg.RedisURL == "" {
		errs = append(errs, errors.New("redis store needs a redis URL"))
	}
	if cfg.KeyPrefix == "" {
		cfg.KeyPrefix = DefaultKeyPrefix
	}
	switch {
	case cfg.Timeout == 0:
		cfg.Timeout = DefaultTimeout
	case cfg.Timeout < 0:
		errs = append(errs, fmt.Errorf("timeout %s: must not be negative", cfg.Timeout))
	}
	switch {
	case cfg.DialTimeout == 0:
		cfg.DialTimeout = DefaultDialTimeout
	case cfg.DialTimeout < 0:
		errs = append(errs, fmt.Errorf("dial timeout %s: must not be negative", cfg.DialTimeout))
	}
	switch cfg.FailurePolicy {
	case "":
		cfg.FailurePolicy = PolicyOpen
	case PolicyOpen, PolicyClosed:
	default:
		errs = append(errs, fmt.Errorf("failure policy %q: want %q or %q", cfg.FailurePolicy, PolicyOpen, PolicyClosed))
	}
	switch {
	case cfg.BreakerThreshold == 0:
		cfg.BreakerThreshold = DefaultBreakerThreshold
	case cfg.BreakerThreshold < 0:
		errs = append(errs, fmt.Errorf("breaker threshold %d: must not be negative", cfg.BreakerThreshold))
	}
	switch {
	case cfg.BreakerCooldown == 0:
		cfg.BreakerCooldown = DefaultBreakerCooldown
	case cfg.BreakerCooldown < 0:
		errs = append(errs, fmt.Errorf("breaker cooldown %s: must not be negative", cfg.BreakerCooldown))
	}
	return cfg, errs
}

// validateLimits returns every problem with the tenant limits.
func validateLimits(limits []TenantLimit) []error {
	var errs []error
	seen := make(map[string]bool, len(limits))
	for i, tl := range limits {
		if tl.Tenant == "" {
			errs = append(errs, fmt.Errorf("limit %d: empty tenant", i))
		} else if seen[tl.Tenant] {
			errs = append(errs, fmt.Errorf("limit %d: tenant %q listed twice", i, tl.Tenant))
		}
		seen[tl.Tenant] = true
		if tl.Requests == 0 {
			errs = append(errs, fmt.Errorf("limit %d (tenant %q): requests must be positive", i, tl.Tenant))
		}
		if tl.Interval <= 0 {
			errs = append(errs, fmt.Errorf("limit %d (tenant %q): interval must be positive", i, tl.Tenant))
		}
	}
	return errs
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
