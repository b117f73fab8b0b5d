package assemble

import (
	"time"

	"github.com/llmgw/gateway/shared/auth"
	"github.com/llmgw/gateway/shared/config"
	"github.com/llmgw/gateway/shared/keys"
	"github.com/llmgw/gateway/shared/problem"
)

// checkKeys runs the keys' own rules, then the one between sections: a
// config key names a tenant of the table and only models that tenant
// may call (a key narrows, never widens).
func checkKeys(c *config.Config, at problem.At, getenv func(string) string) {
	c.APIKeys.Check(at, getenv, time.Now())
	tenants := make(map[string]*config.Tenant, len(c.Tenants))
	for i := range c.Tenants {
		tenants[auth.CanonicalTenant(c.Tenants[i].ID)] = &c.Tenants[i]
	}
	for i, r := range c.APIKeys.Keys {
		if r.Tenant == "" {
			continue // reported by Check
		}
		t, ok := tenants[auth.CanonicalTenant(r.Tenant)]
		if !ok {
			at.Item("keys", i).Add("tenant", "%q is not a tenant of tenants[]", r.Tenant)
			continue
		}
		for _, m := range r.Models {
			if !tenantAllows(c, t, m) {
				at.Item("keys", i).Add("models", "%q is not one of tenant %q's models: a key narrows its tenant's models, never widens them", m, r.Tenant)
			}
		}
	}
}

// tenantAllows reports whether t lists model, or the model an alias
// names.
func tenantAllows(c *config.Config, t *config.Tenant, model string) bool {
	for _, m := range t.Models {
		if m == model || c.Aliases[model] == m {
			return true
		}
	}
	return false
}

// Keys is the gateway keys' settings, defaults applied.
func Keys(c *config.Config) keys.Settings { return c.APIKeys.WithDefaults() }
