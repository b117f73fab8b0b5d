// Package config owns the gateway's configuration file as plain data: its
// schema, decoding it from YAML or JSON (every unknown key, duplicate key
// and mistyped value reported by field path), overlays, the defaults that
// are the file's own semantics (a pool inherits upstream's stream policy,
// a tenant the top-level concurrency cap), and the rules between its own
// sections (names unique, tenants' models served by a pool, the
// environment variables it names set).
//
// Each part the binary wires owns its settings' rules and the defaults of
// their zero values. A part that owns a whole section declares it (its
// yaml names, its defaults, its Check): Config holds that type, so the
// section is declared once, in the part, and config decodes it and
// dispatches it; the parts never import config. The wiring step runs the
// parts' checks under the sections' field paths (see shared/assemble).
//
// Numbers and durations are never negative. A zero (or absent) duration or
// count means the default named in the field's comment; the one exception is
// an endpoint's weight, which must be at least 1 when it is given.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/llmgw/gateway/shared/auth"
	"github.com/llmgw/gateway/shared/budget"
	"github.com/llmgw/gateway/shared/dispatch"
	"github.com/llmgw/gateway/shared/keys"
	"github.com/llmgw/gateway/shared/lambdaurl"
	"github.com/llmgw/gateway/shared/price"
	"github.com/llmgw/gateway/shared/ratelimit"
	"github.com/llmgw/gateway/shared/route"
	"github.com/llmgw/gateway/shared/server"
	"github.com/llmgw/gateway/shared/stores"
	"github.com/llmgw/gateway/shared/telemetry"
	"github.com/llmgw/gateway/shared/upstream"
	"github.com/llmgw/gateway/shared/upstream/entra"
)

// Config is the whole gateway configuration. Secrets are never inline: fields
// ending in _env name the environment variable that holds them.
type Config struct {
	// Listen is the host:port to serve HTTP on. An explicit listen always
	// wins; when it is absent, $PORT, else $CONTAINER_APP_PORT (Azure
	// Container Apps sets it to the ingress target port), fills it in as
	// ":PORT" (every interface, as a container needs), else the HTTP
	// host's default, 127.0.0.1:8080 (functions/gateway). See ListenAddr.
	Listen string `yaml:"listen" json:"listen"`
	// Server is the HTTP server's settings at the top level (max_body_bytes,
	// body_read_timeout, max_header_bytes, max_connections,
	// max_pending_connections, lingering_*, raw_syscalls) and the HTTP
	// host's (read_header_timeout, idle_timeout, shutdown_grace,
	// log_level), their defaults and rules the server's (server.Settings).
	Server server.Settings `yaml:",inline" check:"part"`
	// MaxConcurrentRequests caps each tenant's proxied requests in flight
	// on one replica (429 too_many_concurrent_requests beyond, with
	// Retry-After); a tenant's row may set its own. Per replica, not
	// shared: exact across replicas would cost a store round trip per
	// request and a lease per stream. Default
	// tenant.DefaultMaxConcurrent.
	MaxConcurrentRequests int `yaml:"max_concurrent_requests" json:"max_concurrent_requests"`

	// Auth is the JWT verifier's section, its settings and their
	// defaults the verifier's (auth.Config).
	Auth auth.Config `yaml:"auth" json:"auth" check:"part"`
	// Store is where the state replicas share lives (the limiter's
	// buckets, the token budgets, the stored-response records, the
	// backend-asked cooldowns), its settings and their defaults the
	// shared stores' (stores.Config); each part keeps its own answer
	// timeout and failure policy in its own section.
	Store stores.Config `yaml:"store" json:"store" check:"part"`
	// APIKeys is the gateway keys' section (keys accepted beside JWTs,
	// docs/keys.md), its settings and their defaults the keys' own
	// (keys.Settings). Default none: JWTs only.
	APIKeys  keys.Settings `yaml:"api_keys" json:"api_keys" check:"part"`
	Limiter  Limiter       `yaml:"limiter" json:"limiter"`
	Upstream Upstream      `yaml:"upstream" json:"upstream"`
	Lambda   Lambda        `yaml:"lambda" json:"lambda"`
	// Budget is the token budgets' section, its settings and their
	// defaults the ledger's and the prompt bound's (budget.Settings).
	Budget budget.Settings `yaml:"budget" json:"budget" check:"part"`
	// Prices is the price catalogue the spend limits charge by
	// (tenants[].spend_per_*; docs/spend.md), its settings and rules the
	// catalogue's (price.Spec). Default none.
	Prices  price.Spec `yaml:"prices" json:"prices" check:"part"`
	Tenants []Tenant   `yaml:"tenants" json:"tenants"`
	Pools   []Pool     `yaml:"pools" json:"pools"`
	// Aliases maps a public model name to a model a pool serves: a
	// request, a tenant's allow-list and /v1/models read the alias as
	// that model (its pool, its backend name). Clients that ask for a
	// name of their own when none is set (Codex, the Agents SDK, Claude
	// Code) then run on what the operator serves. A tenant allowed a
	// model may use its aliases; a tenant may also list an alias alone.
	// An alias is a new name: not a pool's model, not another alias's
	// target. Default none.
	Aliases map[string]string `yaml:"aliases" json:"aliases"`
	// Telemetry is how the gateway's OTLP export behaves
	// (trust_traceparent, flush_timeout), its settings, defaults and
	// rules the telemetry's (telemetry.Settings); whether and where it
	// exports is the standard OTEL_* environment's (docs/telemetry.md).
	Telemetry telemetry.Settings `yaml:"telemetry" json:"telemetry" check:"part"`

	// Deprecated lists, one line each, the deprecated keys the file
	// wrote (limiter's store settings, now store's): the binary logs
	// each line at start.
	Deprecated []string `yaml:"-" json:"-"`
	// writtenAs maps a field the file wrote under a deprecated name to
	// that name ("store.key_prefix" → "limiter.key_prefix"), so that a
	// problem names the key the file holds.
	writtenAs map[string]string
	// undecoded holds the fields Decode reported (their values left
	// zero), whose other problems Decoded drops.
	undecoded map[string]bool
}

