package azconfig

import (
	"cmp"
	"slices"
	"testing"

	"github.com/llmgw/gateway/shared/assemble"
	"github.com/llmgw/gateway/shared/auth"
	"github.com/llmgw/gateway/shared/config"
)

// Directory, app and identity IDs shaped like Entra's (GUIDs).
const (
	homeTenant      = "72f988bf-86f1-41af-91ab-2d7cd011db47" // the API's directory
	otherTenant     = "f8cdef31-a31e-4b4a-93e4-5f571e91255a"
	fabrikamTenant  = "3c4d5e6f-7081-4a2b-9c3d-4e5f60718293"
	northwindTenant = "8a9b0c1d-2e3f-4051-8617-28394a5b6c7d"
	woodgroveTenant = "5e6f7081-92a3-4b4c-8d5e-6f708192a3b4"
	apiClientID     = "6e2b6f2a-3c1d-4f8e-9a7b-1d2c3e4f5a6b"
	callerAppID     = "0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0"
	callerSPOID     = "9f8e7d6c-5b4a-3928-1706-f5e4d3c2b1a0"
	identityCID     = "c0ffee00-1111-2222-3333-444455556666"
	identityOID     = "d00dfeed-7777-8888-9999-aaaabbbbcccc"
	openAIAccount   = "gwtest-openai"
	northwindAcct   = "northwind-openai"
)

// accountEndpoint is an account's endpoint, as openai-access.bicep outputs it.
func accountEndpoint(account string) string { return "https://" + account + ".openai.azure.com/" }

// testParams are the parameters of a one-directory deployment, as a user
// following the README would set them.
func testParams(redis bool, tenants []tenantParam) params {
	return params{
		EntraTenantID: homeTenant,
		APIClientID:   apiClientID,
		Tenants:       tenants,
		Models:        []model{{"gpt-4o-mini", "gpt-4o-mini-prod"}, {"gpt-4o", "gpt-4o-2024-11-20"}},
		OpenAIAccount: openAIAccount,
		EnableRedis:   redis,
		Endpoints:     map[string]string{openAIAccount: accountEndpoint(openAIAccount), northwindAcct: accountEndpoint(northwindAcct)},
		Identity:      identity{identityCID, identityOID},
	}
}

// threeTenants is the README's isolated tier: the shared gateway for the
// API's own directory, and three customer directories with an app each.
// fabrikam takes every default, northwind calls its own account under its
// own deployment names, woodgrove has its own bucket size.
func threeTenants(redis bool) params {
	p := testParams(redis, nil)
	p.IsolatedTenants = []isolatedParam{
		{ID: fabrikamTenant, Name: "fabrikam", Models: []string{"gpt-4o-mini"}},
		{ID: northwindTenant, Name: "northwind", Models: []string{"gpt-4o"}, Requests: 2, Interval: "1h",
			OpenAIAccountName: northwindAcct, OpenAIResourceGroup: "rg-northwind", Deployments: []model{{"gpt-4o", "nw-gpt-4o"}}},
		{ID: woodgroveTenant, Name: "woodgrove", Models: []string{"gpt-4o-mini", "gpt-4o"}, Requests: 2, Interval: "1h"},
	}
	p.TenantIdentities = map[string]identity{
		"fabrikam":  {"c0ffee01-1111-2222-3333-444455556666", "d00dfe01-7777-8888-9999-aaaabbbbcccc"},
		"northwind": {"c0ffee02-1111-2222-3333-444455556666", "d00dfe02-7777-8888-9999-aaaabbbbcccc"},
		"woodgrove": {"c0ffee03-1111-2222-3333-444455556666", "d00dfe03-7777-8888-9999-aaaabbbbcccc"},
	}
	return p
}

