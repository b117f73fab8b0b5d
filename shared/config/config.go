// Package config owns the gateway's configuration schema: loading it from a
// YAML or JSON file, applying defaults, and validating it so that a bad config
// stops the binary before it listens, with every problem listed by field path.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"sort"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Config is the whole gateway configuration. Secrets are never inline: fields
// ending in _env name the environment variable that holds them.
type Config struct {
	// Listen is the address to serve HTTP on. Default "127.0.0.1:8080";
	// $PORT overrides the port (Azure Container Apps sets it).
	Listen string `yaml:"listen" json:"listen"`
	// MaxBodyBytes caps a request body. Default 1 MiB; larger → 413.
	MaxBodyBytes int64 `yaml:"max_body_bytes" json:"max_body_bytes"`
	// BodyReadTimeout bounds reading one request body. Default 10s; a
	// client slower than that gets 408.
	BodyReadTimeout Duration `yaml:"body_read_timeout" json:"body_read_timeout"`
	// ReadHeaderTimeout bounds reading a request's headers, from the
	// connection's first byte. Default 10s.
	ReadHeaderTimeout Duration `yaml:"read_header_timeout" json:"read_header_timeout"`
	// IdleTimeout closes a keep-alive connection with no request for this
	// long. Default 60s.
	IdleTimeout Duration `yaml:"idle_timeout" json:"idle_timeout"`
	// MaxHeaderBytes caps a request's header bytes (431 beyond). Default 32 KiB.
	MaxHeaderBytes int `yaml:"max_header_bytes" json:"max_header_bytes"`
	// ShutdownGrace is how long open streams may run after SIGTERM. Default 30s.
	ShutdownGrace Duration `yaml:"shutdown_grace" json:"shutdown_grace"`
	// LogLevel is debug, info (default), warn or error.
	LogLevel string `yaml:"log_level" json:"log_level"`

	Auth     Auth     `yaml:"auth" json:"auth"`
	Limiter  Limiter  `yaml:"limiter" json:"limiter"`
	Upstream Upstream `yaml:"upstream" json:"upstream"`
	Lambda   Lambda   `yaml:"lambda" json:"lambda"`
	Tenants  []Tenant `yaml:"tenants" json:"tenants"`
	Pools    []Pool   `yaml:"pools" json:"pools"`
}

// Auth configures JWT verification.
type Auth struct {
	Issuer             string   `yaml:"issuer" json:"issuer"`
	JWKSURL            string   `yaml:"jwks_url" json:"jwks_url"`
	Audiences          []string `yaml:"audiences" json:"audiences"`
	TenantClaim        string   `yaml:"tenant_claim" json:"tenant_claim"`
	Algorithms         []string `yaml:"algorithms" json:"algorithms"`
	Leeway             Duration `yaml:"leeway" json:"leeway"`
	MaxTokenBytes      int      `yaml:"max_token_bytes" json:"max_token_bytes"`
	JWKSRefreshMin     Duration `yaml:"jwks_refresh_min" json:"jwks_refresh_min"`
	JWKSRefreshMax     Duration `yaml:"jwks_refresh_max" json:"jwks_refresh_max"`
	UnknownKIDInterval Duration `yaml:"unknown_kid_interval" json:"unknown_kid_interval"`
}

// Limiter configures the per-tenant token buckets' store.
type Limiter struct {
	// Store is memory (default) or redis.
	Store string `yaml:"store" json:"store"`
	// RedisURLEnv names the env var holding a redis:// or rediss:// URL.
	RedisURLEnv string `yaml:"redis_url_env" json:"redis_url_env"`
	// RedisPasswordEnv optionally names the env var holding the password.
	RedisPasswordEnv string `yaml:"redis_password_env" json:"redis_password_env"`
	// RedisEntra, when set, authenticates to Azure Cache for Redis / Azure
	// Managed Redis with a Microsoft Entra ID token as the password (no key).
	RedisEntra *RedisEntra `yaml:"redis_entra" json:"redis_entra"`
	KeyPrefix  string      `yaml:"key_prefix" json:"key_prefix"`
	// Timeout bounds one take against the store. Default 50ms.
	Timeout Duration `yaml:"timeout" json:"timeout"`
	// FailurePolicy is open or closed: what happens when the store is down.
	FailurePolicy string `yaml:"failure_policy" json:"failure_policy"`
}

