package assemble

import (
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/gateway/shared/config"
	"github.com/llmgw/gateway/shared/server"
	"github.com/llmgw/gateway/shared/tenant"
)

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

const minimal = `
auth: {issuer: "https://issuer.example", audiences: [gw]}
tenants: [{id: t1, models: [m1], requests: 10}]
pools:
  - name: p1
    kind: vllm
    models: {m1: served}
    endpoints: [{url: "http://127.0.0.1:8000"}]
`

func selfSignedPEM(t *testing.T) []byte {
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	t.Cleanup(srv.Close)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
}

func TestDemoConfigLoads(t *testing.T) {
	// go test runs in the package's folder (a path from runtime.Caller
	// is not a file's under -trimpath, which make test uses).
	demo := filepath.Join("..", "..", "scripts", "dev", "demo.yaml")
	c, err := Load(demo, "", env(map[string]string{"DEMO_BACKEND_KEY": "k", "DEMO_KEYS_SECRET": strings.Repeat("d", 32)}))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Pools) < 4 || len(c.Tenants) < 2 {
		t.Fatalf("demo must have ≥4 pools and ≥2 tenants, has %d and %d", len(c.Pools), len(c.Tenants))
	}
}

func TestProblems(t *testing.T) {
	dir := t.TempDir()
	caPEM := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caPEM, selfSignedPEM(t), 0o600); err != nil {
		t.Fatal(err)
	}
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	endpoint := func(extra string) string {
		return strings.Replace(minimal, `{url: "http://127.0.0.1:8000"}`, `{url: "http://127.0.0.1:8000", `+extra+`}`, 1)
	}
	kind := func(k, cfg string) string { return strings.Replace(cfg, "kind: vllm", "kind: "+k, 1) }
	withURL := func(u string) string { return strings.Replace(minimal, "http://127.0.0.1:8000", u, 1) }
	tests := []struct {
		name  string
		cfg   string
		env   map[string]string
		wants []string // each must appear in the error
		not   []string // none may appear
	}{
		{name: "empty", cfg: ``, wants: []string{"auth.issuer: required", "auth.audiences", "pools: at least one", "tenants: at least one"}},
		{name: "unknown field", cfg: minimal + "\nbogus: 1\n", wants: []string{"bogus: unknown field (line 10)"}},
		{name: "unknown fields everywhere, all at once",
			cfg: strings.Replace(endpoint("foo: 1"), "audiences: [gw]", "audiences: [gw], isuer: x", 1) +
				"limiter: {store: redis, redis_url_env: R, redis_entra: {credential: managed-identity, username: u, bar: 2}}\n" +
				"upstream: {retries: 3}\n",
			env: map[string]string{"R": "redis://x"},
			wants: []string{"auth.isuer: unknown field", "pools[0].endpoints[0].foo: unknown field",
				"limiter.redis_entra.bar: unknown field", "upstream.retries: unknown field"},
			not: []string{"not found in type"}},
		{name: "unknown field in JSON", cfg: `{"auth":{"issuer":"https://i.example","audiences":["gw"],"leway":"1s"}}`,
			wants: []string{"auth.leway: unknown field", "pools: at least one"}},
		{name: "key written twice", cfg: minimal + "listen: \"127.0.0.1:1\"\nlisten: \"127.0.0.1:2\"\n", wants: []string{"listen: written twice (lines 9 and 10)"}, not: []string{"required"}},
		{name: "wrong type names the field", cfg: minimal + "\nmax_body_bytes: lots\n",
			wants: []string{"max_body_bytes: cannot unmarshal !!str `lots` into int64 (line 10)"}},
		{name: "list where a mapping belongs", cfg: strings.Replace(minimal, `auth: {issuer: "https://issuer.example", audiences: [gw]}`, "auth: [a, b]", 1), wants: []string{"auth: must be a mapping of fields, not a list"},
			not: []string{"auth.issuer", "auth.audiences"}},
		{name: "not a mapping at all", cfg: "42", wants: []string{"(top level): must be a mapping of fields"}, not: []string{"required"}},
		{name: "aliases expanding past the node budget",
			cfg:   "auth: {issuer: x, algorithms: &a [" + strings.Repeat("RS256, ", 400) + "RS256]}\ntenants: [" + strings.Repeat("{models: *a}, ", 400) + "{}]\n",
			wants: []string{"parse: document too large (more than 65536 nodes, aliases expanded)"}},
		{name: "merge cycle", cfg: minimal + "upstream: &u {<<: *u}\nlambda: {<<: &l [*l]}\n",
			wants: []string{"upstream: << merges a mapping into itself", "lambda: << must merge a mapping or a list of mappings"}},
		{name: "bad duration", cfg: minimal + "\nshutdown_grace: soon\n", wants: []string{`shutdown_grace: "soon" is not a duration like "500ms" or "1m" (line 10)`}},
		{name: "bad duration of a part's section", cfg: strings.Replace(minimal, "audiences: [gw]", "audiences: [gw], leeway: soon", 1),
			wants: []string{`auth.leeway: "soon" is not a duration like "500ms" or "1m"`}},
		{name: "negative leeway", cfg: strings.Replace(minimal, "audiences: [gw]", "audiences: [gw], leeway: -1s", 1), wants: []string{"auth.leeway: must not be negative, got -1s"}},
		{name: "listen without port", cfg: minimal + "listen: localhost\n", wants: []string{`listen: must be host:port`}},
		{name: "listen with a named port", cfg: minimal + "listen: \"127.0.0.1:http\"\n", wants: []string{`listen: port must be a number from 0 to 65535, not "http"`}},
		{name: "listen port out of range", cfg: minimal + "listen: \":70000\"\n", wants: []string{`listen: port must be a number`}},
		{name: "listen host with a space", cfg: minimal + "listen: \"my host:80\"\n", wants: []string{`listen: host "my host" is not`}},
		{name: "negative sizes", cfg: minimal + "max_header_bytes: -1\nmax_body_bytes: -2\nupstream: {max_attempts: -1, max_idle_conns_per_host: -4}\n",
			wants: []string{"max_header_bytes: must not be negative, got -1", "max_body_bytes: must not be negative, got -2",
				"upstream.max_attempts: must not be negative", "upstream.max_idle_conns_per_host: must not be negative"}},
		{name: "negative max_token_bytes", cfg: strings.Replace(minimal, "audiences: [gw]", "audiences: [gw], max_token_bytes: -1", 1),
			wants: []string{"auth.max_token_bytes: must not be negative"}},
		{name: "weight 0", cfg: endpoint("weight: 0"), wants: []string{"pools[0].endpoints[0].weight: must be at least 1"}},
		{name: "weight 0 in JSON", cfg: `{"auth":{"issuer":"https://i.example","audiences":["gw"]},"tenants":[{"id":"t","models":["m"],"requests":5}],
			"pools":[{"name":"p","kind":"vllm","models":{"m":""},"endpoints":[{"url":"https://a.example","weight":0}]}]}`,
			wants: []string{"pools[0].endpoints[0].weight: must be at least 1"}},
		{name: "weight negative", cfg: endpoint("weight: -2"), wants: []string{"pools[0].endpoints[0].weight: must not be negative, got -2"},
			not: []string{"at least 1"}},
		{name: "weight too large", cfg: endpoint("weight: 1000000000000"), wants: []string{"pools[0].endpoints[0].weight: must be at most 1000000"}},
		{name: "priority too large", cfg: endpoint("priority: 10"), wants: []string{"pools[0].endpoints[0].priority: must be at most 9 (0 is tried first)"}},
		{name: "priority negative", cfg: endpoint("priority: -1"), wants: []string{"pools[0].endpoints[0].priority: must not be negative, got -1"}},
		{name: "default_cooldown past max_cooldown", cfg: minimal + "upstream: {default_cooldown: 2m}\n",
			wants: []string{"upstream.default_cooldown: must not exceed max_cooldown (1m0s), got 2m0s"}},
		{name: "default default_cooldown past a short max_cooldown", cfg: minimal + "upstream: {max_cooldown: 2s}\n",
			wants: []string{"upstream.default_cooldown: must not exceed max_cooldown (2s), got 5s"}},
		{name: "max_cooldown negative", cfg: minimal + "upstream: {max_cooldown: -1s}\n", wants: []string{"upstream.max_cooldown: must not be negative, got -1s"}},
		{name: "url with query", cfg: withURL("http://127.0.0.1:8000/v1?api-version=1"), wants: []string{"pools[0].endpoints[0].url: must not have a query"}},
		{name: "url with fragment", cfg: withURL("http://127.0.0.1:8000/#x"), wants: []string{"pools[0].endpoints[0].url: must not have a fragment"}},
		{name: "url with userinfo", cfg: withURL("http://user:secret@127.0.0.1:8000"), wants: []string{"pools[0].endpoints[0].url: must not carry credentials"},
			not: []string{"secret"}},
		{name: "organization on vllm", cfg: endpoint("organization: org-1"), wants: []string{"pools[0].endpoints[0].organization: only for openai pools, not vllm"}},
		{name: "project on azure-openai", cfg: kind("azure-openai", endpoint("project: proj-1")), wants: []string{"pools[0].endpoints[0].project: only for openai pools, not azure-openai"}},
		{name: "organization with a line break", cfg: kind("openai", endpoint(`organization: "org\r\nX-Evil: 1"`)),
			wants: []string{"pools[0].endpoints[0].organization: must be a printable header value"}},
		{name: "ca_file a directory", cfg: endpoint(fmt.Sprintf("ca_file: %q", dir)), wants: []string{"pools[0].endpoints[0].ca_file: " + dir + " is not a regular file"}},
		{name: "ca_file missing", cfg: endpoint(fmt.Sprintf("ca_file: %q", filepath.Join(dir, "nope.pem"))), wants: []string{"pools[0].endpoints[0].ca_file: cannot read"}},
		{name: "ca_file not PEM", cfg: endpoint(fmt.Sprintf("ca_file: %q", notPEM)), wants: []string{"pools[0].endpoints[0].ca_file: " + notPEM + " holds no PEM certificate"}},
		{name: "two trusts on one host", cfg: minimal + fmt.Sprintf(`  - {name: p2, kind: vllm, models: {m2: x}, endpoints: [{url: "https://127.0.0.1:8000/v2", ca_file: %q}]}`, caPEM) + "\n",
			wants: []string{`pools[1].endpoints[0].ca_file: "` + caPEM + `" differs from pools[0].endpoints[0].ca_file "" on the same host 127.0.0.1:8000`}},
		{name: "organization with surrounding space", cfg: kind("openai", endpoint(`organization: " org-1"`)),
			wants: []string{"pools[0].endpoints[0].organization: must be a printable header value"}},
		{name: "empty audience", cfg: strings.Replace(minimal, "audiences: [gw]", `audiences: [gw, ""]`, 1), wants: []string{"auth.audiences[1]: must not be empty"}},
		{name: "hmac alg", cfg: strings.Replace(minimal, "audiences: [gw]", "audiences: [gw], algorithms: [HS256, none]", 1),
			wants: []string{`auth.algorithms[0]: "HS256"`, `auth.algorithms[1]: "none"`}},
		{name: "refresh min above max", cfg: strings.Replace(minimal, "audiences: [gw]", "audiences: [gw], jwks_refresh_max: 1m", 1),
			wants: []string{"auth.jwks_refresh_min: must not exceed auth.jwks_refresh_max (5m0s > 1m0s)"}},
		{name: "unknown model in tenant", cfg: strings.Replace(minimal, "models: [m1]", "models: [m1, nope]", 1), wants: []string{`tenants[0].models[1]: model "nope" is not served`}},
		{name: "missing env", cfg: endpoint("api_key_env: VLLM_KEY"),
			wants: []string{"pools[0].endpoints[0].api_key_env: environment variable VLLM_KEY is not set"}},
		{name: "bad kind and url", cfg: strings.Replace(strings.Replace(minimal, "kind: vllm", "kind: bedrock", 1), "http://127.0.0.1:8000", "ftp://x", 1),
			wants: []string{`pools[0].kind: must be openai, azure-openai, vllm or anthropic, not "bedrock"`, `pools[0].endpoints[0].url`}},
		{name: "redis without url", cfg: minimal + "\nlimiter: {store: redis, failure_policy: maybe}\n", wants: []string{"store.redis_url_env: required when limiter.store is redis", "limiter.failure_policy"}},
		{name: "store redis without url", cfg: minimal + "\nstore: {backend: redis}\n", wants: []string{"store.redis_url_env: required when store.backend is redis"}},
		{name: "store backend unknown", cfg: minimal + "\nstore: {backend: mongo}\n", wants: []string{`store.backend: must be memory or redis, not "mongo"`}},
		{name: "store backend unknown, written as limiter's", cfg: minimal + "\nlimiter: {store: mongo}\n", wants: []string{`limiter.store: must be memory or redis, not "mongo"`}},
		{name: "store negative dial timeout", cfg: minimal + "\nstore: {dial_timeout: -1s}\n", wants: []string{"store.dial_timeout: must not be negative"}, not: []string{"limiter."}},
		{name: "a store setting under both names", cfg: minimal + "\nstore: {key_prefix: a:}\nlimiter: {key_prefix: b:}\n",
			wants: []string{"limiter.key_prefix: deprecated alias of store.key_prefix, which the file also sets"}},
		{name: "redis interval finer than a microsecond", cfg: strings.Replace(minimal, "requests: 10}", "requests: 10, interval: 1500ns}", 1) +
			"limiter: {store: redis, redis_url_env: R}\n", env: map[string]string{"R": "redis://x"},
			wants: []string{"tenants[0].interval: must be a whole number of microseconds with a Redis store"}},
		{name: "entra on vllm", cfg: endpoint("auth: entra"),
			wants: []string{"pools[0].endpoints[0].auth: entra is only for azure-openai", "pools[0].endpoints[0].entra.credential"}},
		{name: "entra settings with key auth", cfg: endpoint("entra: {credential: managed-identity}"),
			wants: []string{"pools[0].endpoints[0].entra: only used with auth: entra"}},
		{name: "azure-cli with client_id", cfg: kind("azure-openai", endpoint("auth: entra, entra: {credential: azure-cli, client_id: abc}")),
			wants: []string{"pools[0].endpoints[0].entra.client_id: not used by the Azure CLI"}},
		{name: "workload identity without its environment", cfg: kind("azure-openai", endpoint("auth: entra, entra: {credential: workload-identity}")),
			wants: []string{"pools[0].endpoints[0].entra.credential: environment variable AZURE_TENANT_ID is not set",
				"pools[0].endpoints[0].entra.credential: environment variable AZURE_FEDERATED_TOKEN_FILE is not set",
				"pools[0].endpoints[0].entra.client_id: environment variable AZURE_CLIENT_ID is not set"}},
		{name: "redis_entra with memory store", cfg: minimal + "limiter: {redis_entra: {credential: managed-identity, username: u}}\n",
			wants: []string{"limiter.redis_entra: only used with store.backend redis"}},
		{name: "requests beyond the bucket's refill", cfg: strings.Replace(minimal, "requests: 10}", "requests: 1001, interval: 1ms}", 1),
			wants: []string{"tenants[0].requests: 1001 per 1ms is more than the token bucket can refill"}},
		{name: "requests beyond the default interval's refill", cfg: strings.Replace(minimal, "requests: 10}", "requests: 300000}", 1),
			wants: []string{"tenants[0].requests: 300000 per 1m0s is more than the token bucket can refill"}},
		{name: "tenant without id", cfg: strings.Replace(minimal, "id: t1, ", "", 1), wants: []string{"tenants[0].id: required"}},
		{name: "duplicate tenant", cfg: strings.Replace(minimal, "tenants: [{id: t1, models: [m1], requests: 10}]", "tenants: [{id: t1, models: [m1], requests: 10}, {id: t1, models: [m1], requests: 10}]", 1),
			wants: []string{`tenants[1].id: duplicate tenant "t1"`}},
		{name: "duplicate model", cfg: minimal + `  - {name: p2, kind: openai, models: {m1: x}, endpoints: [{url: "http://a.example"}]}` + "\n", wants: []string{`pools[1].models.m1: model is already served by pool "p1"`}},
		{name: "every problem at once", cfg: strings.Replace(minimal, `issuer: "https://issuer.example", `, "", 1) + "bogus: 1\nlisten: nope\nshutdown_grace: -1s\n",
			wants: []string{"bogus: unknown field", "auth.issuer: required", "listen: must be host:port", "shutdown_grace: must not be negative"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.cfg), env(tt.env))
			if err == nil {
				t.Fatal("accepted a bad config")
			}
			var p config.Problems
			if !errors.As(err, &p) {
				t.Fatalf("error is not Problems: %v", err)
			}
			for _, w := range tt.wants {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not mention %q:\n%v", w, err)
				}
			}
			for _, n := range tt.not {
				if strings.Contains(err.Error(), n) {
					t.Errorf("error mentions %q:\n%v", n, err)
				}
			}
			seen := map[string]bool{}
			for _, line := range p {
				if field, _, ok := strings.Cut(line, ": "); !ok || field == "" || strings.Contains(field, " ") && field != "(top level)" {
					t.Errorf("problem %q does not start with a field path", line)
				}
				if seen[line] {
					t.Errorf("problem %q reported twice", line)
				}
				seen[line] = true
			}
		})
	}
}