// ListenAddr is the address to serve HTTP on: listen as written, else
// ":$PORT", else ":$CONTAINER_APP_PORT", else "" (the HTTP host's
// default). A listen the file writes is never replaced by the
// environment's port (a default compared by value once let $PORT
// widen an explicit 127.0.0.1:8080 to every interface); the file keeps
// listen empty when it writes none.
func (c *Config) ListenAddr(getenv func(string) string) string {
	if c.Listen != "" {
		return c.Listen
	}
	for _, env := range []string{"PORT", "CONTAINER_APP_PORT"} {
		if port := getenv(env); port != "" {
			return net.JoinHostPort("", port)
		}
	}
	return c.Listen
}

// Limiter is the limiter section: the request limiter's settings
// (timeout, failure_policy), their defaults and rules the limiter's
// (ratelimit.Config), and the deprecated aliases of the store section's
// settings.
type Limiter struct {
	// Store and the Redis settings are the deprecated aliases of
	// store.backend and the store section's settings of the same names
	// (the limiter's of old): Decode moves them there and notes each in
	// Config.Deprecated.
	Store                string `yaml:"store" json:"store"`
	stores.RedisSettings `yaml:",inline"`
	ratelimit.Config     `yaml:",inline" check:"part"`
}

// Upstream tunes calls to backends: each part's settings under the
// upstream section, their defaults and rules that part's.
type Upstream struct {
	// Dispatch is the backend conversation's max_attempts,
	// header_timeout, response_timeout, stream_idle_timeout and
	// default_cooldown (dispatch.Settings).
	Dispatch dispatch.Settings `yaml:",inline" check:"part"`
	// ClientSettings is the backend client's connect_timeout and
	// max_idle_conns_per_host, their defaults and rules the client's
	// (upstream.ClientSettings).
	upstream.ClientSettings `yaml:",inline" check:"part"`
	// Route is the router's max_cooldown (route.Settings).
	Route route.Settings `yaml:",inline" check:"part"`
	// Streams is every pool's keepalive_interval and
	// first_token_timeout unless the pool writes its own
	// (server.StreamPolicy).
	Streams server.StreamPolicy `yaml:",inline" check:"part"`
}

