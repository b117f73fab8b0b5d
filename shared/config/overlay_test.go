package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestOverlay(t *testing.T) {
	const base = `# the shipped config
auth: {issuer: "https://issuer.example", audiences: [gw]}
limiter: {timeout: 80ms, failure_policy: closed}
tenants: [{id: t1, models: [m1], requests: 10}, {id: t2, models: [m1], requests: 20}]
pools:
  - name: p1
    kind: vllm
    models: {m1: served}
    endpoints: [{url: "http://127.0.0.1:8000"}]
log_level: debug
`
	for _, tc := range []struct {
		name, overlay string
		check         func(t *testing.T, c *Config)
		wantErr       string
	}{
		{"empty overlay", "", func(t *testing.T, c *Config) {
			if len(c.Tenants) != 2 {
				t.Fatalf("tenants %+v", c.Tenants)
			}
		}, ""},
		{"a list replaces, a mapping merges, null removes",
			`{"tenants":[{"id":"acme","name":"acme","models":["m1"],"requests":2,"interval":"1h"}],"limiter":{"key_prefix":"llmgw:acme:"},"log_level":null}`,
			func(t *testing.T, c *Config) {
				if len(c.Tenants) != 1 || c.Tenants[0].ID != "acme" || c.Tenants[0].Requests != 2 {
					t.Errorf("tenants %+v: the overlay's list replaces the file's", c.Tenants)
				}
				// limiter.key_prefix is the deprecated alias of store's.
				if c.Store.KeyPrefix != "llmgw:acme:" || c.Limiter.Timeout.Milliseconds() != 80 || c.Limiter.FailurePolicy != "closed" {
					t.Errorf("limiter %+v, store %+v: fields merge", c.Limiter, c.Store)
				}
				if c.Server.Host.LogLevel != "" {
					t.Errorf("log_level %q: null removes it (the logger's default applies)", c.Server.Host.LogLevel)
				}
				if c.Auth.Issuer != "https://issuer.example" || len(c.Pools) != 1 {
					t.Errorf("untouched fields changed: %+v %+v", c.Auth, c.Pools)
				}
			}, ""},
		{"a new section is added", "upstream: {max_attempts: 5}\n", func(t *testing.T, c *Config) {
			if c.Upstream.Dispatch.MaxAttempts != 5 {
				t.Errorf("max_attempts %d", c.Upstream.Dispatch.MaxAttempts)
			}
		}, ""},
		{"overlay problems are reported like the file's", `{"tenants":[{"id":"acme","models":["nope"],"requests":1}],"limiter":{"bogus":1}}`, nil,
			`tenants[0].models[0]: model "nope" is not served`},
		{"unknown field in the overlay", `{"limiter":{"bogus":1}}`, nil, "limiter.bogus: unknown field"},
		{"not a mapping", `[1, 2]`, nil, "overlay: must be a mapping of fields"},
		{"not YAML", `{"tenants": [`, nil, "overlay: parse:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "gateway.yaml")
			if err := os.WriteFile(path, []byte(base), 0o600); err != nil {
				t.Fatal(err)
			}
			b, err := Read(path, tc.overlay)
			var c *Config
			if err == nil {
				c, err = parse(b, env(nil))
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, c)
		})
	}
}