// TestDefaultCooldownWithinMax: a default_cooldown that max_cooldown
// allows loads (the refusals beyond it are in TestProblems).
func TestDefaultCooldownWithinMax(t *testing.T) {
	if _, err := Parse([]byte(minimal+"upstream: {default_cooldown: 2m, max_cooldown: 5m}\n"), env(nil)); err != nil {
		t.Fatal(err)
	}
}

// FuzzParse: any input either loads or lists problems, each once; it never
// panics, and an accepted config always has what the gateway needs.
func FuzzParse(f *testing.F) {
	f.Add([]byte(minimal))
	f.Add([]byte(`{"auth":{"issuer":"https://i"}}`))
	f.Add([]byte("tenants: [{id: a}]\npools: [{name: p, endpoints: [{}]}]"))
	f.Add([]byte("a: &x {b: 1}\nc: [*x, *x, {<<: *x}]\nauth: {issuer: x, issuer: y}\nlisten: 1"))
	f.Add([]byte(`{"pools":[{"endpoints":[{"weight":0,"url":"http://u:p@h/?q#f"}]}],"x":1}`))
	f.Add([]byte("auth: &a {<<: [*a, {<<: *a}]}\npools: [&p {<<: [*p]}]"))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := Parse(b, env(nil))
		if err != nil {
			var p config.Problems
			if !errors.As(err, &p) || len(p) == 0 {
				t.Fatalf("error is not a problem list: %v", err)
			}
			seen := make(map[string]bool, len(p))
			for _, line := range p {
				if seen[line] {
					t.Fatalf("%q reported twice:\n%v", line, p)
				}
				seen[line] = true
			}
			return
		}
		if c.Auth.Issuer == "" || len(c.Pools) == 0 || len(c.Tenants) == 0 {
			t.Fatalf("accepted an incomplete config: %+v", c)
		}
	})
}