// Lambda tunes the AWS Lambda host: each part's settings under the
// lambda section, their defaults and rules that part's.
type Lambda struct {
	// Settings is the Lambda host's deadline_margin (lambdaurl.Settings).
	lambdaurl.Settings `yaml:",inline" check:"part"`
	// LambdaSettings is the request handler's min_remaining
	// (server.LambdaSettings).
	server.LambdaSettings `yaml:",inline" check:"part"`
}

// Tenant is one row of the tenant table.
type Tenant struct {
	ID string `yaml:"id" json:"id"`
	// Name is optional, for people: the access log's tenant_name.
	Name   string   `yaml:"name" json:"name"`
	Models []string `yaml:"models" json:"models"`
	// Requests per Interval in the tenant's token bucket. Required.
	Requests uint64 `yaml:"requests" json:"requests"`
	// CountRequests per Interval in the tenant's bucket for prompt counts
	// (count_tokens, input_tokens), apart from Requests. Default
	// ratelimit.DefaultCountsPerRequest times requests.
	CountRequests uint64 `yaml:"count_requests" json:"count_requests"`
	// Interval of the token bucket. Default ratelimit.DefaultInterval.
	Interval Duration `yaml:"interval" json:"interval" check:"part"`
	// MaxConcurrentRequests caps the tenant's requests in flight on one
	// replica. Default the top-level max_concurrent_requests.
	MaxConcurrentRequests int `yaml:"max_concurrent_requests" json:"max_concurrent_requests"`

	// Token budgets (optional; see Budget): each counts prompt plus
	// completion tokens, and 0 is no limit.
	//
	// TokensPerMinute caps the tokens of one UTC calendar minute.
	TokensPerMinute int64 `yaml:"tokens_per_minute" json:"tokens_per_minute" check:"part"`
	// TokenQuota caps the tokens of one QuotaPeriod; it always fails
	// closed when the budget store is down.
	TokenQuota int64 `yaml:"token_quota" json:"token_quota" check:"part"`
	// QuotaPeriod is day or month (UTC); required with TokenQuota.
	QuotaPeriod string `yaml:"quota_period" json:"quota_period"`
	// MaxOutputTokens caps every request's output per choice, whatever
	// the client asks.
	MaxOutputTokens int64 `yaml:"max_output_tokens" json:"max_output_tokens" check:"part"`

	// Spend limits (optional; docs/spend.md): the money the tenant's
	// requests may cost per UTC calendar minute, day and month, as a
	// decimal amount of prices.currency ("50.00"), priced by the
	// catalogue (prices), reserved and settled with the token budget. A
	// daily or monthly limit always fails closed. Default none.
	SpendPerMinute string `yaml:"spend_per_minute" json:"spend_per_minute"`
	SpendPerDay    string `yaml:"spend_per_day" json:"spend_per_day"`
	SpendPerMonth  string `yaml:"spend_per_month" json:"spend_per_month"`
	// Projects are limits per named project below the tenant (the
	// auth.project_claim of the caller's token); ProjectDefault the limits
	// of every other project; UserDefault the limits of each user (the
	// auth.user_claim) below its project. A request reserves at every
	// level in one step (docs/spend.md). Default none.
	Projects       []Project    `yaml:"projects" json:"projects"`
	ProjectDefault *LevelLimits `yaml:"project_default" json:"project_default"`
	UserDefault    *LevelLimits `yaml:"user_default" json:"user_default"`
	// ServiceTiers are the service tiers the tenant may ask for
	// (standard, flex, priority, scale): another is refused 400, "auto"
	// (or none) is reserved at the dearest of them. Default standard
	// only.
	ServiceTiers []string `yaml:"service_tiers" json:"service_tiers"`

	// Features are the server-side features the tenant may use (web
	// search, code execution, MCP servers, file ids…; docs/ownership.md):
	// one backend account serves every tenant, so each is off unless
	// listed here. Default none.
	Features []Feature `yaml:"features" json:"features"`
	// AnthropicBeta lists the anthropic-beta values the tenant may send
	// beyond the defaults of request.AnthropicBetas; any other value is dropped
	// from the backend request and logged. Default none.
	AnthropicBeta []string `yaml:"anthropic_beta" json:"anthropic_beta"`
	// UnknownFields: refuse makes a body member no table names a 400
	// for this tenant on every pool; drop (default) leaves it to the
	// pool's unknown_fields.
	UnknownFields string `yaml:"unknown_fields" json:"unknown_fields"`
}

