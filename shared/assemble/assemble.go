// Package assemble maps the gateway's config file onto the settings of the
// parts it wires, and checks the file whole: the file's own rules (package
// config) and each part's rules (auth, stores, ratelimit, budget, entra,
// server, dispatch, route, upstream) under the field paths of the sections that hold that
// part's settings, every problem at once. The binary, its -check and the tests of
// the shipped configs all load through Load or Parse, so a config one
// accepts the others accept; the parts' constructors run the same rules.
package assemble

import (
	"fmt"

	"github.com/llmgw/gateway/shared/auth"
	"github.com/llmgw/gateway/shared/budget"
	"github.com/llmgw/gateway/shared/config"
	"github.com/llmgw/gateway/shared/problem"
	"github.com/llmgw/gateway/shared/ratelimit"
	"github.com/llmgw/gateway/shared/server"
	"github.com/llmgw/gateway/shared/stores"
	"github.com/llmgw/gateway/shared/tenant"
	"github.com/llmgw/gateway/shared/upstream"
)

// Load reads the config file at path with overlay merged over it
// (config.Read) and checks it (Parse): a bad config stops the binary
// before it listens, with every problem named by field path.
func Load(path, overlay string, getenv func(string) string) (*config.Config, error) {
	b, err := config.Read(path, overlay)
	if err != nil {
		return nil, err
	}
	return Parse(b, getenv)
}

// Parse decodes b and returns the config, or config.Problems listing every
// problem at once: the document's shape, the file's own rules and each
// part's. getenv resolves the secrets' env vars only to check that they
// are set.
func Parse(b []byte, getenv func(string) string) (*config.Config, error) {
	c, p := config.Decode(b)
	if c == nil {
		return nil, p
	}
	for i := range c.Tenants {
		// An Entra directory ID matches the token's tid in any case.
		c.Tenants[i].ID = auth.CanonicalTenant(c.Tenants[i].ID)
	}
	p = append(p, c.Decoded(problems(c, getenv))...)
	if len(p) > 0 {
		return nil, p
	}
	c.ResolveAliases()
	return c, nil
}

// problems is every problem with c by the file's rules and the parts',
// each rule in one place: the file's generic rules skip the settings a
// part checks (config's check:"part" tag).
func problems(c *config.Config, getenv func(string) string) config.Problems {
	return append(c.Validate(getenv), c.WrittenAs(check(c, getenv))...)
}

// into reports into p under path.
func into(p *config.Problems, path string) problem.At {
	return problem.Into((*[]string)(p), path)
}

// check runs every part's rules on its settings in c, under their field
// paths.
func check(c *config.Config, getenv func(string) string) config.Problems {
	var p config.Problems
	c.Server.Check(into(&p, ""))
	c.Upstream.Dispatch.Check(into(&p, "upstream"))
	c.Upstream.ClientSettings.Check(into(&p, "upstream"))
	c.Upstream.Route.Check(into(&p, "upstream"))
	c.Upstream.Route.CheckBound(into(&p, "upstream"), "default_cooldown", c.Upstream.Dispatch.WithDefaults().DefaultCooldown)
	c.Upstream.Streams.Check(into(&p, "upstream"))
	c.Lambda.Settings.Check(into(&p, "lambda"))
	c.Lambda.LambdaSettings.Check(into(&p, "lambda"))
	c.Telemetry.Check(into(&p, "telemetry"))
	c.Auth.Check(into(&p, "auth"))
	c.Store.Check(into(&p, "store"), getenv)
	checkKeys(c, into(&p, "api_keys"), getenv)
	Limiter(c).Check(into(&p, "limiter"), TenantLimits(c.Tenants), into(&p, "tenants"))
	ratelimit.CheckRefill(TenantLimits(c.Tenants), into(&p, "tenants"))
	c.Budget.Check(into(&p, "budget"))
	cat := Catalogue(c, into(&p, "prices"))
	for i, t := range c.Tenants {
		f := fmt.Sprintf("tenants[%d]", i)
		lim, err := tenantLimits(t)
		if err != nil {
			into(&p, f).Add("quota_period", "must be day or month, not %q", t.QuotaPeriod)
			// Reported once: the rule between token_quota and
			// quota_period sees a period given where a quota needs one.
			lim.QuotaPeriod = budget.PeriodNone
			if t.TokenQuota > 0 {
				lim.QuotaPeriod = budget.PeriodDay
			}
		}
		lim.SpendPerMinute, lim.SpendPerDay, lim.SpendPerMonth = spendLimits(t, into(&p, f))
		lim.Check(into(&p, f))
		levelLimits(t, into(&p, f))
		if (len(t.Projects) > 0 || t.ProjectDefault != nil) && c.Auth.ProjectClaim == "" {
			into(&p, f).Add("projects", "project limits need auth.project_claim: the claim of the verified token that names the caller's project")
		}
		CheckFeatures(into(&p, f), t)
		upstream.CheckUnknownFields(into(&p, f), t.UnknownFields)
		checkSpend(into(&p, f), t, cat)
	}
	for i, pl := range c.Pools {
		at := into(&p, "pools").Item("", i)
		pl.Streams.Check(at)
		upstream.CheckPool(at, pl.Kind, pl.ForwardHeaders, pl.Fields, pl.UnknownFields)
		if pl.TenantShare < 0 || pl.TenantShare > 1 {
			at.Add("tenant_share", "must be above 0 and at most 1, not %v", pl.TenantShare)
		}
		for j, e := range pl.Endpoints {
			eat := at.Item("endpoints", j)
			Target(pl, e).Check(eat, e.Auth == "entra")
			if e.Auth == "entra" {
				e.Entra.Check(eat.In("entra"), getenv)
			}
		}
	}
	return p
}