// TestBudget: the token budget fields, their defaults (the failure policy
// is the limiter's unless set) and every problem at once, by field path.
func TestBudget(t *testing.T) {
	withTenant := func(extra string) string {
		return strings.Replace(minimal, "requests: 10}", "requests: 10, "+extra+"}", 1)
	}
	c, err := Parse([]byte(withTenant("tokens_per_minute: 1000, token_quota: 50000, quota_period: month, max_output_tokens: 256")+
		"limiter: {failure_policy: closed}\n"), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	tn := c.Tenants[0]
	if tn.TokensPerMinute != 1000 || tn.TokenQuota != 50000 || tn.QuotaPeriod != "month" || tn.MaxOutputTokens != 256 || !tn.HasBudget() {
		t.Fatalf("tenant %+v", tn)
	}
	b := c.Budget.Config.WithDefaults()
	if b.Mode != "strict" || b.Lease != 15*time.Minute || b.DefaultOutputTokens != 4096 || b.Timeout != 250*time.Millisecond || b.FailurePolicy != "closed" {
		t.Fatalf("budget defaults %+v", b)
	}
	if c, err := Parse([]byte(minimal+"budget: {mode: estimate, failure_policy: open, lease: 2m}\nlimiter: {failure_policy: closed}\n"), env(nil)); err != nil ||
		c.Budget.FailurePolicy != "open" || c.Budget.Mode != "estimate" || c.Tenants[0].HasBudget() {
		t.Fatalf("%+v, %v", c, err)
	}

	_, err = Parse([]byte(strings.Replace(withTenant("token_quota: 100"), "tenants: [", "tenants: [{id: t2, models: [m1], requests: 1, quota_period: day}, {id: t3, models: [m1], requests: 1, token_quota: 5, quota_period: week, tokens_per_minute: 9007199254740993}, ", 1)+
		"budget: {mode: lenient, failure_policy: maybe, lease: 1500ns, default_output_tokens: -1}\n"), env(nil))
	for _, w := range []string{
		"budget.mode: must be strict or estimate",
		"budget.failure_policy: must be open or closed",
		"budget.lease: must be a whole number of microseconds",
		"budget.default_output_tokens: must not be negative",
		"tenants[0].quota_period: only used with token_quota",
		"tenants[1].quota_period: must be day or month",
		"tenants[1].tokens_per_minute: must be at most 9007199254740992",
		"tenants[2].quota_period: required with token_quota",
	} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("error does not mention %q:\n%v", w, err)
		}
	}
}