// LevelLimits are the limits of a level below a tenant: the tenant's
// token and spend limits, by the same names and rules.
type LevelLimits struct {
	TokensPerMinute int64  `yaml:"tokens_per_minute" json:"tokens_per_minute" check:"part"`
	TokenQuota      int64  `yaml:"token_quota" json:"token_quota" check:"part"`
	QuotaPeriod     string `yaml:"quota_period" json:"quota_period"`
	SpendPerMinute  string `yaml:"spend_per_minute" json:"spend_per_minute"`
	SpendPerDay     string `yaml:"spend_per_day" json:"spend_per_day"`
	SpendPerMonth   string `yaml:"spend_per_month" json:"spend_per_month"`
}

// Spends reports whether l has a spend limit.
func (l LevelLimits) Spends() bool {
	return l.SpendPerMinute != "" || l.SpendPerDay != "" || l.SpendPerMonth != ""
}

// Project is one named project's limits (Tenant.Projects).
type Project struct {
	// Name is the project claim's value.
	Name        string `yaml:"name" json:"name"`
	LevelLimits `yaml:",inline"`
}

// Feature allows a tenant one server-side feature and prices it.
type Feature struct {
	// Name is the feature: one of request.FeatureNames().
	Name string `yaml:"name" json:"name"`
	// CostPerUse is the token-equivalent one use costs: a token budget
	// reserves it per use before forwarding and charges it with the
	// tokens. Default 0 (free: the operator says what a use costs).
	CostPerUse int64 `yaml:"cost_per_use" json:"cost_per_use" check:"part"`
	// DefaultUses is how many uses are reserved for a request that bounds
	// none (max_uses, max_tool_calls). Default tenant.DefaultUses.
	DefaultUses int64 `yaml:"default_uses" json:"default_uses" check:"part"`
	// AccountOwner says the tenant has the backend account to itself. The
	// features that name account-wide state by id (file_id, container,
	// file_search's vector stores, data_sources' indexes,
	// kv_transfer_params' cache blocks) need it: the gateway serves no API
	// that creates that state, so it can never record which tenant owns
	// an id, and on a shared account one tenant would reach another's.
	AccountOwner bool `yaml:"account_owner" json:"account_owner"`
}

// HasBudget reports whether the tenant has a token budget, an output cap
// or a spend limit.
func (t Tenant) HasBudget() bool {
	return t.TokensPerMinute > 0 || t.TokenQuota > 0 || t.MaxOutputTokens > 0 || t.Spends() || t.HasLevels()
}

// HasLevels reports whether the tenant has limits below it.
func (t Tenant) HasLevels() bool {
	return len(t.Projects) > 0 || t.ProjectDefault != nil || t.UserDefault != nil
}

// Spends reports whether the tenant has a spend limit, at its level or
// below.
func (t Tenant) Spends() bool {
	if t.SpendPerMinute != "" || t.SpendPerDay != "" || t.SpendPerMonth != "" {
		return true
	}
	for _, p := range t.Projects {
		if p.Spends() {
			return true
		}
	}
	return t.ProjectDefault != nil && t.ProjectDefault.Spends() || t.UserDefault != nil && t.UserDefault.Spends()
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
	// ForwardHeaders names caller headers passed to this pool's backends as
	// sent, beyond the built-in allow-list (a backend's own feature flags);
	// credentials, hop-by-hop, encoding, account and identity headers are
	// refused (upstream.CheckForward).
	ForwardHeaders []string `yaml:"forward_headers" json:"forward_headers"`
	// Fields names top-level body members forwarded to this pool's
	// backends beyond the operation's table and the kind's own (a
	// backend's own extension); members the gateway writes or gates per
	// tenant are refused (upstream.CheckField).
	Fields []string `yaml:"fields" json:"fields"`
	// UnknownFields is what becomes of a body member no table names:
	// drop (default: forwarded without it, named in
	// X-Llmgw-Dropped-Fields) or refuse (400 unsupported_parameter).
	UnknownFields string `yaml:"unknown_fields" json:"unknown_fields"`
	// TenantShare is the fraction of an endpoint's capacity_tpm one
	// tenant's requests may ask for in a minute. Default
	// route.DefaultTenantShare.
	TenantShare float64 `yaml:"tenant_share" json:"tenant_share"`
	// Streams is the pool's keepalive_interval and first_token_timeout,
	// each upstream's unless written here (a reasoning model's pool may
	// wait longer for a first token); server.StreamPolicy.
	Streams server.StreamPolicy `yaml:",inline" check:"part"`
}