// Tenants is the tenant table's rows: a concurrency cap left out (by the
// row and the top level) is zero, the table's default
// (tenant.DefaultMaxConcurrent).
func Tenants(ts []config.Tenant) []tenant.Row {
	rows := make([]tenant.Row, 0, len(ts))
	for _, t := range ts {
		rows = append(rows, tenant.Row{ID: t.ID, Name: t.Name, Models: t.Models,
			MaxConcurrent: t.MaxConcurrentRequests,
			Grants:        Grants(t.Features), Betas: t.AnthropicBeta, RefuseUnknown: t.UnknownFields == "refuse",
			Tiers: ServiceTiers(t.ServiceTiers, problem.At{})})
	}
	return rows
}

// Streams is each pool's keepalive and first-token policy, by pool name,
// upstream's where the pool writes none (config's defaults): a setting
// neither names is nil, the server's default.
func Streams(c *config.Config) map[string]server.StreamPolicy {
	m := make(map[string]server.StreamPolicy, len(c.Pools))
	for _, p := range c.Pools {
		m[p.Name] = p.Streams
	}
	return m
}

// Limiter is the request limiter's configuration without its shared
// store, which the binary opens at start (stores.Open): the limiter
// section as written, its store and dial budget the store section's.
func Limiter(c *config.Config) ratelimit.Config {
	lc := c.Limiter.Config
	lc.Store, lc.DialTimeout = c.Store.Backend, c.Store.DialTimeout
	return lc
}

// Stores is the shared store's configuration without its secrets, which
// the binary resolves from the environment at start
// (stores.Config.WithSecrets): the store section as written, with each
// part's answer timeout from its own section (limiter.timeout for takes
// and cooldown reads, budget.timeout for reservations), and the budgets'
// store asked for when a tenant has a budget.
func Stores(c *config.Config) stores.Config {
	sc := c.Store
	sc.TakeTimeout, sc.ReserveTimeout = c.Limiter.Timeout, c.Budget.Timeout
	for _, t := range c.Tenants {
		sc.Budgets = sc.Budgets || t.HasBudget()
	}
	return sc.WithDefaults()
}

// TenantLimits is each tenant's request bucket, in the table's order.
func TenantLimits(ts []config.Tenant) []ratelimit.TenantLimit {
	limits := make([]ratelimit.TenantLimit, 0, len(ts))
	for _, t := range ts {
		limits = append(limits, ratelimit.TenantLimit{Tenant: t.ID, Requests: t.Requests, Interval: t.Interval.D(), Counts: t.CountRequests})
	}
	return limits
}

// Target is an endpoint's backend target, defaults applied, without its
// credential and key, which the binary resolves at start.
func Target(p config.Pool, e config.Endpoint) upstream.TargetSpec {
	return upstream.TargetSpec{
		Kind: p.Kind, URL: e.URL, APIVersion: e.APIVersion, AzureAPI: e.AzureAPI, Models: p.Models,
		Organization: e.Organization, Project: e.Project, Forward: p.ForwardHeaders,
		Fields: p.Fields, RefuseUnknown: p.UnknownFields == "refuse",
	}.WithDefaults()
}

// TenantBudgets is the budget of each tenant that has one.
func TenantBudgets(ts []config.Tenant) ([]budget.TenantBudget, error) {
	var out []budget.TenantBudget
	for _, t := range ts {
		if !t.HasBudget() {
			continue
		}
		lim, err := tenantLimits(t)
		if err != nil {
			return nil, err
		}
		out = append(out, budget.TenantBudget{Tenant: t.ID, Limits: lim})
	}
	return out, nil
}

// tenantLimits is t's token budget; an error for a quota_period that is
// not one.
func tenantLimits(t config.Tenant) (budget.Limits, error) {
	lim := budget.Limits{TokensPerMinute: t.TokensPerMinute, TokenQuota: t.TokenQuota, MaxOutputTokens: t.MaxOutputTokens}
	lim.SpendPerMinute, lim.SpendPerDay, lim.SpendPerMonth = spendLimits(t, problem.At{})
	lim.Levels = levelLimits(t, problem.At{})
	if t.QuotaPeriod == "" {
		return lim, nil
	}
	p, err := budget.ParsePeriod(t.QuotaPeriod)
	lim.QuotaPeriod = p
	return lim, err
}