// TestStreamSettingsNotNegative: the upstream section's, a pool's, the
// lambda section's and the telemetry section's durations are their
// parts' (dispatch, route, server, lambdaurl, telemetry), each negative
// one reported once by its field path.
func TestStreamSettingsNotNegative(t *testing.T) {
	in := func(field string) string { return minimal + "upstream: {" + field + ": -1s}\n" }
	pool := func(field string) string {
		return strings.Replace(minimal, "kind: vllm", "kind: vllm\n    "+field+": -1s", 1)
	}
	for path, cfg := range map[string]string{
		"upstream.header_timeout":      in("header_timeout"),
		"upstream.response_timeout":    in("response_timeout"),
		"upstream.stream_idle_timeout": in("stream_idle_timeout"),
		"upstream.default_cooldown":    in("default_cooldown"),
		"upstream.max_cooldown":        in("max_cooldown"),
		"upstream.keepalive_interval":  in("keepalive_interval"),
		"upstream.first_token_timeout": in("first_token_timeout"),
		"pools[0].keepalive_interval":  pool("keepalive_interval"),
		"pools[0].first_token_timeout": pool("first_token_timeout"),
		"lambda.deadline_margin":       minimal + "lambda: {deadline_margin: -1s}\n",
		"lambda.min_remaining":         minimal + "lambda: {min_remaining: -1s}\n",
		"telemetry.flush_timeout":      minimal + "telemetry: {flush_timeout: -1s}\n",
	} {
		t.Run(path, func(t *testing.T) {
			_, err := Parse([]byte(cfg), env(nil))
			want := path + ": must not be negative, got -1s"
			if err == nil || strings.Count(err.Error(), want) != 1 {
				t.Fatalf("want %q once, got %v", want, err)
			}
		})
	}
}

