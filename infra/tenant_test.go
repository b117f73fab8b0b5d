package infra

import (
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/llmgw/gateway/shared/assemble"
	"github.com/llmgw/gateway/shared/config"
)

// tenantStack is the parameters of one isolated tenant's stack, as the
// README's loop passes them.
func tenantStack(id, name string, models ...string) map[string]any {
	ms := make([]any, len(models))
	for i, m := range models {
		ms[i] = m
	}
	return map[string]any{"TenantId": id, "TenantName": name, "TenantModels": ms, "TenantRequests": "120", "TenantInterval": "1m"}
}

// stackConfig resolves the template for params and loads the config the
// function would run: the shipped file with the stack's overlay merged over
// it (assemble.Load, as functions/gateway does), with the stack's
// environment.
func stackConfig(t *testing.T, params map[string]any) (*config.Config, map[string]string) {
	t.Helper()
	fn := function(t, must(open(t, params)))
	vars := fn.Environment.Variables
	cfg, err := assemble.Load(configFile, vars["GATEWAY_CONFIG_OVERLAY"], func(k string) string { return vars[k] })
	if err != nil {
		t.Fatalf("the stack's config does not load: %v\noverlay: %s", err, vars["GATEWAY_CONFIG_OVERLAY"])
	}
	return cfg, vars
}

// TestTenantStacks: one stack per tenant from this template, all from the
// one zip (same CodeUri, same shipped config) and the one Redis secret; each
// stack's config is pinned to its tenant (a one-row table, so any other
// tenant's valid token gets 403) with its own key prefix; everything else
// (issuer, pools, shared store) is the shipped config's.
func TestTenantStacks(t *testing.T) {
	shared, sharedVars := stackConfig(t, nil)
	if got, want := sharedVars["GATEWAY_CONFIG_OVERLAY"], `{"auth":{"audiences":["`+apiClientID+`","api://`+apiClientID+`"]}}`; got != want {
		t.Fatalf("the shared stack's overlay is %s, want the API's audiences only: %s", got, want)
	}
	fabrikam, fVars := stackConfig(t, tenantStack("3c4d5e6f-7081-4a2b-9c3d-4e5f60718293", "fabrikam", "gpt-4o-mini"))
	northwind, nVars := stackConfig(t, tenantStack("8a9b0c1d-2e3f-4051-8617-28394a5b6c7d", "northwind", "gpt-4o", "gpt-4o-mini"))

	for _, tc := range []struct {
		name, id string
		models   []string
		cfg      *config.Config
		vars     map[string]string
	}{
		{"fabrikam", "3c4d5e6f-7081-4a2b-9c3d-4e5f60718293", []string{"gpt-4o-mini"}, fabrikam, fVars},
		{"northwind", "8a9b0c1d-2e3f-4051-8617-28394a5b6c7d", []string{"gpt-4o", "gpt-4o-mini"}, northwind, nVars},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if len(tc.cfg.Tenants) != 1 {
				t.Fatalf("tenant table %+v: want this tenant alone", tc.cfg.Tenants)
			}
			tn := tc.cfg.Tenants[0]
			if tn.ID != tc.id || tn.Name != tc.name || !reflect.DeepEqual(tn.Models, tc.models) || tn.Requests != 120 || tn.Interval.D().Minutes() != 1 {
				t.Errorf("tenant %+v", tn)
			}
			if tc.cfg.Store.KeyPrefix != "llmgw:"+tc.name+":" {
				t.Errorf("key prefix %q", tc.cfg.Store.KeyPrefix)
			}
			// The rest is the shipped config's: one Redis, the same pools
			// and issuer for every stack.
			if tc.cfg.Store.Backend != "redis" || tc.cfg.Store.RedisURLEnv != shared.Store.RedisURLEnv || tc.vars["REDIS_URL"] != sharedVars["REDIS_URL"] {
				t.Errorf("store %+v, REDIS_URL %q: want the shared one", tc.cfg.Store, tc.vars["REDIS_URL"])
			}
			if !reflect.DeepEqual(tc.cfg.Pools, shared.Pools) || !reflect.DeepEqual(tc.cfg.Auth, shared.Auth) {
				t.Error("pools or auth differ from the shipped config's")
			}
			for k, v := range sharedVars {
				if k != "GATEWAY_CONFIG_OVERLAY" && tc.vars[k] != v {
					t.Errorf("%s = %q, the shared stack's is %q", k, tc.vars[k], v)
				}
			}
		})
	}
	if fabrikam.Store.KeyPrefix == northwind.Store.KeyPrefix || strings.HasPrefix(northwind.Store.KeyPrefix, fabrikam.Store.KeyPrefix) {
		t.Error("two tenants' key prefixes overlap")
	}
}

// TestTenantStackIsolation: what keeps tenant stacks apart is per stack in
// the template: the function, its URL and log group belong to the stack,
// the concurrency is reserved per function, and the code is the one zip
// for the stack's architecture.
func TestTenantStackIsolation(t *testing.T) {
	b, err := os.ReadFile(templateFile)
	if err != nil {
		t.Fatal(err)
	}
	src := string(b)
	for _, want := range []string{
		"ReservedConcurrentExecutions: !If [HasReservedConcurrency, !Ref ReservedConcurrency, !Ref AWS::NoValue]",
		"CodeUri: ../bin/lambda/gateway-lambda-arm64.zip",
		"CodeUri: ../bin/lambda/gateway-lambda-amd64.zip",
	} {
		if !strings.Contains(src, want) {
			t.Errorf("template.yaml lacks %q", want)
		}
	}
	fn := function(t, must(open(t, tenantStack("3c4d5e6f-7081-4a2b-9c3d-4e5f60718293", "fabrikam", "gpt-4o-mini"))))
	if fn.FunctionUrlConfig == nil || fn.FunctionUrlConfig.AuthType != "NONE" {
		t.Error("a tenant stack has its own Function URL")
	}
	// A tenant name that would break out of its JSON string or key space
	// is refused by the parameter's pattern.
	for _, bad := range []string{`acme"`, "Acme", "a:b", "-a"} {
		if patternAllows(t, "TenantName", bad) {
			t.Errorf("TenantName allows %q", bad)
		}
	}
	for _, good := range []string{"", "fabrikam", "north-wind2"} {
		if !patternAllows(t, "TenantName", good) {
			t.Errorf("TenantName refuses %q", good)
		}
	}
	for _, bad := range []string{`gpt"4`, "gpt 4", ""} {
		if bad != "" && patternAllows(t, "TenantModels", bad) {
			t.Errorf("TenantModels allows %q", bad)
		}
	}
}

// patternAllows reports whether parameter name's AllowedPattern accepts v.
func patternAllows(t *testing.T, name, v string) bool {
	t.Helper()
	_, raw := open(t, nil)
	params, _ := raw["Parameters"].(map[string]any)
	p, _ := params[name].(map[string]any)
	pattern, _ := p["AllowedPattern"].(string)
	if pattern == "" {
		t.Fatalf("parameter %s has no AllowedPattern", name)
	}
	return regexp.MustCompile(pattern).MatchString(v)
}
