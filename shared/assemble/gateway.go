package assemble

import (
	"github.com/llmgw/gateway/shared/auth"
	"github.com/llmgw/gateway/shared/budget"
	"github.com/llmgw/gateway/shared/config"
	"github.com/llmgw/gateway/shared/lambdaurl"
	"github.com/llmgw/gateway/shared/problem"
	"github.com/llmgw/gateway/shared/ratelimit"
	"github.com/llmgw/gateway/shared/route"
	"github.com/llmgw/gateway/shared/server"
	"github.com/llmgw/gateway/shared/server/listener"
	"github.com/llmgw/gateway/shared/telemetry"
	"github.com/llmgw/gateway/shared/tenant"
	"github.com/llmgw/gateway/shared/upstream"
	"github.com/llmgw/gateway/shared/upstream/entra"
)

// This file is what the binary (functions/gateway) takes of the config:
// each function reads one part's settings from the whole file, so that
// the binary wires parts and reads no config field itself.

// Host is the binary's own settings: the HTTP host's and the Lambda
// host's, and its log level.
type Host struct {
	// Listen is the address to serve HTTP on (config.Config.ListenAddr);
	// "" when neither the file nor the environment names one: the host's
	// default.
	Listen string
	// HostSettings is the HTTP host's timeouts and log level.
	server.HostSettings
	MaxHeaderBytes int
	// Conns is the listener's connection bounds (Log left to the caller).
	Conns listener.Options
	// Lambda is the Lambda host's margin before an invocation's deadline.
	Lambda lambdaurl.Settings
	// Deprecated is the deprecated keys the file wrote, a line each, for
	// the log at start.
	Deprecated []string
}

// HostOf is c's host settings; getenv supplies $PORT and
// $CONTAINER_APP_PORT when c names no listen address.
func HostOf(c *config.Config, getenv func(string) string) Host {
	return Host{
		Listen:         c.ListenAddr(getenv),
		HostSettings:   c.Server.Host,
		MaxHeaderBytes: c.Server.Limits.MaxHeaderBytes,
		Conns:          c.Server.Listener(),
		Lambda:         c.Lambda.Settings,
		Deprecated:     c.Deprecated,
	}
}

// Server is what the file decides of the request handler's Deps; the
// binary adds the parts it builds (verifier, limiter, router and targets,
// backend client, log, stores, budgets, telemetry).
func Server(c *config.Config) server.Deps {
	return server.Deps{
		Tenants:       tenant.NewTable(Tenants(c.Tenants)),
		Limits:        c.Server.Limits,
		Dispatch:      c.Upstream.Dispatch,
		Streams:       Streams(c),
		BudgetScanner: c.Budget.Scanner,
		Prices:        Catalogue(c, problem.At{}),
		Lambda:        c.Lambda.LambdaSettings,
	}
}

// Verifier is the JWT verifier's configuration: the auth section as
// written, which the verifier defaults (auth.New), reading the
// operators' roles (api_keys.role_claim) when the admin route is on.
func Verifier(c *config.Config) auth.Config {
	a := c.Auth
	if ks := Keys(c); ks.AdminRole != "" {
		a.RoleClaim = ks.RoleClaim
	}
	return a
}

// RequestLimiter is the request limiter's configuration (its shared
// store left to the caller: stores.Set.Limiter) and each tenant's
// bucket.
func RequestLimiter(c *config.Config) (ratelimit.Config, []ratelimit.TenantLimit) {
	return Limiter(c).WithDefaults(), TenantLimits(c.Tenants)
}

// Budgets is the token budgets' ledger configuration (its Log left to
// the caller) and the budget of each tenant that has one; no tenants when
// none has.
func Budgets(c *config.Config) (budget.Config, []budget.TenantBudget, error) {
	tenants, err := TenantBudgets(c.Tenants)
	bc := c.Budget.Config.WithDefaults()
	bc.DialTimeout = Stores(c).DialTimeout
	return bc, tenants, err
}

// Telemetry is the OTLP export's behaviour (whether it continues a
// caller's trace, its flushes' bound): the telemetry section as written,
// which the exporter defaults (otlp.New).
func Telemetry(c *config.Config) telemetry.Settings { return c.Telemetry }

// Routing is the router's pools, in the config's order, and options;
// shared, when not nil, carries backend-asked cooldowns between replicas.
func Routing(c *config.Config, shared route.Shared) ([]route.PoolSpec, route.Options) {
	specs := make([]route.PoolSpec, 0, len(c.Pools))
	for _, p := range c.Pools {
		ps := route.PoolSpec{Name: p.Name}
		for m := range p.Models {
			ps.Models = append(ps.Models, m)
		}
		for _, e := range p.Endpoints {
			ps.Endpoints = append(ps.Endpoints, route.EndpointSpec{Name: e.URL, Weight: e.Weight, Priority: e.Priority,
				Capacity: e.CapacityTPM, TenantShare: p.TenantShare})
		}
		specs = append(specs, ps)
	}
	// An ejection's base is default_cooldown
	// (dispatch.Settings.DefaultCooldown), its default too.
	eject := c.Upstream.Dispatch.WithDefaults().DefaultCooldown
	return specs, route.Options{Settings: c.Upstream.Route, EjectBase: eject, Shared: shared}
}

// Endpoint is one backend endpoint as the binary builds it.
type Endpoint struct {
	// Pool is its pool's name.
	Pool string
	// Spec is its target, without its credential and key.
	Spec upstream.TargetSpec
	// Entra, when not nil, is its Entra ID credential's configuration.
	Entra *entra.Config
	// APIKeyEnv names the env var holding its key ("" none).
	APIKeyEnv string
	// URL and CAFile: the endpoint's URL and its extra roots' PEM file
	// ("" the system's).
	URL, CAFile string
}

// Endpoints is every pool's endpoints, by pool in the config's order.
func Endpoints(c *config.Config) [][]Endpoint {
	out := make([][]Endpoint, len(c.Pools))
	for i, p := range c.Pools {
		for _, e := range p.Endpoints {
			ep := Endpoint{Pool: p.Name, Spec: Target(p, e), APIKeyEnv: e.APIKeyEnv, URL: e.URL, CAFile: e.CAFile}
			if e.Auth == "entra" {
				ec := e.Entra
				ep.Entra = &ec
			}
			out[i] = append(out[i], ep)
		}
	}
	return out
}

// Backends is the backend clients' connection settings.
type Backends struct {
	upstream.ClientSettings
	// PlainConns leaves the backend connections' reads and writes to
	// net rather than raw system calls (package rawconn). Default
	// false: raw.
	PlainConns bool
}

// BackendsOf is c's backend clients' connection settings.
func BackendsOf(c *config.Config) Backends {
	return Backends{ClientSettings: c.Upstream.ClientSettings, PlainConns: !c.Server.RawConns()}
}