// TestEdgeLimits: the connection and concurrency caps and the lingering
// bounds have working defaults (the parts'), a tenant's cap defaults to
// the top-level one, and bad values are named by field.
func TestEdgeLimits(t *testing.T) {
	c, err := Parse([]byte(minimal), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	// The caps' and the lingering bounds' defaults are the listener's and
	// the tenant table's (server's and tenant's tests): left out, they
	// reach them as zero, and the parts apply them.
	if o, rows := c.Server.Listener(), Tenants(c.Tenants); o.MaxConns != 0 || o.WithDefaults().MaxConns != 4096 || rows[0].MaxConcurrent != 0 ||
		tenant.NewTable(rows).Lookup("t1").MaxConcurrent != 512 {
		t.Fatalf("defaults: max_connections %d tenant cap %d", o.MaxConns, rows[0].MaxConcurrent)
	}
	c, err = Parse([]byte(minimal+"max_concurrent_requests: 7\n"), env(nil))
	if err != nil || Tenants(c.Tenants)[0].MaxConcurrent != 7 {
		t.Fatalf("tenant cap from the top-level one: %v %+v", err, c)
	}
	c, err = Parse([]byte(strings.Replace(minimal, "requests: 10}", "requests: 10, max_concurrent_requests: 3}", 1)+"max_concurrent_requests: 7\n"), env(nil))
	if err != nil || Tenants(c.Tenants)[0].MaxConcurrent != 3 {
		t.Fatalf("tenant's own cap: %v %+v", err, c)
	}
	tenantCap := strings.Replace(minimal, "requests: 10}", "requests: 10, max_concurrent_requests: -1}", 1)
	tests := map[string]string{
		"lingering_timeout: must not exceed lingering_time (2s), got 3s":      minimal + "lingering_time: 2s\nlingering_timeout: 3s\n",
		"max_connections: must not be negative, got -1":                       minimal + "max_connections: -1\n",
		"max_pending_connections: must not exceed max_connections (8), got 9": minimal + "max_connections: 8\nmax_pending_connections: 9\n",
		"lingering_max_bytes: must not be negative, got -1":                   minimal + "lingering_max_bytes: -1\n",
		"send_timeout: must not be negative, got -1s":                         minimal + "send_timeout: -1s\n",
		"max_concurrent_requests: must not be negative, got -2":               minimal + "max_concurrent_requests: -2\n",
		"tenants[0].max_concurrent_requests: must not be negative, got -1":    tenantCap,
	}
	for want, cfg := range tests {
		_, err := Parse([]byte(cfg), env(nil))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("want %q, got %v", want, err)
		}
	}
}

