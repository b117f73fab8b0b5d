package config

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
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

func TestDemoConfigLoads(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	demo := filepath.Join(filepath.Dir(file), "..", "..", "scripts", "dev", "demo.yaml")
	c, err := Load(demo, env(map[string]string{"DEMO_BACKEND_KEY": "k"}))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Pools) < 4 || len(c.Tenants) < 2 {
		t.Fatalf("demo must have ≥4 pools and ≥2 tenants, has %d and %d", len(c.Pools), len(c.Tenants))
	}
}

func TestDefaults(t *testing.T) {
	c, err := Parse([]byte(minimal), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		name string
		ok   bool
	}{
		{"listen", c.Listen == "127.0.0.1:8080"},
		{"max_body_bytes", c.MaxBodyBytes == 1<<20},
		{"tenant_claim", c.Auth.TenantClaim == "tid"},
		{"algorithms", strings.Join(c.Auth.Algorithms, ",") == "RS256,ES256"},
		{"max_token_bytes", c.Auth.MaxTokenBytes == 8192},
		{"limiter.store", c.Limiter.Store == "memory"},
		{"limiter.timeout", c.Limiter.Timeout.D() == 50*time.Millisecond},
		{"upstream.max_attempts", c.Upstream.MaxAttempts == 3},
		{"tenant interval", c.Tenants[0].Interval.D() == time.Minute},
		{"endpoint weight", c.Pools[0].Endpoints[0].Weight == 1},
	}
	for _, ck := range checks {
		if !ck.ok {
			t.Errorf("default %s not applied: %+v", ck.name, c)
		}
	}
}

func TestJSONAccepted(t *testing.T) {
	js := `{"auth":{"issuer":"https://i.example","audiences":["gw"]},
	"tenants":[{"id":"t","models":["m"],"requests":5,"interval":"10s"}],
	"pools":[{"name":"p","kind":"openai","models":{"m":""},"endpoints":[{"url":"https://api.example","api_key_env":"K"}]}]}`
	c, err := Parse([]byte(js), env(map[string]string{"K": "v"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.Tenants[0].Interval.D() != 10*time.Second {
		t.Fatalf("interval %v", c.Tenants[0].Interval.D())
	}
}

func TestProblems(t *testing.T) {
	tests := []struct {
		name  string
		cfg   string
		env   map[string]string
		wants []string // each must appear in the error
	}{
		{name: "empty", cfg: ``, wants: []string{"auth.issuer: required", "auth.audiences", "pools: at least one", "tenants: at least one"}},
		{name: "unknown field", cfg: minimal + "\nbogus: 1\n", wants: []string{"field bogus not found"}},
		{name: "bad duration", cfg: minimal + "\nshutdown_grace: soon\n", wants: []string{`"soon" is not a duration`}},
		{name: "hmac alg", cfg: strings.Replace(minimal, "audiences: [gw]", "audiences: [gw], algorithms: [HS256, none]", 1),
			wants: []string{`auth.algorithms[0]: "HS256"`, `auth.algorithms[1]: "none"`}},
		{name: "unknown model in tenant", cfg: strings.Replace(minimal, "models: [m1]", "models: [m1, nope]", 1), wants: []string{`tenants[0].models[1]: model "nope" is not served`}},
		{name: "missing env", cfg: strings.Replace(minimal, `{url: "http://127.0.0.1:8000"}`, `{url: "http://127.0.0.1:8000", api_key_env: VLLM_KEY}`, 1),
			wants: []string{"pools[0].endpoints[0].api_key_env: environment variable VLLM_KEY is not set"}},
		{name: "bad kind and url", cfg: strings.Replace(strings.Replace(minimal, "kind: vllm", "kind: bedrock", 1), "http://127.0.0.1:8000", "ftp://x", 1),
			wants: []string{`pools[0].kind: must be openai, azure-openai or vllm, not "bedrock"`, `pools[0].endpoints[0].url`}},
		{name: "redis without url", cfg: minimal + "\nlimiter: {store: redis, failure_policy: maybe}\n", wants: []string{"limiter.redis_url_env: required", "limiter.failure_policy"}},
		{name: "entra on vllm", cfg: strings.Replace(minimal, `{url: "http://127.0.0.1:8000"}`, `{url: "http://127.0.0.1:8000", auth: entra}`, 1),
			wants: []string{"pools[0].endpoints[0].auth: entra is only for azure-openai", "pools[0].endpoints[0].entra.credential"}},
		{name: "duplicate model", cfg: minimal + `  - {name: p2, kind: openai, models: {m1: x}, endpoints: [{url: "http://a.example"}]}` + "\n", wants: []string{`pools[1].models.m1: model is already served by pool "p1"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.cfg), env(tt.env))
			if err == nil {
				t.Fatal("accepted a bad config")
			}
			for _, w := range tt.wants {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not mention %q:\n%v", w, err)
				}
			}
		})
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "nope.yaml"), env(nil))
	if !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("err = %v", err)
	}
}

// FuzzParse: any input either loads or lists problems; it never panics, and
// an accepted config always has what the gateway needs.
func FuzzParse(f *testing.F) {
	f.Add([]byte(minimal))
	f.Add([]byte(`{"auth":{"issuer":"https://i"}}`))
	f.Add([]byte("tenants: [{id: a}]\npools: [{name: p, endpoints: [{}]}]"))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := Parse(b, env(nil))
		if err != nil {
			var p Problems
			if !errors.As(err, &p) || len(p) == 0 {
				t.Fatalf("error is not a problem list: %v", err)
			}
			return
		}
		if c.Auth.Issuer == "" || len(c.Pools) == 0 || len(c.Tenants) == 0 {
			t.Fatalf("accepted an incomplete config: %+v", c)
		}
	})
}