// RedisEntra is the keyless Redis login: the identity's object id as the
// username, its token (scope https://redis.azure.com/.default) as password.
type RedisEntra struct {
	Entra `yaml:",inline"`
	// Username is the identity's object (principal) id, as the Redis access
	// policy assignment names it.
	Username string `yaml:"username" json:"username"`
}

// Upstream tunes calls to backends.
type Upstream struct {
	// MaxAttempts bounds endpoints tried per request before the first byte. Default 3.
	MaxAttempts int `yaml:"max_attempts" json:"max_attempts"`
	// HeaderTimeout bounds the wait for a streaming backend's response
	// headers; past it the next endpoint is tried. Default 30s.
	HeaderTimeout Duration `yaml:"header_timeout" json:"header_timeout"`
	// ResponseTimeout bounds a non-streaming answer, which a backend sends
	// only when it is done; past it the client gets 504 and no other endpoint
	// is tried (the first may still be working, and paying). Default 10m.
	ResponseTimeout Duration `yaml:"response_timeout" json:"response_timeout"`
	// ConnectTimeout bounds a TCP/TLS connect. Default 3s.
	ConnectTimeout Duration `yaml:"connect_timeout" json:"connect_timeout"`
	// StreamIdleTimeout ends a backend stream that sends nothing for this
	// long (an SSE error event tells the client). Default 2m.
	StreamIdleTimeout Duration `yaml:"stream_idle_timeout" json:"stream_idle_timeout"`
	// DefaultCooldown is how long a failed endpoint sits out when the backend
	// gave no Retry-After. Default 5s.
	DefaultCooldown Duration `yaml:"default_cooldown" json:"default_cooldown"`
	// MaxIdleConnsPerHost sizes the keep-alive pool per backend. Default 1024.
	MaxIdleConnsPerHost int `yaml:"max_idle_conns_per_host" json:"max_idle_conns_per_host"`
}

// Lambda tunes the AWS Lambda host.
type Lambda struct {
	// DeadlineMargin is how long before the invocation deadline the stream is
	// ended with an error event. Default 2s.
	DeadlineMargin Duration `yaml:"deadline_margin" json:"deadline_margin"`
}

// Tenant is one row of the tenant table.
type Tenant struct {
	ID     string   `yaml:"id" json:"id"`
	Models []string `yaml:"models" json:"models"`
	// Requests per Interval in the tenant's token bucket.
	Requests uint64   `yaml:"requests" json:"requests"`
	Interval Duration `yaml:"interval" json:"interval"`
}

// Pool is a set of interchangeable endpoints of one wire format.
type Pool struct {
	Name string `yaml:"name" json:"name"`
	// Kind is openai, azure-openai or vllm.
	Kind string `yaml:"kind" json:"kind"`
	// Models maps the public model name to the backend's name for it (the
	// Azure deployment, or the vLLM served model name). Empty = same name.
	Models    map[string]string `yaml:"models" json:"models"`
	Endpoints []Endpoint        `yaml:"endpoints" json:"endpoints"`
}

// Endpoint is one backend URL in a pool.
type Endpoint struct {
	URL    string `yaml:"url" json:"url"`
	Weight int    `yaml:"weight" json:"weight"`
	// APIKeyEnv names the env var holding the backend key (openai: bearer,
	// azure-openai: api-key header). Empty = no key.
	APIKeyEnv string `yaml:"api_key_env" json:"api_key_env"`
	// APIVersion is the azure-openai api-version. Default 2024-10-21.
	APIVersion string `yaml:"api_version" json:"api_version"`
	// AzureAPI is deployments (default) or v1: the /openai/v1 surface.
	AzureAPI string `yaml:"azure_api" json:"azure_api"`
	// Auth is key (default) or entra (Microsoft Entra ID token, azure-openai).
	Auth  string `yaml:"auth" json:"auth"`
	Entra Entra  `yaml:"entra" json:"entra"`
	// Organization and Project are sent as OpenAI-Organization and
	// OpenAI-Project (openai kind): the account the gateway's key acts for
	// is the operator's choice, never the caller's.
	Organization string `yaml:"organization" json:"organization"`
	Project      string `yaml:"project" json:"project"`
	// CAFile is a PEM bundle of extra root CAs trusted for this endpoint
	// (a vLLM behind a private CA); the system roots stay trusted.
	CAFile string `yaml:"ca_file" json:"ca_file"`
}