// TestStreamPolicies: a pool's keepalive and first-token timeout are
// upstream's unless it names its own; a keepalive or min_remaining nobody
// names reaches the server as nil, its default, and one written 0 as
// off.
func TestStreamPolicies(t *testing.T) {
	cfg := strings.Replace(minimal, "kind: vllm", "kind: vllm\n    first_token_timeout: 9s", 1) +
		`  - {name: p2, kind: vllm, models: {m2: ""}, endpoints: [{url: "http://127.0.0.1:8001"}], keepalive_interval: 0s}` + "\n" +
		"upstream: {first_token_timeout: 4s}\nlambda: {min_remaining: 0s}\n"
	c, err := Parse([]byte(cfg), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	srv := server.New(Server(c))
	if p := srv.Streams["p1"]; Streams(c)["p1"].KeepaliveInterval != nil || p.Keepalive() != server.DefaultKeepaliveInterval || p.FirstToken() != 9*time.Second {
		t.Errorf("p1 %+v", p)
	}
	if p := srv.Streams["p2"]; p.Keepalive() != 0 || p.FirstToken() != 4*time.Second {
		t.Errorf("p2 %+v: keepalive_interval 0s is off", p)
	}
	if d := *srv.Lambda.MinRemaining; d != 0 {
		t.Errorf("min_remaining 0s is off, got %s", d)
	}
	c, _ = Parse([]byte(minimal+"upstream: {keepalive_interval: 5s}\n"), env(nil))
	srv = server.New(Server(c))
	if d, m := srv.Streams["p1"].Keepalive(), *srv.Lambda.MinRemaining; d != 5*time.Second || c.Lambda.MinRemaining != nil || m != server.DefaultMinRemaining {
		t.Errorf("keepalive %s from upstream, min_remaining %s by default", d, m)
	}
}

// TestTenantGrants: a tenant's features reach its table row, a default
// use count filled in; a tenant without them has none (features are off
// by default).
func TestTenantGrants(t *testing.T) {
	rows := Tenants([]config.Tenant{
		{ID: "a", Models: []string{"m"}, Features: []config.Feature{{Name: "web_search", CostPerUse: 2000}, {Name: "mcp", DefaultUses: 2}}, AnthropicBeta: []string{"files-api-2025-04-14"}},
		{ID: "b", Models: []string{"m"}},
	})
	tb := tenant.NewTable(rows)
	a, b := tb.Lookup("a"), tb.Lookup("b")
	if g, ok := a.Grant("web_search"); !ok || g.CostPerUse != 2000 || g.DefaultUses != tenant.DefaultUses {
		t.Errorf("a's web_search: %+v %v", g, ok)
	}
	if g, ok := a.Grant("mcp"); !ok || g.DefaultUses != 2 {
		t.Errorf("a's mcp: %+v %v", g, ok)
	}
	if _, ok := a.Grant("code_execution"); ok {
		t.Error("a has a feature its config does not list")
	}
	if !a.AllowsBeta("files-api-2025-04-14") || b.AllowsBeta("files-api-2025-04-14") {
		t.Error("anthropic_beta does not follow the config")
	}
	if _, ok := b.Grant("web_search"); ok {
		t.Error("b has a feature by default")
	}
}