// Endpoint is one backend URL in a pool.
type Endpoint struct {
	// URL is the backend's base URL: http(s), no query, fragment or userinfo
	// (credentials come from APIKeyEnv or Entra).
	URL string `yaml:"url" json:"url"`
	// Weight is the endpoint's share of first attempts, 1 to MaxWeight.
	// Default 1 when absent; an explicit 0 is an error, not a default (it
	// reads as "send nothing here", which the router cannot do).
	Weight int `yaml:"weight" json:"weight"`
	// CapacityTPM is the tokens a minute the endpoint admits (a PTU's
	// capacity as its backend counts it: prompt and output caps); with it
	// each tenant's requests may ask at most the pool's tenant_share of
	// it a minute before they spill to the next priority
	// (route.Router.Admit). Default 0: no capacity, nothing counted.
	CapacityTPM int64 `yaml:"capacity_tpm" json:"capacity_tpm"`
	// Priority orders a pool's endpoints: requests go to the best (lowest)
	// priority whose endpoints are not cooling; a 429 moves the request to
	// the next one (reserved capacity first, pay-as-you-go for its 429s),
	// any other failure tries the same priority first. 0 to MaxPriority;
	// default 0.
	Priority int `yaml:"priority" json:"priority"`
	// APIKeyEnv names the env var holding the backend key (openai: bearer,
	// azure-openai: api-key header). Empty = no key.
	APIKeyEnv string `yaml:"api_key_env" json:"api_key_env"`
	// APIVersion is the azure-openai api-version. Default
	// upstream.DefaultAzureAPIVersion.
	APIVersion string `yaml:"api_version" json:"api_version"`
	// AzureAPI is deployments (default) or v1: the /openai/v1 surface.
	AzureAPI string `yaml:"azure_api" json:"azure_api"`
	// Auth is key or entra (Microsoft Entra ID token, azure-openai).
	// Default key: empty is key (the endpoint sends api_key_env's key,
	// or none), so no part needs a default for it.
	Auth string `yaml:"auth" json:"auth"`
	// Entra is the endpoint's Entra ID credential with auth: entra, its
	// defaults and rules the credential's (entra.Config).
	Entra entra.Config `yaml:"entra" json:"entra" check:"part"`
	// Organization and Project are sent as OpenAI-Organization and
	// OpenAI-Project (openai kind only): the account the gateway's key acts
	// for is the operator's choice, never the caller's.
	Organization string `yaml:"organization" json:"organization"`
	Project      string `yaml:"project" json:"project"`
	// CAFile is a PEM bundle of extra root CAs trusted for this endpoint
	// (a vLLM behind a private CA); the system roots stay trusted. It must
	// hold at least one certificate.
	CAFile string `yaml:"ca_file" json:"ca_file"`

	// weightGiven records that the config wrote a weight, so an explicit 0
	// is refused rather than read as the default.
	weightGiven bool
}

// MaxWeight bounds an endpoint's weight, so a pool's total cannot overflow.
const MaxWeight = 1_000_000

// MaxPriority bounds an endpoint's priority: a handful of tiers is what a
// pool needs (reserved, pay-as-you-go, a last resort).
const MaxPriority = 9