// Entra selects the Entra ID credential explicitly: no probing chain.
type Entra struct {
	// Credential is managed-identity, workload-identity or azure-cli.
	Credential string `yaml:"credential" json:"credential"`
	// ClientID selects a user-assigned managed identity.
	ClientID string `yaml:"client_id" json:"client_id"`
	// Scope defaults to https://cognitiveservices.azure.com/.default.
	Scope string `yaml:"scope" json:"scope"`
	// Timeout bounds one token fetch. Default 10s.
	Timeout Duration `yaml:"timeout" json:"timeout"`
}

// Duration is a time.Duration written as "90ms", "5m".
type Duration time.Duration

// D returns the standard library duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// UnmarshalYAML accepts a Go duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	var s string
	if err := n.Decode(&s); err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("line %d: %q is not a duration like \"500ms\" or \"1m\"", n.Line, s)
	}
	*d = Duration(v)
	return nil
}

// Problems is every validation failure in a config, by field path.
type Problems []string

func (p Problems) Error() string {
	return "invalid config:\n  " + strings.Join(p, "\n  ")
}

// Load reads path (YAML or JSON), applies defaults and validates. getenv
// resolves the secrets' env vars only to check that they are set.
func Load(path string, getenv func(string) string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	return Parse(b, getenv)
}

// Parse decodes b strictly (unknown fields are errors), applies defaults and
// validates.
func Parse(b []byte, getenv func(string) string) (*Config, error) {
	var c Config
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
		return nil, Problems{"parse: " + err.Error()}
	}
	c.applyDefaults()
	if p := c.validate(getenv); len(p) > 0 {
		return nil, p
	}
	return &c, nil
}

func (c *Config) applyDefaults() {
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	defD := func(d *Duration, v time.Duration) {
		if *d == 0 {
			*d = Duration(v)
		}
	}
	def(&c.Listen, "127.0.0.1:8080")
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = 1 << 20
	}
	defD(&c.ShutdownGrace, 30*time.Second)
	defD(&c.BodyReadTimeout, 10*time.Second)
	defD(&c.ReadHeaderTimeout, 10*time.Second)
	defD(&c.IdleTimeout, 60*time.Second)
	if c.MaxHeaderBytes == 0 {
		c.MaxHeaderBytes = 32 << 10
	}
	def(&c.LogLevel, "info")
	def(&c.Auth.TenantClaim, "tid")
	if len(c.Auth.Algorithms) == 0 {
		c.Auth.Algorithms = []string{"RS256", "ES256"}
	}
	defD(&c.Auth.Leeway, 30*time.Second)
	if c.Auth.MaxTokenBytes == 0 {
		c.Auth.MaxTokenBytes = 8192
	}
	defD(&c.Auth.JWKSRefreshMin, 5*time.Minute)
	defD(&c.Auth.JWKSRefreshMax, 24*time.Hour)
	defD(&c.Auth.UnknownKIDInterval, time.Minute)
	def(&c.Limiter.Store, "memory")
	if e := c.Limiter.RedisEntra; e != nil {
		def(&e.Scope, "https://redis.azure.com/.default")
		defD(&e.Timeout, 10*time.Second)
	}
	def(&c.Limiter.KeyPrefix, "llmgw:")
	defD(&c.Limiter.Timeout, 50*time.Millisecond)
	def(&c.Limiter.FailurePolicy, "open")
	if c.Upstream.MaxAttempts == 0 {
		c.Upstream.MaxAttempts = 3
	}
	defD(&c.Upstream.HeaderTimeout, 30*time.Second)
	defD(&c.Upstream.ResponseTimeout, 10*time.Minute)
	defD(&c.Upstream.ConnectTimeout, 3*time.Second)
	defD(&c.Upstream.DefaultCooldown, 5*time.Second)
	defD(&c.Upstream.StreamIdleTimeout, 2*time.Minute)
	if c.Upstream.MaxIdleConnsPerHost == 0 {
		c.Upstream.MaxIdleConnsPerHost = 1024
	}
	defD(&c.Lambda.DeadlineMargin, 2*time.Second)
	for i := range c.Tenants {
		defD(&c.Tenants[i].Interval, time.Minute)
	}
	for i := range c.Pools {
		for j := range c.Pools[i].Endpoints {
			e := &c.Pools[i].Endpoints[j]
			if e.Weight == 0 {
				e.Weight = 1
			}
			def(&e.Auth, "key")
			if c.Pools[i].Kind == "azure-openai" {
				def(&e.APIVersion, "2024-10-21")
				def(&e.AzureAPI, "deployments")
			}
			if e.Auth == "entra" {
				def(&e.Entra.Scope, "https://cognitiveservices.azure.com/.default")
				defD(&e.Entra.Timeout, 10*time.Second)
			}
		}
	}
}