func TestGeneratedConfigLoads(t *testing.T) {
	t.Parallel()
	contoso := []tenantParam{{ID: homeTenant, Name: "contoso", Models: []string{"gpt-4o-mini"}, Requests: 120, Interval: "1m"}}
	env := map[string]string{"REDIS_URL": "rediss://redis-x.westeurope.redis.azure.net:10000"}
	for _, tc := range []struct {
		name      string
		p         params
		wantStore string
	}{
		{"defaults", testParams(false, nil), "memory"},
		{"tenant table", testParams(false, contoso), "memory"},
		{"a row without a name", testParams(false, []tenantParam{{ID: homeTenant, Models: []string{"gpt-4o"}, Requests: 1, Interval: "1m"}}), "memory"},
		{"a row without requests or interval", testParams(false, []tenantParam{{ID: homeTenant, Name: "home", Models: []string{"gpt-4o"}}}), "memory"},
		{"Azure Managed Redis", testParams(true, contoso), "redis"},
		{"application ID URI given", func() params { p := testParams(false, nil); p.APIAppIDURI = "api://llm-gateway.contoso.com"; return p }(), "memory"},
		{"required roles and scopes", func() params {
			p := testParams(false, nil)
			p.RequiredRoles, p.RequiredScopes = []string{"Gateway.Invoke"}, []string{"access_as_user"}
			return p
		}(), "memory"},
		{"US Government cloud, with Redis", func() params { p := testParams(true, contoso); p.Cloud = "AzureUSGovernment"; return p }(), "redis"},
		{"China cloud", func() params { p := testParams(false, nil); p.Cloud = "AzureChinaCloud"; return p }(), "memory"},
		{"scopes given", func() params {
			p := testParams(true, contoso)
			p.Cloud, p.OpenAITokenScope, p.RedisTokenScope = "AzureStackCloud", "https://cognitiveservices.example/.default", "https://redis.example/.default"
			return p
		}(), "redis"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a := sharedApp(tc.p)
			c, err := assemble.Parse(render(t, a), func(k string) string { return env[k] })
			if err != nil {
				t.Fatalf("the generated config does not load: %v\n%s", err, render(t, a))
			}
			checkCommon(t, c, tc.p)
			if len(c.Tenants) != 1 || c.Tenants[0].ID != homeTenant || c.Tenants[0].Name != a.Rows[0].Name {
				t.Errorf("tenants %+v", c.Tenants)
			}
			if c.Store.Backend != tc.wantStore || c.Store.KeyPrefix != "llmgw:" {
				t.Errorf("store %+v", c.Store)
			}
			if tc.wantStore == "redis" {
				e := c.Store.RedisEntra
				if e == nil || e.Credential != "managed-identity" || e.ClientID != identityCID || e.Username != identityOID || c.Store.RedisURLEnv != "REDIS_URL" {
					t.Errorf("redis store %+v", c.Store)
				}
			}
			ep := c.Pools[0].Endpoints[0]
			if ep.URL != accountEndpoint(openAIAccount) || ep.Auth != "entra" || ep.Entra.Credential != "managed-identity" || ep.Entra.ClientID != identityCID {
				t.Errorf("endpoint %+v", ep)
			}
			if len(c.Pools[0].Models) != 2 || c.Pools[0].Models["gpt-4o-mini"] != "gpt-4o-mini-prod" {
				t.Errorf("models %v", c.Pools[0].Models)
			}
		})
	}
}

