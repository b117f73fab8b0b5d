package azconfig

import (
	"crypto/sha256"
	"encoding/hex"
	"maps"
	"regexp"
	"slices"
	"testing"
)

// redisURL is gateway.bicep's redisUrl for the tests' store.
const redisURL = "rediss://redis-tok.westeurope.redis.azure.net:10000"

// revisionTemplate is what of app a's Container App template (the
// revision scope) the deployment computes from the parameters: its image,
// its identity and GATEWAY_CONFIG_HASH, the digest of every secret it is
// given (app.bicep's secrets and configHash; the generated config, the
// Redis URL). ARM's uniqueString is a hash of its input: sha256 stands in
// for it here, since what matters is that the digest changes exactly when
// its input does.
func revisionTemplate(t *testing.T, a app) map[string]string {
	t.Helper()
	type secret struct {
		Name  string `json:"name"`
		Value string `json:"value"`
	}
	secrets := []secret{{"gateway-config", string(render(t, a))}}
	if a.EnableRedis {
		secrets = append(secrets, secret{"redis-url", redisURL})
	}
	sum := sha256.Sum256([]byte(bicepJSON(t, secrets)))
	return map[string]string{
		"image":               "crabc.azurecr.io/llm-gateway/gateway:azd-deploy-1",
		"AZURE_CLIENT_ID":     a.Identity.ClientID,
		"GATEWAY_CONFIG":      "/etc/gateway/gateway.yaml",
		"GATEWAY_CONFIG_HASH": hex.EncodeToString(sum[:8]),
	}
}

// revisions is every app's revision template for p, by app name.
func revisions(t *testing.T, p params) map[string]map[string]string {
	out := map[string]map[string]string{}
	for _, a := range append([]app{sharedApp(p)}, tenantApps(p)...) {
		out[a.Name] = revisionTemplate(t, a)
	}
	return out
}

// TestConfigChangeRollsOnlyItsApp: a day-two edit of
// the parameters changes the revision template of exactly the apps whose
// config it changes, so each of those, and no other, gets a new revision
// that reads the new config; before, the template did not depend on the
// config at all, and an edit reached no running replica.
func TestConfigChangeRollsOnlyItsApp(t *testing.T) {
	t.Parallel()
	// app.bicep puts the digest in the container's env, which is in the
	// template; the vars behind it are TestBicepIsWhatIsMirrored's.
	if src := bicepSource(t, "app.bicep"); !regexp.MustCompile(`(?s)template: \{\n\s+containers: .*env: concat\(\[[^]]*\{ name: 'GATEWAY_CONFIG_HASH', value: configHash \}`).MatchString(src) {
		t.Fatal("app.bicep's container env has no GATEWAY_CONFIG_HASH = configHash: a config change makes no revision")
	}
	base := func() params {
		p := threeTenants(true)
		p.Tenants = []tenantParam{
			{ID: homeTenant, Name: "home", Models: []string{"gpt-4o-mini", "gpt-4o"}, Requests: 600, Interval: "1m"},
			{ID: otherTenant, Name: "contoso", Models: []string{"gpt-4o-mini"}, Requests: 100, Interval: "1m"},
		}
		return p
	}
	before := revisions(t, base())
	for _, tc := range []struct {
		name string
		edit func(*params)
		want []string // the apps whose revision template changes
	}{
		{"a shared-tier tenant's limit", func(p *params) { p.Tenants[1].Requests = 200 }, []string{"shared"}},
		{"a shared-tier tenant's models", func(p *params) { p.Tenants[1].Models = append(p.Tenants[1].Models, "gpt-4o") }, []string{"shared"}},
		{"a shared-tier tenant added", func(p *params) {
			p.Tenants = append(p.Tenants, tenantParam{ID: woodgroveTenant, Name: "wg", Models: []string{"gpt-4o"}})
		}, []string{"shared"}},
		{"an isolated tenant's limit", func(p *params) { p.IsolatedTenants[0].Requests = 50 }, []string{"fabrikam"}},
		{"an isolated tenant's models", func(p *params) { p.IsolatedTenants[2].Models = []string{"gpt-4o"} }, []string{"woodgrove"}},
		// GATEWAY_MODELS: a deployment renamed reaches the shared app and
		// the tenants that call that model through the default
		// deployments; northwind has its own.
		{"a deployment renamed (GATEWAY_MODELS)", func(p *params) { p.Models[1].Deployment = "gpt-4o-2025" }, []string{"shared", "woodgrove"}},
		{"required roles (GATEWAY_REQUIRED_ROLES)", func(p *params) { p.RequiredRoles = []string{"Gateway.Invoke"} }, []string{"fabrikam", "northwind", "shared", "woodgrove"}},
		{"nothing", func(*params) {}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := base()
			tc.edit(&p)
			after := revisions(t, p)
			var changed []string
			for name, tmpl := range after {
				if !maps.Equal(tmpl, before[name]) {
					changed = append(changed, name)
				}
				// The config in the secret changed exactly where the
				// digest did: no change hides from it.
				cfgChanged := string(render(t, appNamed(p, name))) != string(render(t, appNamed(base(), name)))
				if cfgChanged != (tmpl["GATEWAY_CONFIG_HASH"] != before[name]["GATEWAY_CONFIG_HASH"]) {
					t.Errorf("%s: config changed %v, but its digest did not follow", name, cfgChanged)
				}
			}
			slices.Sort(changed)
			if !slices.Equal(changed, tc.want) {
				t.Errorf("new revisions for %v, want %v", changed, tc.want)
			}
		})
	}
}

// appNamed is app name ("shared" or a tenant's) of p.
func appNamed(p params, name string) app {
	if name == "shared" {
		return sharedApp(p)
	}
	return tenantApp(p, name)
}