func (c *Config) validate(getenv func(string) string) Problems {
	var p Problems
	add := func(field, format string, a ...any) {
		p = append(p, field+": "+fmt.Sprintf(format, a...))
	}
	needEnv := func(field, name string) {
		if name != "" && getenv(name) == "" {
			add(field, "environment variable %s is not set", name)
		}
	}
	if c.MaxBodyBytes < 0 {
		add("max_body_bytes", "must be positive")
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		add("log_level", "must be debug, info, warn or error, not %q", c.LogLevel)
	}

	a := c.Auth
	if a.Issuer == "" {
		add("auth.issuer", "required")
	} else if !isHTTPURL(a.Issuer) {
		add("auth.issuer", "must be an http(s) URL, not %q", a.Issuer)
	}
	if a.JWKSURL != "" && !isHTTPURL(a.JWKSURL) {
		add("auth.jwks_url", "must be an http(s) URL, not %q", a.JWKSURL)
	}
	if len(a.Audiences) == 0 {
		add("auth.audiences", "at least one audience is required")
	}
	for i, alg := range a.Algorithms {
		switch alg {
		case "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA":
		default:
			add(fmt.Sprintf("auth.algorithms[%d]", i), "%q is not an accepted asymmetric algorithm (none and HMAC are never accepted)", alg)
		}
	}
	if a.MaxTokenBytes < 0 {
		add("auth.max_token_bytes", "must be positive")
	}
	if a.JWKSRefreshMin > a.JWKSRefreshMax {
		add("auth.jwks_refresh_min", "must not exceed auth.jwks_refresh_max")
	}

	l := c.Limiter
	switch l.Store {
	case "memory":
	case "redis":
		if l.RedisURLEnv == "" {
			add("limiter.redis_url_env", "required when limiter.store is redis")
		}
		needEnv("limiter.redis_url_env", l.RedisURLEnv)
		needEnv("limiter.redis_password_env", l.RedisPasswordEnv)
		if e := l.RedisEntra; e != nil {
			switch e.Credential {
			case "managed-identity", "workload-identity", "azure-cli":
			default:
				add("limiter.redis_entra.credential", "must be managed-identity, workload-identity or azure-cli, not %q", e.Credential)
			}
			if e.Username == "" {
				add("limiter.redis_entra.username", "required: the identity's object id")
			}
			if l.RedisPasswordEnv != "" {
				add("limiter.redis_password_env", "must be empty when limiter.redis_entra is set")
			}
		}
	default:
		add("limiter.store", "must be memory or redis, not %q", l.Store)
	}
	if l.FailurePolicy != "open" && l.FailurePolicy != "closed" {
		add("limiter.failure_policy", "must be open or closed, not %q", l.FailurePolicy)
	}
	if l.Timeout < 0 {
		add("limiter.timeout", "must be positive")
	}
	if c.Upstream.MaxAttempts < 1 {
		add("upstream.max_attempts", "must be at least 1")
	}

	models := map[string]string{} // public model → pool
	poolNames := map[string]bool{}
	if len(c.Pools) == 0 {
		add("pools", "at least one pool is required")
	}
	for i, pl := range c.Pools {
		f := fmt.Sprintf("pools[%d]", i)
		if pl.Name == "" {
			add(f+".name", "required")
		} else if poolNames[pl.Name] {
			add(f+".name", "duplicate pool name %q", pl.Name)
		}
		poolNames[pl.Name] = true
		switch pl.Kind {
		case "openai", "azure-openai", "vllm":
		default:
			add(f+".kind", "must be openai, azure-openai or vllm, not %q", pl.Kind)
		}
		if len(pl.Models) == 0 {
			add(f+".models", "at least one model is required")
		}
		for _, m := range sortedKeys(pl.Models) {
			if other, dup := models[m]; dup {
				add(f+".models."+m, "model is already served by pool %q", other)
			}
			models[m] = pl.Name
		}
		if len(pl.Endpoints) == 0 {
			add(f+".endpoints", "at least one endpoint is required")
		} else if len(pl.Endpoints) > 64 {
			add(f+".endpoints", "at most 64 endpoints per pool")
		}
		for j, e := range pl.Endpoints {
			ef := fmt.Sprintf("%s.endpoints[%d]", f, j)
			if !isHTTPURL(e.URL) {
				add(ef+".url", "must be an http(s) URL, not %q", e.URL)
			}
			if e.Weight < 0 {
				add(ef+".weight", "must be positive")
			}
			needEnv(ef+".api_key_env", e.APIKeyEnv)
			switch e.Auth {
			case "key":
			case "entra":
				if pl.Kind != "azure-openai" {
					add(ef+".auth", "entra is only for azure-openai pools")
				}
				if e.APIKeyEnv != "" {
					add(ef+".api_key_env", "must be empty when auth is entra")
				}
				switch e.Entra.Credential {
				case "managed-identity", "workload-identity", "azure-cli":
				default:
					add(ef+".entra.credential", "must be managed-identity, workload-identity or azure-cli, not %q", e.Entra.Credential)
				}
			default:
				add(ef+".auth", "must be key or entra, not %q", e.Auth)
			}
			if pl.Kind == "azure-openai" && e.AzureAPI != "deployments" && e.AzureAPI != "v1" {
				add(ef+".azure_api", "must be deployments or v1, not %q", e.AzureAPI)
			}
		}
	}

	tenantIDs := map[string]bool{}
	if len(c.Tenants) == 0 {
		add("tenants", "at least one tenant is required")
	}
	for i, t := range c.Tenants {
		f := fmt.Sprintf("tenants[%d]", i)
		if t.ID == "" {
			add(f+".id", "required")
		} else if tenantIDs[t.ID] {
			add(f+".id", "duplicate tenant %q", t.ID)
		}
		tenantIDs[t.ID] = true
		if len(t.Models) == 0 {
			add(f+".models", "at least one model is required")
		}
		for j, m := range t.Models {
			if _, ok := models[m]; !ok {
				add(fmt.Sprintf("%s.models[%d]", f, j), "model %q is not served by any pool", m)
			}
		}
		if t.Requests == 0 {
			add(f+".requests", "must be at least 1")
		}
		if t.Interval <= 0 {
			add(f+".interval", "must be positive")
		} else if float64(t.Requests)*float64(t.Requests) > float64(t.Interval.D().Nanoseconds()) {
			// go-limiter refills interval/requests per tick; beyond this
			// bound a tick no longer refills the whole bucket.
			add(f+".requests", "%d per %s is more than the token bucket can refill; use a shorter interval", t.Requests, t.Interval.D())
		}
	}
	return p
}

func isHTTPURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