// TestTenantConfigsLoad: every isolated tenant's config loads and is pinned
// to its tenant: one row (its directory), its models only, on the account
// its identity has its role on, as that identity, in its own key space.
func TestTenantConfigsLoad(t *testing.T) {
	t.Parallel()
	env := map[string]string{"REDIS_URL": "rediss://redis-x.westeurope.redis.azure.net:10000"}
	p := threeTenants(true)
	prefixes := map[string]string{}
	for _, it := range p.IsolatedTenants {
		t.Run(it.Name, func(t *testing.T) {
			a := tenantApp(p, it.Name)
			c, err := assemble.Parse(render(t, a), func(k string) string { return env[k] })
			if err != nil {
				t.Fatalf("the generated config does not load: %v\n%s", err, render(t, a))
			}
			checkCommon(t, c, p)
			if len(c.Tenants) != 1 || c.Tenants[0].ID != it.ID || c.Tenants[0].Name != it.Name || !slices.Equal(c.Tenants[0].Models, it.Models) {
				t.Errorf("tenant table %+v: want only %s", c.Tenants, it.Name)
			}
			id := p.TenantIdentities[it.Name]
			ep := c.Pools[0].Endpoints[0]
			wantAccount := openAIAccount
			if it.OpenAIAccountName != "" {
				wantAccount = it.OpenAIAccountName
			}
			if ep.URL != accountEndpoint(wantAccount) || ep.Entra.ClientID != id.ClientID {
				t.Errorf("endpoint %s as %s, want %s as the tenant's identity %s", ep.URL, ep.Entra.ClientID, accountEndpoint(wantAccount), id.ClientID)
			}
			if len(c.Pools[0].Models) != len(it.Models) {
				t.Errorf("pool models %v: want the tenant's models only", c.Pools[0].Models)
			}
			if e := c.Store.RedisEntra; e == nil || e.ClientID != id.ClientID || e.Username != id.PrincipalID {
				t.Errorf("redis login %+v, want the tenant's identity", c.Store.RedisEntra)
			}
			if c.Store.KeyPrefix != "llmgw:"+it.Name+":" {
				t.Errorf("key prefix %q", c.Store.KeyPrefix)
			}
			prefixes[it.Name] = c.Store.KeyPrefix
		})
	}
	if c := tenantApp(p, "northwind"); c.Models[0] != (model{"gpt-4o", "nw-gpt-4o"}) {
		t.Errorf("northwind's deployment: %v", c.Models)
	}
	// No prefix is another's prefix, nor the shared gateway's ("llmgw:"
	// + "rl:"): their keys cannot meet.
	for a, pa := range prefixes {
		for b, pb := range prefixes {
			if a != b && len(pa) <= len(pb) && pb[:len(pa)] == pa {
				t.Errorf("%s's prefix %q is a prefix of %s's %q", a, pa, b, pb)
			}
		}
		if pa[:len("llmgw:rl:")] == "llmgw:rl:" {
			t.Errorf("%s's prefix %q is inside the shared gateway's key space", a, pa)
		}
	}
}

// checkCommon: what every generated config shares: Entra v2.0 tokens of any
// directory for the API (the issuer template, the common keys).
func checkCommon(t *testing.T, c *config.Config, p params) {
	t.Helper()
	if c.Auth.Issuer != "https://login.microsoftonline.com/{tenantid}/v2.0" || c.Auth.JWKSURL != "https://login.microsoftonline.com/common/discovery/v2.0/keys" {
		t.Errorf("issuer %q, jwks_url %q", c.Auth.Issuer, c.Auth.JWKSURL)
	}
	wantURI := "api://" + apiClientID
	if p.APIAppIDURI != "" {
		wantURI = p.APIAppIDURI
	}
	if len(c.Auth.Audiences) != 2 || c.Auth.Audiences[0] != apiClientID || c.Auth.Audiences[1] != wantURI {
		t.Errorf("audiences %q: want the client ID (v2.0 tokens) and %s", c.Auth.Audiences, wantURI)
	}
	if cmp.Or(c.Auth.TenantClaim, auth.DefaultTenantClaim) != "tid" || !slices.Equal(c.Auth.RequiredRoles, orEmpty(p.RequiredRoles)) || !slices.Equal(c.Auth.RequiredScopes, orEmpty(p.RequiredScopes)) {
		t.Errorf("tenant claim %q, required roles %q, scopes %q", c.Auth.TenantClaim, c.Auth.RequiredRoles, c.Auth.RequiredScopes)
	}
	ep := c.Pools[0].Endpoints[0]
	if c.Pools[0].Kind != "azure-openai" || ep.Auth != "entra" || ep.Entra.Credential != "managed-identity" {
		t.Errorf("pool %+v", c.Pools[0])
	}
	// The token scopes are the cloud's: what the gateway asks
	// the managed identity for, for Azure OpenAI and for Redis.
	suffix := map[string]string{"": "azure.com", "AzureUSGovernment": "azure.us", "AzureChinaCloud": "azure.cn"}[p.Cloud]
	wantOpenAI, wantRedis := "https://cognitiveservices."+suffix+"/.default", "https://redis."+suffix+"/.default"
	if p.OpenAITokenScope != "" {
		wantOpenAI, wantRedis = p.OpenAITokenScope, p.RedisTokenScope
	}
	if ep.Entra.Scope != wantOpenAI {
		t.Errorf("Azure OpenAI scope %q, want %q", ep.Entra.Scope, wantOpenAI)
	}
	if e := c.Store.RedisEntra; e != nil && e.Scope != wantRedis {
		t.Errorf("Redis scope %q, want %q", e.Scope, wantRedis)
	}
}