// UnmarshalYAML decodes an endpoint and notes whether weight was written.
func (e *Endpoint) UnmarshalYAML(n *yaml.Node) error {
	type plain Endpoint // no methods: no recursion
	if err := n.Decode((*plain)(e)); err != nil {
		return err
	}
	var given struct {
		Weight *int `yaml:"weight"`
	}
	if err := n.Decode(&given); err == nil && given.Weight != nil {
		e.weightGiven = true
	}
	return nil
}

// Duration is a time.Duration written as "90ms", "5m".
type Duration time.Duration

// D returns the standard library duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// UnmarshalYAML accepts a Go duration string. Its error is a *yaml.TypeError
// so that decoding goes on and the loader can list every problem.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	var s string
	if err := n.Decode(&s); err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: %q is not a duration like \"500ms\" or \"1m\"", n.Line, s)}}
	}
	*d = Duration(v)
	return nil
}

// Decode decodes b (YAML or JSON) strictly and applies the file's own
// defaults. Every problem with the document's shape (unknown fields,
// values of the wrong type, keys written twice) is in the Problems, by
// field path. The Config is nil only when b is not YAML at all; else what
// decoded is there, so that the checks that follow can still report every
// other problem at once.
func Decode(b []byte) (*Config, Problems) {
	var root yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(b)).Decode(&root); err != nil && !errors.Is(err, io.EOF) {
		return nil, Problems{"parse: " + err.Error()}
	}
	var c Config
	var p Problems
	if root.Kind != 0 {
		p = checkSchema(&root)
		if err := root.Decode(&c); err != nil && len(p) == 0 {
			p.add("parse", "%s", err)
		}
	}
	c.moveAliases(&p)
	c.applyDefaults()
	c.undecoded = make(map[string]bool, len(p))
	for _, s := range p {
		field, _, _ := strings.Cut(s, ": ")
		c.undecoded[field] = true
	}
	return &c, p
}

// moveAliases moves the limiter's deprecated store settings into the
// store section, noting each in c.Deprecated. A setting written under
// both names is a problem: which one the file means is not for the
// gateway to guess.
func (c *Config) moveAliases(p *Problems) {
	l, s := &c.Limiter, &c.Store
	move := func(old, now string, given, taken bool, set func()) {
		if !given {
			return
		}
		if taken {
			p.add("limiter."+old, "deprecated alias of store.%s, which the file also sets: keep store.%s", now, now)
			return
		}
		set()
		c.Deprecated = append(c.Deprecated, fmt.Sprintf("limiter.%s is deprecated: write store.%s", old, now))
		if c.writtenAs == nil {
			c.writtenAs = map[string]string{}
		}
		c.writtenAs["store."+now] = "limiter." + old
	}
	move("store", "backend", l.Store != "", s.Backend != "", func() { s.Backend = l.Store })
	move("redis_url_env", "redis_url_env", l.RedisURLEnv != "", s.RedisURLEnv != "", func() { s.RedisURLEnv = l.RedisURLEnv })
	move("redis_password_env", "redis_password_env", l.RedisPasswordEnv != "", s.RedisPasswordEnv != "", func() { s.RedisPasswordEnv = l.RedisPasswordEnv })
	move("redis_entra", "redis_entra", l.RedisEntra != nil, s.RedisEntra != nil, func() { s.RedisEntra = l.RedisEntra })
	move("key_prefix", "key_prefix", l.KeyPrefix != "", s.KeyPrefix != "", func() { s.KeyPrefix = l.KeyPrefix })
	move("dial_timeout", "dial_timeout", l.RedisSettings.DialTimeout != 0, s.DialTimeout != 0, func() { s.DialTimeout = l.RedisSettings.DialTimeout })
	l.Store, l.RedisSettings = "", stores.RedisSettings{}
}

// FieldName is field ("store.key_prefix") as the file wrote it: its
// deprecated name when the file used that.
func (c *Config) FieldName(field string) string {
	if old, ok := c.writtenAs[field]; ok {
		return old
	}
	return field
}

// WrittenAs returns p with every setting the file wrote under a
// deprecated name ("store.key_prefix" for limiter.key_prefix) named as
// the file wrote it, where a problem names it and where its message does.
func (c *Config) WrittenAs(p Problems) Problems {
	if len(c.writtenAs) == 0 {
		return p
	}
	out := make(Problems, len(p))
	for i, s := range p {
		for now, old := range c.writtenAs {
			s = replaceField(s, now, old)
		}
		out[i] = s
	}
	return out
}

// replaceField replaces each whole field name from in s with to: not a
// longer name that starts with it (store.redis_entra is not
// store.redis_entra_x), but a field below it (store.redis_entra.username).
func replaceField(s, from, to string) string {
	var b strings.Builder
	for {
		i := strings.Index(s, from)
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		end := i + len(from)
		whole := end == len(s) || !(s[end] == '_' || 'a' <= s[end] && s[end] <= 'z' || '0' <= s[end] && s[end] <= '9')
		whole = whole && (i == 0 || s[i-1] == ' ' || s[i-1] == '(')
		b.WriteString(s[:i])
		if whole {
			b.WriteString(to)
		} else {
			b.WriteString(from)
		}
		s = s[end:]
	}
}

// Read reads the config file at path, with overlay (YAML or JSON; ""
// none) merged over it (Overlay), so that one shipped config can serve
// several deployments that differ in a few fields: the AWS template's
// per-tenant stacks give their tenant row and key prefix this way.
func Read(path, overlay string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	if overlay == "" {
		return b, nil
	}
	return Overlay(b, []byte(overlay))
}

// applyDefaults applies the file's own semantics: a setting one section
// takes from another when it leaves it out (the budget's failure policy
// from the limiter's, a tenant's concurrency cap from the top level's, a
// pool's stream policy from upstream's) and an endpoint's weight (an
// explicit 0 is an error, not a default). Every other setting the file
// leaves out stays zero here: its default is the part's that takes it
// (TestDefaults), which the part applies.
func (c *Config) applyDefaults() {
	// The budget store fails the way the limiter's does unless told
	// otherwise.
	def(&c.Budget.FailurePolicy, c.Limiter.FailurePolicy)
	for i := range c.Tenants {
		defN(&c.Tenants[i].MaxConcurrentRequests, c.MaxConcurrentRequests)
	}
	for i := range c.Pools {
		c.Pools[i].applyDefaults(c.Upstream)
	}
}

// applyDefaults: a pool's stream policy is upstream's unless it says
// otherwise (a setting neither names stays nil: the server's default).
func (p *Pool) applyDefaults(u Upstream) {
	p.Streams = p.Streams.Or(u.Streams)
	for j := range p.Endpoints {
		e := &p.Endpoints[j]
		if e.Weight == 0 && !e.weightGiven {
			e.Weight = 1
		}
	}
}

func def(s *string, v string) {
	if *s == "" {
		*s = v
	}
}

func defN[T int | int64](n *T, v T) {
	if *n == 0 {
		*n = v
	}
}

// ResolveAliases writes each alias into what serves and allows its
// target: the target's pool serves the alias under the target's backend
// name, and every tenant allowed the target is allowed the alias. Run it
// once, on a config Validate accepted; the router, the tenant table and
// the backends' renames then know aliases as ordinary models, so the
// request path has no alias step.
func (c *Config) ResolveAliases() {
	if len(c.Aliases) == 0 {
		return
	}
	for _, alias := range sortedKeys(c.Aliases) {
		target := c.Aliases[alias]
		for i := range c.Pools {
			backend, ok := c.Pools[i].Models[target]
			if !ok {
				continue
			}
			if backend == "" { // the backend's name is the target's
				backend = target
			}
			c.Pools[i].Models[alias] = backend
		}
	}
	for i := range c.Tenants {
		t := &c.Tenants[i]
		has := make(map[string]bool, len(t.Models))
		for _, m := range t.Models {
			has[m] = true
		}
		models := t.Models[:len(t.Models):len(t.Models)] // never write into a shared array
		for _, alias := range sortedKeys(c.Aliases) {
			if has[c.Aliases[alias]] && !has[alias] {
				models = append(models, alias)
				has[alias] = true
			}
		}
		t.Models = models
	}
}
